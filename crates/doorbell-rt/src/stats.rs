//! What a live NIC counted, as a report: the bus crossings in total and per
//! QP (MMIO writes and bytes, DMA reads and writes by purpose, TLPs by
//! kind), the packets and retransmissions, the kernel-named `hw_counters`
//! and the UDP port's counters. [`NicStats::to_json`] is the statistics
//! file the C library writes at exit (`DOORBELL_STATS`), and
//! [`NicStats::to_table`] the short table it prints for `-`.

use std::fmt::Write as _;

use doorbell_pcie::{Counters, DmaPurpose};
use serde_json::{Map, Value, json};

pub use crate::inbox::BusSnapshot;
use crate::udp::PortCounters;

/// Everything one NIC counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicStats {
    /// The device name.
    pub name: String,
    /// The port's IPv4 address.
    pub addr: [u8; 4],
    /// Bus and device counters.
    pub bus: BusSnapshot,
    /// The UDP port's counters (zero on the in-process fabric).
    pub port: PortCounters,
}

fn by_purpose(v: &[u64; doorbell_pcie::PURPOSES]) -> Value {
    let mut m = Map::new();
    for p in DmaPurpose::ALL {
        m.insert(p.name().into(), json!(v[p as usize]));
    }
    Value::Object(m)
}

fn bus_json(c: &Counters) -> Value {
    json!({
        "mmio_writes": c.mmio_writes,
        "mmio_bytes": c.mmio_bytes,
        "dma_reads": by_purpose(&c.dma_reads),
        "dma_read_bytes": by_purpose(&c.dma_read_bytes),
        "dma_writes": by_purpose(&c.dma_writes),
        "dma_write_bytes": by_purpose(&c.dma_write_bytes),
        "tlps": { "mwr": c.mwr_tlps(), "mrd": c.mrd_tlps, "cpld": c.cpld_tlps },
    })
}

impl NicStats {
    /// The report as JSON: `device`, `address`, `total` and `qps` (bus
    /// counters), `packets` (`tx`, `rx`, `retransmits`), `hw_counters` and
    /// `port`.
    pub fn to_json(&self) -> String {
        let n = &self.bus.nic;
        let mut hw = Map::new();
        for (k, v) in n.hw_counters() {
            hw.insert(k.into(), json!(v));
        }
        let qps: Vec<Value> = self
            .bus
            .qps
            .iter()
            .map(|(q, c)| {
                let mut v = bus_json(c);
                v["qpn"] = json!(q.get());
                v
            })
            .collect();
        let p = &self.port;
        let doc = json!({
            "device": self.name,
            "address": std::net::Ipv4Addr::from(self.addr).to_string(),
            "total": bus_json(&self.bus.total),
            "qps": qps,
            "packets": {
                "tx": n.tx_packets,
                "rx": n.rx_packets,
                "retransmits": n.tx_retransmits,
                "rx_dropped": n.rx_dropped,
                "rx_icrc_errors": n.rx_icrc_errors,
                "acks_coalesced": n.acks_coalesced,
            },
            "doorbells": {
                "bad": n.bad_doorbells,
                "not_ready": n.doorbells_not_ready,
                "by_record": n.doorbells_by_record,
                "arms_by_record": n.arms_by_record,
                // Doorbells taken from records were not seen on the bus:
                // each is counted as one 8-byte store, the least it can
                // have been.
                "mmio": if n.doorbells_by_record + n.arms_by_record == 0 {
                    "observed"
                } else {
                    "observed, except the doorbells taken from records: counted as one 8-byte store \
                     each, whether doorbell or BlueFlame, and how many stores were coalesced, not known"
                },
            },
            "hw_counters": Value::Object(hw),
            "port": {
                "tx_datagrams": p.tx_datagrams,
                "tx_refused": p.tx_refused,
                "tx_payload_lost": p.tx_payload_lost,
                "rx_datagrams": p.rx_datagrams,
                "rx_truncated": p.rx_truncated,
                "rx_socket_drops": p.rx_socket_drops,
                "rx_left_to_polls": p.rx_left_to_polls,
                "rx_left_to_polls_us": p.rx_left_to_polls_us,
                "rx_called_back": p.rx_called_back,
                "rx_looked": p.rx_looked,
                "rx_trains": p.rx_trains,
                "shm_tx_frames": p.shm_tx_frames,
                "shm_rx_frames": p.shm_rx_frames,
                "shm_tx_full_drops": p.shm_tx_full_drops,
                "shm_tx_stalls": p.shm_tx_stalls,
                "shm_rx_dropped": p.shm_rx_dropped,
                "shm_rings_broken": p.shm_rings_broken,
                "shm_peers_out": p.shm_peers_out,
                "shm_peers_in": p.shm_peers_in,
                "shm_peers_refused": p.shm_peers_refused,
                "shm_bells": p.shm_bells,
                "shm_bells_spared": p.shm_bells_spared,
                "shm_lingers_paid": p.shm_lingers_paid,
            },
        });
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    }

    /// A short table: one line per QP and the total.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "doorbell: {} at {}: {} packets out ({} retransmitted), {} in",
            self.name,
            std::net::Ipv4Addr::from(self.addr),
            self.bus.nic.tx_packets,
            self.bus.nic.tx_retransmits,
            self.bus.nic.rx_packets
        );
        let _ = writeln!(
            s,
            "{:>10} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "qp", "MMIO", "MMIO B", "WQE rd", "data rd", "CQE wr", "MWr", "MRd", "CplD", "DMA B"
        );
        let line = |s: &mut String, what: String, c: &Counters| {
            let _ = writeln!(
                s,
                "{:>10} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
                what,
                c.mmio_writes,
                c.mmio_bytes,
                c.reads(DmaPurpose::SendWqe),
                c.reads(DmaPurpose::Payload),
                c.writes(DmaPurpose::Cqe),
                c.mwr_tlps(),
                c.mrd_tlps,
                c.cpld_tlps,
                c.total_read_bytes() + c.total_write_bytes()
            );
        };
        for (q, c) in &self.bus.qps {
            line(&mut s, format!("{:#x}", q.get()), c);
        }
        line(&mut s, "total".into(), &self.bus.total);
        let t = &self.bus.total;
        let _ = writeln!(
            s,
            "{:>10} {} EQE writes, {} MSI-X interrupts (the NIC's, not any one QP's)",
            "events",
            t.writes(DmaPurpose::Eqe),
            t.writes(DmaPurpose::Msix)
        );
        let p = &self.port;
        let _ = writeln!(
            s,
            "{:>10} UDP {} datagrams out, {} in; shared memory {} frames out, {} in, \
             {} bells rung, {} spared, {} answers waited for",
            "port",
            p.tx_datagrams,
            p.rx_datagrams,
            p.shm_tx_frames,
            p.shm_rx_frames,
            p.shm_bells,
            p.shm_bells_spared,
            p.shm_lingers_paid
        );
        let noted: Vec<_> = self.counters().into_iter().filter(|c| c.1 != 0).collect();
        if !noted.is_empty() {
            let _ = writeln!(s, "counters that are not zero:");
        }
        for (name, v, what) in noted {
            let _ = writeln!(s, "{name:>30} {v:>10}  {what}");
        }
        s
    }

    /// Every counter a person reads, with what it means and its usual
    /// cause: the kernel's `hw_counters` under their names, then the
    /// device's own.
    pub fn counters(&self) -> Vec<(&'static str, u64, &'static str)> {
        let n = &self.bus.nic;
        let mut v: Vec<(&'static str, u64, &'static str)> = n
            .hw_counters()
            .into_iter()
            .map(|(name, value)| (name, value, explain(name)))
            .collect();
        v.extend([
            (
                "tx_retransmits",
                n.tx_retransmits,
                "packets sent again after a timeout or a NAK: loss on the path, or a peer slow to answer",
            ),
            (
                "rx_dropped",
                n.rx_dropped,
                "frames dropped as unparsable or for no QP here: a peer with a stale QPN, or not RoCEv2",
            ),
            (
                "bad_doorbells",
                n.bad_doorbells,
                "doorbells refused: an unknown QP, a UAR the QP does not ring through, or a counter out of the ring",
            ),
            (
                "doorbells_not_ready",
                n.doorbells_not_ready,
                "doorbells for a QP not yet in RTS: a post before the QP was connected",
            ),
            (
                "doorbells_by_record",
                n.doorbells_by_record,
                "send doorbells taken from doorbell records (a provider that maps UARs itself): counts inferred",
            ),
            (
                "arms_by_record",
                n.arms_by_record,
                "CQ arms taken from doorbell records",
            ),
            (
                "events_lost",
                n.events_lost,
                "events no EQ could take (full, or its EQE write faulted): an EQ not consumed fast enough",
            ),
            (
                "acks_coalesced",
                n.acks_coalesced,
                "ACKs folded into a later one before leaving: normal under load",
            ),
        ]);
        v
    }
}

/// A capture of the host interface ([`crate::LiveNic::capture`]) as JSON
/// lines, one per crossing, bytes in hex: `{"mmio":{"uar","offset","data"}}`,
/// `{"record":{"uar","send"|"arm"}}`, `{"read":{"qpn","what","data"}}` and
/// `{"write":{"qpn","what","data"}}`. Host addresses are left out, so that
/// two runs of one program compare equal where the device saw the same.
pub fn capture_json_lines(c: &[doorbell_pcie::Carried]) -> String {
    use doorbell_host::RecordDoorbell;
    use doorbell_pcie::Carried;
    let hex = |b: &[u8]| {
        b.iter().fold(String::new(), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
    };
    let mut out = String::new();
    for x in c {
        let v = match x {
            Carried::Mmio { uar, offset, data } => {
                json!({"mmio": {"uar": uar.get(), "offset": offset, "data": hex(data)}})
            }
            Carried::RecordDoorbell { uar, db } => match db {
                RecordDoorbell::Send(q) => json!({"record": {"uar": uar.get(), "send": q.get()}}),
                RecordDoorbell::Arm(c) => json!({"record": {"uar": uar.get(), "arm": c.get()}}),
            },
            Carried::Read { tag, data } => json!({"read": {
                "qpn": tag.qpn.map(|q| q.get()),
                "what": tag.purpose.name(),
                "data": hex(data),
            }}),
            Carried::Write { tag, data } => json!({"write": {
                "qpn": tag.qpn.map(|q| q.get()),
                "what": tag.purpose.name(),
                "data": hex(data),
            }}),
        };
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}

/// What a kernel-named `hw_counter` means, and its usual cause.
fn explain(name: &str) -> &'static str {
    match name {
        "duplicate_request" => {
            "requests received again (a retry of one already executed): the peer resent, because an ACK was lost or late"
        }
        "implied_nak_seq_err" => {
            "READ or atomic responses that skipped PSNs: responses lost on the way, so the requester retried"
        }
        "local_ack_timeout_err" => {
            "ACK timeouts with retries left: packets or ACKs lost, or a peer slower than the QP's timeout"
        }
        "out_of_buffer" => {
            "messages that found no receive WQE (RNR NAK sent, or a UD datagram dropped): the receiver posts too few receives"
        }
        "out_of_sequence" => {
            "packets received with a PSN ahead of the one expected: loss before them, answered with a NAK"
        }
        "packet_seq_err" => {
            "sequence-error NAKs received: the peer saw a gap in this side's packets"
        }
        "req_rnr_retries_exceeded" => {
            "WQEs failed for RNR retries exhausted: the peer never posted a receive in time"
        }
        "req_transport_retries_exceeded" => {
            "WQEs failed for transport retries exhausted: the peer is gone or the path drops everything"
        }
        "req_cqe_error" => {
            "send WRs completed with an error: see the CQE's status (the peer refused, or retries ran out)"
        }
        "req_cqe_flush_error" => {
            "send WRs flushed because their QP went to the error state after an earlier error"
        }
        "req_remote_access_errors" => {
            "remote access error NAKs received: a WRITE, READ or atomic with a bad rkey, outside the peer's MR or without its access right"
        }
        "req_remote_invalid_request" => {
            "invalid request NAKs received: the peer found a request malformed (lengths, an unaligned atomic, an opcode it does not take)"
        }
        "resp_cqe_error" => {
            "receive WRs completed with an error: see the CQE's status (a message too long for the buffer, a bad local key)"
        }
        "resp_cqe_flush_error" => "receive WRs flushed because their QP went to the error state",
        "resp_local_length_error" => {
            "messages longer than the receive buffers posted for them: the sender's message size and the receiver's buffers disagree"
        }
        "resp_remote_access_errors" => {
            "requests this side refused with a remote access error: the peer used a bad rkey, left the MR or lacked the access right"
        }
        "rnr_nak_retry_err" => {
            "RNR NAKs received and retried: the peer had no receive posted, and got one later"
        }
        "roce_adp_retrans" => {
            "resends started early, when an ACK was later than the measured round trip allows: a packet at the end of a message lost, a resend lost again, or a peer that paused"
        }
        "roce_adp_retrans_to" => {
            "ACK timeouts after early resends had not helped: the path lost the resends too, or the peer is gone"
        }
        "rx_atomic_requests" => "atomic requests this side executed as a responder",
        "rx_icrc_encapsulated" => {
            "RoCEv2 packets dropped for a bad ICRC: corrupted on the way (or by fault injection)"
        }
        "rx_read_requests" => "RDMA READ requests this side answered (retries included)",
        "rx_write_requests" => "RDMA WRITE requests this side executed",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_device::NicCounters;
    use doorbell_types::Qpn;

    #[test]
    fn the_report_names_every_purpose_qp_and_hw_counter() {
        let mut total = Counters {
            mmio_writes: 3,
            mmio_bytes: 24,
            cpld_tlps: 5,
            ..Counters::default()
        };
        total.dma_reads[DmaPurpose::SendWqe as usize] = 2;
        total.dma_writes[DmaPurpose::Eqe as usize] = 4;
        total.dma_writes[DmaPurpose::Msix as usize] = 3;
        let stats = NicStats {
            name: "doorbell0".into(),
            addr: [127, 0, 0, 2],
            bus: BusSnapshot {
                total,
                qps: vec![(Qpn::new(0x100), total)],
                nic: NicCounters {
                    tx_packets: 9,
                    ..NicCounters::default()
                },
            },
            port: PortCounters::default(),
        };
        let v: Value = serde_json::from_str(&stats.to_json()).unwrap();
        assert_eq!(v["address"], "127.0.0.2");
        assert_eq!(v["total"]["mmio_writes"], 3);
        assert_eq!(v["total"]["dma_reads"]["wqe"], 2);
        assert_eq!(v["total"]["tlps"]["cpld"], 5);
        assert_eq!(v["qps"][0]["qpn"], 0x100);
        assert_eq!(v["packets"]["tx"], 9);
        assert_eq!(v["hw_counters"].as_object().unwrap().len(), 23);
        assert_eq!(v["total"]["dma_writes"]["eqe"], 4);
        assert_eq!(v["total"]["dma_writes"]["msix"], 3);
        assert!(stats.to_table().contains("0x100"));
        assert!(
            stats
                .to_table()
                .contains("4 EQE writes, 3 MSI-X interrupts")
        );
        assert!(
            !stats.to_table().contains("not zero"),
            "no counter is worth a note"
        );
    }

    /// Each counter that is not zero gets a line that says what it means;
    /// every counter has an explanation.
    #[test]
    fn counters_that_are_not_zero_are_explained() {
        let mut stats = NicStats::default();
        stats.bus.nic.out_of_sequence = 3;
        stats.bus.nic.tx_retransmits = 2;
        let t = stats.to_table();
        let notes: Vec<&str> = t
            .lines()
            .skip_while(|l| !l.starts_with("counters that are not zero"))
            .skip(1)
            .collect();
        assert_eq!(notes.len(), 2, "{t}");
        assert!(
            notes
                .iter()
                .any(|l| l.contains("out_of_sequence") && l.contains("PSN ahead"))
        );
        assert!(
            notes
                .iter()
                .any(|l| l.contains("tx_retransmits") && l.contains("loss"))
        );
        for (name, _, what) in stats.counters() {
            assert!(!what.is_empty(), "{name} has no explanation");
        }
    }
}
