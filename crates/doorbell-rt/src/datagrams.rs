//! A UDP port's datagrams as the bytes of their packets: the IPv4 and UDP
//! headers the kernel writes, and a run of datagrams behind one of them
//! ([`Frame::segment`], decision record 0073) cut back into whole
//! packets.

use doorbell_device::Frame;
use doorbell_wire::{Ipv4Header, UdpHeader, ipv4, udp};

/// Bytes of the IPv4 and UDP headers the kernel writes.
pub(crate) const HEADERS_LEN: usize = ipv4::HEADER_LEN + udp::HEADER_LEN;

/// Sets the lengths in `h`, a packet's IPv4 and UDP headers, to a
/// datagram's whose UDP payload is `len` bytes, and the IPv4 checksum to
/// match them.
pub(crate) fn set_lengths(h: &mut [u8; HEADERS_LEN], len: usize) {
    let (ip, udp_h) = h.split_at_mut(ipv4::HEADER_LEN);
    let mut ip = Ipv4Header::new_unchecked(ip);
    ip.set_total_len((HEADERS_LEN + len) as u16);
    ip.fill_checksum();
    UdpHeader::new_unchecked(udp_h).set_len((udp::HEADER_LEN + len) as u16);
}

/// Each datagram of a run ([`Frame::segment`]) as the whole packet a NIC
/// builds, given to `each` in turn as its two parts: the run's IPv4 and
/// UDP headers, with the datagram's lengths, then the datagram's bytes,
/// where they lie in the run.
pub(crate) fn each_packet(f: &Frame, mut each: impl FnMut(&[u8; HEADERS_LEN], &[u8])) {
    let seg = f.segment as usize;
    let Some((h, body)) = f.bytes.split_first_chunk::<HEADERS_LEN>() else {
        return;
    };
    if seg == 0 {
        return;
    }
    for d in body.chunks(seg) {
        if d.len() == seg {
            each(h, d);
        } else {
            let mut head = *h;
            set_lengths(&mut head, d.len());
            each(&head, d);
        }
    }
}
