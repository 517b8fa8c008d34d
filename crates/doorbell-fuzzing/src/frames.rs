//! Requests a peer sends, built from a few choices: the extension headers
//! an opcode calls for, and a message cut into packets at the path MTU.

use std::ops::Range;

use doorbell_types::{Qpn, Rkey};
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthOpcode, DethRepr, ExtHeaders,
    IethRepr, ImmDtRepr, RethRepr,
};

/// The path MTU of the rig's QPs.
pub const MTU: usize = 1024;

/// Values for every extension header; [`ext_for`] takes those an opcode
/// calls for.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtVals {
    /// RETH and AtomicETH virtual address.
    pub va: u64,
    /// RETH, AtomicETH and IETH key.
    pub rkey: u32,
    /// RETH DMA length.
    pub dma_len: u32,
    /// AtomicETH swap or add operand.
    pub swap_add: u64,
    /// AtomicETH compare operand.
    pub compare: u64,
    /// AETH syndrome byte; a reserved one becomes an ACK.
    pub syndrome: u8,
    /// AETH MSN (24 bits).
    pub msn: u32,
    /// AtomicAckETH original value.
    pub orig: u64,
    /// Immediate data.
    pub imm: u32,
    /// DETH Q_Key.
    pub qkey: u32,
    /// DETH source QP.
    pub src_qp: u32,
}

/// The extension headers `opcode` calls for, filled from `v`.
pub fn ext_for(opcode: BthOpcode, v: &ExtVals) -> ExtHeaders {
    let mut ext = ExtHeaders::NONE;
    if opcode.has_deth() {
        ext.deth = Some(DethRepr {
            qkey: v.qkey,
            src_qp: Qpn::new(v.src_qp & 0x00ff_ffff),
        });
    }
    if opcode.has_reth() {
        ext.reth = Some(RethRepr {
            va: v.va,
            rkey: Rkey::from_raw(v.rkey),
            dma_len: v.dma_len,
        });
    }
    if opcode.has_atomic_eth() {
        ext.atomic_eth = Some(AtomicEthRepr {
            va: v.va,
            rkey: Rkey::from_raw(v.rkey),
            swap_add: v.swap_add,
            compare: v.compare,
        });
    }
    if opcode.has_aeth() {
        ext.aeth = Some(AethRepr {
            syndrome: AethSyndrome::decode(v.syndrome)
                .unwrap_or(AethSyndrome::Ack { credits: 0x1f }),
            msn: v.msn & 0x00ff_ffff,
        });
    }
    if opcode.has_atomic_ack_eth() {
        ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig: v.orig });
    }
    if opcode.has_immdt() {
        ext.immdt = Some(ImmDtRepr { imm: v.imm });
    }
    if opcode.has_ieth() {
        ext.ieth = Some(IethRepr {
            rkey: Rkey::from_raw(v.rkey),
        });
    }
    ext
}

/// A message a responder receives, by its last packet's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendImm,
    /// SEND with invalidate.
    SendInv,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate data.
    WriteImm,
}

impl Message {
    /// Every kind, by its number.
    pub const ALL: [Self; 5] = [
        Self::Send,
        Self::SendImm,
        Self::SendInv,
        Self::Write,
        Self::WriteImm,
    ];

    /// The RC opcodes of an only, first, middle and last packet.
    fn opcodes(self) -> [BthOpcode; 4] {
        use BthOpcode as O;
        match self {
            Self::Send => [
                O::RcSendOnly,
                O::RcSendFirst,
                O::RcSendMiddle,
                O::RcSendLast,
            ],
            Self::SendImm => [
                O::RcSendOnlyWithImmediate,
                O::RcSendFirst,
                O::RcSendMiddle,
                O::RcSendLastWithImmediate,
            ],
            Self::SendInv => [
                O::RcSendOnlyWithInvalidate,
                O::RcSendFirst,
                O::RcSendMiddle,
                O::RcSendLastWithInvalidate,
            ],
            Self::Write => [
                O::RcRdmaWriteOnly,
                O::RcRdmaWriteFirst,
                O::RcRdmaWriteMiddle,
                O::RcRdmaWriteLast,
            ],
            Self::WriteImm => [
                O::RcRdmaWriteOnlyWithImmediate,
                O::RcRdmaWriteFirst,
                O::RcRdmaWriteMiddle,
                O::RcRdmaWriteLastWithImmediate,
            ],
        }
    }

    /// The message of `len` bytes cut into packets of [`MTU`]: each
    /// packet's opcode and the range of the message it carries.
    pub fn packets(self, len: usize) -> Vec<(BthOpcode, Range<usize>)> {
        let [only, first, middle, last] = self.opcodes();
        if len <= MTU {
            return vec![(only, 0..len)];
        }
        let n = len.div_ceil(MTU);
        (0..n)
            .map(|k| {
                let op = match k {
                    0 => first,
                    k if k + 1 == n => last,
                    _ => middle,
                };
                (op, k * MTU..((k + 1) * MTU).min(len))
            })
            .collect()
    }
}
