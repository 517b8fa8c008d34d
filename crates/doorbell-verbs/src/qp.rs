//! Queue pairs: creation, modify, and the post_send / post_recv fast path
//! (mlx5 reference §5, §6, §7).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use doorbell_driver::CreateQpReq;
use doorbell_hif::{AddressVector, QpAttrs, QpState, QpType};
use doorbell_host::{PAGE_SIZE, offset};
use doorbell_layout::dbr;
use doorbell_layout::uar::BF_CHUNK;
use doorbell_layout::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, WQEBB_LEN, WqeOpcode,
    ctrl_flags, field,
};
use doorbell_types::{HostAddr, Qpn, Rkey};

use crate::context::{Bfreg, Context};
use crate::cq::Cq;
use crate::cq::CqInner;
use crate::error::VerbsError;
use crate::mr::{Pd, Sge};
use crate::queue_buf::QueueBuf;
use crate::report::{PostReport, Ring};
use crate::srq::Srq;
use crate::wq::{MAX_WQE_LEN, QpShared, RqState, STAGE_LEN, SqState, write_recv_segments};
use crate::wr::{PostError, RecvWr};

/// Requested queue sizes (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// QP creation attributes (`ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr {
    /// Service type.
    pub qp_type: QpType,
    /// CQ of send completions.
    pub send_cq: Cq,
    /// CQ of receive completions.
    pub recv_cq: Cq,
    /// Sizes.
    pub cap: QpCaps,
    /// Signal every send WR, whatever its flags.
    pub sq_sig_all: bool,
    /// The shared receive queue the QP takes its receive WQEs from; `None`
    /// gives it a receive queue of its own (`cap.max_recv_wr`,
    /// `cap.max_recv_sge`). With one, those two are ignored, the QP has no
    /// receive queue and [`Qp::post_recv`] is refused; its receive
    /// completions carry its own `qp_num` and the wr_id posted to the SRQ.
    pub srq: Option<Srq>,
}

/// Where a remote RDMA or atomic operation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: Rkey,
}

/// The operation of a send WR, with what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOpcode {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// RDMA WRITE.
    RdmaWrite(RemoteAddr),
    /// RDMA WRITE with immediate data.
    RdmaWriteWithImm(RemoteAddr, u32),
    /// RDMA READ into the SGEs.
    RdmaRead(RemoteAddr),
    /// 64-bit compare and swap; the old value lands in the one 8-byte SGE.
    AtomicCmpSwp {
        /// Target.
        remote: RemoteAddr,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 64-bit fetch and add; the old value lands in the one 8-byte SGE.
    AtomicFetchAdd {
        /// Target.
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
}

impl WrOpcode {
    /// Whether the operation sends a payload of its own (so may carry it
    /// inline): not a READ or an atomic, whose SGE is where the answer
    /// lands.
    pub fn carries_payload(&self) -> bool {
        !matches!(
            self,
            WrOpcode::RdmaRead(_) | WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. }
        )
    }
}

/// Send flags (`ibv_send_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// Wait for earlier READs and atomics.
    pub const FENCE: SendFlags = SendFlags(1);
    /// Write a completion.
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// Raise a solicited event at the receiver.
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    /// Copy the data into the WQE.
    pub const INLINE: SendFlags = SendFlags(1 << 3);

    /// True if every flag of `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// An address handle (`ibv_ah`): a UD destination's path. mlx5 keeps it in
/// user space and copies it into each WQE's datagram segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ah {
    /// The path.
    pub av: AddressVector,
}

/// UD addressing of a send WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTarget {
    /// Destination path.
    pub ah: Ah,
    /// Destination QPN.
    pub remote_qpn: Qpn,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Local data.
    pub sg_list: &'a [Sge],
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// UD destination (UD QPs only).
    pub ud: Option<UdTarget>,
}

/// Where a send WR's payload comes from.
#[derive(Debug, Clone, Copy)]
pub enum SendData<'a> {
    /// Bytes of host memory named by SGEs: by pointer (the device reads
    /// them, the lkeys are checked), or, with [`SendFlags::INLINE`], copied
    /// by the CPU into the WQE at post time (no lkey needed).
    Sges(&'a [Sge]),
    /// Bytes copied into the WQE at post time whatever the flags, as
    /// `ibv_wr_set_inline_data` gives them: no registration, no host
    /// address.
    Inline(&'a [u8]),
}

/// A send work request whose payload may be given as bytes: what
/// [`Qp::post_send_iter`] takes. A [`SendWr`] converts into one.
#[derive(Debug, Clone, Copy)]
pub struct PostWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The payload.
    pub data: SendData<'a>,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// UD destination (UD QPs only).
    pub ud: Option<UdTarget>,
}

impl<'a> From<&SendWr<'a>> for PostWr<'a> {
    fn from(w: &SendWr<'a>) -> Self {
        Self {
            wr_id: w.wr_id,
            data: SendData::Sges(w.sg_list),
            opcode: w.opcode,
            flags: w.flags,
            ud: w.ud,
        }
    }
}

/// The WQEs of a post staged and not yet written into the send ring.
struct Run {
    /// The ring slot of the first.
    slot: usize,
    /// The post's index of the first WR.
    first: u32,
    /// The producer index before the first.
    cur_post: u16,
    /// Bytes staged, whole WQEBBs.
    len: usize,
    /// The post's segments, inline bytes and inline chunks before the
    /// first ([`PostReport`]'s).
    counts: (u32, u32, u32),
}

/// What [`Qp::build_wqe`] wrote.
struct Built {
    /// Bytes of the WQE, a multiple of 16.
    size: usize,
    /// It carries its payload inline.
    inline: bool,
    /// Inline payload bytes.
    inline_len: u32,
    /// Segments after the control segment, as [`PostReport::segments`]
    /// counts them.
    segments: u32,
}

struct QpInner {
    pd: Pd,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _srq: Option<Srq>,
    shared: Arc<QpShared>,
    qp_type: QpType,
    sq_sig_all: bool,
    buf: QueueBuf,
    sq_start: HostAddr,
    rq_stride: u32,
    dbr: HostAddr,
    /// The user index its CQEs carry (`uidx`).
    uidx: u32,
    bfreg_index: u32,
    bf: Arc<Bfreg>,
    max_send_post: u32,
    max_recv_post: u32,
    max_send_gs: u32,
    max_recv_gs: u32,
    max_inline: u32,
    /// Held over a modify: one at a time.
    modifying: Mutex<()>,
    /// The state's mlx5 code, written under `modifying`, read by a post
    /// without a lock.
    state_code: AtomicU8,
    cap: QpCaps,
}

impl QpInner {
    /// Removes the QP's unpolled completions from its CQs, giving an SRQ
    /// back the WQEs they held (mlx5 does so on reset and on destroy).
    fn clean_cqs(&self) -> Result<(), VerbsError> {
        let qpn = self.shared.qpn;
        let srq = self.shared.srq.as_ref();
        self._recv_cq.clean(qpn, |wqe| {
            if let Some(srq) = srq {
                srq.complete(wqe);
            }
        })?;
        if !Arc::ptr_eq(&self._send_cq, &self._recv_cq) {
            self._send_cq.clean(qpn, |_| {})?;
        }
        Ok(())
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let ctx = &self.pd.inner.ctx;
        ctx.unregister_qp(self.shared.qpn);
        self._recv_cq.forget_qp(self.shared.qpn);
        self._send_cq.forget_qp(self.shared.qpn);
        if ctx.driver().destroy_qp(self.shared.qpn).is_ok() {
            let _ = self.clean_cqs();
            self.buf.free(&**ctx.mem());
        }
        ctx.free_dbrec(self.dbr);
        ctx.free_uidx(self.uidx);
    }
}

/// A queue pair (`ibv_qp`).
#[derive(Clone)]
pub struct Qp {
    inner: Arc<QpInner>,
}

/// Clears the bytes `range` of a WQE being built, but for those in its
/// first WQEBB, which `build_wqe` cleared whole before writing any
/// segment: what lies there past the last byte written is still zero. (A
/// small WQE, all in its first WQEBB, then needs no second clearing.)
#[inline]
fn zero_past_first_wqebb(wqe: &mut [u8; MAX_WQE_LEN], range: std::ops::Range<usize>) {
    if range.end > WQEBB_LEN {
        wqe[range.start.max(WQEBB_LEN)..range.end].fill(0);
    }
}

/// Bytes of fixed segments a send WQE of this type may need before its data
/// (rdma-core v44's `_sq_overhead` with the default operations of each
/// type): for RC and UC the largest of an RDMA (ctrl + raddr), an atomic
/// (ctrl + raddr + atomic) and a memory-window WQE (ctrl + UMR ctrl + mkey
/// context + 64 bytes of KLMs), 192 bytes; for UD ctrl + datagram.
fn sq_overhead(t: QpType) -> u32 {
    let rdma = field::CTRL_LEN + field::RADDR_LEN;
    let atomic = rdma + field::ATOMIC_LEN;
    let mw = field::CTRL_LEN
        + field::UMR_CTRL_LEN
        + field::MKEY_CONTEXT_LEN
        + field::UMR_KLM_LEN.max(64);
    match t {
        QpType::Rc | QpType::Uc => rdma.max(atomic).max(mw) as u32,
        QpType::Ud => (field::CTRL_LEN + field::AV_LEN) as u32,
    }
}

impl Pd {
    /// Creates a QP (`ibv_create_qp`), sizing its queues as the mlx5
    /// provider does.
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<Qp, VerbsError> {
        self.create_qp_as(attr, false)
    }

    /// Creates the port's GSI QP (QP1): a UD QP the device numbers 1, which
    /// takes the management datagrams peers send to QP 1 and sends its own
    /// from it. What the kernel makes for its CM; one per device (EBUSY for
    /// a second).
    pub fn create_gsi_qp(&self, attr: &QpInitAttr) -> Result<Qp, VerbsError> {
        if attr.qp_type != QpType::Ud {
            return Err(VerbsError::InvalidArgument("the GSI QP is UD"));
        }
        self.create_qp_as(attr, true)
    }

    fn create_qp_as(&self, attr: &QpInitAttr, gsi: bool) -> Result<Qp, VerbsError> {
        let ctx = self.context().clone();
        // As the kernel's uverbs: every object a QP names is of its context.
        if !attr.send_cq.context().same_as(&ctx) || !attr.recv_cq.context().same_as(&ctx) {
            return Err(VerbsError::InvalidArgument("a CQ of another context"));
        }
        let resp = ctx.driver().resp().clone();
        let cap = attr.cap;
        let own_rq = attr.srq.is_none();
        if cap.max_send_wr > resp.max_send_wqebb || (own_rq && cap.max_recv_wr > resp.max_recv_wr) {
            return Err(VerbsError::InvalidArgument("queue depth out of range"));
        }
        // Send WQE size: room for the SGEs or the inline data, whole WQEBBs.
        let overhead = sq_overhead(attr.qp_type);
        let gather = overhead + cap.max_send_sge * wqe::DS_LEN as u32;
        let inl = overhead + (cap.max_inline_data + field::INLINE_HDR_LEN as u32).div_ceil(16) * 16;
        let wqe_size = gather.max(inl).div_ceil(WQEBB_LEN as u32) * WQEBB_LEN as u32;
        if wqe_size > resp.max_sq_desc_sz {
            return Err(VerbsError::InvalidArgument(
                "send WQE larger than max_sq_desc_sz",
            ));
        }
        let max_inline = wqe_size - overhead - field::INLINE_HDR_LEN as u32;
        // A QP may ask for no send queue (a receive-only end, as qperf's
        // servers make): as mlx5, it has none to post to, though the
        // device still gets a one-WQE ring.
        let sq_bytes =
            (u64::from(cap.max_send_wr.max(1)) * u64::from(wqe_size)).next_power_of_two();
        let sq_wqe_cnt = (sq_bytes / WQEBB_LEN as u64) as u32;
        if sq_wqe_cnt > resp.max_send_wqebb {
            return Err(VerbsError::InvalidArgument(
                "send queue larger than max_send_wqebb",
            ));
        }
        let max_send_post = if cap.max_send_wr == 0 {
            0
        } else {
            (sq_bytes / u64::from(wqe_size)) as u32
        };
        // mlx5 grants the SGEs asked for (`sq.max_gs`), not all that fit.
        let max_send_gs = cap.max_send_sge;
        // Receive queue: stride for the SGEs, at least one WQEBB in all.
        // A QP with an SRQ has none: its buffer is the send queue.
        let rq_stride = (cap.max_recv_sge.max(1) * 16).next_power_of_two();
        if own_rq && rq_stride > resp.max_rq_desc_sz {
            return Err(VerbsError::InvalidArgument(
                "receive WQE larger than max_rq_desc_sz",
            ));
        }
        let rq_bytes = if own_rq {
            (u64::from(cap.max_recv_wr.max(1).next_power_of_two()) * u64::from(rq_stride)).max(64)
        } else {
            0
        };
        let rq_wqe_cnt = (rq_bytes / u64::from(rq_stride)) as u32;
        let rq_stride = if own_rq { rq_stride } else { 16 };
        let buf_len = (rq_bytes + sq_bytes).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let mem = ctx.mem();
        let qbuf = self.alloc_queue_buf(buf_len)?;
        let buf = qbuf.addr;
        let dbr_addr = match ctx.alloc_dbrec() {
            Ok(d) => d,
            Err(e) => {
                qbuf.free(&**mem);
                return Err(e);
            }
        };
        let uidx = ctx.alloc_uidx();
        // A parent domain's thread domain gives the register (lockless).
        let td_bf = self.thread_domain().map(|td| Arc::clone(td.bfreg()));
        let req = CreateQpReq {
            qp_type: attr.qp_type,
            pd: self.pdn(),
            send_cq: attr.send_cq.cqn(),
            recv_cq: attr.recv_cq.cqn(),
            buf_addr: buf,
            buf_len,
            log_sq_size: sq_wqe_cnt.trailing_zeros() as u8,
            log_rq_size: if own_rq {
                rq_wqe_cnt.trailing_zeros() as u8
            } else {
                0
            },
            log_rq_stride: (rq_stride.trailing_zeros() - 4) as u8,
            db_addr: dbr_addr,
            srq: attr.srq.as_ref().map(Srq::srqn),
            dyn_bfreg: td_bf.as_ref().and_then(|b| b.dyn_index),
            gsi,
            // The lowest free index, as libmlx5 numbers them (this
            // provider finds a completion's QP by its number all the same).
            user_index: uidx,
        };
        let out = ctx.driver().create_qp(req);
        let bf_of =
            |o: &doorbell_driver::CreateQpResp| td_bf.or_else(|| ctx.bfreg(o.bfreg_index).cloned());
        // An application's buffer is cleared once pinned (process memory
        // reaches a granted range only then), as libmlx5 clears it.
        let out = out.map(|o| (o, bf_of(&o), qbuf.clear(&**mem)));
        let (out, bf) = match out {
            Ok((o, Some(bf), Ok(()))) => (o, bf),
            Ok((o, bf, cleared)) => {
                let _ = ctx.driver().destroy_qp(o.qpn);
                qbuf.free(&**mem);
                ctx.free_dbrec(dbr_addr);
                ctx.free_uidx(uidx);
                return Err(match (bf, cleared) {
                    (_, Err(e)) => e,
                    _ => VerbsError::InvalidArgument("kernel returned an unmapped bfreg"),
                });
            }
            Err(e) => {
                qbuf.free(&**mem);
                ctx.free_dbrec(dbr_addr);
                ctx.free_uidx(uidx);
                return Err(e.into());
            }
        };
        let shared = Arc::new(QpShared {
            qpn: out.qpn,
            sq: Mutex::new(SqState::new(sq_wqe_cnt)),
            rq: Mutex::new(RqState {
                head: 0,
                tail: 0,
                wrid: vec![0; rq_wqe_cnt as usize],
                build: vec![0; rq_stride as usize],
            }),
            sq_wqe_cnt,
            rq_wqe_cnt,
            srq: attr.srq.as_ref().map(|s| Arc::clone(s.shared())),
        });
        ctx.register_qp(Arc::clone(&shared));
        let granted = QpCaps {
            max_send_wr: max_send_post,
            max_recv_wr: rq_wqe_cnt,
            max_send_sge: max_send_gs,
            max_recv_sge: if own_rq { rq_stride / 16 } else { 0 },
            max_inline_data: max_inline,
        };
        Ok(Qp {
            inner: Arc::new(QpInner {
                pd: self.clone(),
                _send_cq: Arc::clone(&attr.send_cq.inner),
                _recv_cq: Arc::clone(&attr.recv_cq.inner),
                _srq: attr.srq.clone(),
                shared,
                qp_type: attr.qp_type,
                sq_sig_all: attr.sq_sig_all,
                buf: qbuf,
                sq_start: offset(buf, rq_bytes)?,
                rq_stride,
                dbr: dbr_addr,
                uidx,
                bfreg_index: out.bfreg_index,
                bf,
                max_send_post,
                max_recv_post: rq_wqe_cnt,
                max_send_gs,
                max_recv_gs: if own_rq { rq_stride / 16 } else { 0 },
                max_inline,
                modifying: Mutex::new(()),
                state_code: AtomicU8::new(QpState::Reset as u8),
                cap: granted,
            }),
        })
    }
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.inner.shared.qpn
    }

    /// The service type.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The sizes granted (`ibv_query_qp` IBV_QP_CAP).
    pub fn caps(&self) -> QpCaps {
        self.inner.cap
    }

    /// The gross bfreg index this QP rings through, as the kernel answered
    /// it: `doorbell_driver::INVALID_BFREG` for a QP of a thread domain.
    pub fn bfreg_index(&self) -> u32 {
        self.inner.bfreg_index
    }

    pub(crate) fn bf(&self) -> &Arc<Bfreg> {
        &self.inner.bf
    }

    /// The state as the provider last set it.
    pub fn state(&self) -> QpState {
        let code = self.inner.state_code.load(Ordering::Acquire);
        // Only codes of states are stored.
        QpState::from_code(code).unwrap_or(QpState::Err)
    }

    fn ctx(&self) -> &Context {
        &self.inner.pd.inner.ctx
    }

    /// Moves the QP to `state` with the attributes in `attrs`
    /// (`ibv_modify_qp`; an attribute is in the mask when it is `Some`).
    pub fn modify(&self, state: QpState, attrs: &QpAttrs) -> Result<(), VerbsError> {
        let _one = self
            .inner
            .modifying
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.ctx().driver().modify_qp(self.qpn(), state, *attrs)?;
        self.inner.state_code.store(state as u8, Ordering::Release);
        if state == QpState::Reset {
            // The provider forgets everything posted and zeroes the record.
            let mut sq = self
                .inner
                .shared
                .sq
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            sq.cur_post = 0;
            sq.head = 0;
            sq.tail = 0;
            let mut rq = self
                .inner
                .shared
                .rq
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            rq.head = 0;
            rq.tail = 0;
            drop((sq, rq));
            self.ctx().mem().write(self.inner.dbr, &[0u8; 8])?;
            self.inner.clean_cqs()?;
        }
        Ok(())
    }

    /// Asks the device for the QP's state and attributes.
    pub fn query(&self) -> Result<(QpState, QpAttrs), VerbsError> {
        Ok(self.ctx().driver().query_qp(self.qpn())?)
    }

    /// Posts receive WRs (`ibv_post_recv`): writes the WQEs and the doorbell
    /// record's receive counter. No MMIO.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        self.post_recv_list(wrs).map_err(|e| e.error)
    }

    /// [`Qp::post_recv`], saying which WR failed (`ibv_post_recv`'s
    /// `bad_wr`): the WRs before it are posted, it and those after are not.
    pub fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_iter(wrs.iter().map(|w| (w.wr_id, w.sg_list.iter().copied())))
    }

    /// Posts the receive WRs `wrs` yields, each a `wr_id` and its SGEs, as
    /// [`Qp::post_recv_list`] posts a list; builds each WQE as it comes, so
    /// nothing is collected or allocated.
    pub fn post_recv_iter<I, S>(&self, wrs: I) -> Result<(), PostError>
    where
        I: IntoIterator<Item = (u64, S)>,
        S: IntoIterator<Item = Sge>,
        S::IntoIter: ExactSizeIterator,
    {
        let at = |index: usize| move |error| PostError { index, error };
        let inner = &*self.inner;
        if inner._srq.is_some() {
            return Err(at(0)(VerbsError::InvalidArgument(
                "a QP with an SRQ has no receive queue: post to the SRQ",
            )));
        }
        let state = self.state();
        if matches!(state, QpState::Reset) {
            return Err(at(0)(VerbsError::BadQpState {
                qpn: self.qpn().get(),
                state,
            }));
        }
        let mem = self.ctx().mem();
        let shared = &inner.shared;
        let mut guard = shared.rq.lock().unwrap_or_else(|e| e.into_inner());
        let rq = &mut *guard;
        let stride = inner.rq_stride as usize;
        let wqe = &mut rq.build;
        let mut count = 0;
        for (n, (wr_id, sges)) in wrs.into_iter().enumerate() {
            let sges = sges.into_iter();
            let posted = rq.head.wrapping_sub(rq.tail).wrapping_add(n as u32);
            if posted >= inner.max_recv_post {
                self.publish_recv(&mut rq.head, n as u32).map_err(at(n))?;
                return Err(at(n)(VerbsError::QueueFull {
                    posted,
                    max: inner.max_recv_post,
                }));
            }
            if sges.len() as u32 > inner.max_recv_gs {
                self.publish_recv(&mut rq.head, n as u32).map_err(at(n))?;
                return Err(at(n)(VerbsError::InvalidArgument(
                    "more SGEs than max_recv_sge",
                )));
            }
            let ind = (rq.head.wrapping_add(n as u32) & (shared.rq_wqe_cnt - 1)) as usize;
            let bytes =
                write_recv_segments(wqe, sges.map(Sge::segment), inner.max_recv_gs as usize);
            let written = offset(inner.buf.addr, (ind * stride) as u64)
                .and_then(|a| mem.write(a, &wqe[..bytes]));
            if let Err(e) = written {
                self.publish_recv(&mut rq.head, n as u32).map_err(at(n))?;
                return Err(at(n)(e.into()));
            }
            rq.wrid[ind] = wr_id;
            count = n + 1;
        }
        self.publish_recv(&mut rq.head, count as u32).map_err(at(0))
    }

    /// Counts `nreq` more receive WQEs posted at `head`, in the doorbell
    /// record too.
    fn publish_recv(&self, head: &mut u32, nreq: u32) -> Result<(), VerbsError> {
        if nreq == 0 {
            return Ok(());
        }
        *head = head.wrapping_add(nreq);
        let head = *head;
        self.write_dbr_word(dbr::field::WORD0, |r| r.set_recv_counter(head as u16))
    }

    /// Posts send WRs (`ibv_post_send`). On error, the WRs before the failing
    /// one are posted and rung; the failing one and those after are not.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), VerbsError> {
        self.post_send_list(wrs).map_err(|e| e.error)
    }

    /// [`Qp::post_send`], saying which WR failed (`ibv_post_send`'s
    /// `bad_wr`).
    pub fn post_send_list(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.post_send_iter(wrs.iter().map(PostWr::from))
    }

    /// Posts the WRs `wrs` yields, as [`Qp::post_send_list`] posts a list:
    /// one doorbell for all of them, or BlueFlame for a single small one;
    /// on error the WRs before the failing one are posted and rung, the
    /// failing one (its index in the error) and those after are not.
    /// Builds each WQE as it comes, so nothing is collected or allocated.
    pub fn post_send_iter<'a>(
        &self,
        wrs: impl IntoIterator<Item = PostWr<'a>>,
    ) -> Result<(), PostError> {
        let inner = &*self.inner;
        let state = self.state();
        if state != QpState::Rts {
            return Err(PostError {
                index: 0,
                error: VerbsError::BadQpState {
                    qpn: self.qpn().get(),
                    state,
                },
            });
        }
        let shared = &inner.shared;
        let mut guard = shared.sq.lock().unwrap_or_else(|e| e.into_inner());
        // The WQEs are built one after another in the staging area, as they
        // will lie in the ring from the slot of the first one not written
        // yet, and written there when the area is full and at the end: one
        // access to the ring's memory for a postlist, not one a WQE. A WR
        // that fails half-built lies past the last good WQE, whose bytes
        // the doorbell (or BlueFlame copy) carries. The area lives with the
        // queue, so a post does not clear it first: each WQE clears its
        // first WQEBB and writes every byte after it up to its end.
        let SqState {
            ref mut staged,
            ref mut written,
            ref mut cur_post,
            ref mut head,
            ref tail,
            ref mut wrid,
            ref mut wqe_head,
        } = *guard;
        let mut run = Run {
            slot: self.sq_slot(*cur_post),
            first: 0,
            cur_post: *cur_post,
            len: 0,
            counts: (0, 0, 0),
        };
        // The last good WQE: where it starts in the area (`None` once it
        // has been written out, its bytes then in `written`), its size and
        // whether it is inline.
        let mut last: Option<(Option<usize>, usize, bool)> = None;
        // The size and kind of the last WQE written out with a full area.
        let mut kept: Option<(usize, bool)> = None;
        // Whether the run's WQEs failed to reach the ring.
        let mut unwritten = false;
        let mut result = Ok(());
        let mut nreq = 0u32;
        let (mut segments, mut inline_bytes, mut inline_chunks) = (0u32, 0u32, 0u32);
        for wr in wrs {
            let posted = head.wrapping_sub(*tail).wrapping_add(nreq);
            if posted >= inner.max_send_post {
                result = Err(VerbsError::QueueFull {
                    posted,
                    max: inner.max_send_post,
                });
                break;
            }
            if STAGE_LEN - run.len < MAX_WQE_LEN {
                if let Err(e) = self.write_sq(run.slot, &staged[..run.len]) {
                    (result, unwritten) = (Err(e), true);
                    break;
                }
                if let Some((Some(at), size, inl)) = last {
                    written[..size].copy_from_slice(&staged[at..at + size]);
                    last = Some((None, size, inl));
                    kept = Some((size, inl));
                }
                run = Run {
                    slot: self.sq_slot(*cur_post),
                    first: nreq,
                    cur_post: *cur_post,
                    len: 0,
                    counts: (segments, inline_bytes, inline_chunks),
                };
            }
            let Some(wqe) = staged
                .get_mut(run.len..)
                .and_then(|b| b.first_chunk_mut::<MAX_WQE_LEN>())
            else {
                // Never: an emptied area holds the largest WQE.
                result = Err(VerbsError::NoSpace("send WQE staging area"));
                break;
            };
            let Built {
                size,
                inline: inl,
                inline_len,
                segments: segs,
            } = match self.build_wqe(&wr, *cur_post, wqe) {
                Ok(x) => x,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let idx = self.sq_slot(*cur_post);
            wrid[idx] = wr.wr_id;
            wqe_head[idx] = head.wrapping_add(nreq);
            // `build_wqe` padded the WQE to whole WQEBBs.
            let blocks = size.div_ceil(WQEBB_LEN);
            last = Some((Some(run.len), size, inl));
            run.len += blocks * WQEBB_LEN;
            *cur_post = cur_post.wrapping_add(blocks as u16);
            nreq += 1;
            segments += segs;
            inline_bytes += inline_len;
            inline_chunks += inline_len.div_ceil(64);
        }
        if !unwritten
            && run.len > 0
            && let Err(e) = self.write_sq(run.slot, &staged[..run.len])
        {
            (result, unwritten) = (Err(e), true);
        }
        if unwritten {
            // The run's WQEs are not in the ring: they and the WRs after
            // them are not posted. Those before it were written out with a
            // full area, the last of them kept.
            nreq = run.first;
            *cur_post = run.cur_post;
            (segments, inline_bytes, inline_chunks) = run.counts;
            last = kept.map(|(size, inl)| (None, size, inl));
        }
        if let Some((at, size, inl)) = last {
            let wqe = match at {
                Some(at) => &staged[at..at + size],
                None => &written[..size],
            };
            *head = head.wrapping_add(nreq);
            // The WQEs are in memory before the record (a compiler barrier
            // on x86); the record before the doorbell (sfence).
            self.write_dbr_word(dbr::field::WORD1, |r| r.set_send_counter(*cur_post))
                .map_err(|error| PostError { index: 0, error })?;
            let bf = &inner.bf;
            let mut report = PostReport {
                qpn: self.qpn(),
                wqes: nreq,
                segments,
                inline_bytes,
                inline_chunks,
                ring: Ring::Doorbell,
                bfreg: inner.bfreg_index,
                locked: bf.need_lock,
            };
            let observer = self.ctx().post_observer();
            if let Some(o) = &observer {
                o.before_ring(&report);
            }
            report.ring = self.ring(wqe, nreq, inl);
            if let Some(o) = &observer {
                o.after_ring(&report);
            }
        }
        result.map_err(|error| PostError {
            index: nreq as usize,
            error,
        })
    }

    /// Builds one WQE at producer index `cur_post`; says what it wrote.
    fn build_wqe(
        &self,
        wr: &PostWr<'_>,
        cur_post: u16,
        wqe: &mut [u8; MAX_WQE_LEN],
    ) -> Result<Built, VerbsError> {
        let inner = &*self.inner;
        let (opcode, imm, remote, atomic) = match wr.opcode {
            WrOpcode::Send => (WqeOpcode::Send, 0, None, None),
            WrOpcode::SendWithImm(i) => (WqeOpcode::SendImm, i, None, None),
            WrOpcode::RdmaWrite(r) => (WqeOpcode::RdmaWrite, 0, Some(r), None),
            WrOpcode::RdmaWriteWithImm(r, i) => (WqeOpcode::RdmaWriteImm, i, Some(r), None),
            WrOpcode::RdmaRead(r) => (WqeOpcode::RdmaRead, 0, Some(r), None),
            WrOpcode::AtomicCmpSwp {
                remote,
                compare,
                swap,
            } => (WqeOpcode::AtomicCs, 0, Some(remote), Some((swap, compare))),
            WrOpcode::AtomicFetchAdd { remote, add } => {
                (WqeOpcode::AtomicFa, 0, Some(remote), Some((add, 0)))
            }
        };
        let is_rd = !wr.opcode.carries_payload();
        if inner.qp_type == QpType::Ud && (remote.is_some() || wr.ud.is_none()) {
            return Err(VerbsError::InvalidArgument(
                "UD QPs send only SENDs, each with a UD target",
            ));
        }
        if inner.qp_type == QpType::Uc && is_rd {
            // mlx5 refuses READ and atomics on UC at post (EINVAL).
            return Err(VerbsError::InvalidArgument(
                "UC QPs have no RDMA READ and no atomics",
            ));
        }
        let sg_list = match wr.data {
            SendData::Sges(l) => l,
            SendData::Inline(_) if is_rd => {
                return Err(VerbsError::InvalidArgument(
                    "READs and atomics carry no inline data",
                ));
            }
            SendData::Inline(_) => &[],
        };
        if sg_list.len() as u32 > inner.max_send_gs {
            return Err(VerbsError::InvalidArgument("more SGEs than max_send_sge"));
        }
        if atomic.is_some() && (sg_list.len() != 1 || sg_list[0].length != 8) {
            return Err(VerbsError::InvalidArgument(
                "an atomic needs exactly one 8-byte SGE",
            ));
        }
        // The first WQEBB cleared at once; bytes past it are cleared where
        // nothing else writes them (`zero_past_first_wqebb`).
        wqe[..WQEBB_LEN].fill(0);
        let mut off = field::CTRL_LEN;
        if let Some(ud) = wr.ud {
            let mut d = DatagramSeg::new_unchecked(&mut wqe[off..off + field::AV_LEN]);
            d.set_qkey(ud.remote_qkey);
            d.set_dqpn(ud.remote_qpn.get());
            d.set_sl(ud.ah.av.sl);
            d.set_fl_mlid(0);
            // The UDP source port of RoCE v2 (libmlx5 picks one at random
            // per address handle): 0 lets the device choose.
            d.set_rlid(0);
            d.set_rmac(crate::ah::roce_mac(&ud.ah.av.dgid));
            d.set_tclass(ud.ah.av.traffic_class);
            d.set_hop_limit(ud.ah.av.hop_limit);
            // On RoCE every packet has a GRH, so the GRH bit is reserved
            // and left clear, as libmlx5 leaves it.
            d.set_grh_gid_fl(u32::from(ud.ah.av.sgid_index) << 20);
            d.set_rgid(ud.ah.av.dgid);
            off += field::AV_LEN;
        }
        if let Some(r) = remote {
            let mut s = RaddrSeg::new_unchecked(&mut wqe[off..off + field::RADDR_LEN]);
            s.set_raddr(r.addr);
            s.set_rkey(r.rkey.raw());
            off += field::RADDR_LEN;
        }
        if let Some((swap_add, compare)) = atomic {
            let mut s = AtomicSeg::new_unchecked(&mut wqe[off..off + field::ATOMIC_LEN]);
            s.set_swap_add(swap_add);
            s.set_compare(compare);
            off += field::ATOMIC_LEN;
        }
        let bytes = match wr.data {
            SendData::Inline(b) => Some(b),
            SendData::Sges(_) => None,
        };
        let inline = (bytes.is_some() || wr.flags.contains(SendFlags::INLINE)) && !is_rd;
        let mut inline_len = 0u32;
        let mut segments = ((off - field::CTRL_LEN) / wqe::DS_LEN) as u32;
        if inline {
            let total: usize = match bytes {
                Some(b) => b.len(),
                None => sg_list.iter().map(|s| s.length as usize).sum(),
            };
            if total > inner.max_inline as usize {
                return Err(VerbsError::InlineTooLong {
                    len: total,
                    max: inner.max_inline as usize,
                });
            }
            if total > 0 {
                InlineSeg::new_unchecked(&mut wqe[off..off + field::INLINE_HDR_LEN])
                    .set_byte_count(total as u32);
                let mut at = off + field::INLINE_HDR_LEN;
                if let Some(b) = bytes {
                    wqe[at..at + b.len()].copy_from_slice(b);
                    at += b.len();
                }
                for s in sg_list {
                    // The CPU copies the payload from the user's buffer.
                    self.ctx()
                        .mem()
                        .read(HostAddr::new(s.addr), &mut wqe[at..at + s.length as usize])?;
                    at += s.length as usize;
                }
                let end = off + usize::from(wqe::inline_ds(total)) * wqe::DS_LEN;
                zero_past_first_wqebb(wqe, at..end);
                off = end;
                inline_len = total as u32;
                segments += 1;
            }
        } else {
            for s in sg_list.iter().filter(|s| s.length > 0) {
                let mut d = DataSeg::new_unchecked(&mut wqe[off..off + field::DATA_LEN]);
                d.set_byte_count(s.length);
                d.set_lkey(s.lkey.raw());
                d.set_addr(s.addr);
                off += field::DATA_LEN;
                segments += 1;
            }
        }
        let ds = (off / wqe::DS_LEN) as u8;
        let signaled = wr.flags.contains(SendFlags::SIGNALED) || inner.sq_sig_all;
        let mut fm_ce_se = if signaled { ctrl_flags::CQ_UPDATE } else { 0 };
        if wr.flags.contains(SendFlags::SOLICITED) {
            fm_ce_se |= ctrl_flags::SOLICITED;
        }
        if wr.flags.contains(SendFlags::FENCE) {
            fm_ce_se |= ctrl_flags::FENCE;
        }
        let mut c = CtrlSeg::new_unchecked(&mut wqe[..field::CTRL_LEN]);
        c.set_opmod_idx_opcode(0, cur_post, opcode);
        c.set_qpn_ds(self.qpn().get(), ds);
        c.set_signature(0);
        c.set_dci_stream(0);
        c.set_fm_ce_se(fm_ce_se);
        c.set_imm(imm);
        // Pad the last WQEBB so a BlueFlame copy carries no stale bytes.
        let size = off;
        let padded = size.div_ceil(WQEBB_LEN) * WQEBB_LEN;
        zero_past_first_wqebb(wqe, size..padded);
        Ok(Built {
            size,
            inline,
            inline_len,
            segments,
        })
    }

    /// Writes one word of the QP's doorbell record, encoded by the layout's
    /// view; the other word (the other direction's counter) is untouched.
    fn write_dbr_word(
        &self,
        word: doorbell_layout::Field,
        set: impl FnOnce(&mut dbr::QpDoorbellRecord<&mut [u8]>),
    ) -> Result<(), VerbsError> {
        let mut rec = [0u8; dbr::DBR_LEN];
        set(&mut dbr::QpDoorbellRecord::new_unchecked(&mut rec[..]));
        let at = offset(self.inner.dbr, word.start as u64)?;
        Ok(self.ctx().mem().write(at, &rec[word])?)
    }

    /// The send ring's slot for producer index `cur_post`.
    fn sq_slot(&self, cur_post: u16) -> usize {
        (u32::from(cur_post) & (self.inner.shared.sq_wqe_cnt - 1)) as usize
    }

    /// Writes WQEs into the send ring from WQEBB `idx`, wrapping at the end
    /// (`bytes` are a post's, which fit in the ring).
    fn write_sq(&self, idx: usize, bytes: &[u8]) -> Result<(), VerbsError> {
        let inner = &*self.inner;
        let mem = self.ctx().mem();
        let ring = inner.shared.sq_wqe_cnt as usize * WQEBB_LEN;
        let start = idx * WQEBB_LEN;
        let first = bytes.len().min(ring - start);
        mem.write(offset(inner.sq_start, start as u64)?, &bytes[..first])?;
        if first < bytes.len() {
            mem.write(inner.sq_start, &bytes[first..])?;
        }
        Ok(())
    }

    /// Rings the doorbell for the last WQE built: BlueFlame when a single
    /// small WQE allows it, else the 8-byte doorbell.
    fn ring(&self, last_wqe: &[u8], nreq: u32, inline: bool) -> Ring {
        let inner = &*self.inner;
        let bf = &inner.bf;
        let cfg = self.ctx().config();
        let ds = last_wqe.len() / wqe::DS_LEN;
        let use_bf = !cfg.shut_up_bf
            && nreq == 1
            && bf.buf_size != 0
            && (inline || cfg.prefer_bf)
            && ds > 1
            && ds <= bf.buf_size as usize / wqe::DS_LEN;
        let mmio = self.ctx().mmio();
        // The register's lock when it is shared; its alternation state
        // otherwise belongs to this QP alone, whose posts hold its send
        // queue's lock.
        let _shared = bf
            .need_lock
            .then(|| bf.lock.lock().unwrap_or_else(|e| e.into_inner()));
        let offset = bf.offset.load(Ordering::Relaxed);
        let reg = bf.reg + offset;
        let ring = if use_bf {
            let padded = ds.div_ceil(BF_CHUNK / wqe::DS_LEN) * BF_CHUNK;
            let mut chunk = [0u8; BF_CHUNK];
            for (i, at) in (0..padded).step_by(BF_CHUNK).enumerate() {
                let n = (last_wqe.len() - at).min(BF_CHUNK);
                chunk[..n].copy_from_slice(&last_wqe[at..at + n]);
                chunk[n..].fill(0);
                mmio.mmio_write(bf.uar, reg + (i * BF_CHUNK) as u32, &chunk);
            }
            Ring::BlueFlame {
                chunks: (padded / BF_CHUNK) as u32,
            }
        } else {
            mmio.mmio_write(bf.uar, reg, &last_wqe[..8]);
            Ring::Doorbell
        };
        bf.offset.store(offset ^ bf.buf_size, Ordering::Relaxed);
        ring
    }
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("type", &self.inner.qp_type)
            .finish()
    }
}

impl Qp {
    /// Byte offset of the send queue in the QP buffer (for tests).
    #[doc(hidden)]
    pub fn sq_wqe_count(&self) -> u32 {
        self.inner.shared.sq_wqe_cnt
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// The SRQ the QP receives from, if it has one.
    pub fn srq(&self) -> Option<&Srq> {
        self.inner._srq.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WQE being built: its first WQEBB cleared, stale bytes after it.
    fn stale() -> [u8; MAX_WQE_LEN] {
        let mut wqe = [0xa5; MAX_WQE_LEN];
        wqe[..WQEBB_LEN].fill(0);
        wqe
    }

    #[test]
    fn clearing_past_the_first_wqebb_clears_exactly_the_range_beyond_it() {
        for (range, cleared) in [
            (40..64, 0..0),
            (0..64, 0..0),
            (60..128, 64..128),
            (64..128, 64..128),
            (100..192, 100..192),
            (130..130, 0..0),
        ] {
            let mut wqe = stale();
            zero_past_first_wqebb(&mut wqe, range.clone());
            for (i, &b) in wqe.iter().enumerate() {
                let want = if i < WQEBB_LEN || cleared.contains(&i) {
                    0
                } else {
                    0xa5
                };
                assert_eq!(b, want, "byte {i} after clearing {range:?}");
            }
        }
    }
}
