//! Any bytes in a send or a receive queue: the device's WQE parser
//! (`doorbell_device`'s send engine and receive path), reached as a
//! provider reaches it, by doorbells and by the peer's requests.

use doorbell_host::RecordDoorbell;
use doorbell_layout::uar::{BF_BUF_SIZE, BF_CHUNK, DOORBELL_LEN};
use doorbell_layout::wqe::WQEBB_LEN;
use doorbell_types::{Duration, Psn};
use doorbell_wire::BthRepr;

use crate::frames::{ExtVals, Message, ext_for};
use crate::input::Input;
use crate::rig::{EPSN, REG, RQ_BYTES, RQ_WQES, Rig, SQ_WQEBBS};

/// How [`sq_wqe`] tells the device about the WQEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// An 8-byte doorbell: the first 8 bytes of the ring's first WQE.
    Doorbell = 0,
    /// A BlueFlame copy of the first WQE, in 64-byte chunks.
    BlueFlame = 1,
    /// A store the device did not see: it reads the send counter.
    Record = 2,
    /// The 8-byte doorbell twice.
    Twice = 3,
}

/// Timer steps after each post: an ACK timeout, a retry, and long after.
const STEPS_US: [u64; 3] = [100, 10_000, 1_000_000];

/// Target `sq_wqe`. Input: a flags byte (bit 0 the QP, bits 1-2 a
/// [`Ring`]), the WQE index the doorbell names (`u16`), how many WQEBBs the
/// send counter says were posted (mod 17), then the bytes written into the
/// send queue from that index on (wrapping). The device fetches and runs
/// them, and its timers run; nothing may panic.
pub fn sq_wqe(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let i = usize::from(flags & 1);
    let ring =
        [Ring::Doorbell, Ring::BlueFlame, Ring::Record, Ring::Twice][usize::from(flags >> 1) & 3];
    let index = input.u16();
    let posted = u16::from(input.u8()) % (SQ_WQEBBS + 1);
    let bytes = input.bytes(usize::from(SQ_WQEBBS) * WQEBB_LEN);

    let mut rig = Rig::new();
    rig.write_sq(i, index, bytes);
    rig.set_send_counter(i, index.wrapping_add(posted));
    let mut first = [0u8; BF_BUF_SIZE];
    let n = bytes.len().min(BF_BUF_SIZE);
    first[..n].copy_from_slice(&bytes[..n]);
    let (uar, qpn) = (rig.uar, rig.qps[i].qpn);
    match ring {
        Ring::Doorbell => rig.mmio(uar, REG, &first[..DOORBELL_LEN]),
        Ring::Twice => {
            rig.mmio(uar, REG, &first[..DOORBELL_LEN]);
            rig.drain();
            rig.mmio(uar, REG, &first[..DOORBELL_LEN]);
        }
        Ring::BlueFlame => {
            for (k, chunk) in first.chunks(BF_CHUNK).enumerate() {
                rig.mmio(uar, REG + (k * BF_CHUNK) as u32, chunk);
            }
        }
        Ring::Record => {
            let now = rig.now;
            rig.nic
                .handle_record_doorbell(now, uar, RecordDoorbell::Send(qpn), &mut rig.bus);
        }
    }
    settle(&mut rig);
}

/// Drains the NIC, consumes its CQEs, and runs its timers for a while.
fn settle(rig: &mut Rig) {
    rig.drain();
    rig.consume_cqes();
    for us in STEPS_US {
        rig.advance(Duration::from_us(us));
        rig.drain();
        rig.consume_cqes();
    }
}

/// Target `rq_wqe`. Input: a flags byte (bit 0 the QP, the rest a
/// [`Message`] kind, mod 5), how many receive WQEs the receive counter
/// says were posted (mod 9), how many messages the peer sends (mod 4, plus
/// one), the payload length (`u16`, mod 3073: up to three packets), an
/// immediate or key (`u32`), then the bytes written into the receive queue
/// from WQE 0 on. The peer's messages, in sequence and with a correct
/// ICRC, make the device fetch and scatter into those WQEs; nothing may
/// panic.
pub fn rq_wqe(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let i = usize::from(flags & 1);
    let kind = Message::ALL[usize::from(flags >> 1) % Message::ALL.len()];
    let posted = u16::from(input.u8()) % (RQ_WQES + 1);
    let messages = input.u8() % 4 + 1;
    let len = usize::from(input.u16()) % (3 * crate::frames::MTU + 1);
    let key = input.u32();
    let bytes = input.bytes(RQ_BYTES as usize);

    let mut rig = Rig::new();
    rig.write_rq(i, 0, bytes);
    rig.set_recv_counter(i, posted);
    let payload: Vec<u8> = (0..len).map(|b| b as u8).collect();
    let vals = ExtVals {
        va: rig.open_buf.get(),
        rkey: if kind == Message::SendInv {
            key
        } else {
            rig.open_mr.raw()
        },
        dma_len: len as u32,
        imm: key,
        ..ExtVals::default()
    };
    let mut psn = Psn::new(EPSN[i]);
    for _ in 0..messages {
        for (opcode, range) in kind.packets(len) {
            let mut bth = BthRepr::new(opcode, rig.qps[i].qpn, psn);
            bth.ack_req = true;
            let ext = ext_for(opcode, &vals);
            if let Some(f) = rig.peer_frame(i, bth, ext, &payload[range]) {
                rig.frame(&f);
            }
            rig.drain();
            psn = psn.add(1);
        }
        rig.consume_cqes();
    }
    settle(&mut rig);
}
