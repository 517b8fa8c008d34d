//! Every field offset against the kernel's table of the CM messages.
//!
//! `include/rdma/ibta_vol1_c12.h` describes each field of IBA Vol 1
//! Tables 106–120 by a location macro: `CM_FIELD8_LOC(byte, width)`,
//! `CM_FIELD_BLOC(byte, bit, width)` (bit counted from the byte's most
//! significant bit), `CM_FIELD16_LOC`/`CM_FIELD32_LOC(byte, width)` (the
//! field starts at the most significant bit of `byte`), `CM_FIELD64_LOC(byte)`
//! and `CM_FIELD_MLOC(byte, bits)`, all counted from the end of the MAD
//! header (`iba.h`). Below, the table is restated field by field as those
//! numbers and compared with this crate's `field` constants, both reduced to
//! (first bit, width) counted from the most significant bit of the data
//! area's byte 0.

use doorbell_cm::{Bits, Field, drep, dreq, mra, path, rej, rep, req, rtu, sidr};

/// A kernel location macro.
#[derive(Clone, Copy)]
enum K {
    F8(usize, usize),
    Bloc(usize, usize, usize),
    F16(usize, usize),
    F32(usize, usize),
    F64(usize),
    Mem(usize, usize),
}

impl K {
    fn span(self) -> (usize, usize) {
        match self {
            K::F8(b, w) | K::F16(b, w) | K::F32(b, w) => (b * 8, w),
            K::Bloc(b, bit, w) => (b * 8 + bit, w),
            K::F64(b) => (b * 8, 64),
            K::Mem(b, bits) => (b * 8, bits),
        }
    }
}

fn range(f: Field) -> (usize, usize) {
    (f.start * 8, (f.end - f.start) * 8)
}

fn byte(b: usize) -> (usize, usize) {
    (b * 8, 8)
}

fn bits(f: Bits) -> (usize, usize) {
    let w = f.width as usize;
    (f.byte * 8 + (8 - f.shift as usize - w), w)
}

/// A path field at `offset` into the message.
fn at(offset: usize, (start, w): (usize, usize)) -> (usize, usize) {
    (offset * 8 + start, w)
}

fn check(table: &[(&str, K, (usize, usize))]) {
    for (name, k, ours) in table {
        assert_eq!(k.span(), *ours, "{name}: kernel (bit, width) vs ours");
    }
}

#[test]
fn req_matches_table_106() {
    use req::field as f;
    let p = f::PRIMARY_PATH.start;
    let a = f::ALTERNATE_PATH.start;
    let flow = |off| {
        at(
            off,
            (
                path::field::FLOW_LABEL_WORD.start * 8,
                32 - path::field::FLOW_LABEL_SHIFT as usize,
            ),
        )
    };
    check(&[
        ("LOCAL_COMM_ID", K::F32(0, 32), range(f::LOCAL_COMM_ID)),
        ("VENDOR_ID", K::F32(5, 24), range(f::VENDOR_ID)),
        ("SERVICE_ID", K::F64(8), range(f::SERVICE_ID)),
        ("LOCAL_CA_GUID", K::F64(16), range(f::LOCAL_CA_GUID)),
        ("LOCAL_Q_KEY", K::F32(28, 32), range(f::LOCAL_QKEY)),
        ("LOCAL_QPN", K::F32(32, 24), range(f::LOCAL_QPN)),
        (
            "RESPONDER_RESOURCES",
            K::F8(35, 8),
            byte(f::RESPONDER_RESOURCES),
        ),
        ("LOCAL_EECN", K::F32(36, 24), range(f::LOCAL_EECN)),
        ("INITIATOR_DEPTH", K::F8(39, 8), byte(f::INITIATOR_DEPTH)),
        ("REMOTE_EECN", K::F32(40, 24), range(f::REMOTE_EECN)),
        (
            "REMOTE_CM_RESPONSE_TIMEOUT",
            K::F8(43, 5),
            bits(f::REMOTE_CM_RESPONSE_TIMEOUT),
        ),
        (
            "TRANSPORT_SERVICE_TYPE",
            K::Bloc(43, 5, 2),
            bits(f::TRANSPORT_SERVICE_TYPE),
        ),
        (
            "END_TO_END_FLOW_CONTROL",
            K::Bloc(43, 7, 1),
            bits(f::END_TO_END_FLOW_CONTROL),
        ),
        ("STARTING_PSN", K::F32(44, 24), range(f::STARTING_PSN)),
        (
            "LOCAL_CM_RESPONSE_TIMEOUT",
            K::F8(47, 5),
            bits(f::LOCAL_CM_RESPONSE_TIMEOUT),
        ),
        ("RETRY_COUNT", K::Bloc(47, 5, 3), bits(f::RETRY_COUNT)),
        ("PARTITION_KEY", K::F16(48, 16), range(f::PKEY)),
        ("PATH_PACKET_PAYLOAD_MTU", K::F8(50, 4), bits(f::PATH_MTU)),
        ("RDC_EXISTS", K::Bloc(50, 4, 1), bits(f::RDC_EXISTS)),
        (
            "RNR_RETRY_COUNT",
            K::Bloc(50, 5, 3),
            bits(f::RNR_RETRY_COUNT),
        ),
        ("MAX_CM_RETRIES", K::F8(51, 4), bits(f::MAX_CM_RETRIES)),
        ("SRQ", K::Bloc(51, 4, 1), bits(f::SRQ)),
        (
            "EXTENDED_TRANSPORT_TYPE",
            K::Bloc(51, 5, 3),
            bits(f::EXTENDED_TRANSPORT_TYPE),
        ),
        (
            "PRIMARY_LOCAL_PORT_LID",
            K::F16(52, 16),
            at(p, range(path::field::LOCAL_LID)),
        ),
        (
            "PRIMARY_REMOTE_PORT_LID",
            K::F16(54, 16),
            at(p, range(path::field::REMOTE_LID)),
        ),
        (
            "PRIMARY_LOCAL_PORT_GID",
            K::Mem(56, 128),
            at(p, range(path::field::LOCAL_GID)),
        ),
        (
            "PRIMARY_REMOTE_PORT_GID",
            K::Mem(72, 128),
            at(p, range(path::field::REMOTE_GID)),
        ),
        ("PRIMARY_FLOW_LABEL", K::F32(88, 20), flow(p)),
        (
            "PRIMARY_PACKET_RATE",
            K::Bloc(91, 2, 6),
            at(p, bits(path::field::PACKET_RATE)),
        ),
        (
            "PRIMARY_TRAFFIC_CLASS",
            K::F8(92, 8),
            at(p, byte(path::field::TRAFFIC_CLASS)),
        ),
        (
            "PRIMARY_HOP_LIMIT",
            K::F8(93, 8),
            at(p, byte(path::field::HOP_LIMIT)),
        ),
        ("PRIMARY_SL", K::F8(94, 4), at(p, bits(path::field::SL))),
        (
            "PRIMARY_SUBNET_LOCAL",
            K::Bloc(94, 4, 1),
            at(p, bits(path::field::SUBNET_LOCAL)),
        ),
        (
            "PRIMARY_LOCAL_ACK_TIMEOUT",
            K::F8(95, 5),
            at(p, bits(path::field::LOCAL_ACK_TIMEOUT)),
        ),
        (
            "ALTERNATE_LOCAL_PORT_LID",
            K::F16(96, 16),
            at(a, range(path::field::LOCAL_LID)),
        ),
        (
            "ALTERNATE_REMOTE_PORT_LID",
            K::F16(98, 16),
            at(a, range(path::field::REMOTE_LID)),
        ),
        (
            "ALTERNATE_LOCAL_PORT_GID",
            K::Mem(100, 128),
            at(a, range(path::field::LOCAL_GID)),
        ),
        (
            "ALTERNATE_REMOTE_PORT_GID",
            K::Mem(116, 128),
            at(a, range(path::field::REMOTE_GID)),
        ),
        ("ALTERNATE_FLOW_LABEL", K::F32(132, 20), flow(a)),
        (
            "ALTERNATE_PACKET_RATE",
            K::Bloc(135, 2, 6),
            at(a, bits(path::field::PACKET_RATE)),
        ),
        (
            "ALTERNATE_TRAFFIC_CLASS",
            K::F8(136, 8),
            at(a, byte(path::field::TRAFFIC_CLASS)),
        ),
        (
            "ALTERNATE_HOP_LIMIT",
            K::F8(137, 8),
            at(a, byte(path::field::HOP_LIMIT)),
        ),
        ("ALTERNATE_SL", K::F8(138, 4), at(a, bits(path::field::SL))),
        (
            "ALTERNATE_SUBNET_LOCAL",
            K::Bloc(138, 4, 1),
            at(a, bits(path::field::SUBNET_LOCAL)),
        ),
        (
            "ALTERNATE_LOCAL_ACK_TIMEOUT",
            K::F8(139, 5),
            at(a, bits(path::field::LOCAL_ACK_TIMEOUT)),
        ),
        ("SAP_SUPPORTED", K::Bloc(139, 5, 1), bits(f::SAP_SUPPORTED)),
        ("PRIVATE_DATA", K::Mem(140, 736), range(f::PRIVATE_DATA)),
    ]);
}

#[test]
fn mra_rej_match_tables_107_108() {
    use mra::field as m;
    use rej::field as r;
    check(&[
        ("MRA_LOCAL_COMM_ID", K::F32(0, 32), range(m::LOCAL_COMM_ID)),
        (
            "MRA_REMOTE_COMM_ID",
            K::F32(4, 32),
            range(m::REMOTE_COMM_ID),
        ),
        ("MRA_MESSAGE_MRAED", K::F8(8, 2), bits(m::MESSAGE_MRAED)),
        ("MRA_SERVICE_TIMEOUT", K::F8(9, 5), bits(m::SERVICE_TIMEOUT)),
        ("MRA_PRIVATE_DATA", K::Mem(10, 1776), range(m::PRIVATE_DATA)),
        ("REJ_LOCAL_COMM_ID", K::F32(0, 32), range(r::LOCAL_COMM_ID)),
        (
            "REJ_REMOTE_COMM_ID",
            K::F32(4, 32),
            range(r::REMOTE_COMM_ID),
        ),
        (
            "REJ_MESSAGE_REJECTED",
            K::F8(8, 2),
            bits(r::MESSAGE_REJECTED),
        ),
        (
            "REJ_REJECTED_INFO_LENGTH",
            K::F8(9, 7),
            bits(r::REJECT_INFO_LENGTH),
        ),
        ("REJ_REASON", K::F16(10, 16), range(r::REASON)),
        ("REJ_ARI", K::Mem(12, 576), range(r::ARI)),
        ("REJ_PRIVATE_DATA", K::Mem(84, 1184), range(r::PRIVATE_DATA)),
    ]);
}

#[test]
fn rep_rtu_dreq_drep_match_tables_110_to_113() {
    use rep::field as p;
    check(&[
        ("REP_LOCAL_COMM_ID", K::F32(0, 32), range(p::LOCAL_COMM_ID)),
        (
            "REP_REMOTE_COMM_ID",
            K::F32(4, 32),
            range(p::REMOTE_COMM_ID),
        ),
        ("REP_LOCAL_Q_KEY", K::F32(8, 32), range(p::LOCAL_QKEY)),
        ("REP_LOCAL_QPN", K::F32(12, 24), range(p::LOCAL_QPN)),
        ("REP_VENDOR_ID_H", K::F8(15, 8), byte(p::VENDOR_ID_H)),
        (
            "REP_LOCAL_EE_CONTEXT_NUMBER",
            K::F32(16, 24),
            range(p::LOCAL_EECN),
        ),
        ("REP_VENDOR_ID_M", K::F8(19, 8), byte(p::VENDOR_ID_M)),
        ("REP_STARTING_PSN", K::F32(20, 24), range(p::STARTING_PSN)),
        ("REP_VENDOR_ID_L", K::F8(23, 8), byte(p::VENDOR_ID_L)),
        (
            "REP_RESPONDER_RESOURCES",
            K::F8(24, 8),
            byte(p::RESPONDER_RESOURCES),
        ),
        (
            "REP_INITIATOR_DEPTH",
            K::F8(25, 8),
            byte(p::INITIATOR_DEPTH),
        ),
        (
            "REP_TARGET_ACK_DELAY",
            K::F8(26, 5),
            bits(p::TARGET_ACK_DELAY),
        ),
        (
            "REP_FAILOVER_ACCEPTED",
            K::Bloc(26, 5, 2),
            bits(p::FAILOVER_ACCEPTED),
        ),
        (
            "REP_END_TO_END_FLOW_CONTROL",
            K::Bloc(26, 7, 1),
            bits(p::END_TO_END_FLOW_CONTROL),
        ),
        (
            "REP_RNR_RETRY_COUNT",
            K::F8(27, 3),
            bits(p::RNR_RETRY_COUNT),
        ),
        ("REP_SRQ", K::Bloc(27, 3, 1), bits(p::SRQ)),
        ("REP_LOCAL_CA_GUID", K::F64(28), range(p::LOCAL_CA_GUID)),
        ("REP_PRIVATE_DATA", K::Mem(36, 1568), range(p::PRIVATE_DATA)),
        (
            "RTU_LOCAL_COMM_ID",
            K::F32(0, 32),
            range(rtu::field::LOCAL_COMM_ID),
        ),
        (
            "RTU_REMOTE_COMM_ID",
            K::F32(4, 32),
            range(rtu::field::REMOTE_COMM_ID),
        ),
        (
            "RTU_PRIVATE_DATA",
            K::Mem(8, 1792),
            range(rtu::field::PRIVATE_DATA),
        ),
        (
            "DREQ_LOCAL_COMM_ID",
            K::F32(0, 32),
            range(dreq::field::LOCAL_COMM_ID),
        ),
        (
            "DREQ_REMOTE_COMM_ID",
            K::F32(4, 32),
            range(dreq::field::REMOTE_COMM_ID),
        ),
        (
            "DREQ_REMOTE_QPN_EECN",
            K::F32(8, 24),
            range(dreq::field::REMOTE_QPN_EECN),
        ),
        (
            "DREQ_PRIVATE_DATA",
            K::Mem(12, 1760),
            range(dreq::field::PRIVATE_DATA),
        ),
        (
            "DREP_LOCAL_COMM_ID",
            K::F32(0, 32),
            range(drep::field::LOCAL_COMM_ID),
        ),
        (
            "DREP_REMOTE_COMM_ID",
            K::F32(4, 32),
            range(drep::field::REMOTE_COMM_ID),
        ),
        (
            "DREP_PRIVATE_DATA",
            K::Mem(8, 1792),
            range(drep::field::PRIVATE_DATA),
        ),
    ]);
}

#[test]
fn sidr_matches_tables_119_120() {
    use sidr::{rep_field as p, req_field as q};
    check(&[
        ("SIDR_REQ_REQUESTID", K::F32(0, 32), range(q::REQUEST_ID)),
        ("SIDR_REQ_PARTITION_KEY", K::F16(4, 16), range(q::PKEY)),
        ("SIDR_REQ_SERVICEID", K::F64(8), range(q::SERVICE_ID)),
        (
            "SIDR_REQ_PRIVATE_DATA",
            K::Mem(16, 1728),
            range(q::PRIVATE_DATA),
        ),
        ("SIDR_REP_REQUESTID", K::F32(0, 32), range(p::REQUEST_ID)),
        ("SIDR_REP_STATUS", K::F8(4, 8), byte(p::STATUS)),
        (
            "SIDR_REP_ADDITIONAL_INFORMATION_LENGTH",
            K::F8(5, 8),
            byte(p::ADDITIONAL_INFO_LENGTH),
        ),
        ("SIDR_REP_VENDOR_ID_H", K::F16(6, 16), range(p::VENDOR_ID_H)),
        ("SIDR_REP_QPN", K::F32(8, 24), range(p::QPN)),
        ("SIDR_REP_VENDOR_ID_L", K::F8(11, 8), byte(p::VENDOR_ID_L)),
        ("SIDR_REP_SERVICEID", K::F64(12), range(p::SERVICE_ID)),
        ("SIDR_REP_Q_KEY", K::F32(20, 32), range(p::QKEY)),
        (
            "SIDR_REP_ADDITIONAL_INFORMATION",
            K::Mem(24, 576),
            range(p::ADDITIONAL_INFO),
        ),
        (
            "SIDR_REP_PRIVATE_DATA",
            K::Mem(96, 1088),
            range(p::PRIVATE_DATA),
        ),
    ]);
}

#[test]
fn private_data_sizes_are_ib_cms() {
    // IB_CM_*_PRIVATE_DATA_SIZE in include/rdma/ib_cm.h.
    assert_eq!(req::PRIVATE_DATA_LEN, 92);
    assert_eq!(mra::PRIVATE_DATA_LEN, 222);
    assert_eq!(rej::PRIVATE_DATA_LEN, 148);
    assert_eq!(rep::PRIVATE_DATA_LEN, 196);
    assert_eq!(rtu::PRIVATE_DATA_LEN, 224);
    assert_eq!(dreq::PRIVATE_DATA_LEN, 220);
    assert_eq!(drep::PRIVATE_DATA_LEN, 224);
    assert_eq!(sidr::REQ_PRIVATE_DATA_LEN, 216);
    assert_eq!(sidr::REP_PRIVATE_DATA_LEN, 136);
    assert_eq!(rej::ARI_LEN, 72); // IB_CM_REJ_ARI_LENGTH
    assert_eq!(sidr::ADDITIONAL_INFO_LEN, 72); // IB_CM_SIDR_REP_INFO_LENGTH
}
