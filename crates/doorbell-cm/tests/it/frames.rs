//! Sample CM MADs of every kind, each with distinctive field values, and
//! the RoCEv2 UD frames to QP 1 that carry them, built with doorbell-wire.

use std::net::Ipv4Addr;

use doorbell_cm::ip_cm::{CmaAddrs, CmaHeader, CmaHeaderRepr, PortSpace, service_id};
use doorbell_cm::mad::MAD_LEN;
use doorbell_cm::{
    CmMad, CmMessage, DrepRepr, DreqRepr, GSI_QKEY, GSI_QPN, MraRepr, MsgResponse, PathRepr,
    RejRepr, RejectReason, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus,
    TransportServiceType, drep, dreq, mra, rej, rep, req, rtu, sidr,
};
use doorbell_types::{Psn, Qpn};
use doorbell_wire::{
    BthOpcode, BthRepr, DethRepr, EtherType, EthernetHeader, EthernetRepr, ExtHeaders, Gid, RoceIp,
    RoceRepr,
};

/// The active side's address.
pub(crate) const CLIENT: [u8; 4] = [192, 0, 2, 1];
/// The passive side's address.
pub(crate) const SERVER: [u8; 4] = [192, 0, 2, 2];
/// The port rdma_cm listens on.
pub(crate) const PORT: u16 = 20000;
/// The active side's source port in the IP CM header.
pub(crate) const SRC_PORT: u16 = 0xc350;
/// Local QPN of the REQ.
pub(crate) const REQ_QPN: u32 = 0x00_1234;
/// Starting PSN of the REQ.
pub(crate) const REQ_PSN: u32 = 0xab_cdef;
/// Local QPN of the REP.
pub(crate) const REP_QPN: u32 = 0x00_5678;
/// Starting PSN of the REP.
pub(crate) const REP_PSN: u32 = 0x12_3456;
/// QPN a SIDR_REP resolves to.
pub(crate) const SIDR_QPN: u32 = 0x00_9abc;

/// The local communication ID of sample `i`: distinct for every message.
pub(crate) fn comm_id(i: usize) -> u32 {
    0x1000_0000 + i as u32
}

fn cma_header(ps_private: &mut [u8]) {
    CmaHeaderRepr {
        src_port: SRC_PORT,
        addrs: CmaAddrs::V4 {
            src: Ipv4Addr::from(CLIENT),
            dst: Ipv4Addr::from(SERVER),
        },
    }
    .emit(&mut CmaHeader::new_unchecked(ps_private));
}

fn path() -> PathRepr {
    PathRepr {
        local_lid: 0,
        remote_lid: 0,
        local_gid: Gid::from_ipv4(CLIENT),
        remote_gid: Gid::from_ipv4(SERVER),
        flow_label: 0x1_2345,
        packet_rate: 0x10,
        traffic_class: 0x20,
        hop_limit: 64,
        sl: 3,
        subnet_local: false,
        local_ack_timeout: 18,
    }
}

/// One sample of each of the nine CM messages, in the order of a
/// connection's life (SIDR last).
pub(crate) fn samples() -> Vec<CmMad> {
    let mut req_pd = [0u8; req::PRIVATE_DATA_LEN];
    cma_header(&mut req_pd);
    let mut sidr_pd = [0u8; sidr::REQ_PRIVATE_DATA_LEN];
    cma_header(&mut sidr_pd);
    let mut rej_ari = [0u8; rej::ARI_LEN];
    rej_ari[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let messages = [
        CmMessage::Req(ReqRepr {
            local_comm_id: comm_id(0),
            vendor_id: 0,
            service_id: service_id(PortSpace::Tcp, PORT),
            local_ca_guid: 0x0002_c903_00ab_cdef,
            local_qkey: 0,
            local_qpn: Qpn::new(REQ_QPN),
            responder_resources: 4,
            local_eecn: 0,
            initiator_depth: 5,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_service_type: TransportServiceType::Rc,
            end_to_end_flow_control: true,
            starting_psn: Psn::new(REQ_PSN),
            local_cm_response_timeout: 21,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 6,
            max_cm_retries: 15,
            srq: false,
            extended_transport_type: 0,
            primary_path: path(),
            alternate_path: PathRepr::default(),
            sap_supported: false,
            private_data: req_pd,
        }),
        CmMessage::Mra(MraRepr {
            local_comm_id: comm_id(1),
            remote_comm_id: comm_id(0),
            message_mraed: MsgResponse::Req,
            service_timeout: 24,
            private_data: [0; mra::PRIVATE_DATA_LEN],
        }),
        CmMessage::Rep(RepRepr {
            local_comm_id: comm_id(2),
            remote_comm_id: comm_id(0),
            local_qkey: 0,
            local_qpn: Qpn::new(REP_QPN),
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: Psn::new(REP_PSN),
            responder_resources: 4,
            initiator_depth: 5,
            target_ack_delay: 15,
            failover_accepted: 1,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: false,
            local_ca_guid: 0x0002_c903_0012_3456,
            private_data: [0; rep::PRIVATE_DATA_LEN],
        }),
        CmMessage::Rtu(RtuRepr {
            local_comm_id: comm_id(3),
            remote_comm_id: comm_id(2),
            private_data: [0; rtu::PRIVATE_DATA_LEN],
        }),
        CmMessage::Dreq(DreqRepr {
            local_comm_id: comm_id(4),
            remote_comm_id: comm_id(2),
            remote_qpn: Qpn::new(REP_QPN),
            private_data: [0; dreq::PRIVATE_DATA_LEN],
        }),
        CmMessage::Drep(DrepRepr {
            local_comm_id: comm_id(5),
            remote_comm_id: comm_id(4),
            private_data: [0; drep::PRIVATE_DATA_LEN],
        }),
        CmMessage::Rej(RejRepr {
            local_comm_id: comm_id(6),
            remote_comm_id: comm_id(0),
            message_rejected: MsgResponse::Req,
            reason: RejectReason::ConsumerDefined,
            ari_len: 4,
            ari: rej_ari,
            private_data: [0; rej::PRIVATE_DATA_LEN],
        }),
        CmMessage::SidrReq(SidrReqRepr {
            request_id: comm_id(7),
            pkey: 0xffff,
            service_id: service_id(PortSpace::Udp, PORT),
            private_data: sidr_pd,
        }),
        CmMessage::SidrRep(SidrRepRepr {
            request_id: comm_id(7),
            status: SidrStatus::Success,
            additional_info_len: 0,
            vendor_id: 0,
            qpn: Qpn::new(SIDR_QPN),
            service_id: service_id(PortSpace::Udp, PORT),
            qkey: doorbell_cm::ip_cm::RDMA_UDP_QKEY,
            additional_info: [0; sidr::ADDITIONAL_INFO_LEN],
            private_data: [0; sidr::REP_PRIVATE_DATA_LEN],
        }),
    ];
    messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| CmMad::new(0x0000_0001_0000_0000 | i as u64, m))
        .collect()
}

/// The Ethernet frame carrying `mad` from the client to the server's QP 1:
/// `Ethernet | IPv4 | UDP 4791 | BTH (UD SEND Only, QP 1) | DETH (Q_Key
/// 0x80010000, source QP 1) | MAD | ICRC`.
pub(crate) fn frame(mad: &CmMad, psn: u32) -> Vec<u8> {
    let mut payload = [0u8; MAD_LEN];
    assert_eq!(mad.emit(&mut payload), Ok(MAD_LEN));
    let roce = RoceRepr {
        ip: RoceIp::v4(CLIENT, SERVER),
        src_port: 0xc001,
        bth: BthRepr::new(BthOpcode::UdSendOnly, Qpn::new(GSI_QPN), Psn::new(psn)),
        ext: ExtHeaders {
            deth: Some(DethRepr {
                qkey: GSI_QKEY,
                src_qp: Qpn::new(GSI_QPN),
            }),
            ..ExtHeaders::NONE
        },
    };
    let mut ip = Vec::new();
    roce.emit_to_vec(&payload, &mut ip).expect("frame fits");
    let mut out = vec![0u8; doorbell_wire::ethernet::HEADER_LEN];
    EthernetRepr {
        dst: [0x02, 0, 0, 0, 0, 2],
        src: [0x02, 0, 0, 0, 0, 1],
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut EthernetHeader::new_unchecked(&mut out[..]));
    out.extend_from_slice(&ip);
    out
}

/// A classic pcap file (microsecond timestamps, link type Ethernet) of
/// `frames`, one per second.
pub(crate) fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    const MAGIC: u32 = 0xa1b2_c3d4;
    const LINKTYPE_ETHERNET: u32 = 1;
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes()); // version 2.4
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // this zone
    out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&65535u32.to_le_bytes()); // snaplen
    out.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).unwrap();
        out.extend_from_slice(&(1_700_000_000 + i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes()); // captured
        out.extend_from_slice(&len.to_le_bytes()); // on the wire
        out.extend_from_slice(f);
    }
    out
}
