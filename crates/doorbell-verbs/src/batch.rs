//! Send WRs built a call at a time and posted together: the model of
//! libibverbs' `ibv_wr_*` API (`ibv_wr_start`, `ibv_wr_<opcode>`,
//! `ibv_wr_set_*`, `ibv_wr_complete`), and a list that owns its SGEs and
//! inline bytes, which `ibv_post_send`'s chain of C structs becomes.
//!
//! A [`SendBatch`] keeps its memory when it is cleared, so a program that
//! posts through one batch allocates nothing once the batch has held its
//! largest list. Inline data is copied into the batch when it is set (the
//! caller may reuse its buffer at once, as `ibv_wr_set_inline_data`
//! promises) and from there into the WQE when the batch is posted.

use std::ops::Range;

use crate::error::VerbsError;
use crate::mr::Sge;
use crate::qp::{PostWr, Qp, SendData, SendFlags, UdTarget, WrOpcode};
use crate::wr::PostError;

/// Send WRs waiting to be posted together ([`Qp::post_batch`]).
///
/// Built either a WR at a time ([`SendBatch::push`]), or as the `ibv_wr_*`
/// calls build one: [`SendBatch::begin`] starts a WR, and the setters fill
/// in the WR begun last. A setter that fails leaves the batch as it was.
#[derive(Debug, Clone, Default)]
pub struct SendBatch {
    wrs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Pending {
    wr_id: u64,
    flags: SendFlags,
    opcode: WrOpcode,
    data: Data,
    ud: Option<UdTarget>,
}

/// A WR's payload: a range of the batch's SGEs or of its inline bytes.
#[derive(Debug, Clone)]
enum Data {
    Sges(Range<usize>),
    Inline(Range<usize>),
}

const NOTHING_BEGUN: VerbsError = VerbsError::InvalidArgument("no WR begun in the batch");

impl SendBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
    }

    /// Number of WRs in the batch.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch holds no WR.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Appends a whole WR: `data`'s SGEs, or its bytes, are copied into
    /// the batch. Fails, adding nothing, if inline bytes are given for a
    /// READ or an atomic.
    pub fn push(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        opcode: WrOpcode,
        ud: Option<UdTarget>,
        data: SendData<'_>,
    ) -> Result<(), VerbsError> {
        let data = match data {
            SendData::Sges(l) => {
                let at = self.sges.len();
                self.sges.extend_from_slice(l);
                Data::Sges(at..self.sges.len())
            }
            SendData::Inline(b) => {
                if !opcode.carries_payload() {
                    return Err(VerbsError::InvalidArgument(
                        "READs and atomics carry no inline data",
                    ));
                }
                let at = self.inline.len();
                self.inline.extend_from_slice(b);
                Data::Inline(at..self.inline.len())
            }
        };
        self.wrs.push(Pending {
            wr_id,
            flags,
            opcode,
            data,
            ud,
        });
        Ok(())
    }

    /// Begins a WR with no payload yet (`ibv_wr_<opcode>`, with the
    /// `wr_id` and `wr_flags` the caller set).
    pub fn begin(&mut self, wr_id: u64, flags: SendFlags, opcode: WrOpcode) {
        let at = self.sges.len();
        self.wrs.push(Pending {
            wr_id,
            flags,
            opcode,
            data: Data::Sges(at..at),
            ud: None,
        });
    }

    /// The WR begun last; the batch's SGEs and bytes after its own are
    /// none (each setter replaces the payload of that WR only).
    fn last(&mut self) -> Result<&mut Pending, VerbsError> {
        self.wrs.last_mut().ok_or(NOTHING_BEGUN)
    }

    /// Drops the payload of the WR begun last, which is the batch's last
    /// SGEs or bytes.
    fn drop_payload(&mut self) -> Result<(), VerbsError> {
        let w = self.wrs.last().ok_or(NOTHING_BEGUN)?;
        match &w.data {
            Data::Sges(r) => self.sges.truncate(r.start),
            Data::Inline(r) => self.inline.truncate(r.start),
        }
        Ok(())
    }

    /// Keeps the first `len` WRs and drops the rest, with their payloads.
    pub fn truncate(&mut self, len: usize) {
        self.wrs.truncate(len);
        let (mut sges, mut inline) = (0, 0);
        for w in &self.wrs {
            match &w.data {
                Data::Sges(r) => sges = r.end,
                Data::Inline(r) => inline = r.end,
            }
        }
        self.sges.truncate(sges);
        self.inline.truncate(inline);
    }

    /// Sets the WR's payload to one SGE (`ibv_wr_set_sge`).
    pub fn set_sge(&mut self, sge: Sge) -> Result<(), VerbsError> {
        self.set_sge_list([sge])
    }

    /// Sets the WR's payload to SGEs (`ibv_wr_set_sge_list`).
    pub fn set_sge_list(&mut self, list: impl IntoIterator<Item = Sge>) -> Result<(), VerbsError> {
        self.drop_payload()?;
        let at = self.sges.len();
        self.sges.extend(list);
        let end = self.sges.len();
        self.last()?.data = Data::Sges(at..end);
        Ok(())
    }

    /// Sets the WR's payload to a copy of `bytes`, sent inline
    /// (`ibv_wr_set_inline_data`).
    pub fn set_inline_data(&mut self, bytes: &[u8]) -> Result<(), VerbsError> {
        self.set_inline_data_list([bytes])
    }

    /// Sets the WR's payload to a copy of `pieces`, one after another, sent
    /// inline (`ibv_wr_set_inline_data_list`). Fails for a READ or an
    /// atomic.
    pub fn set_inline_data_list<'b>(
        &mut self,
        pieces: impl IntoIterator<Item = &'b [u8]>,
    ) -> Result<(), VerbsError> {
        if !self.last()?.opcode.carries_payload() {
            return Err(VerbsError::InvalidArgument(
                "READs and atomics carry no inline data",
            ));
        }
        self.drop_payload()?;
        let at = self.inline.len();
        for p in pieces {
            self.inline.extend_from_slice(p);
        }
        let end = self.inline.len();
        self.last()?.data = Data::Inline(at..end);
        Ok(())
    }

    /// Sets the WR's UD destination (`ibv_wr_set_ud_addr`).
    pub fn set_ud_addr(&mut self, ud: UdTarget) -> Result<(), VerbsError> {
        self.last()?.ud = Some(ud);
        Ok(())
    }

    /// The WRs, in order, as the provider posts them.
    fn iter(&self) -> impl Iterator<Item = PostWr<'_>> {
        self.wrs.iter().map(|w| PostWr {
            wr_id: w.wr_id,
            data: match &w.data {
                Data::Sges(r) => SendData::Sges(&self.sges[r.clone()]),
                Data::Inline(r) => SendData::Inline(&self.inline[r.clone()]),
            },
            opcode: w.opcode,
            flags: w.flags,
            ud: w.ud,
        })
    }
}

impl Qp {
    /// Posts the batch's WRs (`ibv_wr_complete`), as
    /// [`Qp::post_send_list`] posts a list: one doorbell, the WRs before a
    /// failing one posted. The batch is left as it was; clear it to reuse
    /// it.
    pub fn post_batch(&self, batch: &SendBatch) -> Result<(), PostError> {
        self.post_send_iter(batch.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_types::Mkey;

    fn sge(addr: u64) -> Sge {
        Sge {
            addr,
            length: 8,
            lkey: Mkey::from_raw(7),
        }
    }

    fn data(b: &SendBatch) -> Vec<String> {
        b.iter()
            .map(|w| match w.data {
                SendData::Sges(l) => format!(
                    "{}:sges{:?}",
                    w.wr_id,
                    l.iter().map(|s| s.addr).collect::<Vec<_>>()
                ),
                SendData::Inline(i) => format!("{}:inline{i:?}", w.wr_id),
            })
            .collect()
    }

    #[test]
    fn each_setter_replaces_only_the_payload_of_the_wr_begun_last() {
        let mut b = SendBatch::new();
        assert_eq!(b.set_sge(sge(1)), Err(NOTHING_BEGUN), "nothing begun");
        b.begin(1, SendFlags::default(), WrOpcode::Send);
        b.set_sge_list([sge(1), sge(2)]).unwrap();
        b.begin(2, SendFlags::default(), WrOpcode::Send);
        b.set_inline_data(b"ab").unwrap();
        b.set_inline_data_list([&b"cd"[..], b"e"]).unwrap();
        b.begin(3, SendFlags::default(), WrOpcode::Send);
        b.set_inline_data(b"xy").unwrap();
        b.set_sge(sge(3)).unwrap();
        assert_eq!(
            data(&b),
            ["1:sges[1, 2]", "2:inline[99, 100, 101]", "3:sges[3]"]
        );
        assert_eq!(b.inline, b"cde", "replaced bytes are not kept");
        assert_eq!(b.sges.len(), 3, "replaced SGEs are not kept");
    }

    #[test]
    fn reads_and_atomics_take_no_inline_data_and_a_refused_call_changes_nothing() {
        let mut b = SendBatch::new();
        let read = WrOpcode::RdmaRead(crate::RemoteAddr {
            addr: 0,
            rkey: Mkey::from_raw(1),
        });
        b.begin(1, SendFlags::default(), read);
        b.set_sge(sge(9)).unwrap();
        assert!(b.set_inline_data(b"no").is_err());
        assert!(
            b.push(2, SendFlags::default(), read, None, SendData::Inline(b"no"))
                .is_err()
        );
        assert_eq!(data(&b), ["1:sges[9]"]);
        assert!(b.inline.is_empty());
    }

    #[test]
    fn a_truncated_batch_drops_the_wrs_after_and_their_payloads() {
        let mut b = SendBatch::new();
        b.push(
            1,
            SendFlags::default(),
            WrOpcode::Send,
            None,
            SendData::Sges(&[sge(1)]),
        )
        .unwrap();
        b.push(
            2,
            SendFlags::default(),
            WrOpcode::Send,
            None,
            SendData::Inline(b"ab"),
        )
        .unwrap();
        b.begin(3, SendFlags::default(), WrOpcode::Send);
        b.set_sge_list([sge(2), sge(3)]).unwrap();
        b.begin(4, SendFlags::default(), WrOpcode::Send);
        b.set_inline_data(b"cd").unwrap();
        b.truncate(2);
        assert_eq!(data(&b), ["1:sges[1]", "2:inline[97, 98]"]);
        assert_eq!((b.sges.len(), b.inline.len()), (1, 2));
        b.begin(5, SendFlags::default(), WrOpcode::Send);
        b.set_sge(sge(5)).unwrap();
        assert_eq!(data(&b)[2], "5:sges[5]");
        b.truncate(0);
        assert!(b.is_empty() && b.sges.is_empty() && b.inline.is_empty());
    }

    #[test]
    fn a_cleared_batch_keeps_its_memory() {
        let fill = |b: &mut SendBatch| {
            for i in 0..16 {
                let data = SendData::Inline(&[0; 64]);
                b.push(i, SendFlags::INLINE, WrOpcode::Send, None, data)
                    .unwrap();
            }
        };
        let mut b = SendBatch::new();
        fill(&mut b);
        let (wrs, bytes) = (b.wrs.capacity(), b.inline.capacity());
        b.clear();
        assert!(b.is_empty());
        fill(&mut b);
        assert_eq!((b.wrs.capacity(), b.inline.capacity()), (wrs, bytes));
    }
}
