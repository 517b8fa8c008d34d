//! MMIO into UAR pages, and the doorbells a device takes from records
//! (`Nic::handle_mmio`, `Nic::handle_record_doorbell`).

use doorbell_host::{HostMemory, RecordDoorbell};
use doorbell_layout::dbr;
use doorbell_layout::wqe::WQEBB_LEN;
use doorbell_types::{Cqn, Duration, HostAddr, Qpn, UarIndex};

use crate::input::Input;
use crate::rig::Rig;

/// Steps [`uar_mmio`] runs at most.
pub const MAX_STEPS: usize = 64;

/// What one step of [`uar_mmio`] does, by its first byte (mod 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// An MMIO write: a UAR choice byte (0 the rig's, 1 the next one, else
    /// a `u32` index follows), the offset (`u32`), then the data as a
    /// length byte and bytes.
    Mmio = 0,
    /// A doorbell from a record: a byte (bit 0: send, else arm; bit 1: the
    /// UAR is the rig's, else the next one), then a QP or CQ choice byte
    /// (0, 1: the rig's; else a `u32` number follows).
    Record = 1,
    /// A record word written by the host: a byte choosing QP 0's receive or
    /// send counter, QP 1's, or the CQ's consumer index or arm word (mod
    /// 6), and the `u32`.
    RecordWord = 2,
    /// A WQEBB written into a send queue: the QP (bit 0), the slot (`u8`),
    /// then 64 bytes.
    Wqebb = 3,
    /// Time moves on by a `u16` of microseconds, and timers fire.
    Advance = 4,
}

/// Target `uar_mmio`: up to [`MAX_STEPS`] [`Step`]s on a rig, each with any
/// UAR index, offset, length and data; the NIC's outputs are drained after
/// each. Nothing may panic.
pub fn uar_mmio(data: &[u8]) {
    let mut input = Input::new(data);
    let mut rig = Rig::new();
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 5 {
            0 => {
                let uar = uar_choice(&rig, &mut input);
                let offset = input.u32();
                let bytes = input.short_bytes();
                rig.mmio(uar, offset, bytes);
            }
            1 => {
                let b = input.u8();
                let uar = if b & 2 != 0 {
                    rig.uar
                } else {
                    UarIndex::new(rig.uar.get().wrapping_add(1))
                };
                let which = input.u8();
                let db = if b & 1 != 0 {
                    RecordDoorbell::Send(match which {
                        0 | 1 => rig.qps[usize::from(which)].qpn,
                        _ => Qpn::new(input.u32()),
                    })
                } else {
                    RecordDoorbell::Arm(match which {
                        0 | 1 => rig.cq,
                        _ => Cqn::new(input.u32()),
                    })
                };
                let now = rig.now;
                rig.nic.handle_record_doorbell(now, uar, db, &mut rig.bus);
            }
            2 => {
                let which = input.u8() % 6;
                let v = input.u32();
                let (base, word) = match which {
                    0 => (rig.qps[0].dbr, dbr::RCV_DBR),
                    1 => (rig.qps[0].dbr, dbr::SND_DBR),
                    2 => (rig.qps[1].dbr, dbr::RCV_DBR),
                    3 => (rig.qps[1].dbr, dbr::SND_DBR),
                    4 => (rig.cq_dbr, dbr::CQ_SET_CI),
                    _ => (rig.cq_dbr, dbr::CQ_ARM_DB),
                };
                let at = HostAddr::new(base.get() + (word * 4) as u64);
                rig.mem.write_be32(at, v).expect("record");
            }
            3 => {
                let i = usize::from(input.u8() & 1);
                let slot = u16::from(input.u8());
                let bb = input.array::<WQEBB_LEN>();
                rig.write_sq(i, slot, &bb);
            }
            _ => rig.advance(Duration::from_us(u64::from(input.u16()))),
        }
        rig.drain();
    }
}

fn uar_choice(rig: &Rig, input: &mut Input<'_>) -> UarIndex {
    match input.u8() {
        0 => rig.uar,
        1 => UarIndex::new(rig.uar.get().wrapping_add(1)),
        _ => UarIndex::new(input.u32()),
    }
}
