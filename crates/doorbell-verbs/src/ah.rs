//! The path back to the sender of a UD message, from the 40 bytes the
//! device places before its payload (`ibv_init_ah_from_wc`).
//!
//! For RoCEv2 over IPv4 the IPv4 header fills the last 20 of the 40 bytes;
//! over IPv6 the IPv6 header fills all of them. Which one it is follows
//! rdma-core's reading: an IPv6 version nibble means IPv6 unless the last 20
//! bytes hold an IPv4 header with a correct checksum.

use doorbell_hif::AddressVector;

use crate::context::Context;
use crate::error::VerbsError;

/// Bytes of the GRH area in front of a UD payload.
pub const GRH_LEN: usize = 40;

/// Where the IPv4 header begins in the GRH area.
const IPV4_AT: usize = 20;

/// IPv6 next header of RoCEv2 (UDP) and of RoCEv1 (the IB BTH).
const NEXT_UDP: u8 = 17;
const NEXT_IB: u8 = 0x1b;

/// The path to a message's sender, with the flow label it came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReturnPath {
    /// The path: the sender's GID, our GID it was sent to, its hop limit
    /// and traffic class.
    pub av: AddressVector,
    /// The IPv6 flow label (0 over IPv4).
    pub flow_label: u32,
}

fn ipv4_mapped(addr: &[u8]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&addr[..4]);
    g
}

/// The IPv4 header checksum of the 20 bytes in `h` is right.
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let folded = (folded & 0xffff) + (folded >> 16);
    folded == 0xffff
}

/// Which IP version the GRH area holds, as rdma-core decides it.
fn ip_version(grh: &[u8; GRH_LEN]) -> Result<u8, VerbsError> {
    let ip4 = &grh[IPV4_AT..];
    if grh[0] >> 4 != 6 {
        return if ip4[0] >> 4 == 4 {
            Ok(4)
        } else {
            Err(VerbsError::Protocol(
                "the GRH area holds neither IPv4 nor IPv6",
            ))
        };
    }
    // An IPv6 version nibble, or the zeroes before an IPv4 header that
    // happen to look like one: a 5-word IPv4 header with a good checksum
    // decides.
    if ip4[0] & 0xf == 5 && ipv4_checksum_ok(ip4) {
        Ok(4)
    } else {
        Ok(6)
    }
}

impl Context {
    /// The index of `gid` in the port's GID table.
    fn gid_index(&self, gid: &[u8; 16]) -> Result<u8, VerbsError> {
        (0..crate::context::GID_TABLE_LEN)
            .find(|&i| self.query_gid(i).as_ref() == Some(gid))
            .map(|i| i as u8)
            .ok_or(VerbsError::InvalidArgument(
                "the message was not sent to a GID of this port",
            ))
    }

    /// The path back to the sender of a UD message whose first
    /// [`GRH_LEN`] bytes are `grh` (`ibv_init_ah_from_wc`): refused if it
    /// was sent to a multicast address or to a GID not of this port
    /// (EINVAL), or if it is not RoCEv2 (EPROTONOSUPPORT).
    pub fn return_path(&self, grh: &[u8; GRH_LEN]) -> Result<ReturnPath, VerbsError> {
        let flow = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        if ip_version(grh)? == 4 {
            let h = &grh[IPV4_AT..];
            let (saddr, daddr) = (&h[12..16], &h[16..20]);
            if (224..=239).contains(&daddr[0]) {
                return Err(VerbsError::InvalidArgument(
                    "a multicast message has no path back",
                ));
            }
            let sgid_index = self.gid_index(&ipv4_mapped(daddr))?;
            return Ok(ReturnPath {
                av: AddressVector {
                    dgid: ipv4_mapped(saddr),
                    sgid_index,
                    hop_limit: h[8],
                    traffic_class: h[1],
                    sl: 0,
                },
                flow_label: flow & 0xf_ffff,
            });
        }
        let mut sgid = [0u8; 16];
        sgid.copy_from_slice(&grh[8..24]);
        let mut dgid = [0u8; 16];
        dgid.copy_from_slice(&grh[24..40]);
        if dgid[0] == 0xff {
            return Err(VerbsError::InvalidArgument(
                "a multicast message has no path back",
            ));
        }
        match grh[6] {
            NEXT_UDP => {}
            NEXT_IB => {
                return Err(VerbsError::InvalidArgument(
                    "RoCEv1: no GID of this port has that type",
                ));
            }
            _ => return Err(VerbsError::Protocol("the IPv6 header does not carry RoCE")),
        }
        Ok(ReturnPath {
            av: AddressVector {
                dgid: sgid,
                sgid_index: self.gid_index(&dgid)?,
                hop_limit: grh[7],
                traffic_class: (flow >> 20) as u8,
                sl: 0,
            },
            flow_label: flow & 0xf_ffff,
        })
    }
}

/// The MAC address doorbell resolves a RoCE GID to
/// ([`doorbell_wire::Gid::roce_mac`]).
pub fn roce_mac(gid: &[u8; 16]) -> [u8; 6] {
    doorbell_wire::Gid::new(*gid).roce_mac()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_header(src: [u8; 4], dst: [u8; 4], ttl: u8, tos: u8) -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        let h = &mut g[IPV4_AT..];
        h[0] = 0x45;
        h[1] = tos;
        h[8] = ttl;
        h[9] = 17;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        let sum: u32 = h
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let sum = (sum & 0xffff) + (sum >> 16);
        let ck = !((sum & 0xffff) + (sum >> 16)) as u16;
        h[10..12].copy_from_slice(&ck.to_be_bytes());
        g
    }

    #[test]
    fn an_ipv4_header_is_found_by_its_version_or_its_checksum() {
        let g = ipv4_header([10, 0, 0, 1], [10, 0, 0, 2], 64, 0);
        assert_eq!(ip_version(&g).unwrap(), 4);
        // The zeroes before it look like IPv6 only if byte 0 says 6; then the
        // checksum decides.
        let mut g6 = g;
        g6[0] = 0x60;
        assert_eq!(ip_version(&g6).unwrap(), 4);
        g6[IPV4_AT + 10] ^= 1;
        assert_eq!(ip_version(&g6).unwrap(), 6);
        let mut bad = g;
        bad[IPV4_AT] = 0x55;
        assert!(matches!(ip_version(&bad), Err(VerbsError::Protocol(_))));
    }

    #[test]
    fn a_published_header_checks_and_a_flipped_bit_does_not() {
        // The worked example of an IPv4 header with its checksum 0xb861
        // (192.168.0.1 to 192.168.0.199, UDP, TTL 64).
        let h: [u8; 20] = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(ipv4_checksum_ok(&h));
        let mut bad = h;
        bad[15] ^= 0x40;
        assert!(!ipv4_checksum_ok(&bad));
        // Our test headers agree with it.
        let g = ipv4_header([192, 168, 0, 1], [192, 168, 0, 199], 64, 0);
        assert!(ipv4_checksum_ok(&g[IPV4_AT..]));
    }
}
