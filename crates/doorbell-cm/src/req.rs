//! REQ, the request for communication (IBA Vol 1 §12.6.5, Table 106;
//! attribute 0x0010; the kernel's `CM_REQ_*` in `ibta_vol1_c12.h`).
//!
//! The active side sends it to the passive side's QP 1: its QP number,
//! starting PSN and capabilities, the service it wants (service ID), the
//! primary path and optionally an alternate one, and 92 bytes of private
//! data, where `rdma_cm` puts its [`crate::ip_cm`] header first.

use doorbell_types::{Psn, Qpn};

use crate::path::{self, PathInfo, PathRepr};
use crate::{
    Result, be16, be24, be32, be64, enum_with_unknown, fixed_view, set_be16, set_be24, set_be32,
    set_be64,
};

/// Field offsets of the REQ, from the start of the MAD data area.
pub mod field {
    use crate::{Bits, Field};

    /// Local communication ID, BE32.
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Vendor ID (ECE), BE24; byte 4 is reserved.
    pub const VENDOR_ID: Field = 5..8;
    /// Service ID, BE64.
    pub const SERVICE_ID: Field = 8..16;
    /// Local CA GUID, BE64.
    pub const LOCAL_CA_GUID: Field = 16..24;
    /// Local Q_Key, BE32 (bytes 24..28 are reserved).
    pub const LOCAL_QKEY: Field = 28..32;
    /// Local QPN, BE24.
    pub const LOCAL_QPN: Field = 32..35;
    /// Responder resources (RDMA READ/atomic depth offered as responder).
    pub const RESPONDER_RESOURCES: usize = 35;
    /// Local EE context number, BE24.
    pub const LOCAL_EECN: Field = 36..39;
    /// Initiator depth.
    pub const INITIATOR_DEPTH: usize = 39;
    /// Remote EE context number, BE24.
    pub const REMOTE_EECN: Field = 40..43;
    /// Remote CM response timeout, 5 bits.
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(43, 3, 5);
    /// Transport service type, 2 bits.
    pub const TRANSPORT_SERVICE_TYPE: Bits = Bits::new(43, 1, 2);
    /// End-to-end flow control.
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(43, 0, 1);
    /// Starting PSN, BE24.
    pub const STARTING_PSN: Field = 44..47;
    /// Local CM response timeout, 5 bits.
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::new(47, 3, 5);
    /// Retry count, 3 bits.
    pub const RETRY_COUNT: Bits = Bits::new(47, 0, 3);
    /// Partition key, BE16.
    pub const PKEY: Field = 48..50;
    /// Path packet payload MTU (IBA MTU code), 4 bits.
    pub const PATH_MTU: Bits = Bits::new(50, 4, 4);
    /// RDC exists.
    pub const RDC_EXISTS: Bits = Bits::new(50, 3, 1);
    /// RNR retry count, 3 bits.
    pub const RNR_RETRY_COUNT: Bits = Bits::new(50, 0, 3);
    /// Max CM retries, 4 bits.
    pub const MAX_CM_RETRIES: Bits = Bits::new(51, 4, 4);
    /// SRQ: the QP uses a shared receive queue.
    pub const SRQ: Bits = Bits::new(51, 3, 1);
    /// Extended transport type, 3 bits (1 = XRC).
    pub const EXTENDED_TRANSPORT_TYPE: Bits = Bits::new(51, 0, 3);
    /// Primary path information.
    pub const PRIMARY_PATH: Field = 52..96;
    /// Alternate path information (all zero: none).
    pub const ALTERNATE_PATH: Field = 96..140;
    /// SAP supported, in the alternate path's last byte.
    pub const SAP_SUPPORTED: Bits = Bits::new(139, 2, 1);
    /// Private data.
    pub const PRIVATE_DATA: Field = 140..232;
}

/// Length of the REQ's private data.
pub const PRIVATE_DATA_LEN: usize = field::PRIVATE_DATA.end - field::PRIVATE_DATA.start;
/// Length of the REQ: the whole MAD data area.
pub const MSG_LEN: usize = field::PRIVATE_DATA.end;

enum_with_unknown! {
    /// Transport service type of a REQ (2 bits).
    pub enum TransportServiceType(u8) {
        /// Reliable connection.
        Rc = 0,
        /// Unreliable connection.
        Uc = 1,
        /// Reliable datagram.
        Rd = 2,
        /// See the extended transport type (1: XRC).
        Extended = 3,
    }
}

fixed_view!(
    /// A REQ message in the MAD data area (IBA Vol 1 §12.6.5), 232 bytes.
    ReqMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> ReqMsg<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.b(), field::LOCAL_COMM_ID)
    }
    /// Vendor ID (24 bits).
    pub fn vendor_id(&self) -> u32 {
        be24(self.b(), field::VENDOR_ID)
    }
    /// Service ID.
    pub fn service_id(&self) -> u64 {
        be64(self.b(), field::SERVICE_ID)
    }
    /// Local CA GUID.
    pub fn local_ca_guid(&self) -> u64 {
        be64(self.b(), field::LOCAL_CA_GUID)
    }
    /// Local Q_Key.
    pub fn local_qkey(&self) -> u32 {
        be32(self.b(), field::LOCAL_QKEY)
    }
    /// Local QPN.
    pub fn local_qpn(&self) -> Qpn {
        Qpn::new(be24(self.b(), field::LOCAL_QPN))
    }
    /// Responder resources.
    pub fn responder_resources(&self) -> u8 {
        self.b()[field::RESPONDER_RESOURCES]
    }
    /// Local EECN.
    pub fn local_eecn(&self) -> u32 {
        be24(self.b(), field::LOCAL_EECN)
    }
    /// Initiator depth.
    pub fn initiator_depth(&self) -> u8 {
        self.b()[field::INITIATOR_DEPTH]
    }
    /// Remote EECN.
    pub fn remote_eecn(&self) -> u32 {
        be24(self.b(), field::REMOTE_EECN)
    }
    /// Remote CM response timeout exponent.
    pub fn remote_cm_response_timeout(&self) -> u8 {
        field::REMOTE_CM_RESPONSE_TIMEOUT.get(self.b())
    }
    /// Transport service type.
    pub fn transport_service_type(&self) -> TransportServiceType {
        TransportServiceType::from(field::TRANSPORT_SERVICE_TYPE.get(self.b()))
    }
    /// End-to-end flow control.
    pub fn end_to_end_flow_control(&self) -> bool {
        field::END_TO_END_FLOW_CONTROL.get(self.b()) != 0
    }
    /// Starting PSN.
    pub fn starting_psn(&self) -> Psn {
        Psn::new(be24(self.b(), field::STARTING_PSN))
    }
    /// Local CM response timeout exponent.
    pub fn local_cm_response_timeout(&self) -> u8 {
        field::LOCAL_CM_RESPONSE_TIMEOUT.get(self.b())
    }
    /// Retry count.
    pub fn retry_count(&self) -> u8 {
        field::RETRY_COUNT.get(self.b())
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.b(), field::PKEY)
    }
    /// Path MTU code.
    pub fn path_mtu(&self) -> u8 {
        field::PATH_MTU.get(self.b())
    }
    /// RDC exists.
    pub fn rdc_exists(&self) -> bool {
        field::RDC_EXISTS.get(self.b()) != 0
    }
    /// RNR retry count.
    pub fn rnr_retry_count(&self) -> u8 {
        field::RNR_RETRY_COUNT.get(self.b())
    }
    /// Max CM retries.
    pub fn max_cm_retries(&self) -> u8 {
        field::MAX_CM_RETRIES.get(self.b())
    }
    /// SRQ.
    pub fn srq(&self) -> bool {
        field::SRQ.get(self.b()) != 0
    }
    /// Extended transport type.
    pub fn extended_transport_type(&self) -> u8 {
        field::EXTENDED_TRANSPORT_TYPE.get(self.b())
    }
    /// The primary path.
    pub fn primary_path(&self) -> PathInfo<&[u8]> {
        PathInfo::new_unchecked(&self.b()[field::PRIMARY_PATH])
    }
    /// The alternate path.
    pub fn alternate_path(&self) -> PathInfo<&[u8]> {
        PathInfo::new_unchecked(&self.b()[field::ALTERNATE_PATH])
    }
    /// SAP supported.
    pub fn sap_supported(&self) -> bool {
        field::SAP_SUPPORTED.get(self.b()) != 0
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.b()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReqMsg<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_be32(self.m(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the vendor ID (24 bits).
    pub fn set_vendor_id(&mut self, v: u32) {
        set_be24(self.m(), field::VENDOR_ID, v);
    }
    /// Sets the service ID.
    pub fn set_service_id(&mut self, v: u64) {
        set_be64(self.m(), field::SERVICE_ID, v);
    }
    /// Sets the local CA GUID.
    pub fn set_local_ca_guid(&mut self, v: u64) {
        set_be64(self.m(), field::LOCAL_CA_GUID, v);
    }
    /// Sets the local Q_Key.
    pub fn set_local_qkey(&mut self, v: u32) {
        set_be32(self.m(), field::LOCAL_QKEY, v);
    }
    /// Sets the local QPN.
    pub fn set_local_qpn(&mut self, v: Qpn) {
        set_be24(self.m(), field::LOCAL_QPN, v.get());
    }
    /// Sets the responder resources.
    pub fn set_responder_resources(&mut self, v: u8) {
        self.m()[field::RESPONDER_RESOURCES] = v;
    }
    /// Sets the local EECN (24 bits).
    pub fn set_local_eecn(&mut self, v: u32) {
        set_be24(self.m(), field::LOCAL_EECN, v);
    }
    /// Sets the initiator depth.
    pub fn set_initiator_depth(&mut self, v: u8) {
        self.m()[field::INITIATOR_DEPTH] = v;
    }
    /// Sets the remote EECN (24 bits).
    pub fn set_remote_eecn(&mut self, v: u32) {
        set_be24(self.m(), field::REMOTE_EECN, v);
    }
    /// Sets the remote CM response timeout exponent (5 bits).
    pub fn set_remote_cm_response_timeout(&mut self, v: u8) {
        field::REMOTE_CM_RESPONSE_TIMEOUT.set(self.m(), v);
    }
    /// Sets the transport service type.
    pub fn set_transport_service_type(&mut self, v: TransportServiceType) {
        field::TRANSPORT_SERVICE_TYPE.set(self.m(), u8::from(v));
    }
    /// Sets end-to-end flow control.
    pub fn set_end_to_end_flow_control(&mut self, v: bool) {
        field::END_TO_END_FLOW_CONTROL.set(self.m(), u8::from(v));
    }
    /// Sets the starting PSN.
    pub fn set_starting_psn(&mut self, v: Psn) {
        set_be24(self.m(), field::STARTING_PSN, v.get());
    }
    /// Sets the local CM response timeout exponent (5 bits).
    pub fn set_local_cm_response_timeout(&mut self, v: u8) {
        field::LOCAL_CM_RESPONSE_TIMEOUT.set(self.m(), v);
    }
    /// Sets the retry count (3 bits).
    pub fn set_retry_count(&mut self, v: u8) {
        field::RETRY_COUNT.set(self.m(), v);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        set_be16(self.m(), field::PKEY, v);
    }
    /// Sets the path MTU code (4 bits).
    pub fn set_path_mtu(&mut self, v: u8) {
        field::PATH_MTU.set(self.m(), v);
    }
    /// Sets RDC exists.
    pub fn set_rdc_exists(&mut self, v: bool) {
        field::RDC_EXISTS.set(self.m(), u8::from(v));
    }
    /// Sets the RNR retry count (3 bits).
    pub fn set_rnr_retry_count(&mut self, v: u8) {
        field::RNR_RETRY_COUNT.set(self.m(), v);
    }
    /// Sets max CM retries (4 bits).
    pub fn set_max_cm_retries(&mut self, v: u8) {
        field::MAX_CM_RETRIES.set(self.m(), v);
    }
    /// Sets SRQ.
    pub fn set_srq(&mut self, v: bool) {
        field::SRQ.set(self.m(), u8::from(v));
    }
    /// Sets the extended transport type (3 bits).
    pub fn set_extended_transport_type(&mut self, v: u8) {
        field::EXTENDED_TRANSPORT_TYPE.set(self.m(), v);
    }
    /// The primary path, writable.
    pub fn primary_path_mut(&mut self) -> PathInfo<&mut [u8]> {
        PathInfo::new_unchecked(&mut self.m()[field::PRIMARY_PATH])
    }
    /// The alternate path, writable. Its last byte also holds SAP
    /// supported: write the path first.
    pub fn alternate_path_mut(&mut self) -> PathInfo<&mut [u8]> {
        PathInfo::new_unchecked(&mut self.m()[field::ALTERNATE_PATH])
    }
    /// Sets SAP supported.
    pub fn set_sap_supported(&mut self, v: bool) {
        field::SAP_SUPPORTED.set(self.m(), u8::from(v));
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.m()[field::PRIVATE_DATA]
    }
}

/// A parsed REQ. Narrow fields are kept as the wire has them and masked on
/// emit; reserved bits are ignored on parse and zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqRepr {
    /// Local communication ID: the sender's handle for the connection.
    pub local_comm_id: u32,
    /// Vendor ID for ECE, 24 bits (0: none).
    pub vendor_id: u32,
    /// Service ID (see [`crate::service_id`]).
    pub service_id: u64,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key (UD/RD only).
    pub local_qkey: u32,
    /// Local QPN.
    pub local_qpn: Qpn,
    /// Responder resources.
    pub responder_resources: u8,
    /// Local EECN, 24 bits.
    pub local_eecn: u32,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Remote EECN, 24 bits.
    pub remote_eecn: u32,
    /// Remote CM response timeout exponent, 5 bits.
    pub remote_cm_response_timeout: u8,
    /// Transport service type.
    pub transport_service_type: TransportServiceType,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// Starting PSN of the sender's send queue.
    pub starting_psn: Psn,
    /// Local CM response timeout exponent, 5 bits.
    pub local_cm_response_timeout: u8,
    /// Retry count, 3 bits.
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU code, 4 bits (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count, 3 bits.
    pub rnr_retry_count: u8,
    /// Max CM retries, 4 bits.
    pub max_cm_retries: u8,
    /// SRQ.
    pub srq: bool,
    /// Extended transport type, 3 bits.
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary_path: PathRepr,
    /// Alternate path; all zero when there is none.
    pub alternate_path: PathRepr,
    /// SAP supported.
    pub sap_supported: bool,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl ReqRepr {
    /// Parses a REQ view.
    pub fn parse<T: AsRef<[u8]>>(m: &ReqMsg<T>) -> Result<Self> {
        m.check_len()?;
        Ok(Self {
            local_comm_id: m.local_comm_id(),
            vendor_id: m.vendor_id(),
            service_id: m.service_id(),
            local_ca_guid: m.local_ca_guid(),
            local_qkey: m.local_qkey(),
            local_qpn: m.local_qpn(),
            responder_resources: m.responder_resources(),
            local_eecn: m.local_eecn(),
            initiator_depth: m.initiator_depth(),
            remote_eecn: m.remote_eecn(),
            remote_cm_response_timeout: m.remote_cm_response_timeout(),
            transport_service_type: m.transport_service_type(),
            end_to_end_flow_control: m.end_to_end_flow_control(),
            starting_psn: m.starting_psn(),
            local_cm_response_timeout: m.local_cm_response_timeout(),
            retry_count: m.retry_count(),
            pkey: m.pkey(),
            path_mtu: m.path_mtu(),
            rdc_exists: m.rdc_exists(),
            rnr_retry_count: m.rnr_retry_count(),
            max_cm_retries: m.max_cm_retries(),
            srq: m.srq(),
            extended_transport_type: m.extended_transport_type(),
            primary_path: PathRepr::parse(&m.primary_path())?,
            alternate_path: PathRepr::parse(&m.alternate_path())?,
            sap_supported: m.sap_supported(),
            private_data: crate::array(m.b(), field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut ReqMsg<T>) {
        m.m()[..MSG_LEN].fill(0);
        m.set_local_comm_id(self.local_comm_id);
        m.set_vendor_id(self.vendor_id);
        m.set_service_id(self.service_id);
        m.set_local_ca_guid(self.local_ca_guid);
        m.set_local_qkey(self.local_qkey);
        m.set_local_qpn(self.local_qpn);
        m.set_responder_resources(self.responder_resources);
        m.set_local_eecn(self.local_eecn);
        m.set_initiator_depth(self.initiator_depth);
        m.set_remote_eecn(self.remote_eecn);
        m.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        m.set_transport_service_type(self.transport_service_type);
        m.set_end_to_end_flow_control(self.end_to_end_flow_control);
        m.set_starting_psn(self.starting_psn);
        m.set_local_cm_response_timeout(self.local_cm_response_timeout);
        m.set_retry_count(self.retry_count);
        m.set_pkey(self.pkey);
        m.set_path_mtu(self.path_mtu);
        m.set_rdc_exists(self.rdc_exists);
        m.set_rnr_retry_count(self.rnr_retry_count);
        m.set_max_cm_retries(self.max_cm_retries);
        m.set_srq(self.srq);
        m.set_extended_transport_type(self.extended_transport_type);
        self.primary_path.emit(&mut m.primary_path_mut());
        self.alternate_path.emit(&mut m.alternate_path_mut());
        m.set_sap_supported(self.sap_supported);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

/// The REQ's path fields sit where [`path`] says, relative to each path.
const _: () = assert!(field::PRIMARY_PATH.end - field::PRIMARY_PATH.start == path::PATH_LEN);
const _: () = assert!(field::ALTERNATE_PATH.end - field::ALTERNATE_PATH.start == path::PATH_LEN);
const _: () = assert!(
    field::SAP_SUPPORTED.byte == field::ALTERNATE_PATH.start + path::field::LOCAL_ACK_TIMEOUT.byte
);
const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::path::tests::{arb_path, sample};
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_req()(
            ids in (any::<u32>(), 0u32..1 << 24, any::<u64>(), any::<u64>(), any::<u32>()),
            qp in (0u32..1 << 24, any::<u8>(), 0u32..1 << 24, any::<u8>(), 0u32..1 << 24),
            w43 in (0u8..32, 0u8..4, any::<bool>()),
            w44 in (0u32..1 << 24, 0u8..32, 0u8..8, any::<u16>()),
            w50 in (0u8..16, any::<bool>(), 0u8..8, 0u8..16, any::<bool>(), 0u8..8),
            primary_path in arb_path(),
            alternate_path in arb_path(),
            sap_supported: bool,
            pd in proptest::collection::vec(any::<u8>(), PRIVATE_DATA_LEN),
        ) -> ReqRepr {
            let mut private_data = [0u8; PRIVATE_DATA_LEN];
            private_data.copy_from_slice(&pd);
            ReqRepr {
                local_comm_id: ids.0, vendor_id: ids.1, service_id: ids.2,
                local_ca_guid: ids.3, local_qkey: ids.4,
                local_qpn: Qpn::new(qp.0), responder_resources: qp.1, local_eecn: qp.2,
                initiator_depth: qp.3, remote_eecn: qp.4,
                remote_cm_response_timeout: w43.0,
                transport_service_type: TransportServiceType::from(w43.1),
                end_to_end_flow_control: w43.2,
                starting_psn: Psn::new(w44.0), local_cm_response_timeout: w44.1,
                retry_count: w44.2, pkey: w44.3,
                path_mtu: w50.0, rdc_exists: w50.1, rnr_retry_count: w50.2,
                max_cm_retries: w50.3, srq: w50.4, extended_transport_type: w50.5,
                primary_path, alternate_path, sap_supported, private_data,
            }
        }
    }

    pub(crate) fn sample_req() -> ReqRepr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[0] = 0x5a;
        private_data[PRIVATE_DATA_LEN - 1] = 0xc3;
        ReqRepr {
            local_comm_id: 0x1122_3344,
            vendor_id: 0x02c9,
            service_id: 0x0000_0000_0106_4e20,
            local_ca_guid: 0x0002_c903_00ab_cdef,
            local_qkey: 0,
            local_qpn: Qpn::new(0x00_0123),
            responder_resources: 4,
            local_eecn: 0,
            initiator_depth: 5,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_service_type: TransportServiceType::Rc,
            end_to_end_flow_control: true,
            starting_psn: Psn::new(0xab_cdef),
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 5,
            rdc_exists: false,
            rnr_retry_count: 6,
            max_cm_retries: 15,
            srq: true,
            extended_transport_type: 0,
            primary_path: sample(),
            alternate_path: PathRepr::default(),
            sap_supported: true,
            private_data,
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let r = sample_req();
        let mut golden = [0u8; MSG_LEN];
        golden[0..8].copy_from_slice(&[0x11, 0x22, 0x33, 0x44, 0, 0x00, 0x02, 0xc9]);
        golden[8..16].copy_from_slice(&0x0000_0000_0106_4e20u64.to_be_bytes());
        golden[16..24].copy_from_slice(&0x0002_c903_00ab_cdefu64.to_be_bytes());
        // QPN 0x123 | resp res 4, EECN 0 | init depth 5,
        // remote EECN 0 | timeout 20 << 3, RC 0 << 1, flow control 1,
        // PSN | local timeout 20 << 3 | retry 7, P_Key, MTU 5 << 4 | RNR 6,
        // max retries 15 << 4 | SRQ 1 << 3.
        golden[32..52].copy_from_slice(&[
            0x00, 0x01, 0x23, 4, 0, 0, 0, 5, 0, 0, 0, 0xa1, 0xab, 0xcd, 0xef, 0xa7, 0xff, 0xff,
            0x56, 0xf8,
        ]);
        sample().emit(&mut PathInfo::new_unchecked(&mut golden[52..96]));
        golden[139] = 0x04; // SAP supported, alone in an empty alternate path
        golden[140] = 0x5a;
        golden[231] = 0xc3;

        let m = ReqMsg::new_checked(&golden[..]).unwrap();
        assert_eq!(m.local_qpn(), Qpn::new(0x123));
        assert_eq!(m.starting_psn(), Psn::new(0xab_cdef));
        assert_eq!(m.primary_path().flow_label(), 0xa_bcde);
        assert_eq!(ReqRepr::parse(&m), Ok(r));
        assert!(ReqMsg::new_checked(&golden[..MSG_LEN - 1]).is_err());

        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut ReqMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    #[test]
    fn setters_leave_neighbouring_bits_alone() {
        let mut buf = [0u8; MSG_LEN];
        let mut m = ReqMsg::new_unchecked(&mut buf[..]);
        m.set_transport_service_type(TransportServiceType::Uc);
        m.set_remote_cm_response_timeout(0x1f);
        m.set_end_to_end_flow_control(true);
        m.set_remote_eecn(0xff_ffff);
        assert_eq!(m.transport_service_type(), TransportServiceType::Uc);
        m.set_transport_service_type(TransportServiceType::Rc);
        assert_eq!(m.remote_cm_response_timeout(), 0x1f);
        assert!(m.end_to_end_flow_control());
        assert_eq!(m.remote_eecn(), 0xff_ffff);
        assert_eq!(buf[40..44], [0xff, 0xff, 0xff, 0xf9]);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_req()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut ReqMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[4], 0); // reserved
            prop_assert_eq!(&buf[24..28], &[0u8; 4]);
            prop_assert_eq!(ReqRepr::parse(&ReqMsg::new_unchecked(&buf[..])), Ok(r));
        }

        #[test]
        fn parse_takes_any_bytes(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
            let r = ReqRepr::parse(&ReqMsg::new_unchecked(&buf[..]));
            prop_assert_eq!(r.is_ok(), buf.len() >= MSG_LEN);
        }
    }
}
