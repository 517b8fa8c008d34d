//! One NIC over host memory, made ready the way a driver makes it: the
//! harnesses of the device start from here.
//!
//! The rig has one UAR, one PD, one CQ, two RC QPs connected (RTS) to two
//! QPs of a peer at [`PEER`], and three buffers: the "open" MR (every
//! access), the "closed" MR (local write only) and a guard buffer that no
//! MR covers. Both QPs have a receive queue of [`RQ_WQES`] WQEs of
//! [`RQ_STRIDE`] bytes, then a send queue of [`SQ_WQEBBS`] WQEBBs.

use std::sync::Arc;

use doorbell_device::{Nic, NicConfig};
use doorbell_hif::{
    Access, AddressVector, CmdError, CmdOut, Command, CqParams, MkeyParams, QpAttrs, QpParams,
    QpState, QpType,
};
use doorbell_host::{HostMemory, HostRam, PAGE_SIZE};
use doorbell_layout::cqe::{CQE_LEN, Cqe64, CqeOpcode, OP_OWN_INIT, owner_for};
use doorbell_layout::dbr;
use doorbell_layout::uar::{self, SendDoorbell};
use doorbell_layout::wqe::WQEBB_LEN;
use doorbell_pcie::{Bus, LinkConfig};
use doorbell_types::{Cqn, Duration, HostAddr, Instant, Mkey, Pdn, Psn, Qpn, UarIndex};
use doorbell_wire::{BthRepr, ExtHeaders, Gid, RoceIp, RoceRepr};

/// The NIC's address.
pub const LOCAL: [u8; 4] = [10, 0, 0, 1];
/// The peer's address.
pub const PEER: [u8; 4] = [10, 0, 0, 2];
/// The peer's QPs, one per rig QP.
pub const PEER_QPNS: [u32; 2] = [0x999, 0x99a];
/// First PSN each rig QP expects from the peer.
pub const EPSN: [u32; 2] = [1000, 0xff_fff0];
/// First PSN each rig QP sends.
pub const SQ_PSN: [u32; 2] = [5000, 0xff_fffa];
/// log2 of the CQ size.
pub const LOG_CQ: u8 = 5;
/// CQEs in the CQ.
pub const NCQE: u32 = 1 << LOG_CQ;
/// log2 of the send queue size in WQEBBs.
pub const LOG_SQ: u8 = 4;
/// WQEBBs in each send queue.
pub const SQ_WQEBBS: u16 = 1 << LOG_SQ;
/// log2 of the receive queue size.
pub const LOG_RQ: u8 = 3;
/// WQEs in each receive queue.
pub const RQ_WQES: u16 = 1 << LOG_RQ;
/// log2(receive stride) - 4: 64-byte receive WQEs, four SGEs.
pub const LOG_RQ_STRIDE: u8 = 2;
/// Bytes of one receive WQE.
pub const RQ_STRIDE: u64 = 16 << LOG_RQ_STRIDE;
/// Bytes of each receive queue (the send queue follows).
pub const RQ_BYTES: u64 = RQ_STRIDE * RQ_WQES as u64;
/// Bytes of each MR and of the guard buffer.
pub const MR_LEN: u64 = 2 * PAGE_SIZE;
/// Offset of the bfreg the QPs ring.
pub const REG: u32 = uar::BF_OFFSET as u32;
/// Byte the closed MR and the guard buffer are filled with.
pub const GUARD_FILL: u8 = 0x5a;

/// One of the rig's QPs.
#[derive(Debug, Clone, Copy)]
pub struct RigQp {
    /// Its number.
    pub qpn: Qpn,
    /// Its buffer: receive queue, then send queue.
    pub buf: HostAddr,
    /// Its doorbell record.
    pub dbr: HostAddr,
    /// Receive WQEs posted.
    pub rq_pi: u16,
    /// Send WQEBBs posted.
    pub sq_pi: u16,
}

/// The NIC and everything around it.
pub struct Rig {
    /// The device.
    pub nic: Nic,
    /// Its bus to host memory.
    pub bus: Bus,
    /// Host memory.
    pub mem: Arc<HostRam>,
    /// The rig's time; only [`Rig::advance`] moves it.
    pub now: Instant,
    /// The UAR both QPs and the CQ ring through.
    pub uar: UarIndex,
    /// The PD of everything.
    pub pd: Pdn,
    /// The CQ both QPs complete into.
    pub cq: Cqn,
    /// The CQ's ring.
    pub cq_buf: HostAddr,
    /// The CQ's doorbell record.
    pub cq_dbr: HostAddr,
    /// CQEs consumed ([`Rig::consume_cqes`]).
    pub ci: u32,
    /// The two QPs.
    pub qps: [RigQp; 2],
    /// The MR with every access.
    pub open_mr: Mkey,
    /// Its buffer.
    pub open_buf: HostAddr,
    /// The MR with local write only.
    pub closed_mr: Mkey,
    /// Its buffer, filled with [`GUARD_FILL`].
    pub closed_buf: HostAddr,
    /// Memory no MR covers, filled with [`GUARD_FILL`].
    pub guard_buf: HostAddr,
}

/// Every access right.
pub const FULL: u32 =
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;

impl Rig {
    /// A NIC with the rig's objects, both QPs in RTS.
    pub fn new() -> Self {
        let mem = Arc::new(HostRam::new());
        let bus = Bus::new(LinkConfig::default(), mem.clone());
        let nic = Nic::new(NicConfig::new(LOCAL));
        let alloc = |len: u64, fill: u8| {
            let a = mem.alloc(len).expect("host memory");
            mem.write(a, &vec![fill; len as usize]).expect("fill");
            let pas = mem.pin(a, len).expect("pin");
            (a, pas)
        };
        let (cq_buf, cq_pas) = alloc(u64::from(NCQE) * CQE_LEN as u64, 0);
        let mut init = vec![0u8; NCQE as usize * CQE_LEN];
        for e in init.chunks_exact_mut(CQE_LEN) {
            e[CQE_LEN - 1] = OP_OWN_INIT;
        }
        mem.write(cq_buf, &init).expect("CQ ring");
        let (cq_dbr, _) = alloc(PAGE_SIZE, 0);
        let qp_len = RQ_BYTES + u64::from(SQ_WQEBBS) * WQEBB_LEN as u64;
        let qp_bufs = [alloc(qp_len, 0), alloc(qp_len, 0)];
        let qp_dbrs = [alloc(PAGE_SIZE, 0).0, alloc(PAGE_SIZE, 0).0];
        let (open_buf, open_mtt) = alloc(MR_LEN, 0);
        let (closed_buf, closed_mtt) = alloc(MR_LEN, GUARD_FILL);
        let (guard_buf, _) = alloc(MR_LEN, GUARD_FILL);
        let mut rig = Self {
            nic,
            bus,
            mem,
            now: Instant::from_ps(1),
            uar: UarIndex::default(),
            pd: Pdn::default(),
            cq: Cqn::default(),
            cq_buf,
            cq_dbr,
            ci: 0,
            qps: [0, 1].map(|i| RigQp {
                qpn: Qpn::default(),
                buf: qp_bufs[i].0,
                dbr: qp_dbrs[i],
                rq_pi: 0,
                sq_pi: 0,
            }),
            open_mr: Mkey::INVALID,
            open_buf,
            closed_mr: Mkey::INVALID,
            closed_buf,
            guard_buf,
        };
        let Ok(CmdOut::Uar(uar)) = rig.exec(Command::AllocUar) else {
            panic!("no UAR")
        };
        let Ok(CmdOut::Pd(pd)) = rig.exec(Command::AllocPd) else {
            panic!("no PD")
        };
        (rig.uar, rig.pd) = (uar, pd);
        let Ok(CmdOut::Cq(cq)) = rig.exec(Command::CreateCq(CqParams {
            log_size: LOG_CQ,
            uar,
            dbr_addr: cq_dbr,
            cqe_bytes: 64,
            pas: cq_pas,
        })) else {
            panic!("no CQ")
        };
        rig.cq = cq;
        for (i, (_, pas)) in qp_bufs.into_iter().enumerate() {
            let Ok(CmdOut::Qp(qpn)) = rig.exec(Command::CreateQp(QpParams {
                qp_type: QpType::Rc,
                pd,
                send_cq: cq,
                recv_cq: cq,
                uar,
                log_sq_size: LOG_SQ,
                log_rq_size: LOG_RQ,
                log_rq_stride: LOG_RQ_STRIDE,
                dbr_addr: qp_dbrs[i],
                pas,
                srq: None,
                gsi: false,
                user_index: i as u32,
            })) else {
                panic!("no QP")
            };
            rig.qps[i].qpn = qpn;
        }
        rig.open_mr = rig.mkey(open_buf, open_mtt, FULL);
        rig.closed_mr = rig.mkey(closed_buf, closed_mtt, Access::LOCAL_WRITE);
        for i in 0..2 {
            rig.connect(i);
        }
        rig
    }

    fn mkey(&mut self, buf: HostAddr, mtt: Vec<HostAddr>, access: u32) -> Mkey {
        let pd = self.pd;
        let Ok(CmdOut::Mkey(k)) = self.exec(Command::CreateMkey(MkeyParams {
            pd,
            access: Access(access),
            start: buf.get(),
            len: MR_LEN,
            mtt,
        })) else {
            panic!("no mkey")
        };
        k
    }

    /// Runs a command at the rig's time.
    pub fn exec(&mut self, cmd: Command) -> Result<CmdOut, CmdError> {
        self.nic.exec(self.now, cmd, &mut self.bus)
    }

    fn modify(&mut self, i: usize, state: QpState, attrs: QpAttrs) {
        let qpn = self.qps[i].qpn;
        self.exec(Command::ModifyQp { qpn, state, attrs })
            .expect("modify QP");
    }

    /// RST -> INIT -> RTR -> RTS, to the peer's QP `PEER_QPNS[i]`.
    fn connect(&mut self, i: usize) {
        let remote = Access(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC);
        self.modify(
            i,
            QpState::Init,
            QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                access: Some(remote),
                ..Default::default()
            },
        );
        self.modify(
            i,
            QpState::Rtr,
            QpAttrs {
                av: Some(AddressVector {
                    dgid: Gid::from_ipv4(PEER).octets(),
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                    sl: 0,
                }),
                path_mtu: Some(1024),
                dest_qpn: Some(Qpn::new(PEER_QPNS[i])),
                rq_psn: Some(Psn::new(EPSN[i])),
                max_dest_rd_atomic: Some(4),
                min_rnr_timer: Some(3),
                ..Default::default()
            },
        );
        self.modify(
            i,
            QpState::Rts,
            QpAttrs {
                sq_psn: Some(Psn::new(SQ_PSN[i])),
                timeout: Some(8),
                retry_cnt: Some(3),
                rnr_retry: Some(3),
                max_rd_atomic: Some(4),
                ..Default::default()
            },
        );
    }

    /// Where send-queue WQEBB `slot` (wrapping) of QP `i` lies.
    pub fn sq_slot(&self, i: usize, slot: u16) -> HostAddr {
        let s = u64::from(slot % SQ_WQEBBS);
        HostAddr::new(self.qps[i].buf.get() + RQ_BYTES + s * WQEBB_LEN as u64)
    }

    /// Where receive WQE `slot` (wrapping) of QP `i` lies.
    pub fn rq_slot(&self, i: usize, slot: u16) -> HostAddr {
        let s = u64::from(slot % RQ_WQES);
        HostAddr::new(self.qps[i].buf.get() + s * RQ_STRIDE)
    }

    /// Writes `bytes` into QP `i`'s send queue from WQEBB `slot` on,
    /// wrapping round the ring.
    pub fn write_sq(&self, i: usize, slot: u16, bytes: &[u8]) {
        for (n, bb) in bytes.chunks(WQEBB_LEN).enumerate() {
            let at = self.sq_slot(i, slot.wrapping_add(n as u16));
            self.mem.write(at, bb).expect("send queue");
        }
    }

    /// Writes `bytes` into QP `i`'s receive queue from WQE `slot` on,
    /// wrapping round the ring.
    pub fn write_rq(&self, i: usize, slot: u16, bytes: &[u8]) {
        for (n, w) in bytes.chunks(RQ_STRIDE as usize).enumerate() {
            let at = self.rq_slot(i, slot.wrapping_add(n as u16));
            self.mem.write(at, w).expect("receive queue");
        }
    }

    /// Publishes QP `i`'s send counter `pi` in its doorbell record.
    pub fn set_send_counter(&mut self, i: usize, pi: u16) {
        self.qps[i].sq_pi = pi;
        let at = HostAddr::new(self.qps[i].dbr.get() + (dbr::SND_DBR * 4) as u64);
        self.mem.write_be32(at, u32::from(pi)).expect("record");
    }

    /// Publishes QP `i`'s receive counter `pi` in its doorbell record.
    pub fn set_recv_counter(&mut self, i: usize, pi: u16) {
        self.qps[i].rq_pi = pi;
        let at = HostAddr::new(self.qps[i].dbr.get() + (dbr::RCV_DBR * 4) as u64);
        self.mem.write_be32(at, u32::from(pi)).expect("record");
    }

    /// Rings QP `i`'s 8-byte send doorbell.
    pub fn ring(&mut self, i: usize, wqe_index: u16, opcode: u8, ds: u8) {
        let db = SendDoorbell {
            wqe_index,
            opcode,
            qpn: self.qps[i].qpn.get(),
            ds,
        };
        self.mmio(self.uar, REG, &db.emit());
    }

    /// An MMIO write into UAR page `uar`.
    pub fn mmio(&mut self, uar: UarIndex, offset: u32, data: &[u8]) {
        let now = self.now;
        self.nic.handle_mmio(now, uar, offset, data, &mut self.bus);
    }

    /// A frame from the peer's QP `PEER_QPNS[i]` to the rig's QP `i`,
    /// with a correct ICRC; `None` if the headers do not fit the opcode.
    pub fn peer_frame(
        &self,
        i: usize,
        mut bth: BthRepr,
        ext: ExtHeaders,
        payload: &[u8],
    ) -> Option<Vec<u8>> {
        bth.dest_qp = self.qps[i].qpn;
        let repr = RoceRepr {
            ip: RoceIp::v4(PEER, LOCAL),
            src_port: 0xc000 | i as u16,
            bth,
            ext,
        };
        let mut out = Vec::new();
        repr.emit_to_vec(payload, &mut out).ok()?;
        Some(out)
    }

    /// A frame from the wire.
    pub fn frame(&mut self, bytes: &[u8]) {
        let now = self.now;
        let _ = self.nic.handle_frame(now, bytes, &mut self.bus);
    }

    /// Moves time on by `d` and fires the timers due.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now.add(d);
        let now = self.now;
        self.nic.handle_timeout(now, &mut self.bus);
    }

    /// Drains every output the NIC has (frames, events, interrupts) and
    /// returns the frames.
    pub fn drain(&mut self) -> Vec<Vec<u8>> {
        let frames = std::iter::from_fn(|| self.nic.poll_transmit())
            .map(|f| f.bytes)
            .collect();
        while self.nic.poll_event().is_some() {}
        while self.nic.poll_interrupt().is_some() {}
        let _ = self.nic.poll_timeout();
        frames
    }

    /// Consumes the CQEs the NIC has written since the last call, as a
    /// poller finds them, and publishes the consumer index, so that the CQ
    /// never overruns because nobody polls it. Returns how many.
    pub fn consume_cqes(&mut self) -> usize {
        let mut n = 0;
        while n < NCQE as usize {
            let slot = u64::from(self.ci % NCQE);
            let mut b = [0u8; CQE_LEN];
            let at = HostAddr::new(self.cq_buf.get() + slot * CQE_LEN as u64);
            self.mem.read(at, &mut b).expect("CQ ring");
            let c = Cqe64::new_unchecked(&b[..]);
            if c.opcode() == CqeOpcode::Invalid || c.owner() != owner_for(self.ci, NCQE) {
                break;
            }
            self.ci = self.ci.wrapping_add(1);
            n += 1;
        }
        let at = HostAddr::new(self.cq_dbr.get() + (dbr::CQ_SET_CI * 4) as u64);
        self.mem
            .write_be32(at, self.ci & 0x00ff_ffff)
            .expect("CQ record");
        n
    }

    /// The bytes at `addr`.
    pub fn read(&self, addr: HostAddr, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read(addr, &mut v).expect("host memory");
        v
    }

    /// Panics if the closed MR or the guard buffer holds anything but
    /// [`GUARD_FILL`]: no peer may write memory without remote write.
    pub fn check_guards(&self) {
        for (what, at) in [
            ("closed MR", self.closed_buf),
            ("guard buffer", self.guard_buf),
        ] {
            let bytes = self.read(at, MR_LEN as usize);
            if let Some(off) = bytes.iter().position(|&b| b != GUARD_FILL) {
                panic!("the {what} changed at byte {off}");
            }
        }
    }
}

impl Default for Rig {
    fn default() -> Self {
        Self::new()
    }
}
