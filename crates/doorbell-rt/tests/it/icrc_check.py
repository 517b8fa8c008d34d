"""Recompute the RoCEv2 ICRC of every packet of a pcap with scapy.

    <repo>/.venv/bin/python icrc_check.py CAPTURE.pcap

For each packet, scapy's RoCE layer (scapy.contrib.roce) recomputes the
ICRC over a copy whose ICRC field is cleared, and the result is compared
with the last four bytes as captured (what doorbell's NIC computed). Prints
one line per packet, "<index> <opcode> <psn> <recomputed ICRC, hex of the
four bytes as they go on the wire> ok|BAD", then a summary line
"scapy ICRC agrees: <n> of <total>". Exits with 1 if any packet has no BTH
or disagrees, or if the capture is empty; with 2 on bad usage.
"""

import sys

from scapy.all import load_contrib, raw, rdpcap

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402  (needs load_contrib first)


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    packets = rdpcap(argv[1])
    agree = 0
    for i, p in enumerate(packets, 1):
        if BTH not in p:
            print(f"{i} no BTH: {p.summary()}")
            continue
        captured = raw(p)[-4:]
        q = p.copy()
        del q[BTH].icrc
        recomputed = raw(q)[-4:]
        good = recomputed == captured
        agree += good
        print(
            f"{i} {p[BTH].opcode:#04x} {p[BTH].psn:#08x} {recomputed.hex()} "
            + ("ok" if good else f"BAD (captured {captured.hex()})")
        )
    print(f"scapy ICRC agrees: {agree} of {len(packets)}")
    return 0 if packets and agree == len(packets) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
