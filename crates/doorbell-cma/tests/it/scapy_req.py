"""An rdma_cm client written apart from doorbell: scapy and the IBA tables.

    <repo>/.venv/bin/python scapy_req.py LOCAL_IP REMOTE_IP SERVICE_PORT \
        SRC_PORT QPN PSN COMM_ID CA_GUID TID

Plays the active side of an rdma_cm connection (port space RDMA_PS_TCP) on
RoCEv2, from a UDP socket bound to LOCAL_IP:4791, to the CM of the device at
REMOTE_IP:4791. Every message is laid out here from the specification, not
from doorbell's code: the common MAD header (IBA Vol 1 §13.4), the CM
messages REQ, REP, REJ, RTU, DREQ and DREP (§12.6.5 to §12.6.11), the IP CM
Service header that rdma_cm puts first in a REQ's private data (IBA annex
A11), and the BTH and DETH of a UD SEND Only to QP 1 (§9.2, §9.3). scapy's
RoCE layer (scapy.contrib.roce) writes the BTH and computes the ICRC from the
IPv4 and UDP headers the receiving NIC will rebuild (identification 0, Don't
Fragment, TTL 64).

1. Sends a REQ for service 0x0000000001060000 | SERVICE_PORT, from QPN with
   first PSN, comm ID COMM_ID, CA GUID and transaction TID, the IP CM header
   saying LOCAL_IP:SRC_PORT to REMOTE_IP, then "from scapy".
2. Waits for the REP (a REJ fails with its reason), checks its ICRC with
   scapy and that it answers the REQ, then sends the RTU.
3. Reads a line from stdin (the passive side saw the connection up), sends
   a DREQ in a new transaction and waits for the DREP.

Prints one JSON line of what it received and exits 0; on any failure it
prints the reason on stderr and exits 1 (2 on bad usage).
"""

import ipaddress
import json
import select
import socket
import sys

from scapy.all import load_contrib, raw
from scapy.fields import (
    BitField,
    ByteField,
    IP6Field,
    IPField,
    IntField,
    ShortField,
    StrFixedLenField,
    X3BytesField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.packet import Packet, bind_layers

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402  (needs load_contrib first)

ROCE_PORT = 4791
# BTH: UD SEND Only (§9.2); the GSI's QP and its well-known Q_Key.
UD_SEND_ONLY = 0x64
GSI_QPN = 1
GSI_QKEY = 0x80010000
DEFAULT_PKEY = 0xFFFF
# The common MAD header's code points (§13.4): the CM class, version 2.
MAD_BASE_VERSION = 1
MGMT_CLASS_CM = 0x07
CM_CLASS_VERSION = 2
METHOD_SEND = 0x03
# CM attribute IDs (§12.6).
ATTR_REQ = 0x0010
ATTR_REJ = 0x0012
ATTR_REP = 0x0013
ATTR_RTU = 0x0014
ATTR_DREQ = 0x0015
ATTR_DREP = 0x0016
# Bytes of a MAD and of its data area after the 24-byte header.
MAD_LEN = 256
MAD_DATA_LEN = 232
# rdma_cm's service IDs: RDMA_IB_IP_PS_TCP | port (annex A11).
RDMA_IB_IP_PS_TCP = 0x0000000001060000
# IPv4 header without options, and UDP header: what the socket does not send.
IP_UDP_LEN = 20 + 8
# The IBA MTU code of 1024 bytes, the path MTU the REQ asks for.
PATH_MTU_1024 = 3
USER_PRIVATE_DATA = b"from scapy"


class DETH(Packet):
    """Datagram Extended Transport Header (§9.3), 8 bytes."""

    name = "DETH"
    fields_desc = [
        XIntField("qkey", 0),
        ByteField("reserved", 0),
        BitField("src_qp", 0, 24),
    ]


class MadHeader(Packet):
    """The common MAD header (§13.4), 24 bytes."""

    name = "MAD"
    fields_desc = [
        ByteField("base_version", MAD_BASE_VERSION),
        XByteField("mgmt_class", MGMT_CLASS_CM),
        ByteField("class_version", CM_CLASS_VERSION),
        BitField("response", 0, 1),
        BitField("method", METHOD_SEND, 7),
        XShortField("status", 0),
        XShortField("class_specific", 0),
        XLongField("tid", 0),
        XShortField("attr_id", 0),
        ShortField("reserved", 0),
        XIntField("attr_mod", 0),
    ]


def path_fields(p):
    """A REQ's path information (§12.6.5), 44 bytes; `p` names
    the primary or alternate path."""
    return [
        XShortField(f"{p}_local_lid", 0),
        XShortField(f"{p}_remote_lid", 0),
        IP6Field(f"{p}_local_gid", "::"),
        IP6Field(f"{p}_remote_gid", "::"),
        BitField(f"{p}_flow_label", 0, 20),
        BitField(f"{p}_reserved0", 0, 6),
        BitField(f"{p}_packet_rate", 0, 6),
        ByteField(f"{p}_traffic_class", 0),
        ByteField(f"{p}_hop_limit", 0),
        BitField(f"{p}_sl", 0, 4),
        BitField(f"{p}_subnet_local", 0, 1),
        BitField(f"{p}_reserved1", 0, 3),
        BitField(f"{p}_local_ack_timeout", 0, 5),
        BitField(f"{p}_reserved2", 0, 3),
    ]


class CmReq(Packet):
    """REQ (§12.6.5), the whole 232-byte data area."""

    name = "CM REQ"
    fields_desc = (
        [
            IntField("local_comm_id", 0),
            ByteField("reserved0", 0),
            X3BytesField("vendor_id", 0),
            XLongField("service_id", 0),
            XLongField("local_ca_guid", 0),
            IntField("reserved1", 0),
            XIntField("local_qkey", 0),
            BitField("local_qpn", 0, 24),
            ByteField("responder_resources", 0),
            BitField("local_eecn", 0, 24),
            ByteField("initiator_depth", 0),
            BitField("remote_eecn", 0, 24),
            BitField("remote_cm_response_timeout", 0, 5),
            BitField("transport_service_type", 0, 2),
            BitField("end_to_end_flow_control", 0, 1),
            BitField("starting_psn", 0, 24),
            BitField("local_cm_response_timeout", 0, 5),
            BitField("retry_count", 0, 3),
            XShortField("pkey", 0),
            BitField("path_mtu", 0, 4),
            BitField("rdc_exists", 0, 1),
            BitField("rnr_retry_count", 0, 3),
            BitField("max_cm_retries", 0, 4),
            BitField("srq", 0, 1),
            BitField("extended_transport_type", 0, 3),
        ]
        + path_fields("primary")
        + path_fields("alternate")
        + [StrFixedLenField("private_data", b"", 92)]
    )


class CmRep(Packet):
    """REP (§12.6.8)."""

    name = "CM REP"
    fields_desc = [
        IntField("local_comm_id", 0),
        IntField("remote_comm_id", 0),
        XIntField("local_qkey", 0),
        BitField("local_qpn", 0, 24),
        ByteField("vendor_id_h", 0),
        BitField("local_eecn", 0, 24),
        ByteField("vendor_id_m", 0),
        BitField("starting_psn", 0, 24),
        ByteField("vendor_id_l", 0),
        ByteField("responder_resources", 0),
        ByteField("initiator_depth", 0),
        BitField("target_ack_delay", 0, 5),
        BitField("failover_accepted", 0, 2),
        BitField("end_to_end_flow_control", 0, 1),
        BitField("rnr_retry_count", 0, 3),
        BitField("srq", 0, 1),
        BitField("reserved", 0, 4),
        XLongField("local_ca_guid", 0),
        StrFixedLenField("private_data", b"", 196),
    ]


class CmRej(Packet):
    """REJ (§12.6.7)."""

    name = "CM REJ"
    fields_desc = [
        IntField("local_comm_id", 0),
        IntField("remote_comm_id", 0),
        BitField("message_rejected", 0, 2),
        BitField("reserved0", 0, 6),
        BitField("reject_info_length", 0, 7),
        BitField("reserved1", 0, 1),
        ShortField("reason", 0),
        StrFixedLenField("ari", b"", 72),
        StrFixedLenField("private_data", b"", 148),
    ]


class CmRtu(Packet):
    """RTU (§12.6.9)."""

    name = "CM RTU"
    fields_desc = [
        IntField("local_comm_id", 0),
        IntField("remote_comm_id", 0),
        StrFixedLenField("private_data", b"", 224),
    ]


class CmDreq(Packet):
    """DREQ (§12.6.10): remote QPN is the receiver's QP."""

    name = "CM DREQ"
    fields_desc = [
        IntField("local_comm_id", 0),
        IntField("remote_comm_id", 0),
        BitField("remote_qpn", 0, 24),
        ByteField("reserved", 0),
        StrFixedLenField("private_data", b"", 220),
    ]


class CmDrep(Packet):
    """DREP (§12.6.11)."""

    name = "CM DREP"
    fields_desc = [
        IntField("local_comm_id", 0),
        IntField("remote_comm_id", 0),
        StrFixedLenField("private_data", b"", 224),
    ]


class CmaHeader(Packet):
    """The IP CM Service private data header (annex A11), 36 bytes: an
    IPv4 address fills the last 4 bytes of its 16-byte field, after 12
    zero bytes."""

    name = "IP CM header"
    fields_desc = [
        BitField("major_version", 0, 4),
        BitField("minor_version", 0, 4),
        BitField("ip_version", 4, 4),
        BitField("reserved", 0, 4),
        ShortField("src_port", 0),
        StrFixedLenField("src_pad", b"\0" * 12, 12),
        IPField("src_ip", "0.0.0.0"),
        StrFixedLenField("dst_pad", b"\0" * 12, 12),
        IPField("dst_ip", "0.0.0.0"),
    ]


bind_layers(BTH, DETH, opcode=UD_SEND_ONLY)
bind_layers(DETH, MadHeader)
for cls, attr in [
    (CmReq, ATTR_REQ),
    (CmRej, ATTR_REJ),
    (CmRep, ATTR_REP),
    (CmRtu, ATTR_RTU),
    (CmDreq, ATTR_DREQ),
    (CmDrep, ATTR_DREP),
]:
    bind_layers(MadHeader, cls, attr_id=attr)


class Failure(Exception):
    """The exchange went wrong; the message says how."""


def ipv4_mapped(ip):
    """The GID of an IPv4 address on RoCEv2: ::ffff:a.b.c.d."""
    return str(ipaddress.IPv6Address("::ffff:" + ip))


def frame(src, dst, tid, msg):
    """IPv4 | UDP | BTH | DETH | MAD | ICRC of one CM message from `src` to
    `dst`, with the headers the receiving NIC rebuilds from the datagram."""
    return (
        IP(src=src, dst=dst, id=0, flags="DF", ttl=64)
        / UDP(sport=ROCE_PORT, dport=ROCE_PORT)
        / BTH(opcode=UD_SEND_ONLY, pkey=DEFAULT_PKEY, dqpn=GSI_QPN, psn=0)
        / DETH(qkey=GSI_QKEY, src_qp=GSI_QPN)
        / MadHeader(tid=tid)
        / msg
    )


def datagram(src, dst, tid, msg):
    """What goes in the UDP datagram: the BTH and what follows, ICRC included."""
    b = raw(frame(src, dst, tid, msg))
    assert len(b) == IP_UDP_LEN + 12 + 8 + MAD_LEN + 4, len(b)
    return b[IP_UDP_LEN:]


def receive(sock, peer, local, want, deadline_s):
    """The next MAD from `peer` whose attribute is one of `want`, checked
    as a CM MAD on the GSI with a good ICRC; others are skipped (a REP sent
    again). A REJ fails with its reason."""
    sock.settimeout(deadline_s)
    while True:
        try:
            data, (ip, port) = sock.recvfrom(4096)
        except socket.timeout:
            names = ", ".join(f"{a:#06x}" for a in want)
            raise Failure(f"no MAD with attribute {names} in {deadline_s} s")
        if ip != peer or port != ROCE_PORT:
            continue
        p = BTH(data)
        rebuilt = (
            IP(src=peer, dst=local, id=0, flags="DF", ttl=64)
            / UDP(sport=ROCE_PORT, dport=ROCE_PORT)
            / BTH(data)
        )
        del rebuilt[BTH].icrc
        icrc_ok = raw(rebuilt)[-4:] == data[-4:]
        if DETH not in p or MadHeader not in p:
            raise Failure(f"not a UD SEND Only with a MAD: {p.summary()}")
        mad = p[MadHeader]
        if mad.attr_id == ATTR_REJ and ATTR_REJ not in want:
            rej = p[CmRej]
            raise Failure(f"REJ reason {rej.reason}, message {rej.message_rejected}")
        if mad.attr_id not in want:
            continue
        if len(data) != 12 + 8 + MAD_LEN + 4:
            raise Failure(f"a datagram of {len(data)} bytes, not one MAD")
        return p, icrc_ok


def headers(p, icrc_ok):
    """What the transport and MAD headers of a received MAD said."""
    b, d, m = p[BTH], p[DETH], p[MadHeader]
    return {
        "opcode": b.opcode,
        "pkey": b.pkey,
        "dest_qp": b.dqpn,
        "qkey": d.qkey,
        "src_qp": d.src_qp,
        "icrc_ok": icrc_ok,
        "base_version": m.base_version,
        "mgmt_class": m.mgmt_class,
        "class_version": m.class_version,
        "method": m.method,
        "status": m.status,
        "tid": m.tid,
    }


def run(local, remote, service_port, src_port, qpn, psn, comm_id, ca_guid, tid):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((local, ROCE_PORT))
    to = (remote, ROCE_PORT)

    private = (
        raw(CmaHeader(ip_version=4, src_port=src_port, src_ip=local, dst_ip=remote))
        + USER_PRIVATE_DATA
    )
    req = CmReq(
        local_comm_id=comm_id,
        service_id=RDMA_IB_IP_PS_TCP | service_port,
        local_ca_guid=ca_guid,
        local_qpn=qpn,
        responder_resources=3,
        initiator_depth=2,
        remote_cm_response_timeout=20,
        transport_service_type=0,  # RC
        end_to_end_flow_control=1,
        starting_psn=psn,
        local_cm_response_timeout=20,
        retry_count=7,
        pkey=DEFAULT_PKEY,
        path_mtu=PATH_MTU_1024,
        rnr_retry_count=7,
        max_cm_retries=15,
        # RoCE: no LIDs; the permissive LID, as the kernel's CM writes.
        primary_local_lid=0xFFFF,
        primary_remote_lid=0xFFFF,
        primary_local_gid=ipv4_mapped(local),
        primary_remote_gid=ipv4_mapped(remote),
        primary_packet_rate=7,
        primary_hop_limit=64,
        primary_local_ack_timeout=14,
        private_data=private.ljust(92, b"\0"),
    )
    sock.sendto(datagram(local, remote, tid, req), to)

    p, icrc_ok = receive(sock, remote, local, [ATTR_REP], 3.0)
    rep = p[CmRep]
    if p[MadHeader].tid != tid:
        raise Failure(f"REP in transaction {p[MadHeader].tid:#x}, not the REQ's {tid:#x}")
    if rep.remote_comm_id != comm_id:
        raise Failure(f"REP for comm ID {rep.remote_comm_id}, not ours {comm_id}")
    if rep.local_qpn == 0 or rep.local_comm_id == 0:
        raise Failure(f"REP without a QPN or comm ID: {rep.summary()}")
    seen = {
        "rep": {
            **headers(p, icrc_ok),
            "local_comm_id": rep.local_comm_id,
            "remote_comm_id": rep.remote_comm_id,
            "local_qpn": rep.local_qpn,
            "starting_psn": rep.starting_psn,
            "responder_resources": rep.responder_resources,
            "initiator_depth": rep.initiator_depth,
            "end_to_end_flow_control": rep.end_to_end_flow_control,
            "rnr_retry_count": rep.rnr_retry_count,
            "srq": rep.srq,
            "local_ca_guid": rep.local_ca_guid,
            "private_data": rep.private_data.rstrip(b"\0").hex(),
        }
    }

    rtu = CmRtu(local_comm_id=comm_id, remote_comm_id=rep.local_comm_id)
    sock.sendto(datagram(local, remote, tid, rtu), to)

    ready, _, _ = select.select([sys.stdin], [], [], 3.0)
    if not ready or not sys.stdin.readline():
        raise Failure("no go-ahead for the DREQ on stdin within 3 s")
    dreq_tid = tid + 1
    dreq = CmDreq(
        local_comm_id=comm_id,
        remote_comm_id=rep.local_comm_id,
        remote_qpn=rep.local_qpn,
    )
    sock.sendto(datagram(local, remote, dreq_tid, dreq), to)
    p, icrc_ok = receive(sock, remote, local, [ATTR_DREP], 3.0)
    drep = p[CmDrep]
    seen["drep"] = {
        **headers(p, icrc_ok),
        "local_comm_id": drep.local_comm_id,
        "remote_comm_id": drep.remote_comm_id,
        "tid_is_the_dreqs": p[MadHeader].tid == dreq_tid,
    }
    print(json.dumps(seen), flush=True)


def main(argv):
    if len(argv) != 10:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    local, remote = argv[1], argv[2]
    service_port, src_port, qpn, psn, comm_id = (int(a, 0) for a in argv[3:8])
    ca_guid, tid = int(argv[8], 0), int(argv[9], 0)
    try:
        run(local, remote, service_port, src_port, qpn, psn, comm_id, ca_guid, tid)
    except Failure as e:
        print(f"scapy_req: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
