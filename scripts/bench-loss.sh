#!/usr/bin/env bash
# Recovery under loss (docs/benchmarks.md, "Recovery from loss"): a 64 KiB
# `doorbell pingpong -c` between two processes in a network namespace of
# its own, first on a clean loopback, then with nftables dropping a share of
# the request packets (SENDs; the ACKs are spared), once with adaptive
# retransmission (the default) and once without it (DOORBELL_ADAPTIVE_
# RETRANSMIT=off: resends on NAKs and on the QP's 67 ms ACK timeout only,
# as before). Prints each run's usec/iter, its ratio to the lossless run,
# and how each side's losses were repaired (the hw_counters).
#
#   sudo scripts/bench-loss.sh            # 1000 iterations, 5% loss
#   sudo scripts/bench-loss.sh 2000 10    # 2000 iterations, 10% loss
#
# Root for the namespace; needs nftables (scripts/setup.sh). Frames go
# through the kernel's UDP stack (DOORBELL_SHM=0) one datagram each
# (DOORBELL_UDP_GSO=0), so that nftables sees every packet. A benchmark,
# not a test: nothing here asserts a speed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

iters=${1:-1000}
loss=${2:-5}
[ "$(id -u)" = 0 ] || { echo "bench-loss: needs root (a network namespace)" >&2; exit 1; }
command -v nft >/dev/null || { echo "bench-loss: nft is missing: run scripts/setup.sh" >&2; exit 1; }

cargo build --release -q -p doorbell-cli
db=$PWD/target/release/doorbell
ns=dbloss$$
out=$(mktemp -d)
cleanup() {
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
in_ns() { ip netns exec "$ns" "$@"; }

# $1: run name; $2: adaptive retransmission (on/off). Prints
# "usec/iter nak adaptive timeouts" for the client, and the server's counts.
run() {
    local name=$1 adaptive=$2 port=$((18600 + RANDOM % 300))
    local common=(pingpong -c -s 65536 -n "$iters" -p "$port" --stats --timeout 60)
    in_ns env DOORBELL_SHM=0 DOORBELL_UDP_GSO=0 DOORBELL_ADAPTIVE_RETRANSMIT="$adaptive" \
        "$db" "${common[@]}" --addr 127.0.0.2 >"$out/$name.s.out" 2>"$out/$name.s.err" &
    local srv=$!
    sleep 0.5
    in_ns env DOORBELL_SHM=0 DOORBELL_UDP_GSO=0 DOORBELL_ADAPTIVE_RETRANSMIT="$adaptive" \
        "$db" "${common[@]}" --addr 127.0.0.3 127.0.0.2 >"$out/$name.c.out" 2>"$out/$name.c.err"
    wait "$srv"
    grep -h "usec/iter" "$out/$name.c.out" | sed "s/^/bench-loss: $name: /" >&2
}

# The counter $2 of side $1's stats (0 when not printed: it was zero).
counter() {
    awk -v n="$2" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }' "$1"
}
usec() { awk '/usec\/iter/ { print $(NF-1) }' "$1"; }

drop_requests() {
    in_ns nft add table inet dbloss
    in_ns nft add chain inet dbloss out '{ type filter hook output priority 0 ; }'
    # The BTH's opcode is the first byte after the UDP header: 0x11 is an
    # RC ACK, which is spared.
    in_ns nft add rule inet dbloss out udp dport 4791 '@th,64,8' '!=' 0x11 \
        numgen random mod 100 '<' "$loss" counter drop
}
dropped() {
    in_ns nft list table inet dbloss | awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") print $(i+1) }'
}

run lossless on
drop_requests
run adaptive on
d1=$(dropped)
run timeout-only off
d2=$(($(dropped) - d1))

echo
echo "64 KiB doorbell pingpong -c, $iters iterations, ${loss}% of request packets dropped (ACKs spared)"
printf '%-14s %10s %6s %9s %7s %9s %9s %8s\n' run usec/iter ratio dropped "NAKs" "adaptive" "adp->to" timeouts
base=$(usec "$out/lossless.c.out")
for r in lossless adaptive timeout-only; do
    u=$(usec "$out/$r.c.out")
    case $r in
        lossless) d=0 ;;
        adaptive) d=$d1 ;;
        *) d=$d2 ;;
    esac
    sum() { echo $(( $(counter "$out/$r.c.err" "$1") + $(counter "$out/$r.s.err" "$1") )); }
    printf '%-14s %10s %6s %9s %7s %9s %9s %8s\n' "$r" "$u" \
        "$(awk -v a="$u" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')" "$d" \
        "$(sum packet_seq_err)" "$(sum roce_adp_retrans)" "$(sum roce_adp_retrans_to)" \
        "$(sum local_ack_timeout_err)"
done
echo "(NAKs: packet_seq_err, adaptive: roce_adp_retrans, adp->to: roce_adp_retrans_to,"
echo " timeouts: local_ack_timeout_err; each the sum of both sides)"
