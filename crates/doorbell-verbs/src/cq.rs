//! Completion queues and `poll_cq` (mlx5 reference §8).

use std::sync::{Arc, Mutex};

use doorbell_host::offset;
use doorbell_layout::cqe::{CQE_LEN, Cqe64, CqeOpcode, OP_OWN_INIT, Syndrome, owner_for};
use doorbell_layout::dbr;
use doorbell_layout::uar::{CQ_DOORBELL, CqArmDoorbell};
use doorbell_layout::wqe::WqeOpcode;
use doorbell_types::{Cqn, HostAddr, Qpn};

use crate::context::Context;
use crate::error::VerbsError;
use crate::wq::QpShared;

/// Status of a completion (`enum ibv_wc_status`, same numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// Success.
    Success = 0,
    /// Local length error.
    LocLenErr = 1,
    /// Local QP operation error.
    LocQpOpErr = 2,
    /// Local protection error.
    LocProtErr = 4,
    /// Flushed.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Bad response.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// Remote invalid request.
    RemInvReqErr = 9,
    /// Remote access error.
    RemAccessErr = 10,
    /// Remote operational error.
    RemOpErr = 11,
    /// Transport retries exceeded.
    RetryExcErr = 12,
    /// RNR retries exceeded.
    RnrRetryExcErr = 13,
    /// Remote aborted.
    RemAbortErr = 16,
    /// Any other error.
    GeneralErr = 21,
}

impl From<Syndrome> for WcStatus {
    fn from(s: Syndrome) -> Self {
        match s {
            Syndrome::LocalLengthErr => WcStatus::LocLenErr,
            Syndrome::LocalQpOpErr => WcStatus::LocQpOpErr,
            Syndrome::LocalProtErr => WcStatus::LocProtErr,
            Syndrome::WrFlushErr => WcStatus::WrFlushErr,
            Syndrome::MwBindErr => WcStatus::MwBindErr,
            Syndrome::BadRespErr => WcStatus::BadRespErr,
            Syndrome::LocalAccessErr => WcStatus::LocAccessErr,
            Syndrome::RemoteInvalReqErr => WcStatus::RemInvReqErr,
            Syndrome::RemoteAccessErr => WcStatus::RemAccessErr,
            Syndrome::RemoteOpErr => WcStatus::RemOpErr,
            Syndrome::TransportRetryExcErr => WcStatus::RetryExcErr,
            Syndrome::RnrRetryExcErr => WcStatus::RnrRetryExcErr,
            Syndrome::RemoteAbortedErr => WcStatus::RemAbortErr,
            Syndrome::Unknown(_) => WcStatus::GeneralErr,
        }
    }
}

/// What completed (`enum ibv_wc_opcode`, same numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// SEND.
    Send = 0,
    /// RDMA WRITE.
    RdmaWrite = 1,
    /// RDMA READ.
    RdmaRead = 2,
    /// Compare and swap.
    CompSwap = 3,
    /// Fetch and add.
    FetchAdd = 4,
    /// A receive.
    Recv = 128,
    /// A receive of RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    pub(crate) fn from_send(op: u8) -> Self {
        match WqeOpcode::from(op) {
            WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
            WqeOpcode::RdmaRead => WcOpcode::RdmaRead,
            WqeOpcode::AtomicCs => WcOpcode::CompSwap,
            WqeOpcode::AtomicFa => WcOpcode::FetchAdd,
            _ => WcOpcode::Send,
        }
    }
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's ID.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives), or read (READ, atomics).
    pub byte_len: u32,
    /// Immediate data, as the sender gave it.
    pub imm_data: Option<u32>,
    /// The local QP.
    pub qp_num: Qpn,
    /// Source QP (UD receives).
    pub src_qp: u32,
    /// A GRH precedes the data (UD receives).
    pub grh: bool,
    /// The service level; for a UD receive over RoCE, the packet's type as
    /// mlx5 reports it (`0x8 | 0x2`: RoCEv2 over IPv4, `0x8 | 0x1`: over
    /// IPv6), which programs such as UCX read to find the GID in the GRH.
    pub sl: u8,
    /// Vendor syndrome (errors).
    pub vendor_err: u8,
    /// When the device wrote the completion, in ticks of its free-running
    /// clock ([`doorbell_hif::CORE_CLOCK_KHZ`]).
    pub timestamp: u64,
}

impl Default for Wc {
    /// A blank completion, to fill a poll buffer with: success, no bytes.
    fn default() -> Self {
        Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            qp_num: Qpn::default(),
            src_qp: 0,
            grh: false,
            sl: 0,
            vendor_err: 0,
            timestamp: 0,
        }
    }
}

impl Wc {
    /// True if the status is success.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}

/// Empty polls in a row after which a poll gives up the CPU once. A
/// doorbell NIC is threads of the host, on the cores the program's polling
/// loop spins on: a program that polls without pause (as ibv_rc_pingpong
/// and perftest do, which on hardware costs nothing) would otherwise keep
/// the NIC's woken threads waiting for the scheduler's next tick (4 ms on
/// this kernel) when the cores are all busy, as with two polling processes
/// on two cores. A yield every 64 empty polls lets them run at once.
///
/// Where the polling thread may run on one CPU only, every empty poll
/// yields ([`empty_polls_per_yield`], decision record 0057).
const YIELD_AFTER_EMPTY_POLLS: u32 = 64;

/// How many empty polls in a row give up the CPU once, for a CQ made by
/// the calling thread: [`YIELD_AFTER_EMPTY_POLLS`], or 1 where the thread
/// may run on one CPU only ([`doorbell_host::one_cpu`]). There, whatever
/// the poll waits for (the NIC's threads, a peer process's) runs only
/// once the polling thread stops, and each poll that keeps the CPU delays
/// it.
fn empty_polls_per_yield() -> u32 {
    if doorbell_host::one_cpu() {
        1
    } else {
        YIELD_AFTER_EMPTY_POLLS
    }
}

pub(crate) struct CqState {
    cons_index: u32,
    arm_sn: u32,
    /// Polls in a row that found nothing.
    empty_polls: u32,
    /// Empty polls in a row that give up the CPU ([`empty_polls_per_yield`]).
    yield_every: u32,
    /// Empty polls that gave up the CPU ([`Cq::polls_that_yielded`]).
    yielded: u64,
    /// The CQE ring and its size, which [`Cq::resize`] changes.
    buf: HostAddr,
    ncqe: u32,
    /// The QP whose CQE was polled last, kept so that the next CQE of the
    /// same QP (most CQs serve one) needs no look-up in the context's
    /// table and its lock; forgotten when the QP is destroyed or its CQEs
    /// cleaned ([`CqInner::forget_qp`]).
    last_qp: Option<Arc<QpShared>>,
}

pub(crate) struct CqInner {
    ctx: Context,
    pub(crate) cqn: Cqn,
    dbr: HostAddr,
    state: Mutex<CqState>,
}

/// Counts a poll that found nothing and, every [`CqState::yield_every`]
/// such polls in a row, gives up the CPU, the CQ's lock let go first.
fn found_nothing(mut st: std::sync::MutexGuard<'_, CqState>) {
    st.empty_polls = st.empty_polls.wrapping_add(1);
    if st.empty_polls.is_multiple_of(st.yield_every) {
        st.yielded += 1;
        drop(st);
        std::thread::yield_now();
    }
}

impl CqInner {
    fn state(&self) -> std::sync::MutexGuard<'_, CqState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the CQE of count `n` into `buf`; true if the device has
    /// written it (valid opcode, the owner bit of `n`'s pass of the ring).
    fn read_cqe(&self, st: &CqState, n: u32, buf: &mut [u8; CQE_LEN]) -> Result<bool, VerbsError> {
        let mem = self.ctx.mem();
        mem.read(slot(st, n)?, buf)?;
        let c = Cqe64::new_unchecked(&buf[..]);
        Ok(c.opcode() != CqeOpcode::Invalid && c.owner() == owner_for(n, st.ncqe))
    }

    /// Tells the device how far the ring has been consumed.
    fn publish_ci(&self, ci: u32) -> Result<(), VerbsError> {
        let mut rec = [0u8; dbr::DBR_LEN];
        dbr::CqDoorbellRecord::new_unchecked(&mut rec[..]).set_consumer_index(ci);
        let word = dbr::field::WORD0;
        self.ctx
            .mem()
            .write(offset(self.dbr, word.start as u64)?, &rec[word])?;
        Ok(())
    }

    /// Drops the QP kept from the last poll if it is `qpn` (which is
    /// being destroyed: a later QP may take its number).
    pub(crate) fn forget_qp(&self, qpn: Qpn) {
        let mut st = self.state();
        if st.last_qp.as_ref().is_some_and(|q| q.qpn == qpn) {
            st.last_qp = None;
        }
    }

    /// Removes QP `qpn`'s completions not yet polled and closes the gaps
    /// (`__mlx5_cq_clean`, run when the QP is reset or destroyed): the other
    /// QPs' CQEs move up towards the producer end, keeping their order, and
    /// the consumer index steps over the freed slots. `freed_recv` is told
    /// the `wqe_counter` of each receive CQE removed, so that an SRQ can
    /// take its WQE back. The device only writes beyond the producer end
    /// found here, which this never touches.
    pub(crate) fn clean(
        &self,
        qpn: Qpn,
        mut freed_recv: impl FnMut(u16),
    ) -> Result<(), VerbsError> {
        let mem = self.ctx.mem();
        let mut st = self.state();
        st.last_qp = None;
        let mut buf = [0u8; CQE_LEN];
        let mut prod = st.cons_index;
        while prod.wrapping_sub(st.cons_index) < st.ncqe && self.read_cqe(&st, prod, &mut buf)? {
            prod = prod.wrapping_add(1);
        }
        let mut freed = 0u32;
        let mut n = prod;
        while n != st.cons_index {
            n = n.wrapping_sub(1);
            self.read_cqe(&st, n, &mut buf)?;
            let c = Cqe64::new_unchecked(&buf[..]);
            if c.qpn() == qpn.get() {
                if is_recv(c.opcode()) {
                    freed_recv(c.wqe_counter());
                }
                freed += 1;
            } else if freed > 0 {
                let to = n.wrapping_add(freed);
                let (opcode, solicited) = (c.opcode(), c.is_solicited());
                Cqe64::new_unchecked(&mut buf[..]).set_op_own(
                    opcode,
                    solicited,
                    owner_for(to, st.ncqe),
                );
                mem.write(slot(&st, to)?, &buf)?;
            }
        }
        if freed > 0 {
            st.cons_index = st.cons_index.wrapping_add(freed);
            self.publish_ci(st.cons_index)?;
        }
        Ok(())
    }
}

/// Where the CQE of count `n` lies in the ring.
fn slot(st: &CqState, n: u32) -> Result<HostAddr, VerbsError> {
    Ok(offset(
        st.buf,
        u64::from(n & (st.ncqe - 1)) * CQE_LEN as u64,
    )?)
}

/// A CQE that completes a receive WQE.
fn is_recv(op: CqeOpcode) -> bool {
    matches!(
        op,
        CqeOpcode::RespSend
            | CqeOpcode::RespSendImm
            | CqeOpcode::RespSendInv
            | CqeOpcode::RespWrImm
            | CqeOpcode::RespErr
    )
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let buf = self.state().buf;
        if self.ctx.driver().destroy_cq(self.cqn).is_ok() {
            let _ = self.ctx.mem().free(buf);
        }
        self.ctx.free_dbrec(self.dbr);
    }
}

/// A ring of `ncqe` invalid CQEs, owner 0 (`mlx5_alloc_cq_buf`).
fn blank_ring(ncqe: u32) -> Vec<u8> {
    let mut init = vec![0u8; ncqe as usize * CQE_LEN];
    for e in init.chunks_exact_mut(CQE_LEN) {
        e[CQE_LEN - 1] = OP_OWN_INIT;
    }
    init
}

/// A completion queue (`ibv_cq`).
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn new(ctx: Context, cqe: u32) -> Result<Self, VerbsError> {
        let max = ctx.driver().caps().max_cqe;
        if cqe == 0 || cqe >= max {
            return Err(VerbsError::InvalidArgument(
                "CQ size must be between 1 and max_cqe - 1",
            ));
        }
        let ncqe = (cqe + 1).next_power_of_two();
        let mem = ctx.mem();
        let len = u64::from(ncqe) * CQE_LEN as u64;
        let buf = mem.alloc(len)?;
        // Every entry starts invalid with owner 0.
        mem.write(buf, &blank_ring(ncqe))?;
        let dbr = match ctx.alloc_dbrec() {
            Ok(d) => d,
            Err(e) => {
                let _ = mem.free(buf);
                return Err(e);
            }
        };
        let cqn = match ctx
            .driver()
            .create_cq(ncqe.trailing_zeros() as u8, buf, dbr)
        {
            Ok(c) => c,
            Err(e) => {
                let _ = mem.free(buf);
                ctx.free_dbrec(dbr);
                return Err(e.into());
            }
        };
        Ok(Self {
            inner: Arc::new(CqInner {
                ctx,
                cqn,
                dbr,
                state: Mutex::new(CqState {
                    cons_index: 0,
                    arm_sn: 0,
                    empty_polls: 0,
                    yield_every: empty_polls_per_yield(),
                    yielded: 0,
                    buf,
                    ncqe,
                    last_qp: None,
                }),
            }),
        })
    }

    /// The context the CQ was made in.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The CQ number.
    pub fn cqn(&self) -> Cqn {
        self.inner.cqn
    }

    /// True while anything besides this handle holds the CQ: a QP that
    /// completes into it, or another clone (so `ibv_destroy_cq` answers
    /// EBUSY).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// Where the CQE ring lies in host memory, and its length in bytes (what
    /// `mlx5dv_init_obj` reports as the CQ's buffer).
    pub fn ring(&self) -> (HostAddr, u64) {
        let st = self.inner.state();
        (st.buf, u64::from(st.ncqe) * CQE_LEN as u64)
    }

    /// Usable entries (`ibv_cq.cqe`).
    pub fn capacity(&self) -> u32 {
        self.inner.state().ncqe - 1
    }

    /// Grows or shrinks the CQ to at least `cqe` entries
    /// (`ibv_resize_cq`), keeping the completions not yet polled: the
    /// device moves to a new ring at once (MODIFY_CQ resize) and the
    /// provider copies what it has not polled into the new ring, each at
    /// its own count, as mlx5 copies CQEs. Refused if the new size cannot
    /// hold them (EINVAL). The same size is a no-op.
    pub fn resize(&self, cqe: u32) -> Result<(), VerbsError> {
        let inner = &*self.inner;
        let ctx = &inner.ctx;
        let max = ctx.driver().caps().max_cqe;
        if cqe == 0 || cqe >= max {
            return Err(VerbsError::InvalidArgument(
                "CQ size must be between 1 and max_cqe - 1",
            ));
        }
        let ncqe = (cqe + 1).next_power_of_two();
        let mut st = inner.state();
        if ncqe == st.ncqe {
            return Ok(());
        }
        let mem = ctx.mem();
        let len = u64::from(ncqe) * CQE_LEN as u64;
        let buf = mem.alloc(len)?;
        if let Err(e) = mem.write(buf, &blank_ring(ncqe)) {
            let _ = mem.free(buf);
            return Err(e.into());
        }
        // From here the device writes CQEs into the new ring only.
        if let Err(e) = ctx
            .driver()
            .resize_cq(inner.cqn, ncqe.trailing_zeros() as u8, buf)
        {
            let _ = mem.free(buf);
            return Err(e.into());
        }
        // Copy the old ring's unpolled CQEs, each to its count's slot with
        // the new ring's owner bit. The device writes new CQEs at later
        // counts, which it keeps within the new ring's size of
        // `cons_index`: the slots never meet.
        let mut cqe_buf = [0u8; CQE_LEN];
        let mut ci = st.cons_index;
        let mut copied = Vec::new();
        while inner.read_cqe(&st, ci, &mut cqe_buf)? {
            let c = Cqe64::new_unchecked(&cqe_buf[..]);
            let (opcode, solicited) = (c.opcode(), c.is_solicited());
            let mut w = Cqe64::new_unchecked(&mut cqe_buf[..]);
            w.set_op_own(opcode, solicited, owner_for(ci, ncqe));
            copied.push((ci, cqe_buf));
            ci = ci.wrapping_add(1);
        }
        for (n, bytes) in copied {
            let slot = u64::from(n & (ncqe - 1));
            mem.write(offset(buf, slot * CQE_LEN as u64)?, &bytes)?;
        }
        let old = std::mem::replace(&mut st.buf, buf);
        st.ncqe = ncqe;
        let _ = mem.free(old);
        Ok(())
    }

    /// Polls up to `wc.len()` completions into `wc`; returns how many.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize, VerbsError> {
        let inner = &*self.inner;
        let mut st = inner.state();
        let mut n = 0;
        let mut buf = [0u8; CQE_LEN];
        let start = st.cons_index;
        if wc.is_empty() {
            return Ok(0);
        }
        // Nothing yet: the device may have work waiting for a thread
        // (frames in a shared-memory ring); this one does it.
        let mut found = inner.read_cqe(&st, st.cons_index, &mut buf)?;
        if !found {
            if !inner.ctx.driver().link().progress() {
                found_nothing(st);
                return Ok(0);
            }
            found = inner.read_cqe(&st, st.cons_index, &mut buf)?;
        }
        // Each CQE is read once: `buf` holds the one at `cons_index`.
        while found {
            st.cons_index = st.cons_index.wrapping_add(1);
            if let Some(w) = self.parse(&mut st, &Cqe64::new_unchecked(&buf[..])) {
                wc[n] = w;
                n += 1;
            }
            found = n < wc.len() && inner.read_cqe(&st, st.cons_index, &mut buf)?;
        }
        // The record is written once per call, and only if CQEs were taken.
        if st.cons_index != start {
            inner.publish_ci(st.cons_index)?;
            st.empty_polls = 0;
        } else {
            found_nothing(st);
        }
        Ok(n)
    }

    /// Polls of this CQ that found nothing and gave up the CPU: one in
    /// every 64 empty polls in a row, or each one where the polling thread
    /// may run on one CPU only ([`doorbell_host::one_cpu`]). A count for
    /// tests and reports.
    pub fn polls_that_yielded(&self) -> u64 {
        self.inner.state().yielded
    }

    fn parse(&self, st: &mut CqState, cqe: &Cqe64<&[u8]>) -> Option<Wc> {
        let qpn = Qpn::new(cqe.qpn());
        if st.last_qp.as_ref().is_none_or(|q| q.qpn != qpn) {
            // A CQE of a QP destroyed meanwhile is consumed and skipped.
            st.last_qp = Some(self.inner.ctx.find_qp(qpn)?);
        }
        let qp = st.last_qp.as_deref()?;
        let mut wc = Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            qp_num: qpn,
            src_qp: 0,
            grh: false,
            sl: 0,
            vendor_err: 0,
            timestamp: cqe.timestamp(),
        };
        match cqe.opcode() {
            CqeOpcode::Req | CqeOpcode::ReqErr => {
                let (wr_id, _) = qp.complete_send(cqe.wqe_counter());
                wc.wr_id = wr_id;
                wc.opcode = WcOpcode::from_send(cqe.send_opcode());
                if cqe.opcode() == CqeOpcode::ReqErr {
                    wc.status = cqe.syndrome().into();
                    wc.vendor_err = cqe.vendor_syndrome();
                } else if matches!(
                    wc.opcode,
                    WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd
                ) {
                    wc.byte_len = cqe.byte_cnt();
                }
            }
            CqeOpcode::RespSend
            | CqeOpcode::RespSendImm
            | CqeOpcode::RespSendInv
            | CqeOpcode::RespWrImm
            | CqeOpcode::RespErr => {
                wc.wr_id = qp.complete_recv(cqe.wqe_counter());
                wc.opcode = if cqe.opcode() == CqeOpcode::RespWrImm {
                    WcOpcode::RecvRdmaWithImm
                } else {
                    WcOpcode::Recv
                };
                if cqe.opcode() == CqeOpcode::RespErr {
                    wc.status = cqe.syndrome().into();
                    wc.vendor_err = cqe.vendor_syndrome();
                } else {
                    wc.byte_len = cqe.byte_cnt();
                    if matches!(cqe.opcode(), CqeOpcode::RespSendImm | CqeOpcode::RespWrImm) {
                        wc.imm_data = Some(cqe.imm());
                    }
                    wc.src_qp = cqe.rqpn();
                    wc.grh = cqe.grh() != 0;
                    wc.sl = cqe.sl();
                }
            }
            _ => {
                wc.status = WcStatus::GeneralErr;
            }
        }
        Some(wc)
    }

    /// Asks for one completion event (`ibv_req_notify_cq`): on the next
    /// completion, or only the next solicited or error one.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), VerbsError> {
        let inner = &*self.inner;
        let st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let arm = CqArmDoorbell {
            sn: (st.arm_sn & 3) as u8,
            solicited_only,
            ci: st.cons_index & 0x00ff_ffff,
            cqn: inner.cqn.get(),
        };
        let mem = inner.ctx.mem();
        let mut rec = [0u8; dbr::DBR_LEN];
        dbr::CqDoorbellRecord::new_unchecked(&mut rec[..]).set_arm(arm.arm_word());
        let word = dbr::field::WORD1;
        mem.write(offset(inner.dbr, word.start as u64)?, &rec[word])?;
        let uar = inner.ctx.driver().cq_uar();
        inner
            .ctx
            .mmio()
            .mmio_write(uar, CQ_DOORBELL as u32, &arm.emit());
        Ok(())
    }

    /// Acknowledges a completion event, advancing the arm sequence number.
    pub fn ack_event(&self) {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        st.arm_sn = st.arm_sn.wrapping_add(1);
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("cqn", &self.inner.cqn)
            .field("ncqe", &self.inner.state().ncqe)
            .finish()
    }
}

impl Context {
    /// Creates a completion queue of at least `cqe` entries.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq, VerbsError> {
        Cq::new(self.clone(), cqe)
    }
}
