//! The byte form of commands and their results, so that a command can cross
//! a process boundary (a mailbox in shared memory, a socket) as it crosses
//! the command queue on mlx5 hardware.
//!
//! # Format
//! Big-endian throughout, like the PRM's mailboxes.
//!
//! - A command is `opcode: u16, op_mod: u16` and the command's fields. The
//!   opcodes are the PRM's (`QUERY_HCA_CAP` 0x100, `CREATE_MKEY` 0x200, ...,
//!   `ALLOC_UAR` 0x802), except [`opcode::MODIFY_QP`]: the PRM has one
//!   opcode per transition (RST2INIT_QP 0x502 ...), which only the device can
//!   pick since it knows the current state, so the whole family travels as
//!   one opcode with the target state's code in `op_mod`.
//! - A result is `status: u8`, three reserved bytes, then for status 0 an
//!   output tag and its fields, and for an error a detail byte and the
//!   error's fields. The statuses are the PRM's (`BAD_PARAM` 0x3,
//!   `BAD_RESOURCE` 0x5, `RESOURCE_BUSY` 0x6, `BAD_RES_STATE` 0x9,
//!   `NO_RESOURCES` 0xf; `INTERNAL_ERR` 0x1 for a device that is gone).
//! - A list (the MTT of CREATE_MKEY, the PAS of CREATE_CQ, CREATE_QP and
//!   CREATE_SRQ) is a `u32` count and that many `u64` page addresses.
//! - An optional number (CREATE_QP's SRQ) is a flag byte (0 or 1) and,
//!   for 1, the `u32`.
//! - RESIZE_CQ is MODIFY_CQ 0x403 with `op_mod` [`MODIFY_CQ_RESIZE`].
//! - The SRQ commands are the PRM's CREATE_SRQ 0x700, DESTROY_SRQ 0x701,
//!   QUERY_SRQ 0x702 and ARM_RQ 0x703 with `op_mod` [`ARM_RQ_SRQ`]
//!   (MODIFY_SRQ: the limit).
//! - [`QpAttrs`] is the attribute mask ([`QpAttrs::mask`]) and the fields
//!   present, in mask-bit order.
//!
//! # Guarantees
//! `decode(encode(x)) == x` for every value (tested with proptest), and
//! decoding never panics: truncated, over-long or out-of-range input is a
//! [`DecodeError`].

use doorbell_types::{Cqn, Eqn, HostAddr, Mkey, Pdn, Psn, Qpn, Srqn, UarIndex};

use crate::cmd::{
    CmdOut, Command, CqParams, DeviceCaps, EqParams, MkeyParams, QpParams, SrqParams,
};
use crate::error::{CmdError, ObjKind, Param};
use crate::qp::{Access, AddressVector, QpAttr, QpAttrs, QpState, QpType, Transition};

/// The PRM's command opcodes, and doorbell's one for MODIFY_QP.
pub mod opcode {
    /// QUERY_HCA_CAP.
    pub const QUERY_HCA_CAP: u16 = 0x100;
    /// CREATE_EQ.
    pub const CREATE_EQ: u16 = 0x301;
    /// DESTROY_EQ.
    pub const DESTROY_EQ: u16 = 0x302;
    /// CREATE_MKEY.
    pub const CREATE_MKEY: u16 = 0x200;
    /// DESTROY_MKEY.
    pub const DESTROY_MKEY: u16 = 0x202;
    /// An mkey's context rewritten in place (doorbell's own opcode, for
    /// what the kernel does with a UMR WQE).
    pub const MODIFY_MKEY: u16 = 0x2ff;
    /// CREATE_CQ.
    pub const CREATE_CQ: u16 = 0x400;
    /// DESTROY_CQ.
    pub const DESTROY_CQ: u16 = 0x401;
    /// MODIFY_CQ; `op_mod` [`super::MODIFY_CQ_RESIZE`] resizes.
    pub const MODIFY_CQ: u16 = 0x403;
    /// CREATE_QP.
    pub const CREATE_QP: u16 = 0x500;
    /// DESTROY_QP.
    pub const DESTROY_QP: u16 = 0x501;
    /// QUERY_QP.
    pub const QUERY_QP: u16 = 0x50b;
    /// The MODIFY_QP family (doorbell's own opcode; the target state is in
    /// `op_mod`).
    pub const MODIFY_QP: u16 = 0x5ff;
    /// CREATE_SRQ.
    pub const CREATE_SRQ: u16 = 0x700;
    /// DESTROY_SRQ.
    pub const DESTROY_SRQ: u16 = 0x701;
    /// QUERY_SRQ.
    pub const QUERY_SRQ: u16 = 0x702;
    /// ARM_RQ; `op_mod` [`super::ARM_RQ_SRQ`] names an SRQ.
    pub const ARM_RQ: u16 = 0x703;
    /// ALLOC_PD.
    pub const ALLOC_PD: u16 = 0x800;
    /// DEALLOC_PD.
    pub const DEALLOC_PD: u16 = 0x801;
    /// ALLOC_UAR.
    pub const ALLOC_UAR: u16 = 0x802;
    /// DEALLOC_UAR.
    pub const DEALLOC_UAR: u16 = 0x803;
    /// ACCESS_REG; `op_mod` 0 writes, 1 reads (only PAOS is modelled).
    pub const ACCESS_REG: u16 = 0x805;
}

/// MODIFY_CQ's `op_mod` for a resize (the PRM's `MLX5_CQ_OPMOD_RESIZE`).
pub const MODIFY_CQ_RESIZE: u16 = 0x1;

/// ARM_RQ's `op_mod` for an SRQ (the PRM's `MLX5_ARM_RQ_IN_OP_MOD_SRQ`).
pub const ARM_RQ_SRQ: u16 = 0x1;

/// The PRM's command statuses that [`CmdError`] maps to.
pub mod status {
    /// Success.
    pub const OK: u8 = 0x0;
    /// Internal error (the device is gone).
    pub const INTERNAL_ERR: u8 = 0x1;
    /// A parameter is bad, missing or not allowed.
    pub const BAD_PARAM: u8 = 0x3;
    /// A named object does not exist.
    pub const BAD_RESOURCE: u8 = 0x5;
    /// The object is in use.
    pub const RESOURCE_BUSY: u8 = 0x6;
    /// The object's state does not allow the command.
    pub const BAD_RES_STATE: u8 = 0x9;
    /// A table is full.
    pub const NO_RESOURCES: u8 = 0xf;
}

/// Why bytes are not a command or a result. The caller drops them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before the value does.
    #[error("truncated command bytes")]
    Truncated,
    /// Bytes are left after the value.
    #[error("{0} bytes after the end of the value")]
    Trailing(usize),
    /// An opcode, status, tag or code this version does not know.
    #[error("unknown {what} {value:#x}")]
    Unknown {
        /// What was being decoded.
        what: &'static str,
        /// The value found.
        value: u32,
    },
    /// A list longer than the bytes could hold.
    #[error("list of {0} entries does not fit")]
    BadLength(u32),
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn pages(&mut self, pages: &[HostAddr]) {
        // A list longer than u32::MAX cannot be built in memory that a
        // command's sender has; saturate rather than panic.
        self.u32(u32::try_from(pages.len()).unwrap_or(u32::MAX));
        for p in pages {
            self.u64(p.get());
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take()?))
    }
    fn pages(&mut self) -> Result<Vec<HostAddr>, DecodeError> {
        let n = self.u32()?;
        if (n as usize).saturating_mul(8) > self.0.len() {
            return Err(DecodeError::BadLength(n));
        }
        (0..n).map(|_| self.u64().map(HostAddr::new)).collect()
    }
    fn end(self) -> Result<(), DecodeError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}

fn unknown<T>(what: &'static str, value: impl Into<u32>) -> Result<T, DecodeError> {
    Err(DecodeError::Unknown {
        what,
        value: value.into(),
    })
}

fn state(code: u8) -> Result<QpState, DecodeError> {
    QpState::from_code(code).map_or_else(|| unknown("QP state", code), Ok)
}

/// The PRM's `st` of the GSI QP (`MLX5_QP_ST_QP1`).
const ST_QP1: u8 = 0x8;

fn qp_type(code: u8) -> Result<QpType, DecodeError> {
    QpType::from_code(code).map_or_else(|| unknown("QP type", code), Ok)
}

fn put_attrs(w: &mut Writer<'_>, a: &QpAttrs) {
    w.u32(a.mask());
    if let Some(s) = a.cur_state {
        w.u8(s as u8);
    }
    if let Some(v) = a.pkey_index {
        w.u16(v);
    }
    if let Some(v) = a.port {
        w.u8(v);
    }
    if let Some(v) = a.access {
        w.u32(v.0);
    }
    if let Some(v) = a.qkey {
        w.u32(v);
    }
    if let Some(av) = a.av {
        w.0.extend_from_slice(&av.dgid);
        w.u8(av.sgid_index);
        w.u8(av.hop_limit);
        w.u8(av.traffic_class);
        w.u8(av.sl);
    }
    if let Some(v) = a.path_mtu {
        w.u32(v);
    }
    if let Some(v) = a.dest_qpn {
        w.u32(v.get());
    }
    if let Some(v) = a.rq_psn {
        w.u32(v.get());
    }
    if let Some(v) = a.sq_psn {
        w.u32(v.get());
    }
    for v in [
        a.max_dest_rd_atomic,
        a.max_rd_atomic,
        a.min_rnr_timer,
        a.timeout,
        a.retry_cnt,
        a.rnr_retry,
    ]
    .into_iter()
    .flatten()
    {
        w.u8(v);
    }
}

fn get_attrs(r: &mut Reader<'_>) -> Result<QpAttrs, DecodeError> {
    let mask = r.u32()?;
    let known = QpAttr::ALL.iter().fold(0, |m, a| m | a.bit());
    if mask & !known != 0 {
        return unknown("attribute mask bits", mask & !known);
    }
    let has = |a: QpAttr| mask & a.bit() != 0;
    let mut a = QpAttrs::default();
    if has(QpAttr::CurState) {
        a.cur_state = Some(state(r.u8()?)?);
    }
    if has(QpAttr::PkeyIndex) {
        a.pkey_index = Some(r.u16()?);
    }
    if has(QpAttr::Port) {
        a.port = Some(r.u8()?);
    }
    if has(QpAttr::Access) {
        a.access = Some(Access(r.u32()?));
    }
    if has(QpAttr::Qkey) {
        a.qkey = Some(r.u32()?);
    }
    if has(QpAttr::Av) {
        a.av = Some(AddressVector {
            dgid: r.take()?,
            sgid_index: r.u8()?,
            hop_limit: r.u8()?,
            traffic_class: r.u8()?,
            sl: r.u8()?,
        });
    }
    if has(QpAttr::PathMtu) {
        a.path_mtu = Some(r.u32()?);
    }
    if has(QpAttr::DestQpn) {
        a.dest_qpn = Some(Qpn::new(r.u32()?));
    }
    if has(QpAttr::RqPsn) {
        a.rq_psn = Some(Psn::new(r.u32()?));
    }
    if has(QpAttr::SqPsn) {
        a.sq_psn = Some(Psn::new(r.u32()?));
    }
    for (attr, field) in [
        (QpAttr::MaxDestRdAtomic, &mut a.max_dest_rd_atomic),
        (QpAttr::MaxRdAtomic, &mut a.max_rd_atomic),
        (QpAttr::MinRnrTimer, &mut a.min_rnr_timer),
        (QpAttr::Timeout, &mut a.timeout),
        (QpAttr::RetryCnt, &mut a.retry_cnt),
        (QpAttr::RnrRetry, &mut a.rnr_retry),
    ] {
        if has(attr) {
            *field = Some(r.u8()?);
        }
    }
    Ok(a)
}

impl Command {
    /// Appends the command's byte form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        let head = |w: &mut Writer<'_>, op: u16, op_mod: u16| {
            w.u16(op);
            w.u16(op_mod);
        };
        match self {
            Command::QueryCaps => head(&mut w, opcode::QUERY_HCA_CAP, 0),
            Command::AllocUar => head(&mut w, opcode::ALLOC_UAR, 0),
            Command::DeallocUar(u) => {
                head(&mut w, opcode::DEALLOC_UAR, 0);
                w.u32(u.get());
            }
            Command::AllocPd => head(&mut w, opcode::ALLOC_PD, 0),
            Command::DeallocPd(p) => {
                head(&mut w, opcode::DEALLOC_PD, 0);
                w.u32(p.get());
            }
            Command::CreateMkey(m) => {
                head(&mut w, opcode::CREATE_MKEY, 0);
                mkey_params(&mut w, m);
            }
            Command::ModifyMkey(k, m) => {
                head(&mut w, opcode::MODIFY_MKEY, 0);
                w.u32(k.raw());
                mkey_params(&mut w, m);
            }
            Command::AccessPaos(set) => {
                head(&mut w, opcode::ACCESS_REG, u16::from(set.is_none()));
                w.u8(u8::from(set.unwrap_or(false)));
            }
            Command::DestroyMkey(k) => {
                head(&mut w, opcode::DESTROY_MKEY, 0);
                w.u32(k.raw());
            }
            Command::CreateCq(c) => {
                head(&mut w, opcode::CREATE_CQ, 0);
                w.u8(c.log_size);
                w.u32(c.uar.get());
                w.u64(c.dbr_addr.get());
                w.u16(c.cqe_bytes);
                w.pages(&c.pas);
            }
            Command::DestroyCq(c) => {
                head(&mut w, opcode::DESTROY_CQ, 0);
                w.u32(c.get());
            }
            Command::ResizeCq { cqn, log_size, pas } => {
                head(&mut w, opcode::MODIFY_CQ, MODIFY_CQ_RESIZE);
                w.u32(cqn.get());
                w.u8(*log_size);
                w.pages(pas);
            }
            Command::CreateQp(q) => {
                head(&mut w, opcode::CREATE_QP, 0);
                // A GSI QP is a UD QP whose `st` is QP1.
                w.u8(if q.gsi { ST_QP1 } else { q.qp_type.code() });
                w.u32(q.pd.get());
                w.u32(q.send_cq.get());
                w.u32(q.recv_cq.get());
                w.u32(q.uar.get());
                w.u8(q.log_sq_size);
                w.u8(q.log_rq_size);
                w.u8(q.log_rq_stride);
                w.u64(q.dbr_addr.get());
                w.pages(&q.pas);
                match q.srq {
                    Some(s) => {
                        w.u8(1);
                        w.u32(s.get());
                    }
                    None => w.u8(0),
                }
                w.u32(q.user_index);
            }
            Command::ModifyQp { qpn, state, attrs } => {
                head(&mut w, opcode::MODIFY_QP, *state as u16);
                w.u32(qpn.get());
                put_attrs(&mut w, attrs);
            }
            Command::QueryQp(q) => {
                head(&mut w, opcode::QUERY_QP, 0);
                w.u32(q.get());
            }
            Command::DestroyQp(q) => {
                head(&mut w, opcode::DESTROY_QP, 0);
                w.u32(q.get());
            }
            Command::CreateSrq(p) => {
                head(&mut w, opcode::CREATE_SRQ, 0);
                w.u32(p.pd.get());
                w.u8(p.log_size);
                w.u8(p.log_stride);
                w.u64(p.dbr_addr.get());
                w.pages(&p.pas);
            }
            Command::ModifySrq { srqn, limit } => {
                head(&mut w, opcode::ARM_RQ, ARM_RQ_SRQ);
                w.u32(srqn.get());
                w.u32(*limit);
            }
            Command::QuerySrq(s) => {
                head(&mut w, opcode::QUERY_SRQ, 0);
                w.u32(s.get());
            }
            Command::DestroySrq(s) => {
                head(&mut w, opcode::DESTROY_SRQ, 0);
                w.u32(s.get());
            }
            Command::CreateEq(e) => {
                head(&mut w, opcode::CREATE_EQ, 0);
                w.u8(e.log_size);
                w.u32(e.uar.get());
                w.u16(e.vector);
                w.u64(e.events);
                w.pages(&e.pas);
            }
            Command::DestroyEq(e) => {
                head(&mut w, opcode::DESTROY_EQ, 0);
                w.u32(e.get());
            }
        }
    }

    /// Parses a command from its byte form.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        let op = r.u16()?;
        let op_mod = r.u16()?;
        let cmd = match op {
            opcode::QUERY_HCA_CAP => Command::QueryCaps,
            opcode::ALLOC_UAR => Command::AllocUar,
            opcode::DEALLOC_UAR => Command::DeallocUar(UarIndex::new(r.u32()?)),
            opcode::ALLOC_PD => Command::AllocPd,
            opcode::DEALLOC_PD => Command::DeallocPd(Pdn::new(r.u32()?)),
            opcode::CREATE_MKEY => Command::CreateMkey(read_mkey_params(&mut r)?),
            opcode::MODIFY_MKEY => {
                let k = Mkey::from_raw(r.u32()?);
                Command::ModifyMkey(k, read_mkey_params(&mut r)?)
            }
            opcode::ACCESS_REG => {
                let up = r.u8()? != 0;
                Command::AccessPaos((op_mod == 0).then_some(up))
            }
            opcode::DESTROY_MKEY => Command::DestroyMkey(Mkey::from_raw(r.u32()?)),
            opcode::CREATE_CQ => Command::CreateCq(CqParams {
                log_size: r.u8()?,
                uar: UarIndex::new(r.u32()?),
                dbr_addr: HostAddr::new(r.u64()?),
                cqe_bytes: r.u16()?,
                pas: r.pages()?,
            }),
            opcode::DESTROY_CQ => Command::DestroyCq(Cqn::new(r.u32()?)),
            opcode::CREATE_EQ => Command::CreateEq(EqParams {
                log_size: r.u8()?,
                uar: UarIndex::new(r.u32()?),
                vector: r.u16()?,
                events: r.u64()?,
                pas: r.pages()?,
            }),
            opcode::DESTROY_EQ => Command::DestroyEq(Eqn::new(r.u32()?)),
            opcode::MODIFY_CQ if op_mod == MODIFY_CQ_RESIZE => Command::ResizeCq {
                cqn: Cqn::new(r.u32()?),
                log_size: r.u8()?,
                pas: r.pages()?,
            },
            opcode::MODIFY_CQ => return unknown("MODIFY_CQ op_mod", op_mod),
            opcode::CREATE_QP => {
                let st = r.u8()?;
                let gsi = st == ST_QP1;
                Command::CreateQp(QpParams {
                    qp_type: if gsi { QpType::Ud } else { qp_type(st)? },
                    pd: Pdn::new(r.u32()?),
                    send_cq: Cqn::new(r.u32()?),
                    recv_cq: Cqn::new(r.u32()?),
                    uar: UarIndex::new(r.u32()?),
                    log_sq_size: r.u8()?,
                    log_rq_size: r.u8()?,
                    log_rq_stride: r.u8()?,
                    dbr_addr: HostAddr::new(r.u64()?),
                    pas: r.pages()?,
                    srq: match r.u8()? {
                        0 => None,
                        1 => Some(Srqn::new(r.u32()?)),
                        f => return unknown("SRQ flag", f),
                    },
                    gsi,
                    user_index: r.u32()?,
                })
            }
            opcode::MODIFY_QP => {
                let state = u8::try_from(op_mod)
                    .ok()
                    .and_then(QpState::from_code)
                    .map_or_else(|| unknown("QP state", op_mod), Ok)?;
                Command::ModifyQp {
                    qpn: Qpn::new(r.u32()?),
                    state,
                    attrs: get_attrs(&mut r)?,
                }
            }
            opcode::QUERY_QP => Command::QueryQp(Qpn::new(r.u32()?)),
            opcode::DESTROY_QP => Command::DestroyQp(Qpn::new(r.u32()?)),
            opcode::CREATE_SRQ => Command::CreateSrq(SrqParams {
                pd: Pdn::new(r.u32()?),
                log_size: r.u8()?,
                log_stride: r.u8()?,
                dbr_addr: HostAddr::new(r.u64()?),
                pas: r.pages()?,
            }),
            opcode::ARM_RQ if op_mod == ARM_RQ_SRQ => Command::ModifySrq {
                srqn: Srqn::new(r.u32()?),
                limit: r.u32()?,
            },
            opcode::ARM_RQ => return unknown("ARM_RQ op_mod", op_mod),
            opcode::QUERY_SRQ => Command::QuerySrq(Srqn::new(r.u32()?)),
            opcode::DESTROY_SRQ => Command::DestroySrq(Srqn::new(r.u32()?)),
            other => return unknown("opcode", other),
        };
        r.end()?;
        Ok(cmd)
    }
}

/// Output tags of a successful result.
mod tag {
    pub(super) const DONE: u8 = 0;
    pub(super) const CAPS: u8 = 1;
    pub(super) const UAR: u8 = 2;
    pub(super) const PD: u8 = 3;
    pub(super) const MKEY: u8 = 4;
    pub(super) const CQ: u8 = 5;
    pub(super) const QP: u8 = 6;
    pub(super) const QP_INFO: u8 = 7;
    pub(super) const SRQ: u8 = 8;
    pub(super) const SRQ_INFO: u8 = 9;
    pub(super) const PORT_UP: u8 = 10;
    pub(super) const EQ: u8 = 11;
}

/// Detail bytes of an error result, under its status.
mod detail {
    pub(super) const EXHAUSTED: u8 = 0;
    pub(super) const NO_SUCH_OBJECT: u8 = 1;
    pub(super) const BUSY: u8 = 2;
    pub(super) const BAD_PARAM: u8 = 3;
    pub(super) const BAD_TRANSITION: u8 = 4;
    pub(super) const MISSING_ATTR: u8 = 5;
    pub(super) const EXTRA_ATTR: u8 = 6;
    pub(super) const DEVICE_GONE: u8 = 7;
}

fn mkey_params(w: &mut Writer<'_>, m: &MkeyParams) {
    w.u32(m.pd.get());
    w.u32(m.access.0);
    w.u64(m.start);
    w.u64(m.len);
    w.pages(&m.mtt);
}

fn read_mkey_params(r: &mut Reader<'_>) -> Result<MkeyParams, DecodeError> {
    Ok(MkeyParams {
        pd: Pdn::new(r.u32()?),
        access: Access(r.u32()?),
        start: r.u64()?,
        len: r.u64()?,
        mtt: r.pages()?,
    })
}

fn index_of<T: PartialEq>(all: &[T], v: &T) -> u8 {
    all.iter().position(|x| x == v).unwrap_or(0) as u8
}

fn from_index<T: Copy>(what: &'static str, all: &[T], i: u8) -> Result<T, DecodeError> {
    all.get(usize::from(i))
        .copied()
        .map_or_else(|| unknown(what, i), Ok)
}

fn put_caps(w: &mut Writer<'_>, c: &DeviceCaps) {
    w.u8(c.log_max_qp);
    for v in [
        c.max_send_wqebb,
        c.max_recv_wr,
        c.max_sq_desc_sz,
        c.max_rq_desc_sz,
        c.max_cqe,
        c.max_mkeys,
        c.max_pd,
        c.max_uar,
        c.bf_reg_size,
    ] {
        w.u32(v);
    }
    w.u8(c.log_uar_size);
    w.u32(c.num_uars_per_page);
    w.u32(c.cache_line_size);
    w.u8(c.max_rd_atomic);
    w.u32(c.max_mtu);
    w.u32(c.vendor_id);
    w.u32(c.vendor_part_id);
}

fn get_caps(r: &mut Reader<'_>) -> Result<DeviceCaps, DecodeError> {
    Ok(DeviceCaps {
        log_max_qp: r.u8()?,
        max_send_wqebb: r.u32()?,
        max_recv_wr: r.u32()?,
        max_sq_desc_sz: r.u32()?,
        max_rq_desc_sz: r.u32()?,
        max_cqe: r.u32()?,
        max_mkeys: r.u32()?,
        max_pd: r.u32()?,
        max_uar: r.u32()?,
        bf_reg_size: r.u32()?,
        log_uar_size: r.u8()?,
        num_uars_per_page: r.u32()?,
        cache_line_size: r.u32()?,
        max_rd_atomic: r.u8()?,
        max_mtu: r.u32()?,
        vendor_id: r.u32()?,
        vendor_part_id: r.u32()?,
    })
}

/// Appends the byte form of a command's result to `out`.
pub fn encode_result(result: &Result<CmdOut, CmdError>, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    let head = |w: &mut Writer<'_>, status: u8, sub: u8| {
        w.u8(status);
        w.0.extend_from_slice(&[0; 3]);
        w.u8(sub);
    };
    match result {
        Ok(o) => match o {
            CmdOut::Done => head(&mut w, status::OK, tag::DONE),
            CmdOut::Caps(c) => {
                head(&mut w, status::OK, tag::CAPS);
                put_caps(&mut w, c);
            }
            CmdOut::Uar(u) => {
                head(&mut w, status::OK, tag::UAR);
                w.u32(u.get());
            }
            CmdOut::Pd(p) => {
                head(&mut w, status::OK, tag::PD);
                w.u32(p.get());
            }
            CmdOut::Mkey(k) => {
                head(&mut w, status::OK, tag::MKEY);
                w.u32(k.raw());
            }
            CmdOut::Cq(c) => {
                head(&mut w, status::OK, tag::CQ);
                w.u32(c.get());
            }
            CmdOut::Qp(q) => {
                head(&mut w, status::OK, tag::QP);
                w.u32(q.get());
            }
            CmdOut::QpInfo { state, attrs } => {
                head(&mut w, status::OK, tag::QP_INFO);
                w.u8(*state as u8);
                put_attrs(&mut w, attrs);
            }
            CmdOut::Srq(s) => {
                head(&mut w, status::OK, tag::SRQ);
                w.u32(s.get());
            }
            CmdOut::PortUp(up) => {
                head(&mut w, status::OK, tag::PORT_UP);
                w.u8(u8::from(*up));
            }
            CmdOut::SrqInfo { limit } => {
                head(&mut w, status::OK, tag::SRQ_INFO);
                w.u32(*limit);
            }
            CmdOut::Eq(e) => {
                head(&mut w, status::OK, tag::EQ);
                w.u32(e.get());
            }
        },
        Err(e) => match e {
            CmdError::Exhausted(k) => {
                head(&mut w, status::NO_RESOURCES, detail::EXHAUSTED);
                w.u8(index_of(&ObjKind::ALL, k));
            }
            CmdError::NoSuchObject { kind, id } => {
                head(&mut w, status::BAD_RESOURCE, detail::NO_SUCH_OBJECT);
                w.u8(index_of(&ObjKind::ALL, kind));
                w.u32(*id);
            }
            CmdError::Busy { kind, id } => {
                head(&mut w, status::RESOURCE_BUSY, detail::BUSY);
                w.u8(index_of(&ObjKind::ALL, kind));
                w.u32(*id);
            }
            CmdError::BadParam { name, value } => {
                head(&mut w, status::BAD_PARAM, detail::BAD_PARAM);
                w.u8(index_of(&Param::ALL, name));
                w.u64(*value);
            }
            CmdError::BadTransition { qpn, from, to } => {
                head(&mut w, status::BAD_RES_STATE, detail::BAD_TRANSITION);
                w.u32(*qpn);
                w.u8(*from as u8);
                w.u8(*to as u8);
            }
            CmdError::MissingAttr {
                qpn,
                transition,
                attr,
            }
            | CmdError::ExtraAttr {
                qpn,
                transition,
                attr,
            } => {
                let d = if matches!(e, CmdError::MissingAttr { .. }) {
                    detail::MISSING_ATTR
                } else {
                    detail::EXTRA_ATTR
                };
                head(&mut w, status::BAD_PARAM, d);
                w.u32(*qpn);
                w.u8(index_of(&Transition::ALL, transition));
                w.u8(index_of(&QpAttr::ALL, attr));
            }
            CmdError::DeviceGone => head(&mut w, status::INTERNAL_ERR, detail::DEVICE_GONE),
        },
    }
}

/// Parses a command's result from its byte form.
pub fn decode_result(bytes: &[u8]) -> Result<Result<CmdOut, CmdError>, DecodeError> {
    let mut r = Reader(bytes);
    let status = r.u8()?;
    let _reserved: [u8; 3] = r.take()?;
    let sub = r.u8()?;
    let kind = |r: &mut Reader<'_>| from_index("object kind", &ObjKind::ALL, r.u8()?);
    let result = match (status, sub) {
        (status::OK, tag::DONE) => Ok(CmdOut::Done),
        (status::OK, tag::CAPS) => Ok(CmdOut::Caps(get_caps(&mut r)?)),
        (status::OK, tag::UAR) => Ok(CmdOut::Uar(UarIndex::new(r.u32()?))),
        (status::OK, tag::PD) => Ok(CmdOut::Pd(Pdn::new(r.u32()?))),
        (status::OK, tag::MKEY) => Ok(CmdOut::Mkey(Mkey::from_raw(r.u32()?))),
        (status::OK, tag::CQ) => Ok(CmdOut::Cq(Cqn::new(r.u32()?))),
        (status::OK, tag::QP) => Ok(CmdOut::Qp(Qpn::new(r.u32()?))),
        (status::OK, tag::QP_INFO) => Ok(CmdOut::QpInfo {
            state: state(r.u8()?)?,
            attrs: get_attrs(&mut r)?,
        }),
        (status::OK, tag::SRQ) => Ok(CmdOut::Srq(Srqn::new(r.u32()?))),
        (status::OK, tag::SRQ_INFO) => Ok(CmdOut::SrqInfo { limit: r.u32()? }),
        (status::OK, tag::PORT_UP) => Ok(CmdOut::PortUp(r.u8()? != 0)),
        (status::OK, tag::EQ) => Ok(CmdOut::Eq(Eqn::new(r.u32()?))),
        (status::NO_RESOURCES, detail::EXHAUSTED) => Err(CmdError::Exhausted(kind(&mut r)?)),
        (status::BAD_RESOURCE, detail::NO_SUCH_OBJECT) => Err(CmdError::NoSuchObject {
            kind: kind(&mut r)?,
            id: r.u32()?,
        }),
        (status::RESOURCE_BUSY, detail::BUSY) => Err(CmdError::Busy {
            kind: kind(&mut r)?,
            id: r.u32()?,
        }),
        (status::BAD_PARAM, detail::BAD_PARAM) => Err(CmdError::BadParam {
            name: from_index("parameter", &Param::ALL, r.u8()?)?,
            value: r.u64()?,
        }),
        (status::BAD_RES_STATE, detail::BAD_TRANSITION) => Err(CmdError::BadTransition {
            qpn: r.u32()?,
            from: state(r.u8()?)?,
            to: state(r.u8()?)?,
        }),
        (status::BAD_PARAM, d @ (detail::MISSING_ATTR | detail::EXTRA_ATTR)) => {
            let qpn = r.u32()?;
            let transition = from_index("transition", &Transition::ALL, r.u8()?)?;
            let attr = from_index("attribute", &QpAttr::ALL, r.u8()?)?;
            Err(if d == detail::MISSING_ATTR {
                CmdError::MissingAttr {
                    qpn,
                    transition,
                    attr,
                }
            } else {
                CmdError::ExtraAttr {
                    qpn,
                    transition,
                    attr,
                }
            })
        }
        (status::INTERNAL_ERR, detail::DEVICE_GONE) => Err(CmdError::DeviceGone),
        (s, d) => return unknown("status and detail", u32::from(s) << 8 | u32::from(d)),
    };
    r.end()?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes_of_alloc_pd_and_its_answer() {
        let mut b = Vec::new();
        Command::DeallocPd(Pdn::new(0x1234)).encode(&mut b);
        assert_eq!(b, [0x08, 0x01, 0, 0, 0, 0, 0x12, 0x34]);
        let mut b = Vec::new();
        encode_result(
            &Err(CmdError::Busy {
                kind: ObjKind::Pd,
                id: 7,
            }),
            &mut b,
        );
        assert_eq!(b, [0x06, 0, 0, 0, detail::BUSY, 1, 0, 0, 0, 7]);
    }

    #[test]
    fn modify_qp_carries_the_target_state_in_op_mod() {
        let mut b = Vec::new();
        Command::ModifyQp {
            qpn: Qpn::new(0x100),
            state: QpState::Rts,
            attrs: QpAttrs::default(),
        }
        .encode(&mut b);
        assert_eq!(b, [0x05, 0xff, 0, 3, 0, 0, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn bad_bytes_are_errors() {
        assert_eq!(Command::decode(&[0x08]), Err(DecodeError::Truncated));
        assert_eq!(
            Command::decode(&[0x08, 0x02, 0, 0, 9]),
            Err(DecodeError::Trailing(1))
        );
        assert!(matches!(
            Command::decode(&[0x12, 0x34, 0, 0]),
            Err(DecodeError::Unknown { value: 0x1234, .. })
        ));
        // A CREATE_MKEY claiming 2^32-1 MTT entries in a few bytes.
        let mut b = vec![0x02, 0x00, 0, 0];
        b.extend_from_slice(&[0; 24]);
        b.extend_from_slice(&[0xff; 4]);
        assert_eq!(Command::decode(&b), Err(DecodeError::BadLength(u32::MAX)));
        assert!(decode_result(&[0x42, 0, 0, 0, 0]).is_err());
        // ARM_RQ of an RQ (op_mod 0) is not a doorbell command.
        assert!(matches!(
            Command::decode(&[0x07, 0x03, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]),
            Err(DecodeError::Unknown { value: 0, .. })
        ));
    }

    #[test]
    fn srq_commands_use_the_prm_opcodes() {
        let bytes = |c: Command| {
            let mut b = Vec::new();
            c.encode(&mut b);
            b
        };
        let s = Srqn::new(0x12);
        assert_eq!(
            bytes(Command::ModifySrq { srqn: s, limit: 5 }),
            [0x07, 0x03, 0, 1, 0, 0, 0, 0x12, 0, 0, 0, 5]
        );
        assert_eq!(bytes(Command::QuerySrq(s))[..4], [0x07, 0x02, 0, 0]);
        assert_eq!(bytes(Command::DestroySrq(s))[..4], [0x07, 0x01, 0, 0]);
        let create = Command::CreateSrq(SrqParams {
            pd: Pdn::new(1),
            log_size: 4,
            log_stride: 1,
            dbr_addr: HostAddr::new(0x1000),
            pas: vec![HostAddr::new(0x2000)],
        });
        assert_eq!(bytes(create)[..4], [0x07, 0x00, 0, 0]);
        let resize = Command::ResizeCq {
            cqn: Cqn::new(3),
            log_size: 7,
            pas: vec![],
        };
        assert_eq!(bytes(resize), [0x04, 0x03, 0, 1, 0, 0, 0, 3, 7, 0, 0, 0, 0]);
    }
}
