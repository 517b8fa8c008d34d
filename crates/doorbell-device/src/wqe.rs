//! Send WQEs as the device reads them: control, datagram, remote-address,
//! atomic, inline and data segments (mlx5 reference §5), checked and
//! parsed into one [`Wqe`].

use doorbell_hif::QpType;
use doorbell_layout::cqe::Syndrome;
use doorbell_layout::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, WqeOpcode,
};

use crate::wq::{Payload, Sge, Spares};

/// A parsed send WQE.
pub(crate) struct Wqe {
    pub(crate) index: u16,
    pub(crate) opcode: WqeOpcode,
    pub(crate) fm_ce_se: u8,
    pub(crate) imm: u32,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) ud: Option<UdDest>,
    pub(crate) payload: Payload,
}

#[derive(Clone, Copy)]
pub(crate) struct UdDest {
    pub(crate) qkey: u32,
    pub(crate) dqpn: u32,
    pub(crate) dgid: [u8; 16],
}

/// Parses the `ds` 16-byte segments of a send WQE for a QP of type `ty`,
/// its payload's storage taken from `spares`.
pub(crate) fn parse_wqe(b: &[u8], ty: QpType, spares: &mut Spares) -> Result<Wqe, Syndrome> {
    let ctrl = CtrlSeg::new_unchecked(&b[..wqe::field::CTRL_LEN]);
    let opcode = ctrl.opcode();
    let (mut raddr, mut rkey, mut swap_add, mut compare, mut ud) = (0, 0, 0, 0, None);
    let mut off = wqe::field::CTRL_LEN;
    let seg = |off: usize, len: usize| b.get(off..off + len).ok_or(Syndrome::LocalQpOpErr);
    // A NOP needs no address, on UD as on the others; it carries none.
    if ty == QpType::Ud && opcode != WqeOpcode::Nop {
        let av = DatagramSeg::new_unchecked(seg(off, wqe::field::AV_LEN)?);
        ud = Some(UdDest {
            qkey: av.qkey(),
            dqpn: av.dqpn(),
            dgid: av.rgid(),
        });
        off += wqe::field::AV_LEN;
    }
    let mut remote = |off: &mut usize| -> Result<(), Syndrome> {
        let r = RaddrSeg::new_unchecked(seg(*off, wqe::field::RADDR_LEN)?);
        (raddr, rkey) = (r.raddr(), r.rkey());
        *off += wqe::field::RADDR_LEN;
        Ok(())
    };
    let payload = match (opcode, ty) {
        (WqeOpcode::Nop, _) => None,
        (WqeOpcode::Send | WqeOpcode::SendImm, _) => Some(off),
        (WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm, QpType::Rc | QpType::Uc)
        | (WqeOpcode::RdmaRead, QpType::Rc) => {
            remote(&mut off)?;
            Some(off)
        }
        (WqeOpcode::AtomicCs | WqeOpcode::AtomicFa, QpType::Rc) => {
            remote(&mut off)?;
            let a = AtomicSeg::new_unchecked(seg(off, wqe::field::ATOMIC_LEN)?);
            (swap_add, compare) = (a.swap_add(), a.compare());
            off += wqe::field::ATOMIC_LEN;
            Some(off)
        }
        _ => return Err(Syndrome::LocalQpOpErr),
    };
    let payload = match payload {
        // A NOP carries nothing.
        None => Payload::Sges(Vec::new()),
        Some(off) => parse_data(b, off, spares)?,
    };
    // Built in one go, once its payload is known: a Wqe is moved on
    // whole, and one written field by field just before would be read
    // back through stores still on their way.
    Ok(Wqe {
        index: ctrl.wqe_index(),
        opcode,
        fm_ce_se: ctrl.fm_ce_se(),
        imm: ctrl.imm(),
        raddr,
        rkey,
        swap_add,
        compare,
        ud,
        payload,
    })
}

/// The data of a WQE from byte `off`: one inline segment, or data segments
/// to the end of the WQE.
fn parse_data(b: &[u8], mut off: usize, spares: &mut Spares) -> Result<Payload, Syndrome> {
    if off + wqe::field::INLINE_HDR_LEN <= b.len()
        && InlineSeg::new_unchecked(&b[off..]).is_inline()
    {
        let n = InlineSeg::new_unchecked(&b[off..]).byte_count() as usize;
        let start = off + wqe::field::INLINE_HDR_LEN;
        let data = b.get(start..start + n).ok_or(Syndrome::LocalLengthErr)?;
        return Ok(Payload::Inline(spares.inline(data)));
    }
    let mut sges = spares.sges();
    while off + wqe::field::DATA_LEN <= b.len() {
        let d = DataSeg::new_unchecked(&b[off..off + wqe::field::DATA_LEN]);
        sges.push(Sge {
            lkey: d.lkey(),
            addr: d.addr(),
            len: d.byte_count(),
        });
        off += wqe::field::DATA_LEN;
    }
    Ok(Payload::Sges(sges))
}
