//! REP, the reply to a request for communication (IBA Vol 1 §12.6.8,
//! Table 110; attribute 0x0013; the kernel's `CM_REP_*`).
//!
//! The passive side accepts a REQ with its own QP number, starting PSN and
//! capabilities; the active side answers with an RTU.

use doorbell_types::{Psn, Qpn};

use crate::{Result, be24, be32, be64, fixed_view, set_be24, set_be32, set_be64};

/// Field offsets of the REP, from the start of the MAD data area.
pub mod field {
    use crate::{Bits, Field};

    /// Local communication ID, BE32.
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Remote communication ID, BE32.
    pub const REMOTE_COMM_ID: Field = 4..8;
    /// Local Q_Key, BE32.
    pub const LOCAL_QKEY: Field = 8..12;
    /// Local QPN, BE24.
    pub const LOCAL_QPN: Field = 12..15;
    /// Vendor ID (ECE), bits 23..16.
    pub const VENDOR_ID_H: usize = 15;
    /// Local EE context number, BE24.
    pub const LOCAL_EECN: Field = 16..19;
    /// Vendor ID, bits 15..8.
    pub const VENDOR_ID_M: usize = 19;
    /// Starting PSN, BE24.
    pub const STARTING_PSN: Field = 20..23;
    /// Vendor ID, bits 7..0.
    pub const VENDOR_ID_L: usize = 23;
    /// Responder resources.
    pub const RESPONDER_RESOURCES: usize = 24;
    /// Initiator depth.
    pub const INITIATOR_DEPTH: usize = 25;
    /// Target ACK delay, 5 bits.
    pub const TARGET_ACK_DELAY: Bits = Bits::new(26, 3, 5);
    /// Failover accepted, 2 bits.
    pub const FAILOVER_ACCEPTED: Bits = Bits::new(26, 1, 2);
    /// End-to-end flow control.
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(26, 0, 1);
    /// RNR retry count, 3 bits.
    pub const RNR_RETRY_COUNT: Bits = Bits::new(27, 5, 3);
    /// SRQ.
    pub const SRQ: Bits = Bits::new(27, 4, 1);
    /// Local CA GUID, BE64.
    pub const LOCAL_CA_GUID: Field = 28..36;
    /// Private data.
    pub const PRIVATE_DATA: Field = 36..232;
}

/// Length of the REP's private data.
pub const PRIVATE_DATA_LEN: usize = field::PRIVATE_DATA.end - field::PRIVATE_DATA.start;
/// Length of the REP: the whole MAD data area.
pub const MSG_LEN: usize = field::PRIVATE_DATA.end;

fixed_view!(
    /// A REP message in the MAD data area (IBA Vol 1 §12.6.8), 232 bytes.
    RepMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> RepMsg<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.b(), field::LOCAL_COMM_ID)
    }
    /// Remote communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        be32(self.b(), field::REMOTE_COMM_ID)
    }
    /// Local Q_Key.
    pub fn local_qkey(&self) -> u32 {
        be32(self.b(), field::LOCAL_QKEY)
    }
    /// Local QPN.
    pub fn local_qpn(&self) -> Qpn {
        Qpn::new(be24(self.b(), field::LOCAL_QPN))
    }
    /// Vendor ID, 24 bits gathered from its three bytes.
    pub fn vendor_id(&self) -> u32 {
        let b = self.b();
        u32::from_be_bytes([
            0,
            b[field::VENDOR_ID_H],
            b[field::VENDOR_ID_M],
            b[field::VENDOR_ID_L],
        ])
    }
    /// Local EECN.
    pub fn local_eecn(&self) -> u32 {
        be24(self.b(), field::LOCAL_EECN)
    }
    /// Starting PSN.
    pub fn starting_psn(&self) -> Psn {
        Psn::new(be24(self.b(), field::STARTING_PSN))
    }
    /// Responder resources.
    pub fn responder_resources(&self) -> u8 {
        self.b()[field::RESPONDER_RESOURCES]
    }
    /// Initiator depth.
    pub fn initiator_depth(&self) -> u8 {
        self.b()[field::INITIATOR_DEPTH]
    }
    /// Target ACK delay exponent.
    pub fn target_ack_delay(&self) -> u8 {
        field::TARGET_ACK_DELAY.get(self.b())
    }
    /// Failover accepted (0 accepted, 1 not supported, 2 rejected).
    pub fn failover_accepted(&self) -> u8 {
        field::FAILOVER_ACCEPTED.get(self.b())
    }
    /// End-to-end flow control.
    pub fn end_to_end_flow_control(&self) -> bool {
        field::END_TO_END_FLOW_CONTROL.get(self.b()) != 0
    }
    /// RNR retry count.
    pub fn rnr_retry_count(&self) -> u8 {
        field::RNR_RETRY_COUNT.get(self.b())
    }
    /// SRQ.
    pub fn srq(&self) -> bool {
        field::SRQ.get(self.b()) != 0
    }
    /// Local CA GUID.
    pub fn local_ca_guid(&self) -> u64 {
        be64(self.b(), field::LOCAL_CA_GUID)
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.b()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RepMsg<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_be32(self.m(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, v: u32) {
        set_be32(self.m(), field::REMOTE_COMM_ID, v);
    }
    /// Sets the local Q_Key.
    pub fn set_local_qkey(&mut self, v: u32) {
        set_be32(self.m(), field::LOCAL_QKEY, v);
    }
    /// Sets the local QPN.
    pub fn set_local_qpn(&mut self, v: Qpn) {
        set_be24(self.m(), field::LOCAL_QPN, v.get());
    }
    /// Sets the vendor ID (low 24 bits of `v`) into its three bytes.
    pub fn set_vendor_id(&mut self, v: u32) {
        let [_, h, mid, l] = v.to_be_bytes();
        let b = self.m();
        b[field::VENDOR_ID_H] = h;
        b[field::VENDOR_ID_M] = mid;
        b[field::VENDOR_ID_L] = l;
    }
    /// Sets the local EECN (24 bits).
    pub fn set_local_eecn(&mut self, v: u32) {
        set_be24(self.m(), field::LOCAL_EECN, v);
    }
    /// Sets the starting PSN.
    pub fn set_starting_psn(&mut self, v: Psn) {
        set_be24(self.m(), field::STARTING_PSN, v.get());
    }
    /// Sets the responder resources.
    pub fn set_responder_resources(&mut self, v: u8) {
        self.m()[field::RESPONDER_RESOURCES] = v;
    }
    /// Sets the initiator depth.
    pub fn set_initiator_depth(&mut self, v: u8) {
        self.m()[field::INITIATOR_DEPTH] = v;
    }
    /// Sets the target ACK delay exponent (5 bits).
    pub fn set_target_ack_delay(&mut self, v: u8) {
        field::TARGET_ACK_DELAY.set(self.m(), v);
    }
    /// Sets failover accepted (2 bits).
    pub fn set_failover_accepted(&mut self, v: u8) {
        field::FAILOVER_ACCEPTED.set(self.m(), v);
    }
    /// Sets end-to-end flow control.
    pub fn set_end_to_end_flow_control(&mut self, v: bool) {
        field::END_TO_END_FLOW_CONTROL.set(self.m(), u8::from(v));
    }
    /// Sets the RNR retry count (3 bits).
    pub fn set_rnr_retry_count(&mut self, v: u8) {
        field::RNR_RETRY_COUNT.set(self.m(), v);
    }
    /// Sets SRQ.
    pub fn set_srq(&mut self, v: bool) {
        field::SRQ.set(self.m(), u8::from(v));
    }
    /// Sets the local CA GUID.
    pub fn set_local_ca_guid(&mut self, v: u64) {
        set_be64(self.m(), field::LOCAL_CA_GUID, v);
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.m()[field::PRIVATE_DATA]
    }
}

/// A parsed REP. Narrow fields are masked on emit; reserved bits are
/// ignored on parse and zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepRepr {
    /// Local communication ID of the replying (passive) side.
    pub local_comm_id: u32,
    /// Remote communication ID: the REQ's local one.
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Local QPN.
    pub local_qpn: Qpn,
    /// Vendor ID for ECE, 24 bits.
    pub vendor_id: u32,
    /// Local EECN, 24 bits.
    pub local_eecn: u32,
    /// Starting PSN of the replier's send queue.
    pub starting_psn: Psn,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay exponent, 5 bits.
    pub target_ack_delay: u8,
    /// Failover accepted, 2 bits.
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count, 3 bits.
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RepRepr {
    /// Parses a REP view.
    pub fn parse<T: AsRef<[u8]>>(m: &RepMsg<T>) -> Result<Self> {
        m.check_len()?;
        Ok(Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            local_qkey: m.local_qkey(),
            local_qpn: m.local_qpn(),
            vendor_id: m.vendor_id(),
            local_eecn: m.local_eecn(),
            starting_psn: m.starting_psn(),
            responder_resources: m.responder_resources(),
            initiator_depth: m.initiator_depth(),
            target_ack_delay: m.target_ack_delay(),
            failover_accepted: m.failover_accepted(),
            end_to_end_flow_control: m.end_to_end_flow_control(),
            rnr_retry_count: m.rnr_retry_count(),
            srq: m.srq(),
            local_ca_guid: m.local_ca_guid(),
            private_data: crate::array(m.b(), field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut RepMsg<T>) {
        m.m()[..MSG_LEN].fill(0);
        m.set_local_comm_id(self.local_comm_id);
        m.set_remote_comm_id(self.remote_comm_id);
        m.set_local_qkey(self.local_qkey);
        m.set_local_qpn(self.local_qpn);
        m.set_vendor_id(self.vendor_id);
        m.set_local_eecn(self.local_eecn);
        m.set_starting_psn(self.starting_psn);
        m.set_responder_resources(self.responder_resources);
        m.set_initiator_depth(self.initiator_depth);
        m.set_target_ack_delay(self.target_ack_delay);
        m.set_failover_accepted(self.failover_accepted);
        m.set_end_to_end_flow_control(self.end_to_end_flow_control);
        m.set_rnr_retry_count(self.rnr_retry_count);
        m.set_srq(self.srq);
        m.set_local_ca_guid(self.local_ca_guid);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_rep()(
            ids in (any::<u32>(), any::<u32>(), any::<u32>(), 0u32..1 << 24, 0u32..1 << 24),
            eecn in 0u32..1 << 24, psn in 0u32..1 << 24, rr: u8, id: u8,
            w26 in (0u8..32, 0u8..4, any::<bool>()), rnr in 0u8..8, srq: bool, guid: u64,
            pd in proptest::collection::vec(any::<u8>(), PRIVATE_DATA_LEN),
        ) -> RepRepr {
            RepRepr {
                local_comm_id: ids.0, remote_comm_id: ids.1, local_qkey: ids.2,
                local_qpn: Qpn::new(ids.3), vendor_id: ids.4, local_eecn: eecn,
                starting_psn: Psn::new(psn), responder_resources: rr, initiator_depth: id,
                target_ack_delay: w26.0, failover_accepted: w26.1,
                end_to_end_flow_control: w26.2, rnr_retry_count: rnr, srq,
                local_ca_guid: guid, private_data: pd.try_into().unwrap(),
            }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        golden[..36].copy_from_slice(&[
            0, 0, 0, 9, 0x11, 0x22, 0x33, 0x44, // comm IDs
            0, 0, 0, 0, // Q_Key
            0x00, 0x04, 0x56, 0x12, // QPN 0x456, vendor ID high
            0, 0, 0, 0x34, // EECN, vendor ID middle
            0x12, 0x34, 0x56, 0x78, // PSN 0x123456, vendor ID low
            4, 5, 0xab, 0xf0, // resources, depth, delay 21 | failover 1 | fc 1, RNR 7 | SRQ
            0, 0x02, 0xc9, 0x03, 0, 0, 0, 1, // CA GUID
        ]);
        golden[36] = 0x61;
        let m = RepMsg::new_checked(&golden[..]).unwrap();
        let r = RepRepr::parse(&m).unwrap();
        assert_eq!(r.local_qpn, Qpn::new(0x456));
        assert_eq!(r.vendor_id, 0x12_3478);
        assert_eq!(r.starting_psn, Psn::new(0x12_3456));
        assert_eq!((r.target_ack_delay, r.failover_accepted), (21, 1));
        assert!(r.end_to_end_flow_control && r.srq);
        assert_eq!(r.rnr_retry_count, 7);
        assert_eq!(r.local_ca_guid, 0x0002_c903_0000_0001);
        assert_eq!(r.private_data[0], 0x61);
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut RepMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_rep()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut RepMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[27] & 0x0f, 0);
            prop_assert_eq!(RepRepr::parse(&RepMsg::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
