//! rdma-core's fixed tables: the `ibv_*_str` strings and the `ibv_rate`
//! conversions, written from the enums and comments of `<infiniband/verbs.h>`
//! and rdma-core's documented behaviour. Out-of-range values give `"unknown"`
//! (strings), -1 (rate to number) or `IBV_RATE_MAX` = 0 (number to rate), as
//! rdma-core does.

use core::ffi::CStr;

const UNKNOWN: &CStr = c"unknown";

/// `enum ibv_wc_status`, values 0 to 23.
const WC_STATUS: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

/// `enum ibv_event_type`, values 0 to 19.
const EVENT_TYPE: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

/// `enum ibv_node_type`, values 1 (`IBV_NODE_CA`) to 7 (`IBV_NODE_UNSPECIFIED`).
const NODE_TYPE: [&CStr; 7] = [
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

/// `enum ibv_port_state`, values 0 (`IBV_PORT_NOP`) to 5 (`IBV_PORT_ACTIVE_DEFER`).
const PORT_STATE: [&CStr; 6] = [
    c"no state change (NOP)",
    c"down",
    c"init",
    c"armed",
    c"active",
    c"active defer",
];

fn lookup(table: &[&'static CStr], index: i64) -> &'static CStr {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i).copied())
        .unwrap_or(UNKNOWN)
}

/// `ibv_wc_status_str`.
pub(crate) fn wc_status(status: u32) -> &'static CStr {
    lookup(&WC_STATUS, status.into())
}

/// `ibv_event_type_str`.
pub(crate) fn event_type(event: u32) -> &'static CStr {
    lookup(&EVENT_TYPE, event.into())
}

/// `ibv_node_type_str`.
pub(crate) fn node_type(node_type: i32) -> &'static CStr {
    lookup(&NODE_TYPE, i64::from(node_type) - 1)
}

/// `ibv_port_state_str`.
pub(crate) fn port_state(state: u32) -> &'static CStr {
    lookup(&PORT_STATE, state.into())
}

/// `enum ibv_rate` value, multiple of 2.5 Gb/s (if it is one), Mb/s.
const RATES: [(u32, Option<i32>, i32); 23] = [
    (2, Some(1), 2500),       // IBV_RATE_2_5_GBPS
    (5, Some(2), 5000),       // IBV_RATE_5_GBPS
    (3, Some(4), 10000),      // IBV_RATE_10_GBPS
    (6, Some(8), 20000),      // IBV_RATE_20_GBPS
    (4, Some(12), 30000),     // IBV_RATE_30_GBPS
    (7, Some(16), 40000),     // IBV_RATE_40_GBPS
    (8, Some(24), 60000),     // IBV_RATE_60_GBPS
    (9, Some(32), 80000),     // IBV_RATE_80_GBPS
    (10, Some(48), 120000),   // IBV_RATE_120_GBPS
    (11, None, 14062),        // IBV_RATE_14_GBPS (FDR lane)
    (12, None, 56250),        // IBV_RATE_56_GBPS
    (13, None, 112500),       // IBV_RATE_112_GBPS
    (14, None, 168750),       // IBV_RATE_168_GBPS
    (15, None, 25781),        // IBV_RATE_25_GBPS (EDR lane)
    (16, None, 103125),       // IBV_RATE_100_GBPS
    (17, None, 206250),       // IBV_RATE_200_GBPS
    (18, None, 309375),       // IBV_RATE_300_GBPS
    (19, Some(11), 28125),    // IBV_RATE_28_GBPS
    (20, Some(20), 53125),    // IBV_RATE_50_GBPS
    (21, Some(160), 425000),  // IBV_RATE_400_GBPS
    (22, Some(240), 637500),  // IBV_RATE_600_GBPS
    (23, Some(320), 850000),  // IBV_RATE_800_GBPS
    (24, Some(480), 1275000), // IBV_RATE_1200_GBPS
];

/// `IBV_RATE_MAX`, the "no such rate" answer.
const RATE_MAX: u32 = 0;

/// `ibv_rate_to_mult`.
pub(crate) fn rate_to_mult(rate: u32) -> i32 {
    RATES
        .iter()
        .find(|r| r.0 == rate)
        .and_then(|r| r.1)
        .unwrap_or(-1)
}

/// `mult_to_ibv_rate`.
pub(crate) fn mult_to_rate(mult: i32) -> u32 {
    RATES
        .iter()
        .find(|r| r.1 == Some(mult))
        .map_or(RATE_MAX, |r| r.0)
}

/// `ibv_rate_to_mbps`.
pub(crate) fn rate_to_mbps(rate: u32) -> i32 {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`.
pub(crate) fn mbps_to_rate(mbps: i32) -> u32 {
    RATES.iter().find(|r| r.2 == mbps).map_or(RATE_MAX, |r| r.0)
}

/// Copies `s` into a C string buffer, truncated to leave its NUL.
pub(crate) fn copy_str(dst: &mut [core::ffi::c_char], s: &str) {
    let room = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as core::ffi::c_char;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_at_both_ends_and_outside() {
        assert_eq!(wc_status(0), c"success");
        assert_eq!(wc_status(5), c"Work Request Flushed Error");
        assert_eq!(wc_status(23), c"TM software rendezvous");
        assert_eq!(wc_status(24), UNKNOWN);
        assert_eq!(event_type(19), c"WQ fatal");
        assert_eq!(event_type(20), UNKNOWN);
        assert_eq!(node_type(1), c"InfiniBand channel adapter");
        assert_eq!(node_type(7), c"unspecified");
        assert_eq!(node_type(0), UNKNOWN);
        assert_eq!(node_type(-1), UNKNOWN);
        assert_eq!(port_state(4), c"active");
        assert_eq!(port_state(6), UNKNOWN);
    }

    #[test]
    fn rates_round_trip() {
        for &(rate, mult, mbps) in &RATES {
            assert_eq!(rate_to_mbps(rate), mbps);
            assert_eq!(mbps_to_rate(mbps), rate);
            match mult {
                Some(m) => assert_eq!(mult_to_rate(m), rate),
                None => assert_eq!(rate_to_mult(rate), -1),
            }
        }
        assert_eq!(rate_to_mult(0), -1);
        assert_eq!(mult_to_rate(3), RATE_MAX);
        assert_eq!(mbps_to_rate(1), RATE_MAX);
    }
}
