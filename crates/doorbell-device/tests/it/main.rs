//! The NIC alone, driven as its runtimes drive it: a `Bus` over `HostRam`,
//! objects made with commands, WQEs written straight into the send queue,
//! doorbells rung with `handle_mmio`, and frames forged on the wire. Each
//! test checks what the device reports for input no correct host or peer
//! would send: an error CQE with its syndrome, a dropped and counted
//! doorbell or frame, the right NAK, and never a panic.
#![allow(missing_docs, unreachable_pub)]

mod acks;
mod allocations;
mod exhaust;
mod left_payload;
mod mkey;
mod read_burst;
mod records;
mod srq;
mod trains;
mod tx_burst;
mod zero_length;

use std::sync::Arc;

use doorbell_device::{Frame, Nic, NicConfig, NicCounters};
use doorbell_hif::{
    Access, AddressVector, CmdError, CmdOut, Command, CqParams, MkeyParams, NicEvent, ObjKind,
    Param, QpAttrs, QpParams, QpState, QpType,
};
use doorbell_host::{HostMemory, HostRam, PAGE_SIZE};
use doorbell_layout::cqe::{CQE_LEN, Cqe64, CqeOpcode, OP_OWN_INIT, Syndrome, owner_for};
use doorbell_layout::dbr;
use doorbell_layout::uar::{self, SendDoorbell};
use doorbell_layout::wqe::{
    CtrlSeg, DataSeg, RaddrSeg, WQEBB_LEN, WqeOpcode, ctrl_flags, field, wqebbs_for_ds,
};
use doorbell_pcie::{Bus, LinkConfig};
use doorbell_types::{Cqn, HostAddr, Instant, Mkey, Pdn, Psn, Qpn, UarIndex};
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthOpcode, BthRepr, DethRepr,
    ExtHeaders, IethRepr, ImmDtRepr, NakCode, RethRepr, RoceIp, RoceRepr, parse_roce,
};
use proptest::prelude::*;

const LOCAL: [u8; 4] = [10, 0, 0, 1];
const PEER: [u8; 4] = [10, 0, 0, 2];
const PEER_QPN: u32 = 0x999;
const LOG_CQ: u8 = 4;
const NCQE: u32 = 1 << LOG_CQ;
/// Send queue of 8 WQEBBs, after a receive queue of 4 WQEs of 16 bytes.
const LOG_SQ: u8 = 3;
const SQ_WQEBBS: u16 = 1 << LOG_SQ;
const LOG_RQ: u8 = 2;
const RQ_BYTES: u64 = 16 << LOG_RQ;
/// First PSN the rig's QP expects from the peer, and first it sends.
const EPSN: u32 = 1000;
const SQ_PSN: u32 = 5000;
const MIN_RNR_TIMER: u8 = 3;
const MR_LEN: u64 = 8192;
/// The user index the rig's QP is created with (24 bits).
const USER_INDEX: u32 = 0x00ab_cdef;
/// The Q_Key of a UD rig's QP ([`Rig::ud`]).
const QKEY: u32 = 0x1111_0000;
/// Offset of the bfreg the QP rings in its UAR.
const REG: u32 = uar::BF_OFFSET as u32;

/// One NIC with one connected RC QP, its CQ and an MR, over host memory.
struct Rig {
    nic: Nic,
    bus: Bus,
    mem: Arc<HostRam>,
    now: Instant,
    uar: UarIndex,
    pd: Pdn,
    cq_buf: HostAddr,
    cq: Cqn,
    cq_dbr: HostAddr,
    ci: u32,
    qpn: Qpn,
    qp_buf: HostAddr,
    qp_dbr: HostAddr,
    rq_pi: u16,
    mr: Mkey,
    mr_buf: HostAddr,
}

impl Rig {
    fn new() -> Self {
        Self::with_config(NicConfig::new(LOCAL))
    }

    /// A rig whose NIC is configured by `cfg` (at [`LOCAL`]).
    fn with_config(cfg: NicConfig) -> Self {
        Self::with_config_and_mtu(cfg, 1024)
    }

    /// [`Self::with_config`], its QP's path MTU `mtu` bytes.
    fn with_config_and_mtu(cfg: NicConfig, mtu: u32) -> Self {
        Self::build(cfg, mtu, QpType::Rc)
    }

    /// A rig whose QP is a UD QP of Q_Key [`QKEY`], ready to send and
    /// receive.
    fn ud() -> Self {
        Self::build(NicConfig::new(LOCAL), 1024, QpType::Ud)
    }

    fn build(cfg: NicConfig, mtu: u32, qp_type: QpType) -> Self {
        let mem = Arc::new(HostRam::new());
        let bus = Bus::new(LinkConfig::default(), mem.clone());
        let nic = Nic::new(cfg);
        let alloc = |len: u64| {
            let a = mem.alloc(len).unwrap();
            let pas = mem.pin(a, len).unwrap();
            (a, pas)
        };
        let (cq_buf, cq_pas) = alloc(u64::from(NCQE) * CQE_LEN as u64);
        let mut init = vec![0u8; NCQE as usize * CQE_LEN];
        for e in init.chunks_exact_mut(CQE_LEN) {
            e[CQE_LEN - 1] = OP_OWN_INIT;
        }
        mem.write(cq_buf, &init).unwrap();
        let (cq_dbr, _) = alloc(PAGE_SIZE);
        let (qp_buf, qp_pas) = alloc(PAGE_SIZE);
        let (qp_dbr, _) = alloc(PAGE_SIZE);
        let (mr_buf, mtt) = alloc(MR_LEN);
        let mut rig = Self {
            nic,
            bus,
            mem,
            now: Instant::from_ps(1),
            uar: UarIndex::default(),
            pd: Pdn::default(),
            cq_buf,
            cq: Cqn::default(),
            cq_dbr,
            ci: 0,
            qpn: Qpn::default(),
            qp_buf,
            qp_dbr,
            rq_pi: 0,
            mr: Mkey::INVALID,
            mr_buf,
        };
        let Ok(CmdOut::Uar(uar)) = rig.exec(Command::AllocUar) else {
            panic!("no UAR")
        };
        let Ok(CmdOut::Pd(pd)) = rig.exec(Command::AllocPd) else {
            panic!("no PD")
        };
        let Ok(CmdOut::Cq(cq)) = rig.exec(Command::CreateCq(CqParams {
            log_size: LOG_CQ,
            uar,
            dbr_addr: cq_dbr,
            cqe_bytes: 64,
            pas: cq_pas,
        })) else {
            panic!("no CQ")
        };
        (rig.uar, rig.pd, rig.cq) = (uar, pd, cq);
        let params = QpParams {
            qp_type,
            ..rig.qp_params(qp_dbr, qp_pas)
        };
        let Ok(CmdOut::Qp(qpn)) = rig.exec(Command::CreateQp(params)) else {
            panic!("no QP")
        };
        let Ok(CmdOut::Mkey(mr)) = rig.exec(Command::CreateMkey(MkeyParams {
            pd,
            access: Access(
                Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC,
            ),
            start: mr_buf.get(),
            len: MR_LEN,
            mtt,
        })) else {
            panic!("no mkey")
        };
        (rig.qpn, rig.mr) = (qpn, mr);
        match qp_type {
            QpType::Ud => rig.ready_ud(),
            _ => rig.connect(mtu, qp_type),
        }
        rig
    }

    /// The parameters of an RC QP like the rig's: its PD, CQ and UAR, a
    /// send queue of [`LOG_SQ`] and a receive queue of [`LOG_RQ`], with its
    /// record at `dbr_addr` and its buffer at `pas`.
    fn qp_params(&self, dbr_addr: HostAddr, pas: Vec<HostAddr>) -> QpParams {
        QpParams {
            qp_type: QpType::Rc,
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            uar: self.uar,
            log_sq_size: LOG_SQ,
            log_rq_size: LOG_RQ,
            log_rq_stride: 0,
            dbr_addr,
            pas,
            srq: None,
            gsi: false,
            user_index: USER_INDEX,
        }
    }

    /// Takes a UD QP to RTS with Q_Key [`QKEY`].
    fn ready_ud(&mut self) {
        let init = QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(QKEY),
            ..Default::default()
        };
        self.modify(QpState::Init, init);
        self.modify(QpState::Rtr, QpAttrs::default());
        let rts = QpAttrs {
            sq_psn: Some(Psn::new(SQ_PSN)),
            ..Default::default()
        };
        self.modify(QpState::Rts, rts);
    }

    fn exec(&mut self, cmd: Command) -> Result<CmdOut, CmdError> {
        self.nic.exec(self.now, cmd, &mut self.bus)
    }

    fn modify(&mut self, state: QpState, attrs: QpAttrs) {
        let qpn = self.qpn;
        self.exec(Command::ModifyQp { qpn, state, attrs }).unwrap();
    }

    /// Takes an RC or UC QP to RTS, connected to the peer (UC has no
    /// READs, atomics, retries or RNR timer to set).
    fn connect(&mut self, mtu: u32, qp_type: QpType) {
        let rc = qp_type == QpType::Rc;
        self.modify(
            QpState::Init,
            QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                access: Some(Access(
                    Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                )),
                ..Default::default()
            },
        );
        self.modify(
            QpState::Rtr,
            QpAttrs {
                av: Some(AddressVector {
                    dgid: doorbell_wire::Gid::from_ipv4(PEER).octets(),
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                    sl: 0,
                }),
                path_mtu: Some(mtu),
                dest_qpn: Some(Qpn::new(PEER_QPN)),
                rq_psn: Some(Psn::new(EPSN)),
                max_dest_rd_atomic: rc.then_some(1),
                min_rnr_timer: rc.then_some(MIN_RNR_TIMER),
                ..Default::default()
            },
        );
        self.modify(
            QpState::Rts,
            QpAttrs {
                sq_psn: Some(Psn::new(SQ_PSN)),
                timeout: rc.then_some(14),
                retry_cnt: rc.then_some(7),
                rnr_retry: rc.then_some(7),
                max_rd_atomic: rc.then_some(1),
                ..Default::default()
            },
        );
    }

    fn state(&self) -> QpState {
        self.nic.qp_state(self.qpn).unwrap()
    }

    fn counters(&self) -> NicCounters {
        self.nic.counters()
    }

    /// Writes WQEBBs at send-queue slot `slot` (wrapping).
    fn write_sq(&self, slot: u16, bytes: &[u8]) {
        for (i, bb) in bytes.chunks(WQEBB_LEN).enumerate() {
            let s = u64::from(slot.wrapping_add(i as u16) % SQ_WQEBBS);
            let at = self.qp_buf.get() + RQ_BYTES + s * WQEBB_LEN as u64;
            self.mem.write(HostAddr::new(at), bb).unwrap();
        }
    }

    /// Publishes the send counter and rings an 8-byte doorbell for the WQE
    /// at `wqe_index` of `ds` units.
    fn ring(&mut self, wqe_index: u16, opcode: u8, ds: u8) {
        let pi = wqe_index.wrapping_add(wqebbs_for_ds(ds).max(1));
        let at = HostAddr::new(self.qp_dbr.get() + (dbr::SND_DBR * 4) as u64);
        self.mem.write_be32(at, u32::from(pi)).unwrap();
        let db = SendDoorbell {
            wqe_index,
            opcode,
            qpn: self.qpn.get(),
            ds,
        };
        let (uar, now) = (self.uar, self.now);
        self.nic
            .handle_mmio(now, uar, REG, &db.emit(), &mut self.bus);
    }

    fn mmio(&mut self, uar: UarIndex, offset: u32, data: &[u8]) {
        let now = self.now;
        self.nic.handle_mmio(now, uar, offset, data, &mut self.bus);
    }

    /// Posts a receive WQE of one SGE.
    fn post_recv(&mut self, lkey: u32, addr: u64, len: u32) {
        let slot = u64::from(self.rq_pi % (1 << LOG_RQ));
        let mut w = [0u8; 16];
        let mut d = DataSeg::new_unchecked(&mut w[..]);
        d.set_byte_count(len);
        d.set_lkey(lkey);
        d.set_addr(addr);
        self.mem
            .write(HostAddr::new(self.qp_buf.get() + slot * 16), &w)
            .unwrap();
        self.rq_pi = self.rq_pi.wrapping_add(1);
        let at = HostAddr::new(self.qp_dbr.get() + (dbr::RCV_DBR * 4) as u64);
        self.mem.write_be32(at, u32::from(self.rq_pi)).unwrap();
    }

    /// Takes a frame from the wire; returns the frames the NIC sends back.
    fn frame(&mut self, bytes: &[u8]) -> Vec<Frame> {
        let now = self.now;
        self.nic.handle_frame(now, bytes, &mut self.bus);
        self.transmitted()
    }

    fn transmitted(&mut self) -> Vec<Frame> {
        std::iter::from_fn(|| self.nic.poll_transmit()).collect()
    }

    fn events(&mut self) -> Vec<NicEvent> {
        std::iter::from_fn(|| self.nic.poll_event()).collect()
    }

    /// Fires the timers due `us` microseconds from now.
    fn advance_us(&mut self, us: u64) {
        self.now = self.now.add(doorbell_types::Duration::from_us(us));
        let now = self.now;
        self.nic.handle_timeout(now, &mut self.bus);
    }

    /// The CQEs written since the last call, as a consumer finds them.
    fn cqes(&mut self) -> Vec<[u8; CQE_LEN]> {
        let mut out = Vec::new();
        loop {
            let slot = u64::from(self.ci % NCQE);
            let mut b = [0u8; CQE_LEN];
            self.mem
                .read(
                    HostAddr::new(self.cq_buf.get() + slot * CQE_LEN as u64),
                    &mut b,
                )
                .unwrap();
            let c = Cqe64::new_unchecked(&b[..]);
            if c.opcode() == CqeOpcode::Invalid || c.owner() != owner_for(self.ci, NCQE) {
                break;
            }
            out.push(b);
            self.ci += 1;
        }
        let at = HostAddr::new(self.cq_dbr.get() + (dbr::CQ_SET_CI * 4) as u64);
        self.mem.write_be32(at, self.ci & 0x00ff_ffff).unwrap();
        out
    }

    /// A frame from the peer to the rig's QP.
    fn request(&self, opcode: BthOpcode, psn: u32, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
        let mut bth = BthRepr::new(opcode, self.qpn, Psn::new(psn));
        bth.ack_req = true;
        self.request_bth(bth, ext, payload)
    }

    /// The headers of a frame from the peer with base transport header
    /// `bth`.
    fn peer_repr(&self, bth: BthRepr, ext: ExtHeaders) -> RoceRepr {
        RoceRepr {
            ip: RoceIp::v4(PEER, LOCAL),
            src_port: 0xc000,
            bth,
            ext,
        }
    }

    /// A frame from the peer with base transport header `bth`.
    fn request_bth(&self, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
        let repr = self.peer_repr(bth, ext);
        let mut out = Vec::new();
        repr.emit_to_vec(payload, &mut out).unwrap();
        out
    }

    /// An RDMA WRITE ONLY of `payload` to byte `offset` of the rig's MR.
    fn write_only(&self, psn: u32, offset: u64, payload: &[u8]) -> Vec<u8> {
        let ext = self.mr_reth(offset, payload.len() as u32);
        self.request(BthOpcode::RcRdmaWriteOnly, psn, ext, payload)
    }

    /// A RETH for `dma_len` bytes from byte `offset` of the rig's MR.
    fn mr_reth(&self, offset: u64, dma_len: u32) -> ExtHeaders {
        ExtHeaders {
            reth: Some(RethRepr {
                va: self.mr_buf.get() + offset,
                rkey: self.mr,
                dma_len,
            }),
            ..ExtHeaders::default()
        }
    }

    fn mr_bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem
            .read(HostAddr::new(self.mr_buf.get() + offset), &mut v)
            .unwrap();
        v
    }
}

/// `(opcode, syndrome, wqe_counter, send opcode, qpn)` of a CQE.
fn cqe_fields(b: &[u8; CQE_LEN]) -> (CqeOpcode, Syndrome, u16, u8, u32) {
    let c = Cqe64::new_unchecked(&b[..]);
    (
        c.opcode(),
        c.syndrome(),
        c.wqe_counter(),
        c.send_opcode(),
        c.qpn(),
    )
}

/// Control segment of a signalled WQE.
fn ctrl(wqe: &mut [u8], index: u16, opcode: WqeOpcode, qpn: u32, ds: u8) {
    let mut c = CtrlSeg::new_unchecked(&mut wqe[..field::CTRL_LEN]);
    c.set_opmod_idx_opcode(0, index, opcode);
    c.set_qpn_ds(qpn, ds);
    c.set_fm_ce_se(ctrl_flags::CQ_UPDATE);
}

/// The peer's ACK of PSN `psn`, the `msn`th message, as a frame.
fn peer_ack(rig: &Rig, psn: u32, msn: u32) -> Vec<u8> {
    peer_aeth(rig, BthOpcode::RcAck, psn, msn, &[])
}

/// A frame from the peer with an AETH (ACK, credits 0x1f) to the rig's
/// QP: an ACK, or a READ response carrying `payload`.
fn peer_aeth(rig: &Rig, opcode: BthOpcode, psn: u32, msn: u32, payload: &[u8]) -> Vec<u8> {
    let mut bth = BthRepr::new(opcode, rig.qpn, Psn::new(psn));
    bth.ack_req = false;
    let repr = RoceRepr {
        ip: RoceIp::v4(PEER, LOCAL),
        src_port: 0xc000,
        bth,
        ext: ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1f },
                msn,
            }),
            ..ExtHeaders::default()
        },
    };
    let mut f = Vec::new();
    repr.emit_to_vec(payload, &mut f).unwrap();
    f
}

/// A well-formed RDMA WRITE (or READ) WQE of `len` bytes of the rig's MR to
/// the peer: ctrl, raddr and one data segment, 3 units in one WQEBB.
fn rdma_wqe(rig: &Rig, index: u16, opcode: WqeOpcode, len: u32) -> [u8; WQEBB_LEN] {
    let mut w = [0u8; WQEBB_LEN];
    ctrl(&mut w, index, opcode, rig.qpn.get(), 3);
    let mut r = RaddrSeg::new_unchecked(&mut w[16..32]);
    r.set_raddr(0x7000_0000);
    r.set_rkey(0x4242);
    let mut d = DataSeg::new_unchecked(&mut w[32..48]);
    d.set_byte_count(len);
    d.set_lkey(rig.mr.raw());
    d.set_addr(rig.mr_buf.get());
    w
}

// ---------------------------------------------------------------------------
// Frames.

#[test]
fn frames_with_a_bad_icrc_are_dropped_and_counted() {
    let mut rig = Rig::new();
    let data: Vec<u8> = (0..64u8).collect();
    let good = rig.write_only(EPSN, 128, &data);
    let c0 = rig.counters();
    // A flipped payload byte, a flipped PSN byte, a flipped ICRC byte: the
    // IP and UDP headers still parse, the ICRC does not match.
    let payload_at = good.len() - 4 - data.len();
    let psn_at = 20 + 8 + 11;
    for (k, at) in [payload_at + 5, psn_at, good.len() - 1]
        .into_iter()
        .enumerate()
    {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        assert!(rig.frame(&bad).is_empty(), "no answer to a corrupt frame");
        let c = rig.counters();
        assert_eq!(c.rx_icrc_errors - c0.rx_icrc_errors, k as u64 + 1);
        assert_eq!((c.rx_packets, c.rx_dropped), (c0.rx_packets, c0.rx_dropped));
    }
    assert_eq!(rig.mr_bytes(128, 64), vec![0u8; 64], "nothing written");
    assert_eq!(rig.state(), QpState::Rts);
    assert!(rig.cqes().is_empty() && rig.events().is_empty());
    // The intact frame is taken: written and acknowledged.
    let out = rig.frame(&good);
    assert_eq!(rig.counters().rx_packets, c0.rx_packets + 1);
    assert_eq!(rig.mr_bytes(128, 64), data);
    assert_eq!(out.len(), 1);
    let ack = parse_roce(&out[0].bytes).unwrap().repr;
    assert_eq!(ack.bth.opcode, BthOpcode::RcAck);
    assert!(matches!(
        ack.ext.aeth.map(|a| a.syndrome),
        Some(AethSyndrome::Ack { .. })
    ));
}

#[test]
fn truncated_and_garbage_frames_are_dropped_and_counted() {
    let mut rig = Rig::new();
    let good = rig.write_only(EPSN, 0, &[7u8; 40]);
    let c0 = rig.counters();
    for cut in 0..good.len() {
        assert!(rig.frame(&good[..cut]).is_empty());
    }
    let c1 = rig.counters();
    assert_eq!(c1.rx_dropped - c0.rx_dropped, good.len() as u64);
    assert_eq!(
        (c1.rx_packets, c1.rx_icrc_errors),
        (c0.rx_packets, c0.rx_icrc_errors)
    );
    // Not IP, not UDP to 4791, a frame for a QP that does not exist.
    let mut not_ip = good.clone();
    not_ip[0] = 0x55;
    let mut other_port = rig.write_only(EPSN, 0, &[7u8; 40]);
    other_port[22] ^= 0x10; // UDP destination port
    let ghost = {
        let mut bth = BthRepr::new(BthOpcode::RcSendOnly, Qpn::new(0x00ab_cdef), Psn::new(EPSN));
        bth.ack_req = true;
        let mut v = Vec::new();
        RoceRepr {
            ip: RoceIp::v4(PEER, LOCAL),
            src_port: 0xc000,
            bth,
            ext: ExtHeaders::default(),
        }
        .emit_to_vec(&[1, 2, 3, 4], &mut v)
        .unwrap();
        v
    };
    for f in [&not_ip, &other_port, &ghost] {
        assert!(rig.frame(f).is_empty());
    }
    let c2 = rig.counters();
    assert_eq!(c2.rx_dropped - c1.rx_dropped, 3);
    assert_eq!(c2.rx_packets, c0.rx_packets);
    assert_eq!(rig.mr_bytes(0, 40), vec![0u8; 40]);
    assert_eq!(rig.state(), QpState::Rts);
    assert!(rig.cqes().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_and_are_counted(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        v4 in any::<bool>(),
    ) {
        let mut rig = Rig::new();
        let mut bytes = bytes;
        // Half the inputs start like an IPv4 header, to get past the
        // first check.
        if v4 && !bytes.is_empty() {
            bytes[0] = 0x45;
        }
        let c0 = rig.counters();
        let out = rig.frame(&bytes);
        let c = rig.counters();
        prop_assert!(out.is_empty());
        prop_assert_eq!(c.rx_packets, c0.rx_packets);
        prop_assert_eq!(
            (c.rx_dropped + c.rx_icrc_errors) - (c0.rx_dropped + c0.rx_icrc_errors),
            1
        );
        prop_assert_eq!(rig.state(), QpState::Rts);
    }

    #[test]
    fn corrupted_frames_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut rig = Rig::new();
        let good = rig.write_only(EPSN, 0, &[9u8; 100]);
        let mut bad = good.clone();
        let n = bad.len();
        for (at, x) in &flips {
            bad[at.index(n)] ^= x;
        }
        if truncate {
            bad.truncate(cut.index(bad.len()));
        }
        let c0 = rig.counters();
        let _ = rig.frame(&bad);
        let c = rig.counters();
        let seen = |c: NicCounters| c.rx_packets + c.rx_dropped + c.rx_icrc_errors;
        prop_assert!(seen(c) > seen(c0), "every frame is counted");
        prop_assert!(rig.exec(Command::QueryQp(rig.qpn)).is_ok());
    }
}

/// Every opcode the wire crate knows, with extension headers that fit it.
fn arb_frame() -> impl Strategy<Value = (BthOpcode, u32, bool, ExtHeaders, Vec<u8>)> {
    let opcodes = prop::sample::select(vec![
        BthOpcode::RcSendFirst,
        BthOpcode::RcSendMiddle,
        BthOpcode::RcSendLast,
        BthOpcode::RcSendLastWithImmediate,
        BthOpcode::RcSendOnly,
        BthOpcode::RcSendOnlyWithImmediate,
        BthOpcode::RcRdmaWriteFirst,
        BthOpcode::RcRdmaWriteMiddle,
        BthOpcode::RcRdmaWriteLast,
        BthOpcode::RcRdmaWriteLastWithImmediate,
        BthOpcode::RcRdmaWriteOnly,
        BthOpcode::RcRdmaWriteOnlyWithImmediate,
        BthOpcode::RcRdmaReadRequest,
        BthOpcode::RcRdmaReadResponseFirst,
        BthOpcode::RcRdmaReadResponseMiddle,
        BthOpcode::RcRdmaReadResponseLast,
        BthOpcode::RcRdmaReadResponseOnly,
        BthOpcode::RcAck,
        BthOpcode::RcAtomicAck,
        BthOpcode::RcCompareSwap,
        BthOpcode::RcFetchAdd,
        BthOpcode::RcSendLastWithInvalidate,
        BthOpcode::RcSendOnlyWithInvalidate,
        BthOpcode::UdSendOnly,
        BthOpcode::UdSendOnlyWithImmediate,
    ]);
    // PSNs near the ones the QP expects or sends, or anywhere.
    let psn = prop_oneof![
        (EPSN - 3..EPSN + 4),
        (SQ_PSN - 3..SQ_PSN + 4),
        0u32..(1 << 24)
    ];
    // Remote addresses in, around and far from the MR; lengths small or wild.
    let va = prop_oneof![0u64..MR_LEN + 64, any::<u64>()];
    let len = prop_oneof![0u32..2200, any::<u32>()];
    let key = prop_oneof![Just(true), Just(false)];
    let syndrome = prop_oneof![
        (0u8..32).prop_map(|credits| AethSyndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| AethSyndrome::RnrNak { timer }),
        (0u8..4).prop_map(|c| AethSyndrome::Nak(NakCode::from(c))),
    ];
    (
        opcodes,
        psn,
        any::<bool>(),
        (va, len, key, any::<u64>(), any::<u64>()),
        syndrome,
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..1100),
    )
        .prop_map(
            |(op, psn, ack_req, (va, len, key, a, b), syn, x, payload)| {
                // A key of all ones stands for the rig's MR, resolved later with
                // `va` taken as an offset into it.
                let rkey = Mkey::from_raw(if key { 0xffff_ffff } else { x });
                let ext = ExtHeaders {
                    reth: op.has_reth().then_some(RethRepr {
                        va,
                        rkey,
                        dma_len: len,
                    }),
                    atomic_eth: op.has_atomic_eth().then_some(AtomicEthRepr {
                        va,
                        rkey,
                        swap_add: a,
                        compare: b,
                    }),
                    aeth: op.has_aeth().then_some(AethRepr {
                        syndrome: syn,
                        msn: x & 0x00ff_ffff,
                    }),
                    atomic_ack_eth: op
                        .has_atomic_ack_eth()
                        .then_some(AtomicAckEthRepr { orig: a }),
                    immdt: op.has_immdt().then_some(ImmDtRepr { imm: x }),
                    ieth: op.has_ieth().then_some(IethRepr { rkey }),
                    deth: op.has_deth().then_some(DethRepr {
                        qkey: x,
                        src_qp: Qpn::new(x & 0x00ff_ffff),
                    }),
                };
                (op, psn, ack_req, ext, payload)
            },
        )
}

/// A forged frame of [`arb_frame`]'s to the rig's QP, its RETH (if any)
/// on the rig's MR with its key; its headers and its bytes.
fn forged_to_rig(
    rig: &Rig,
    (op, psn, ack_req, mut ext, payload): (BthOpcode, u32, bool, ExtHeaders, &[u8]),
) -> (RoceRepr, Vec<u8>) {
    if let Some(r) = ext.reth.as_mut() {
        r.rkey = rig.mr;
        r.va = rig.mr_buf.get().wrapping_add(r.va % (MR_LEN + 64));
    }
    let mut bth = BthRepr::new(op, rig.qpn, Psn::new(psn));
    bth.ack_req = ack_req;
    (rig.peer_repr(bth, ext), rig.request_bth(bth, ext, payload))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Well-formed frames with a good ICRC but forged contents, to a QP that
    /// has a READ and a WRITE of its own outstanding and a receive posted:
    /// the device answers or drops each, and never panics.
    #[test]
    fn forged_well_formed_frames_never_panic(
        frames in proptest::collection::vec(arb_frame(), 1..6),
        to_rig in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let mut rig = Rig::new();
        rig.post_recv(rig.mr.raw(), rig.mr_buf.get() + 4096, 2048);
        let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaRead, 3000);
        rig.write_sq(0, &w);
        let w = rdma_wqe(&rig, 1, WqeOpcode::RdmaWrite, 100);
        rig.write_sq(1, &w);
        rig.ring(1, u8::from(WqeOpcode::RdmaWrite), 3);
        let _ = rig.transmitted();
        for (i, (op, psn, ack_req, mut ext, payload)) in frames.into_iter().enumerate() {
            // Use the rig's own key and MR for addresses flagged valid.
            let fix = |k: &mut Mkey, va: &mut u64| {
                if k.raw() == 0xffff_ffff {
                    *k = rig.mr;
                    *va = rig.mr_buf.get().wrapping_add(*va % (MR_LEN + 64));
                }
            };
            if let Some(r) = ext.reth.as_mut() {
                fix(&mut r.rkey, &mut r.va);
            }
            if let Some(a) = ext.atomic_eth.as_mut() {
                fix(&mut a.rkey, &mut a.va);
            }
            let dest = if to_rig[i] { rig.qpn } else { Qpn::new(0x123) };
            let mut bth = BthRepr::new(op, dest, Psn::new(psn));
            bth.ack_req = ack_req;
            let repr = RoceRepr { ip: RoceIp::v4(PEER, LOCAL), src_port: 0xc000, bth, ext };
            let mut bytes = Vec::new();
            repr.emit_to_vec(&payload, &mut bytes).unwrap();
            let _ = rig.frame(&bytes);
            rig.advance_us(700_000);
            let _ = rig.transmitted();
            let _ = rig.events();
        }
        let _ = rig.cqes();
        prop_assert!(rig.exec(Command::QueryQp(rig.qpn)).is_ok());
    }

    /// The same forged frames handed over by a NIC of this process with
    /// their payloads said to be left in its memory, anywhere and as runs
    /// of any length, ending in a LAST of any length or not
    /// (`Nic::handle_unfilled_frame`): the device takes,
    /// answers or drops each, and never panics.
    #[test]
    fn forged_frames_with_left_payloads_never_panic(
        frames in proptest::collection::vec(arb_frame(), 1..6),
        left in proptest::collection::vec(
            (any::<u64>(), 0u8..3, any::<bool>(), 0u32..1100, proptest::option::of((0u32..5000, any::<bool>()))),
            6,
        ),
    ) {
        let mut rig = Rig::new();
        rig.post_recv(rig.mr.raw(), rig.mr_buf.get() + 4096, 2048);
        let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaRead, 3000);
        rig.write_sq(0, &w);
        rig.ring(0, u8::from(WqeOpcode::RdmaRead), 3);
        let _ = rig.transmitted();
        let src = HostRam::new();
        let base = src.alloc(16 * 4096).unwrap();
        for (i, (op, psn, ack_req, ext, payload)) in frames.into_iter().enumerate() {
            let (repr, bytes) = forged_to_rig(&rig, (op, psn, ack_req, ext, &payload));
            let (off, kind, where_it_is, segments, last) = left[i];
            // In memory the sender has, anywhere, or near the end of the
            // address space, where a run would pass it.
            let from = match kind {
                0 => base.checked_add(off % (16 * 4096)).unwrap(),
                1 => HostAddr::new(off),
                _ => HostAddr::new(u64::MAX - off % 8192),
            };
            let p = repr.payload_range(payload.len());
            let u = doorbell_device::Unfilled {
                from,
                at: if where_it_is { p.start as u32 } else { (off % 200) as u32 },
                len: if where_it_is { p.len() as u32 } else { (off % 5000) as u32 },
                segments,
                last: last.map(|(len, ack_req)| doorbell_device::RunLast { len, ack_req }),
            };
            let now = rig.now;
            let _ = rig.nic.handle_unfilled_frame(now, &bytes, &u, &src, &mut rig.bus);
            rig.advance_us(700_000);
            let _ = rig.transmitted();
            let _ = rig.events();
        }
        let _ = rig.cqes();
        prop_assert!(rig.exec(Command::QueryQp(rig.qpn)).is_ok());
    }
}

// ---------------------------------------------------------------------------
// Malformed WQEs and doorbells.

#[test]
fn malformed_wqes_complete_with_local_qp_operation_errors() {
    // (what, WQE at slot 0, its opcode in the CQE)
    type Mangle = fn(&mut [u8; WQEBB_LEN], u32);
    let cases: [(&str, Mangle, u8); 4] = [
        (
            "ds = 0",
            |w, qpn| ctrl(w, 0, WqeOpcode::RdmaWrite, qpn, 0),
            0x08,
        ),
        (
            "the wrong QPN",
            |w, qpn| ctrl(w, 0, WqeOpcode::RdmaWrite, qpn ^ 0x55, 3),
            0x08,
        ),
        (
            "unknown opcode 0x1f",
            |w, qpn| ctrl(w, 0, WqeOpcode::from(0x1f), qpn, 3),
            0x1f,
        ),
        (
            "an index that is not the WQE's slot",
            |w, qpn| ctrl(w, 5, WqeOpcode::RdmaWrite, qpn, 3),
            0x08,
        ),
    ];
    for (what, mangle, opcode) in cases {
        let mut rig = Rig::new();
        // Slot 0: a WRITE with the defect; slot 1: a good WRITE, rung.
        let mut bad = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
        mangle(&mut bad, rig.qpn.get());
        rig.write_sq(0, &bad);
        let good = rdma_wqe(&rig, 1, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(1, &good);
        let c0 = rig.counters();
        rig.ring(1, u8::from(WqeOpcode::RdmaWrite), 3);
        let qpn = rig.qpn.get();
        let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
        assert_eq!(
            cqes,
            [
                (CqeOpcode::ReqErr, Syndrome::LocalQpOpErr, 0, opcode, qpn),
                (CqeOpcode::ReqErr, Syndrome::WrFlushErr, 1, 0x08, qpn),
            ],
            "{what}"
        );
        assert_eq!(rig.state(), QpState::Err, "{what}");
        assert_eq!(rig.events(), [NicEvent::QpFatal(rig.qpn)], "{what}");
        assert!(rig.transmitted().is_empty(), "{what}: nothing sent");
        assert_eq!(rig.counters().tx_packets, c0.tx_packets);
        // A later doorbell on the errored QP flushes the new WQE, once.
        let next = rdma_wqe(&rig, 2, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(2, &next);
        rig.ring(2, u8::from(WqeOpcode::RdmaWrite), 3);
        let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
        assert_eq!(
            cqes,
            [(CqeOpcode::ReqErr, Syndrome::WrFlushErr, 2, 0x08, qpn)],
            "{what}"
        );
        assert!(rig.transmitted().is_empty());
    }
}

#[test]
fn a_wqe_posted_over_one_not_yet_completed_waits_for_completions() {
    // The ring's eight WQEBBs hold eight WRITEs, all sent, none ACKed.
    // The program then breaks the ring's contract: it writes a ninth WQE
    // over the first, which has not completed, and rings. The ninth waits
    // until the first completes, so that what is outstanding never spans
    // more than the ring and completions keep their order.
    let mut rig = Rig::new();
    for i in 0..SQ_WQEBBS {
        let w = rdma_wqe(&rig, i, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(i, &w);
    }
    rig.ring(SQ_WQEBBS - 1, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.transmitted().len(), usize::from(SQ_WQEBBS));
    let over = rdma_wqe(&rig, SQ_WQEBBS, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(SQ_WQEBBS, &over);
    rig.ring(SQ_WQEBBS, u8::from(WqeOpcode::RdmaWrite), 3);
    assert!(rig.transmitted().is_empty(), "the ninth waits");
    assert_eq!(rig.state(), QpState::Rts);
    // The first WRITE's ACK completes it and lets the ninth go.
    let ack = peer_ack(&rig, SQ_PSN, 1);
    let out = rig.frame(&ack);
    let psns: Vec<u32> = out
        .iter()
        .map(|f| {
            parse_roce(&f.bytes)
                .expect("a RoCE frame")
                .repr
                .bth
                .psn
                .get()
        })
        .collect();
    assert_eq!(psns, [SQ_PSN + u32::from(SQ_WQEBBS)], "the ninth, sent");
    // Everything ACKed: nine completions, in posting order.
    let ack = peer_ack(&rig, SQ_PSN + u32::from(SQ_WQEBBS), 9);
    assert!(rig.frame(&ack).is_empty());
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig
        .cqes()
        .iter()
        .map(cqe_fields)
        .map(|c| (c.0, c.2, c.3, c.4))
        .collect();
    let want: Vec<_> = (0..=SQ_WQEBBS)
        .map(|i| (CqeOpcode::Req, i, 0x08, qpn))
        .collect();
    assert_eq!(cqes, want);
}

#[test]
fn doorbells_the_device_cannot_use_are_ignored_and_counted() {
    let mut rig = Rig::new();
    let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(0, &w);
    let qpn = rig.qpn.get();
    let db = |wqe_index: u16, qpn: u32| {
        SendDoorbell {
            wqe_index,
            opcode: 0x08,
            qpn,
            ds: 3,
        }
        .emit()
    };
    let Ok(CmdOut::Uar(other_uar)) = rig.exec(Command::AllocUar) else {
        panic!()
    };
    let bad = |rig: &Rig| rig.counters().bad_doorbells;
    let b0 = bad(&rig);
    let own = rig.uar;
    // A producer index more than the queue's size ahead of the consumer.
    rig.mmio(own, REG, &db(SQ_WQEBBS + 3, qpn));
    // Another UAR; a UAR that was never allocated; the odd buffer's middle;
    // no register at all; a 4-byte write; an unknown QP.
    rig.mmio(other_uar, REG, &db(0, qpn));
    rig.mmio(UarIndex::new(0x7777), REG, &db(0, qpn));
    rig.mmio(own, REG + 8, &db(0, qpn));
    rig.mmio(own, 0x100, &db(0, qpn));
    rig.mmio(own, REG, &db(0, qpn)[..4]);
    rig.mmio(own, REG, &db(0, 0x00ab_cdef));
    // A BlueFlame chunk that does not start the buffer.
    let mut chunk = [0u8; uar::BF_CHUNK];
    chunk.copy_from_slice(&w);
    rig.mmio(own, REG + uar::BF_CHUNK as u32, &chunk);
    // A BlueFlame burst whose WQE (20 DS, 320 bytes) cannot fit the 256-byte buffer.
    let mut big = chunk;
    big[7] = 20;
    rig.mmio(own, REG, &big);
    assert_eq!(bad(&rig) - b0, 9);
    assert!(rig.transmitted().is_empty() && rig.cqes().is_empty());
    assert_eq!(rig.state(), QpState::Rts);
    // The right doorbell runs the WQE.
    rig.mmio(own, REG, &db(0, qpn));
    assert_eq!(rig.transmitted().len(), 1);
    // A doorbell that goes backwards, or repeats, is dropped.
    rig.mmio(own, REG, &db(0xffff, qpn));
    rig.mmio(own, REG, &db(0, qpn));
    assert_eq!(bad(&rig) - b0, 11);
    assert!(rig.transmitted().is_empty());
    // A doorbell for a QP that cannot send is counted apart.
    rig.modify(QpState::Reset, QpAttrs::default());
    let n0 = rig.counters().doorbells_not_ready;
    rig.mmio(own, REG, &db(0, qpn));
    assert_eq!(rig.counters().doorbells_not_ready - n0, 1);
    assert!(rig.transmitted().is_empty() && rig.cqes().is_empty());
}

proptest! {
    #[test]
    fn arbitrary_mmio_never_panics(
        writes in proptest::collection::vec(
            (0u32..4, 0u32..4200, proptest::collection::vec(any::<u8>(), 0..80)),
            1..20,
        ),
    ) {
        let mut rig = Rig::new();
        let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(0, &w);
        for (u, off, data) in writes {
            let uar = if u == 0 { UarIndex::new(0x7777) } else { rig.uar };
            rig.mmio(uar, off, &data);
            let _ = rig.transmitted();
        }
        let _ = rig.cqes();
        prop_assert!(rig.exec(Command::QueryQp(rig.qpn)).is_ok());
    }
}

// ---------------------------------------------------------------------------
// Responder and requester errors on the wire.

/// The AETH syndrome of the one frame in `out`.
fn aeth_of(out: &[Frame]) -> AethSyndrome {
    assert_eq!(out.len(), 1, "one answer");
    let r = parse_roce(&out[0].bytes).unwrap().repr;
    assert_eq!(r.bth.opcode, BthOpcode::RcAck);
    r.ext.aeth.expect("AETH").syndrome
}

#[test]
fn responder_errors_answer_with_the_matching_nak() {
    let bad_key = Mkey::from_raw(0x1234_5678);
    // A WRITE with a key the device never issued: NAK remote access, ERR.
    let mut rig = Rig::new();
    let f = rig.request(
        BthOpcode::RcRdmaWriteOnly,
        EPSN,
        ExtHeaders {
            reth: Some(RethRepr {
                va: rig.mr_buf.get(),
                rkey: bad_key,
                dma_len: 8,
            }),
            ..ExtHeaders::default()
        },
        &[1; 8],
    );
    assert_eq!(
        aeth_of(&rig.frame(&f)),
        AethSyndrome::Nak(NakCode::RemoteAccessErr)
    );
    assert_eq!(rig.state(), QpState::Err);
    assert_eq!(rig.events(), [NicEvent::QpFatal(rig.qpn)]);

    // A WRITE ONLY past the MR's end, within a page of its own or
    // across the page its last bytes are in: NAK remote access, ERR, and
    // nothing written.
    for at in [MR_LEN, MR_LEN - 4] {
        let mut rig = Rig::new();
        let f = rig.write_only(EPSN, at, &[1; 8]);
        assert_eq!(
            aeth_of(&rig.frame(&f)),
            AethSyndrome::Nak(NakCode::RemoteAccessErr),
            "at {at}"
        );
        assert_eq!(rig.state(), QpState::Err);
        assert_eq!(rig.mr_bytes(MR_LEN - 8, 8), vec![0u8; 8]);
    }

    // An atomic at an address not 8-byte aligned: NAK invalid request, ERR.
    let mut rig = Rig::new();
    let f = rig.request(
        BthOpcode::RcFetchAdd,
        EPSN,
        ExtHeaders {
            atomic_eth: Some(AtomicEthRepr {
                va: rig.mr_buf.get() + 4,
                rkey: rig.mr,
                swap_add: 1,
                compare: 0,
            }),
            ..ExtHeaders::default()
        },
        &[],
    );
    assert_eq!(
        aeth_of(&rig.frame(&f)),
        AethSyndrome::Nak(NakCode::InvalidRequest)
    );
    assert_eq!(rig.state(), QpState::Err);
    assert_eq!(rig.mr_bytes(0, 16), vec![0u8; 16]);

    // A READ for 2 GiB with a bad key: NAK remote access, without first
    // allocating the 2 GiB the forged length asks for (run the tests under
    // `ulimit -v 3000000` to see the difference).
    let mut rig = Rig::new();
    let f = rig.request(
        BthOpcode::RcRdmaReadRequest,
        EPSN,
        ExtHeaders {
            reth: Some(RethRepr {
                va: rig.mr_buf.get(),
                rkey: bad_key,
                dma_len: 1 << 31,
            }),
            ..ExtHeaders::default()
        },
        &[],
    );
    assert_eq!(
        aeth_of(&rig.frame(&f)),
        AethSyndrome::Nak(NakCode::RemoteAccessErr)
    );
    assert_eq!(rig.state(), QpState::Err);

    // A READ longer than the largest message (2^31 bytes): NAK invalid
    // request, checked before the key (IBTA's responder order, as rxe's
    // check_length before check_rkey), so nothing is allocated for it
    // whatever the key covers.
    let mut rig = Rig::new();
    let f = rig.request(
        BthOpcode::RcRdmaReadRequest,
        EPSN,
        ExtHeaders {
            reth: Some(RethRepr {
                va: rig.mr_buf.get(),
                rkey: rig.mr,
                dma_len: u32::MAX,
            }),
            ..ExtHeaders::default()
        },
        &[],
    );
    assert_eq!(
        aeth_of(&rig.frame(&f)),
        AethSyndrome::Nak(NakCode::InvalidRequest)
    );
    assert_eq!(rig.state(), QpState::Err);

    // A SEND Middle with no SEND First before it: NAK invalid request.
    let mut rig = Rig::new();
    rig.post_recv(rig.mr.raw(), rig.mr_buf.get(), 4096);
    let f = rig.request(
        BthOpcode::RcSendMiddle,
        EPSN,
        ExtHeaders::default(),
        &[0; 1024],
    );
    assert_eq!(
        aeth_of(&rig.frame(&f)),
        AethSyndrome::Nak(NakCode::InvalidRequest)
    );
    assert_eq!(rig.state(), QpState::Err);
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(
        cqes,
        [(
            CqeOpcode::RespErr,
            Syndrome::WrFlushErr,
            0,
            0,
            rig.qpn.get()
        )],
        "the posted receive is flushed"
    );

    // A SEND with no receive posted: RNR NAK with the QP's timer; not fatal.
    let mut rig = Rig::new();
    let send = rig.request(BthOpcode::RcSendOnly, EPSN, ExtHeaders::default(), &[5; 32]);
    assert_eq!(
        aeth_of(&rig.frame(&send)),
        AethSyndrome::RnrNak {
            timer: MIN_RNR_TIMER
        }
    );
    assert_eq!(rig.counters().rnr_nak_sent, 1);
    assert_eq!(rig.state(), QpState::Rts);
    // Ahead of the expected PSN: one PSN-sequence NAK, then silence.
    let ahead = rig.request(
        BthOpcode::RcSendOnly,
        EPSN + 2,
        ExtHeaders::default(),
        &[5; 32],
    );
    assert_eq!(
        aeth_of(&rig.frame(&ahead)),
        AethSyndrome::Nak(NakCode::PsnSeqErr)
    );
    assert!(rig.frame(&ahead).is_empty());
    assert_eq!(rig.counters().out_of_sequence, 2);
    assert_eq!(rig.state(), QpState::Rts);
    // The retried SEND, with a receive now, is taken.
    rig.post_recv(rig.mr.raw(), rig.mr_buf.get(), 64);
    assert!(matches!(
        aeth_of(&rig.frame(&send)),
        AethSyndrome::Ack { .. }
    ));
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(cqes.len(), 1);
    assert_eq!(cqes[0].0, CqeOpcode::RespSend);
    assert_eq!(rig.mr_bytes(0, 32), vec![5u8; 32]);
}

#[test]
fn a_short_read_response_is_a_bad_response_completed_once() {
    let mut rig = Rig::new();
    // READ of 100 bytes, then a WRITE behind it.
    let r = rdma_wqe(&rig, 0, WqeOpcode::RdmaRead, 100);
    rig.write_sq(0, &r);
    let w = rdma_wqe(&rig, 1, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(1, &w);
    rig.ring(1, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.transmitted().len(), 2, "READ request and WRITE");
    // The peer answers the READ with 40 bytes marked Only.
    let f = peer_aeth(
        &rig,
        BthOpcode::RcRdmaReadResponseOnly,
        SQ_PSN,
        1,
        &[0xab; 40],
    );
    assert!(rig.frame(&f).is_empty());
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(
        cqes,
        [
            (CqeOpcode::ReqErr, Syndrome::BadRespErr, 0, 0x10, qpn),
            (CqeOpcode::ReqErr, Syndrome::WrFlushErr, 1, 0x08, qpn),
        ]
    );
    assert_eq!(rig.state(), QpState::Err);
}

#[test]
fn a_write_with_immediate_whose_last_packet_fails_completes_its_receive() {
    // A WRITE of two packets with an immediate; its MR is destroyed
    // between them. The last packet takes a receive WQE for the
    // immediate, then cannot be written: the QP goes to ERR, and both
    // receives complete, flushed, the one taken first.
    let mut rig = Rig::new();
    let (lkey, at) = (rig.mr.raw(), rig.mr_buf.get() + 4096);
    rig.post_recv(lkey, at, 64);
    rig.post_recv(lkey, at, 64);
    let f = rig.request(
        BthOpcode::RcRdmaWriteFirst,
        EPSN,
        rig.mr_reth(0, 2048),
        &[1; 1024],
    );
    assert!(matches!(aeth_of(&rig.frame(&f)), AethSyndrome::Ack { .. }));
    let mr = rig.mr;
    rig.exec(Command::DestroyMkey(mr)).unwrap();
    let ext = ExtHeaders {
        immdt: Some(ImmDtRepr { imm: 7 }),
        ..ExtHeaders::default()
    };
    let f = rig.request(
        BthOpcode::RcRdmaWriteLastWithImmediate,
        EPSN + 1,
        ext,
        &[2; 1024],
    );
    assert_eq!(
        aeth_of(&rig.frame(&f)),
        AethSyndrome::Nak(NakCode::RemoteAccessErr)
    );
    assert_eq!(rig.state(), QpState::Err);
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    let got: Vec<_> = cqes.iter().map(|c| (c.0, c.1, c.2)).collect();
    assert_eq!(
        got,
        [
            (CqeOpcode::RespErr, Syndrome::WrFlushErr, 0),
            (CqeOpcode::RespErr, Syndrome::WrFlushErr, 1),
        ]
    );
}

#[test]
fn a_read_or_atomic_inside_a_send_of_several_packets_is_an_invalid_request() {
    for opcode in [BthOpcode::RcRdmaReadRequest, BthOpcode::RcFetchAdd] {
        let mut rig = Rig::new();
        rig.post_recv(rig.mr.raw(), rig.mr_buf.get() + 4096, 4096);
        let f = rig.request(
            BthOpcode::RcSendFirst,
            EPSN,
            ExtHeaders::default(),
            &[1; 1024],
        );
        assert!(matches!(aeth_of(&rig.frame(&f)), AethSyndrome::Ack { .. }));
        let ext = if opcode == BthOpcode::RcFetchAdd {
            ExtHeaders {
                atomic_eth: Some(AtomicEthRepr {
                    va: rig.mr_buf.get(),
                    rkey: rig.mr,
                    swap_add: 1,
                    compare: 0,
                }),
                ..ExtHeaders::default()
            }
        } else {
            rig.mr_reth(0, 8)
        };
        let f = rig.request(opcode, EPSN + 1, ext, &[]);
        assert_eq!(
            aeth_of(&rig.frame(&f)),
            AethSyndrome::Nak(NakCode::InvalidRequest),
            "{opcode:?}"
        );
        assert_eq!(rig.state(), QpState::Err, "{opcode:?}");
    }
}

#[test]
fn a_duplicate_read_is_answered_only_where_it_repeats_a_read_taken() {
    let mut rig = Rig::new();
    let read = |rig: &Rig, psn: u32, len: u32| {
        rig.request(BthOpcode::RcRdmaReadRequest, psn, rig.mr_reth(0, len), &[])
    };
    // A READ of two responses, taken.
    let f = read(&rig, EPSN, 2048);
    assert_eq!(rig.frame(&f).len(), 2);
    // Its copy, and a request for its second response alone: answered.
    assert_eq!(rig.frame(&f).len(), 2, "the whole READ again");
    let f = read(&rig, EPSN + 1, 1024);
    assert_eq!(rig.frame(&f).len(), 1, "the rest of it");
    // Behind the window at a PSN no READ was taken at, or asking for
    // more than the READ taken there: dropped, the QP left as it is.
    for (psn, len) in [(EPSN - 100, 8), (EPSN, 4096), (EPSN + 1, 2048)] {
        let f = read(&rig, psn, len);
        assert!(rig.frame(&f).is_empty(), "PSN {psn}, {len} bytes");
    }
    assert_eq!(rig.state(), QpState::Rts);
}

#[test]
fn a_write_longer_than_the_largest_message_is_an_invalid_request() {
    // 2^31 bytes is the largest message: a WRITE of it is checked against
    // its key (the rig's MR is 8 KiB: a remote access error); one byte
    // more is an invalid request before any key is looked at.
    for (len, code) in [
        (1u32 << 31, NakCode::RemoteAccessErr),
        ((1 << 31) + 1, NakCode::InvalidRequest),
    ] {
        let mut rig = Rig::new();
        let f = rig.request(
            BthOpcode::RcRdmaWriteFirst,
            EPSN,
            rig.mr_reth(0, len),
            &[1; 1024],
        );
        assert_eq!(aeth_of(&rig.frame(&f)), AethSyndrome::Nak(code), "{len}");
        assert_eq!(rig.state(), QpState::Err);
    }
}

#[test]
fn a_uc_write_longer_than_its_reth_is_dropped_and_the_qp_goes_on() {
    let mut rig = Rig::build(NicConfig::new(LOCAL), 1024, QpType::Uc);
    let f = rig.request(
        BthOpcode::UcRdmaWriteFirst,
        EPSN,
        rig.mr_reth(0, 100),
        &[1; 1024],
    );
    assert!(rig.frame(&f).is_empty(), "UC answers nothing");
    assert_eq!(rig.state(), QpState::Rts);
    assert!(rig.events().is_empty(), "no fatal event");
    // The next message lands.
    let f = rig.request(
        BthOpcode::UcRdmaWriteOnly,
        EPSN + 1,
        rig.mr_reth(0, 8),
        &[9; 8],
    );
    assert!(rig.frame(&f).is_empty());
    assert_eq!(rig.mr_bytes(0, 8), vec![9u8; 8]);
}

#[test]
fn a_nop_on_a_ud_qp_completes_and_sends_nothing() {
    // A NOP of its control segment alone, and one sized like a SEND with
    // an address: neither is a datagram.
    let mut rig = Rig::ud();
    let mut w = [0u8; 2 * WQEBB_LEN];
    ctrl(&mut w[..WQEBB_LEN], 0, WqeOpcode::Nop, rig.qpn.get(), 1);
    ctrl(&mut w[WQEBB_LEN..], 1, WqeOpcode::Nop, rig.qpn.get(), 4);
    rig.write_sq(0, &w[..WQEBB_LEN]);
    rig.write_sq(1, &w[WQEBB_LEN..]);
    rig.ring(1, u8::from(WqeOpcode::Nop), 4);
    assert!(rig.transmitted().is_empty(), "no datagram");
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(cqes.len(), 2, "{cqes:?}");
    for (i, c) in cqes.iter().enumerate() {
        assert_eq!((c.0, c.2, c.3, c.4), (CqeOpcode::Req, i as u16, 0x00, qpn));
    }
    assert_eq!(rig.state(), QpState::Rts);
}

#[test]
fn a_failed_read_response_first_completes_what_it_acknowledged() {
    // A WRITE, then a READ of 100 bytes. A response to the READ
    // acknowledges the WRITE before it (its PSN is past the WRITE's), so
    // the WRITE completes as sent even when the response itself fails: too
    // short, or for a buffer that is gone.
    for gone in [false, true] {
        let mut rig = Rig::new();
        let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(0, &w);
        let r = rdma_wqe(&rig, 1, WqeOpcode::RdmaRead, 100);
        rig.write_sq(1, &r);
        rig.ring(1, u8::from(WqeOpcode::RdmaRead), 3);
        assert_eq!(rig.transmitted().len(), 2, "WRITE and READ request");
        let (payload, syndrome) = if gone {
            let mr = rig.mr;
            rig.exec(Command::DestroyMkey(mr)).unwrap();
            (vec![0xab; 100], Syndrome::LocalProtErr)
        } else {
            (vec![0xab; 40], Syndrome::BadRespErr)
        };
        let f = peer_aeth(
            &rig,
            BthOpcode::RcRdmaReadResponseOnly,
            SQ_PSN + 1,
            2,
            &payload,
        );
        assert!(rig.frame(&f).is_empty());
        let qpn = rig.qpn.get();
        let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
        assert_eq!(cqes.len(), 2, "gone {gone}: {cqes:?}");
        assert_eq!(
            (cqes[0].0, cqes[0].2, cqes[0].3),
            (CqeOpcode::Req, 0, 0x08),
            "gone {gone}: the WRITE succeeded"
        );
        assert_eq!(
            cqes[1],
            (CqeOpcode::ReqErr, syndrome, 1, 0x10, qpn),
            "gone {gone}"
        );
        assert_eq!(rig.state(), QpState::Err);
    }
}

#[test]
fn a_message_of_half_the_psn_circle_is_a_length_error() {
    // 2 GiB at a path MTU of 256 bytes is 2^23 packets: as many PSNs as
    // their circle can tell apart one way. Then a NOP.
    let mut rig = Rig::with_config_and_mtu(NicConfig::new(LOCAL), 256);
    let pd = rig.pd;
    let Ok(CmdOut::Mkey(big)) = rig.exec(Command::CreateMkey(MkeyParams {
        pd,
        access: Access(Access::LOCAL_WRITE),
        start: rig.mr_buf.get(),
        len: 1 << 31,
        mtt: vec![rig.mr_buf; 1 << 19],
    })) else {
        panic!("a 2 GiB key");
    };
    let mut w = [0u8; WQEBB_LEN];
    ctrl(&mut w, 0, WqeOpcode::RdmaWrite, rig.qpn.get(), 4);
    let mut r = RaddrSeg::new_unchecked(&mut w[16..32]);
    r.set_raddr(0x7000_0000);
    r.set_rkey(0x4242);
    for k in 0..2u64 {
        let at = 32 + 16 * k as usize;
        let mut d = DataSeg::new_unchecked(&mut w[at..at + 16]);
        d.set_byte_count(1 << 30);
        d.set_lkey(big.raw());
        d.set_addr(rig.mr_buf.get() + (k << 30));
    }
    rig.write_sq(0, &w);
    let mut nop = [0u8; WQEBB_LEN];
    ctrl(&mut nop, 1, WqeOpcode::Nop, rig.qpn.get(), 1);
    rig.write_sq(1, &nop);
    rig.ring(1, u8::from(WqeOpcode::Nop), 1);
    assert!(rig.transmitted().is_empty(), "nothing sent");
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(
        cqes,
        [
            (CqeOpcode::ReqErr, Syndrome::LocalLengthErr, 0, 0x08, qpn),
            (CqeOpcode::ReqErr, Syndrome::WrFlushErr, 1, 0x00, qpn),
        ]
    );
    assert_eq!(rig.state(), QpState::Err);
}

#[test]
fn a_retransmission_from_memory_gone_is_a_protection_error_completed_once() {
    let mut rig = Rig::new();
    // Two WRITEs go out; then their MR is destroyed.
    for i in 0..2 {
        let w = rdma_wqe(&rig, i, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(i, &w);
    }
    rig.ring(1, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.transmitted().len(), 2);
    let mr = rig.mr;
    rig.exec(Command::DestroyMkey(mr)).unwrap();
    // The peer lost the first: a PSN-sequence NAK asks for both again.
    let mut bth = BthRepr::new(BthOpcode::RcAck, rig.qpn, Psn::new(SQ_PSN));
    bth.ack_req = false;
    let nak = RoceRepr {
        ip: RoceIp::v4(PEER, LOCAL),
        src_port: 0xc000,
        bth,
        ext: ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Nak(NakCode::PsnSeqErr),
                msn: 0,
            }),
            ..ExtHeaders::default()
        },
    };
    let mut f = Vec::new();
    nak.emit_to_vec(&[], &mut f).unwrap();
    assert!(rig.frame(&f).is_empty(), "nothing resent");
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(
        cqes,
        [
            (CqeOpcode::ReqErr, Syndrome::LocalProtErr, 0, 0x08, qpn),
            (CqeOpcode::ReqErr, Syndrome::WrFlushErr, 1, 0x08, qpn),
        ]
    );
    assert_eq!(rig.state(), QpState::Err);
}

#[test]
fn objects_in_use_cannot_be_destroyed() {
    let mut rig = Rig::new();
    let Ok(CmdOut::QpInfo { state, .. }) = rig.exec(Command::QueryQp(rig.qpn)) else {
        panic!()
    };
    assert_eq!(state, QpState::Rts);
    let cqn = Cqn::new(1);
    let (pd, uar, qpn, mr) = (rig.pd, rig.uar, rig.qpn, rig.mr);
    assert_eq!(
        rig.exec(Command::DestroyCq(cqn)),
        Err(CmdError::Busy {
            kind: ObjKind::Cq,
            id: cqn.get()
        })
    );
    assert_eq!(
        rig.exec(Command::DeallocPd(pd)),
        Err(CmdError::Busy {
            kind: ObjKind::Pd,
            id: pd.get()
        })
    );
    assert_eq!(
        rig.exec(Command::DeallocUar(uar)),
        Err(CmdError::Busy {
            kind: ObjKind::Uar,
            id: uar.get()
        })
    );
    rig.exec(Command::DestroyQp(qpn)).unwrap();
    rig.exec(Command::DestroyCq(cqn)).unwrap();
    // The MR still holds the PD.
    assert!(matches!(
        rig.exec(Command::DeallocPd(pd)),
        Err(CmdError::Busy {
            kind: ObjKind::Pd,
            ..
        })
    ));
    rig.exec(Command::DestroyMkey(mr)).unwrap();
    rig.exec(Command::DeallocPd(pd)).unwrap();
    rig.exec(Command::DeallocUar(uar)).unwrap();
    assert!(matches!(
        rig.exec(Command::DestroyQp(qpn)),
        Err(CmdError::NoSuchObject {
            kind: ObjKind::Qp,
            ..
        })
    ));
    // A doorbell and a frame for the destroyed QP are dropped and counted.
    let c0 = rig.counters();
    rig.ring(0, 0x08, 3);
    let f = rig.write_only(EPSN, 0, &[1; 8]);
    assert!(rig.frame(&f).is_empty());
    let c = rig.counters();
    assert_eq!(c.bad_doorbells - c0.bad_doorbells, 1);
    assert_eq!(c.rx_dropped - c0.rx_dropped, 1);
}

#[test]
fn commands_with_ranges_past_the_address_space_are_refused() {
    let mut rig = Rig::new();
    let pd = rig.pd;
    // Ends past 2^64: the page count and every later bounds check would
    // overflow.
    for (start, len) in [(rig.mr_buf.get() + 1, u64::MAX), (u64::MAX - 10, 100)] {
        assert!(matches!(
            rig.exec(Command::CreateMkey(MkeyParams {
                pd,
                access: Access(Access::LOCAL_WRITE),
                start,
                len,
                mtt: vec![rig.mr_buf; 2],
            })),
            Err(CmdError::BadParam {
                name: Param::MkeyLength,
                ..
            })
        ));
    }
    // A receive stride past 4 KiB, even on a device whose caps allow large
    // receive descriptors.
    let mut cfg = NicConfig::new(LOCAL);
    cfg.caps.max_rq_desc_sz = 1 << 20;
    rig.nic = Nic::new(cfg);
    let Ok(CmdOut::Uar(uar2)) = rig.exec(Command::AllocUar) else {
        panic!("no UAR")
    };
    let Ok(CmdOut::Pd(pd2)) = rig.exec(Command::AllocPd) else {
        panic!("no PD")
    };
    let Ok(CmdOut::Cq(cq)) = rig.exec(Command::CreateCq(CqParams {
        log_size: LOG_CQ,
        uar: uar2,
        dbr_addr: rig.cq_dbr,
        cqe_bytes: 64,
        pas: vec![rig.cq_buf],
    })) else {
        panic!("no CQ")
    };
    assert!(matches!(
        rig.exec(Command::CreateQp(QpParams {
            qp_type: QpType::Rc,
            pd: pd2,
            send_cq: cq,
            recv_cq: cq,
            uar: uar2,
            log_sq_size: LOG_SQ,
            log_rq_size: LOG_RQ,
            log_rq_stride: 60,
            dbr_addr: rig.qp_dbr,
            pas: vec![rig.qp_buf; 64],
            srq: None,
            gsi: false,
            user_index: 0,
        })),
        Err(CmdError::BadParam {
            name: Param::LogRqStride,
            ..
        })
    ));
}

/// CREATE_CQ takes mlx5's two CQE sizes, and asks a 128-byte CQ for twice
/// the pages.
#[test]
fn create_cq_takes_64_and_128_byte_cqes_and_nothing_else() {
    let mut rig = Rig::new();
    let pages = |n: u64| -> Vec<HostAddr> {
        let a = rig.mem.alloc(n * PAGE_SIZE).unwrap();
        rig.mem.pin(a, n * PAGE_SIZE).unwrap()
    };
    // 64 entries: one page of 64-byte CQEs, two of 128-byte ones.
    let (one, two) = (pages(1), pages(2));
    let create = |rig: &mut Rig, cqe_bytes: u16, pas: Vec<HostAddr>| {
        rig.exec(Command::CreateCq(CqParams {
            log_size: 6,
            uar: rig.uar,
            dbr_addr: rig.cq_dbr,
            cqe_bytes,
            pas,
        }))
    };
    assert!(matches!(
        create(&mut rig, 64, one.clone()),
        Ok(CmdOut::Cq(_))
    ));
    assert!(matches!(create(&mut rig, 128, two), Ok(CmdOut::Cq(_))));
    assert!(matches!(
        create(&mut rig, 128, one.clone()),
        Err(CmdError::BadParam {
            name: Param::CqPasEntries,
            ..
        })
    ));
    for bad in [0, 32, 96, 256] {
        assert!(
            matches!(
                create(&mut rig, bad, one.clone()),
                Err(CmdError::BadParam {
                    name: Param::CqeSize,
                    ..
                })
            ),
            "{bad}"
        );
    }
}

/// Adaptive retransmission waits while the oldest thing unacknowledged is
/// a READ with no response yet (its responder reads the data first, which
/// no round trip of a WRITE predicts), and starts as the responses flow.
#[test]
fn the_adaptive_timer_waits_for_a_reads_first_response() {
    let mut rig = Rig::new();
    let us = doorbell_types::Duration::from_us;
    let ack_timeout = doorbell_roce::ack_timeout(14).unwrap();
    // A WRITE acknowledged 10 us later measures the round trip: the
    // adaptive wait is then 10 + max(16, 4 x 5) = 30 us.
    let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(0, &w);
    rig.ring(0, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.transmitted().len(), 1);
    let sent = rig.now;
    assert_eq!(
        rig.nic.poll_timeout(),
        Some(sent.add(ack_timeout)),
        "nothing measured yet: the ACK timer alone"
    );
    rig.advance_us(10);
    assert!(rig.frame(&peer_ack(&rig, SQ_PSN, 1)).is_empty());
    assert_eq!(rig.nic.poll_timeout(), None, "nothing outstanding");
    // A READ of two responses: held, the ACK timer alone runs.
    let r = rdma_wqe(&rig, 1, WqeOpcode::RdmaRead, 2048);
    rig.write_sq(1, &r);
    rig.ring(1, u8::from(WqeOpcode::RdmaRead), 3);
    assert_eq!(rig.transmitted().len(), 1, "the READ request");
    let asked = rig.now;
    assert_eq!(rig.nic.poll_timeout(), Some(asked.add(ack_timeout)));
    // Its first response ends the hold.
    rig.advance_us(100);
    let f = peer_aeth(
        &rig,
        BthOpcode::RcRdmaReadResponseFirst,
        SQ_PSN + 1,
        1,
        &[0x5a; 1024],
    );
    assert!(rig.frame(&f).is_empty());
    assert_eq!(rig.nic.poll_timeout(), Some(rig.now.add(us(30))));
    assert_eq!(rig.counters().roce_adp_retrans, 0);
}

#[test]
fn recycled_frame_buffers_are_kept_to_a_bound_and_built_into_again() {
    let mut rig = Rig::new();
    assert_eq!(rig.nic.spare_room(), 256);
    rig.nic.recycle(Vec::new());
    rig.nic.recycle(Vec::with_capacity(64 << 10));
    assert_eq!(rig.nic.spare_room(), 256, "empty and oversized: not kept");
    let used = vec![0xeeu8; 100];
    let at = used.as_ptr();
    rig.nic.recycle(used);
    assert_eq!(rig.nic.spare_room(), 255);
    // The next frame is built in it, whole: the old bytes do not show.
    let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(0, &w);
    rig.ring(0, u8::from(WqeOpcode::RdmaWrite), 3);
    let tx = rig.transmitted();
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].bytes.as_ptr(), at, "the spare was used");
    // Whole: it parses, its ICRC over every byte included.
    assert!(doorbell_wire::parse_roce(&tx[0].bytes).is_ok());
    assert_eq!(rig.nic.spare_room(), 256);
    for _ in 0..300 {
        rig.nic.recycle(Vec::with_capacity(128));
    }
    assert_eq!(rig.nic.spare_room(), 0, "at most 256 kept");
}
