//! Captures of what NICs send and receive, as a pcapng file that tshark
//! and Wireshark open: each RoCEv2 packet with the Ethernet header it would
//! have on the wire (the MAC addresses doorbell resolves IP addresses to),
//! its direction (pcapng `epb_flags`), and a wall-clock timestamp in
//! nanoseconds. A frame the NIC dropped (a bad ICRC, a packet for no QP,
//! the link down), or that fault injection dropped on the way out, is still
//! in the file, with a comment that says so.
//!
//! One file may hold several NICs, each an interface of its own (the
//! simulator's two); the runtime that records says where frames cross:
//! `doorbell-rt` as they leave for the port and as the device takes them
//! in. The file is buffered (1 MiB), written at least every 100 ms while
//! frames come, and flushed when the last holder drops it: a program that
//! aborts loses only its last 100 ms.

#![deny(missing_docs)]

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use doorbell_wire::ethernet::{EtherType, EthernetHeader, EthernetRepr};
use doorbell_wire::gid::Gid;
use pcap_file::DataLink;
use pcap_file::Endianness;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};

/// Which way a frame crossed the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Taken in by the NIC.
    In,
    /// Sent by the NIC.
    Out,
}

/// An open capture, shared by the NIC's threads.
#[derive(Clone)]
pub struct Capture {
    w: Arc<Mutex<Inner>>,
}

/// The file, a buffer each packet block is built in, and when the file
/// was last written.
struct Inner {
    w: PcapNgWriter<BufWriter<File>>,
    block: Vec<u8>,
    flushed: std::time::Instant,
}

/// Bytes buffered before a write to the file: a capture records in the
/// NIC's hot path, so it writes seldom.
const BUFFER_BYTES: usize = 1 << 20;

/// The longest a recorded frame stays in the buffer: a program that
/// crashes, or aborts without running its exit handlers, loses at most
/// this much of its capture.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Capture")
    }
}

fn io(e: pcap_file::PcapError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Capture {
    /// Creates (or truncates) the pcapng file `path`, with one Ethernet
    /// interface named after the NIC.
    pub fn create(path: &Path, nic: &str) -> std::io::Result<Self> {
        Self::create_for(path, &[nic])
    }

    /// Creates (or truncates) the pcapng file `path`, with one Ethernet
    /// interface for each NIC of `nics`, numbered in that order.
    pub fn create_for(path: &Path, nics: &[&str]) -> std::io::Result<Self> {
        let file = BufWriter::with_capacity(BUFFER_BYTES, File::create(path)?);
        // Little-endian, which the packet blocks are written in below.
        let mut w = PcapNgWriter::with_endianness(file, Endianness::Little).map_err(io)?;
        for nic in nics {
            let idb = InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: 0,
                options: vec![
                    InterfaceDescriptionOption::IfName(nic.to_string().into()),
                    // Timestamps in nanoseconds (10^-9).
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            };
            w.write_pcapng_block(idb).map_err(io)?;
        }
        Ok(Self {
            w: Arc::new(Mutex::new(Inner {
                w,
                block: Vec::new(),
                flushed: std::time::Instant::now(),
            })),
        })
    }

    /// Records `frame` (an IPv4 or IPv6 packet, as the NIC's port carries
    /// it) crossing the port `dir`, now; `dropped` says why it went no
    /// further, if it did not. A write that fails loses the frame from the
    /// file, never the frame itself.
    pub fn record(&self, dir: Direction, frame: &[u8], dropped: Option<&str>) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        self.record_at(ts, dir, frame, dropped);
    }

    /// [`Capture::record`] at time `ts` since the Unix epoch.
    pub fn record_at(&self, ts: Duration, dir: Direction, frame: &[u8], dropped: Option<&str>) {
        self.record_on(0, ts, dir, frame, dropped);
    }

    /// [`Capture::record_at`] on interface `nic` of [`Capture::create_for`]
    /// (the simulator's, at its virtual time).
    pub fn record_on(
        &self,
        nic: u32,
        ts: Duration,
        dir: Direction,
        frame: &[u8],
        dropped: Option<&str>,
    ) {
        let mut g = self.w.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { w, block, flushed } = &mut *g;
        enhanced_packet(block, nic, ts, dir, frame, dropped);
        let _ = w.get_mut().write_all(block);
        if flushed.elapsed() >= FLUSH_EVERY {
            let _ = w.get_mut().flush();
            *flushed = std::time::Instant::now();
        }
    }

    /// Writes what is buffered to the file.
    pub fn flush(&self) {
        let mut g = self.w.lock().unwrap_or_else(|e| e.into_inner());
        let _ = g.w.get_mut().flush();
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if Arc::strong_count(&self.w) == 1 {
            self.flush();
        }
    }
}

/// The GID of a packet's address (an IPv4 address, mapped, or IPv6).
fn gid_of(ip: &[u8]) -> Gid {
    match ip.len() {
        4 => Gid::from_ipv4([ip[0], ip[1], ip[2], ip[3]]),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(ip);
            Gid::from_ipv6(a)
        }
        _ => Gid::new([0; 16]),
    }
}

/// Builds in `out` the Enhanced Packet Block (pcapng, section 4.3) of
/// `frame` behind its Ethernet header, little-endian: the block is built by
/// hand into a reused buffer, as a NIC's hot path wants, rather than
/// through `pcap_file`'s block types, which allocate for each packet.
fn enhanced_packet(
    out: &mut Vec<u8>,
    nic: u32,
    ts: Duration,
    dir: Direction,
    frame: &[u8],
    dropped: Option<&str>,
) {
    let pad = |n: usize| n.next_multiple_of(4) - n;
    let eth = ethernet_header(frame);
    let len = eth.len() + frame.len();
    let comment = dropped.map(|why| format!("dropped: {why}"));
    let comment_len = comment.as_ref().map_or(0, |c| 4 + c.len() + pad(c.len()));
    // Header, data, epb_flags, comment, opt_endofopt, trailing length.
    let total = 28 + len + pad(len) + 8 + comment_len + 4 + 4;
    let ns = u64::try_from(ts.as_nanos()).unwrap_or(u64::MAX);
    out.clear();
    let u32le = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
    let u16le = |out: &mut Vec<u8>, v: u16| out.extend_from_slice(&v.to_le_bytes());
    u32le(out, 6);
    u32le(out, total as u32);
    u32le(out, nic);
    u32le(out, (ns >> 32) as u32);
    u32le(out, ns as u32);
    u32le(out, len as u32);
    u32le(out, len as u32);
    out.extend_from_slice(&eth);
    out.extend_from_slice(frame);
    out.resize(out.len() + pad(len), 0);
    // epb_flags (code 2), bits 0-1: 01 inbound, 10 outbound.
    u16le(out, 2);
    u16le(out, 4);
    u32le(
        out,
        match dir {
            Direction::In => 1,
            Direction::Out => 2,
        },
    );
    if let Some(c) = &comment {
        // opt_comment (code 1).
        u16le(out, 1);
        u16le(out, c.len() as u16);
        out.extend_from_slice(c.as_bytes());
        out.resize(out.len() + pad(c.len()), 0);
    }
    // opt_endofopt.
    u32le(out, 0);
    u32le(out, total as u32);
    debug_assert_eq!(out.len(), total);
}

/// The Ethernet header `frame` has on the wire.
fn ethernet_header(frame: &[u8]) -> [u8; 14] {
    let (ethertype, src, dst): (EtherType, &[u8], &[u8]) = match frame.first().map(|b| b >> 4) {
        Some(4) if frame.len() >= 20 => (EtherType::Ipv4, &frame[12..16], &frame[16..20]),
        Some(6) if frame.len() >= 40 => (EtherType::Ipv6, &frame[8..24], &frame[24..40]),
        _ => (EtherType::Ipv4, &[], &[]),
    };
    let eth = EthernetRepr {
        dst: gid_of(dst).roce_mac(),
        src: gid_of(src).roce_mac(),
        ethertype,
    };
    let mut out = [0u8; 14];
    eth.emit(&mut EthernetHeader::new_unchecked(&mut out[..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethernet_headers_carry_the_resolved_macs() {
        let mut ip = vec![0x45u8; 20];
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let e = ethernet_header(&ip);
        assert_eq!(&e[..6], &[2, 0, 10, 0, 0, 2]);
        assert_eq!(&e[6..12], &[2, 0, 10, 0, 0, 1]);
        assert_eq!(&e[12..14], &[0x08, 0x00]);
    }
}
