#!/usr/bin/env bash
# The live-speed figures between two processes on this host, each measured
# with the tool people already use and beside its TCP baseline from the same
# run (docs/benchmarks.md, "Between two processes, with the tools users
# know"):
#
#   - one-way latency: unmodified `ib_write_lat -s 8` on doorbell against a
#     TCP ping-pong (`sockperf ping-pong --tcp --nonblocked`: both sides
#     polling, as ib_write_lat does; sockperf reports half the round trip,
#     and its smallest message is 14 bytes, its own header);
#   - round trip: `doorbell pingpong -s 8` against twice sockperf's figure;
#     both latency figures in BENCH_LAT_ROUNDS rounds (3 unless set), each
#     a sockperf run followed by the two doorbell runs; the table gives the
#     median of the rounds' ratios and their range (a run's latency moves
#     by half or more with where the machine puts its CPUs);
#   - bandwidth: unmodified `ib_write_bw -s 65536` against one iperf3 TCP
#     stream;
#   - between two hosts (BENCH_NETNS=1, as root): two network namespaces
#     joined by a veth pair, as doorbell-cli's netns test builds them;
#     unmodified `ib_write_bw -s 65536` across it against one iperf3 TCP
#     stream across the same veth, in BENCH_VETH_ROUNDS rounds (5 unless
#     set), each an iperf3 run followed by an ib_write_bw run; the table
#     gives the median of the rounds' ratios and their range (both sides
#     run near a core each there, and one run moves by a tenth or more
#     with the shared machine's load); the veth keeps its default MTU
#     (1500 bytes: RoCE MTU 1024) unless BENCH_VETH_MTU says another, as
#     a RoCE fabric's jumbo frames (9000: RoCE MTU 4096), for both tools;
#     each round's line also says how many packets the sending NIC sent
#     again (its statistics file's count: nonzero only where a stalled
#     thread let a timer run out, since a veth loses nothing);
#   - an idle open device: the CPU time all threads of `rping -s` (device
#     open, a listening rdma_cm id, no client) take over BENCH_SECS;
#   - message rate: `ib_write_bw -s 8 -I 8 -l 16` (8-byte inline WRITEs,
#     postlist 16) against 14-byte TCP_NODELAY writes (`sockperf throughput
#     --tcp -m 14 --tcp-avoid-nodelay`, which turns Nagle off there);
#   - beside them, a probe of where the machine has put its CPUs: the rate
#     of a bare two-thread hand-off (doorbell-rt's `handoff` example), before
#     the first figure, before each latency and veth round and after the
#     last, and before each latency round the round trip of one cache line
#     between two threads (`handoff --line`).
#
#   scripts/bench-tools.sh            # 5 s per figure
#   BENCH_SECS=10 scripts/bench-tools.sh
#   BENCH_NETNS=1 scripts/bench-tools.sh   # also the two-host figure (root)
#   BENCH_NETNS=1 BENCH_VETH_ROUNDS=9 scripts/bench-tools.sh
#   BENCH_LAT_ROUNDS=5 scripts/bench-tools.sh
#   BENCH_NETNS=1 BENCH_VETH_MTU=9000 scripts/bench-tools.sh  # jumbo veth
#   BENCH_CPUS=0 scripts/bench-tools.sh    # every process on CPU 0 only
#
# With BENCH_CPUS (a CPU list, as `taskset -c` takes it), every process of
# both sides, doorbell's and TCP's, runs under `taskset -c $BENCH_CPUS`: on
# one CPU, as in a container given one, two programs that poll take turns
# at the scheduler's tick (a few ms a turn for sockperf's ping-pong and
# ib_write_lat, which polls memory), so the latency runs are shortened
# there to 500 iterations and the ping-pong to a tenth of its round trips.
#
# Needs scripts/setup.sh's packages (perftest, sockperf, iperf3). Builds the
# release binaries first. Prints each tool's own result line, then a table.
# A benchmark, not a test: nothing here asserts a speed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

secs=${BENCH_SECS:-5}
pin=${BENCH_CPUS:+taskset -c $BENCH_CPUS}
if [[ -n $pin ]] && ! $pin true 2>/dev/null; then
    echo "bench-tools: BENCH_CPUS=$BENCH_CPUS is not a CPU list this machine can run on (taskset -c takes e.g. 0, or 0,1); nproc says $(nproc)" >&2
    exit 1
fi
lat_n=20000
[[ -n $pin ]] && lat_n=500
for v in BENCH_LAT_ROUNDS BENCH_VETH_ROUNDS; do
    if [[ -n ${!v:-} ]] && ! [[ ${!v} =~ ^[1-9][0-9]?$ ]]; then
        echo "bench-tools: $v=${!v} is no count of rounds: give 1 to 99" >&2
        exit 1
    fi
done
veth_mtu=${BENCH_VETH_MTU:-}
if [[ -n $veth_mtu ]]; then
    if ! [[ $veth_mtu =~ ^[1-9][0-9]{0,4}$ ]] || ((veth_mtu < 1280 || veth_mtu > 65535)); then
        echo "bench-tools: BENCH_VETH_MTU=$veth_mtu is no MTU a veth takes here: give bytes from 1280 to 65535 (9000 for jumbo frames)" >&2
        exit 1
    fi
    if [[ ${BENCH_NETNS:-0} != 1 ]]; then
        echo "bench-tools: BENCH_VETH_MTU is the MTU of the veth rounds, which only BENCH_NETNS=1 runs: set it too" >&2
        exit 1
    fi
fi
for c in ib_write_lat ib_write_bw sockperf iperf3; do
    command -v "$c" >/dev/null || { echo "bench-tools: $c is missing: run scripts/setup.sh" >&2; exit 1; }
done

cargo build --release -q -p doorbell-cli -p doorbell-ibverbs -p doorbell-rdmacm
cargo build --release -q -p doorbell-rt --example handoff
db=target/release/doorbell
srv=127.0.88.2
cli=127.0.88.3

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -f "/tmp/bench-tools-server.$$" "/tmp/bench-tools-stats.$$.json"
}
trap cleanup EXIT

say() { echo "bench-tools: $*" >&2; }

# Where the machine has put its two CPUs, as the rate of a bare two-thread
# hand-off of 64-byte records (M/s; the live bench's baseline for 8-byte
# WRITEs): on the 2-core VM of docs/benchmarks.md it flips between about
# 8 and about 45-65 within minutes, and every figure here that crosses
# between cores moves with it. Printed, not used; "-" where every process
# is kept to the CPUs of BENCH_CPUS, where the probe's two threads would
# take turns.
probe() {
    if [[ -n $pin ]]; then echo "-"; else target/release/examples/handoff 0.3; fi
}

# The round trip of one cache line between two threads (ns; the same
# example with --line): the least a message between the two CPUs waits,
# once each way, which the latency rounds pay several times over. Printed
# beside each latency round, not used; "-" where the CPUs are pinned.
line_probe() {
    if [[ -n $pin ]]; then echo "-"; else target/release/examples/handoff --line 0.3; fi
}

# Runs a server command in the background and a client command in front;
# prints the client's output. $1: seconds to let the server start.
pair() {
    local wait=$1 server=$2 client=$3
    bash -c "$pin $server" >/tmp/bench-tools-server.$$ 2>&1 &
    pids+=($!)
    sleep "$wait"
    local out
    out=$(timeout $((secs * 4 + 60)) bash -c "$pin $client" 2>&1) || {
        say "failed: $client"
        echo "$out" >&2
        cat /tmp/bench-tools-server.$$ >&2
        exit 1
    }
    # The TCP servers serve until stopped; perftest's are done by now.
    kill "${pids[-1]}" 2>/dev/null || true
    wait "${pids[-1]}" 2>/dev/null || true
    echo "$out"
}

# Runs sockperf's TCP server on 127.0.0.1 port $1 and a client against it,
# 14-byte messages for BENCH_SECS; prints the client's output. $2: the
# server's options beyond --tcp; $3: the client's mode and its options.
sockperf_pair() {
    pair 1 "timeout $((secs + 30)) sockperf server --tcp $2 -i 127.0.0.1 -p $1" \
        "sockperf $3 --tcp -i 127.0.0.1 -p $1 -m 14 -t $secs"
}

# True if $1 is a figure as the tools print them (digits, maybe a point).
is_figure() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

probe_start=$(probe)
say "hand-off probe: $probe_start M/s"

lat_rounds=${BENCH_LAT_ROUNDS:-3}
lat_rows=""
lat_probes=""
lat_lines=""
for ((r = 1; r <= lat_rounds; r++)); do
    p=$(probe)
    lat_probes+="${lat_probes:+, }$p"
    l=$(line_probe)
    lat_lines+="${lat_lines:+, }$l"
    say "latency round $r of $lat_rounds (hand-off probe $p M/s, a cache line's round trip $l ns)"
    say "TCP ping-pong, 14 B, polling (sockperf)"
    sp=$(sockperf_pair 11111 --nonblocked "ping-pong --nonblocked")
    grep -E 'Summary' <<<"$sp" >&2
    tcp_lat=$(grep -oP 'Summary: Latency is\s*\K[0-9.]+' <<<"$sp" | head -1)

    say "ib_write_lat -s 8 on doorbell"
    lat=$(pair 1.5 "$db run --addr $srv -- ib_write_lat -s 8 -n $lat_n -p 18601" \
        "$db run --addr $cli -- ib_write_lat -s 8 -n $lat_n -p 18601 $srv")
    lat_row=$(awk '$1 == 8 && NF >= 7' <<<"$lat" | tail -1)
    echo "$lat" | grep -E 't_typical|^ 8 ' >&2
    db_lat=$(awk '{print $5}' <<<"$lat_row")

    # 300 000 round trips a second of BENCH_SECS: a run about as long as
    # sockperf's (a round trip takes about 3 us), so that neither its
    # start (connecting, the first rings, a cold cache) nor a moment of
    # the shared machine's noise is a large part of it. (It was 30 000,
    # set when a round trip took ten times as long; runs had shrunk to a
    # tenth of a second.)
    say "doorbell pingpong -s 8"
    pp_n=$((secs * 300000))
    [[ -n $pin ]] && pp_n=$((secs * 30000))
    pp=$(pair 1 "$db pingpong --addr $srv -s 8 -n $pp_n -p 18602" \
        "$db pingpong --addr $cli -s 8 -n $pp_n -p 18602 $srv")
    echo "$pp" | grep 'usec/iter' >&2
    db_rtt=$(grep -oP '=\s*\K[0-9.]+(?= usec/iter)' <<<"$pp" | head -1)
    for v in tcp_lat db_lat db_rtt; do
        if ! is_figure "${!v}"; then
            say "latency round $r: no figure in the tool's output for $v (got '${!v}'); its lines are above"
            exit 1
        fi
    done
    lat_rows+="${lat_rows:+ }$tcp_lat $db_lat $db_rtt"
done

say "TCP_NODELAY 14 B writes (sockperf throughput)"
st=$(sockperf_pair 11112 "" "throughput --tcp-avoid-nodelay")
grep -E 'Message Rate' <<<"$st" >&2
tcp_rate=$(grep -oP 'Message Rate is\s*\K[0-9.]+' <<<"$st" | head -1)

say "one TCP stream (iperf3)"
ip=$(pair 1 "iperf3 -s -1 -B 127.0.0.1 -p 5301" "iperf3 -c 127.0.0.1 -p 5301 -t $secs -J")
tcp_bw=$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8)' <<<"$ip")

say "ib_write_bw -s 65536 on doorbell"
bw=$(pair 1.5 "$db run --addr $srv -- ib_write_bw -s 65536 -D $secs -p 18603" \
    "$db run --addr $cli -- ib_write_bw -s 65536 -D $secs -p 18603 $srv")
echo "$bw" | grep -E 'BW average|^ 65536 ' >&2
db_bw=$(awk '$1 == 65536 {print $4}' <<<"$bw" | tail -1)

say "ib_write_bw -s 8 -I 8 -l 16 on doorbell"
mr=$(pair 1.5 "$db run --addr $srv -- ib_write_bw -s 8 -I 8 -l 16 -D $secs -p 18604" \
    "$db run --addr $cli -- ib_write_bw -s 8 -I 8 -l 16 -D $secs -p 18604 $srv")
echo "$mr" | grep -E 'MsgRate|^ 8 ' >&2
db_rate=$(awk '$1 == 8 {print $5}' <<<"$mr" | tail -1)

say "an idle open device (rping -s waiting for a client, ${secs} s)"
# CPU time of all the process's threads (schedstat, ns) while rping's
# server waits with the device open and a listening rdma_cm id.
$pin $db run --addr "$srv" -- rping -s -a "$srv" -C 1 >/dev/null 2>&1 &
idle_run=$!
pids+=($idle_run)
sleep 2
idle_pid=$(pgrep -f "rping -s -a $srv" | head -1)
cpu_ns() { local s=0 t; for t in /proc/"$idle_pid"/task/*/schedstat; do s=$((s + $(cut -d' ' -f1 "$t"))); done; echo "$s"; }
idle_a=$(cpu_ns)
sleep "$secs"
idle_b=$(cpu_ns)
kill "$idle_pid" 2>/dev/null || true
wait "$idle_run" 2>/dev/null || true
idle_share=$(/usr/bin/python3 -c "print(f'{($idle_b - $idle_a) / ($secs * 1e9) * 100:.2f}')")
echo "idle device: ${idle_share}% of a core" >&2

veth_rows=""
if [[ ${BENCH_NETNS:-0} == 1 ]]; then
    na=dbbench-$$-a nb=dbbench-$$-b va=dbb$$a vb=dbb$$b
    netns_cleanup() { ip netns del "$na" 2>/dev/null || true; ip netns del "$nb" 2>/dev/null || true; }
    trap 'cleanup; netns_cleanup' EXIT
    ip netns add "$na" && ip netns add "$nb"
    ip link add "$va" netns "$na" type veth peer name "$vb" netns "$nb"
    if [[ -n $veth_mtu ]]; then
        ip -n "$na" link set "$va" mtu "$veth_mtu"
        ip -n "$nb" link set "$vb" mtu "$veth_mtu"
    fi
    ip -n "$na" addr add 10.88.0.1/30 dev "$va"
    ip -n "$nb" addr add 10.88.0.2/30 dev "$vb"
    for ns in "$na" "$nb"; do ip -n "$ns" link set lo up; done
    ip -n "$na" link set "$va" up
    ip -n "$nb" link set "$vb" up
    rounds=${BENCH_VETH_ROUNDS:-5}
    veth_probes=""
    for ((r = 1; r <= rounds; r++)); do
        p=$(probe)
        veth_probes+="${veth_probes:+, }$p"
        say "round $r of $rounds over the veth: one TCP stream (iperf3), then ib_write_bw -s 65536 (hand-off probe $p M/s)"
        vip=$(pair 1 "ip netns exec $na iperf3 -s -1 -B 10.88.0.1 -p 5302" \
            "ip netns exec $nb iperf3 -c 10.88.0.1 -p 5302 -t $secs -J")
        veth_tcp=$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8)' <<<"$vip")
        # The sender's statistics say whether its NIC sent anything again
        # (nothing is lost on a veth: a retransmission there is a timer
        # that a stalled thread let run out).
        vstats=/tmp/bench-tools-stats.$$.json
        rm -f "$vstats"
        vbw=$(pair 1.5 "ip netns exec $na $db run --addr 10.88.0.1 -- ib_write_bw -s 65536 -D $secs -p 18605" \
            "ip netns exec $nb env DOORBELL_STATS=$vstats $db run --addr 10.88.0.2 -- ib_write_bw -s 65536 -D $secs -p 18605 10.88.0.1")
        veth_bw=$(awk '$1 == 65536 {print $4}' <<<"$vbw" | tail -1)
        if ! is_figure "$veth_bw"; then
            say "round $r over the veth: ib_write_bw printed no bandwidth:"
            echo "$vbw" >&2
            exit 1
        fi
        again=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["packets"]["retransmits"])' "$vstats" 2>/dev/null || echo "?")
        echo "round $r: iperf3 $(awk -v b="$veth_tcp" 'BEGIN { printf "%.3f", b / 1e9 }') GB/s received; ib_write_bw (packets its NIC sent again: $again):" >&2
        echo "$vbw" | grep -E 'BW average|^ 65536 ' >&2
        veth_rows+=" $veth_bw $veth_tcp"
    done
fi

probe_end=$(probe)
BT_LAT="$lat_rows" BT_VETH="$veth_rows" /usr/bin/python3 - "${veth_mtu:-1500}" "$tcp_rate" "$tcp_bw" "$db_bw" "$db_rate" "$idle_share" <<'EOF'
import os
import sys
veth_mtu = sys.argv.pop(1)
tcp_rate, tcp_bw, db_bw, db_rate, idle = map(float, sys.argv[1:6])
# The latency rounds: (sockperf's one way, ib_write_lat's, pingpong's round trip) in us.
lat = [float(x) for x in os.environ["BT_LAT"].split()]
assert lat and len(lat) % 3 == 0, f"latency rounds: {lat}"
lat = list(zip(lat[0::3], lat[1::3], lat[2::3]))
# Over the veth: ib_write_bw MiB/s and iperf3 bytes/s, round by round.
veth_rows = [float(x) for x in os.environ["BT_VETH"].split()]
assert len(veth_rows) % 2 == 0, f"veth rounds: {veth_rows}"
# perftest's MB is 2^20 bytes.
db_bw_bytes = db_bw * 2**20
def times(r):
    """A ratio of times, with the digits a ratio far below one needs."""
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.4f}x"
def median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
def span(xs, unit):
    """A figure of each round: the one, or the range."""
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f} {unit}" if len(xs) == 1 else f"{lo:.2f}-{hi:.2f} {unit}"
def ratio(rs, what):
    """The rounds' ratios: the one, or their median and range."""
    if len(rs) == 1:
        return f"{times(rs[0])} {what}"
    return f"median {times(median(rs))} {what}, rounds {times(min(rs))}-{times(max(rs))}"
if len(lat) > 1:
    print("latency, round by round: " + ", ".join(
        f"{d:.2f}/{t:.2f} us = {d / t:.2f}x and {p:.2f}/{2 * t:.2f} us = {p / (2 * t):.2f}x"
        for t, d, p in lat), file=sys.stderr)
rounds = f" ({len(lat)} rounds)" if len(lat) > 1 else ""
rows = [
    (f"one-way latency, 8 B{rounds}", f"ib_write_lat t_typical {span([d for _, d, _ in lat], 'us')}",
     f"sockperf (14 B) {span([t for t, _, _ in lat], 'us')}",
     ratio([d / t for t, d, _ in lat], "TCP's time") + " (target <= 0.5)"),
    (f"round trip, 8 B{rounds}", f"doorbell pingpong {span([p for _, _, p in lat], 'us')}",
     f"sockperf (14 B) x2 {span([2 * t for t, _, _ in lat], 'us')}",
     ratio([p / (2 * t) for t, _, p in lat], "TCP's time") + " (target <= 0.5)"),
    ("bandwidth, 64 KiB", f"ib_write_bw {db_bw_bytes / 1e9:.3f} GB/s", f"iperf3 {tcp_bw / 1e9:.3f} GB/s",
     f"{db_bw_bytes / tcp_bw:.2f}x TCP (target >= 1)"),
    ("message rate, 8 B", f"ib_write_bw {db_rate:.3f} Mpps", f"sockperf (14 B) {tcp_rate / 1e6:.3f} Mmsg/s",
     f"{db_rate * 1e6 / tcp_rate:.2f}x TCP (target >= 2)"),
]
rows.append(("idle open device (rping -s)", f"{idle:.2f}% of a core", "", "(target < 1%)"))
# Over the veth: (ib_write_bw MiB/s, iperf3 bytes/s) per round.
veth = [(b * 2**20, t) for b, t in zip(veth_rows[0::2], veth_rows[1::2])]
if veth:
    ratios = sorted(b / t for b, t in veth)
    print("over the veth, round by round: " + ", ".join(
        f"{b / 1e9:.3f}/{t / 1e9:.3f} GB/s = {b / t:.2f}x" for b, t in veth), file=sys.stderr)
    bws = sorted(b for b, _ in veth)
    tcps = sorted(t for _, t in veth)
    rows.append((f"bandwidth over a veth of MTU {veth_mtu}, 64 KiB ({len(veth)} rounds)",
                 f"ib_write_bw {bws[0] / 1e9:.3f}-{bws[-1] / 1e9:.3f} GB/s",
                 f"iperf3 {tcps[0] / 1e9:.3f}-{tcps[-1] / 1e9:.3f} GB/s",
                 f"median {median(ratios):.2f}x TCP, rounds {ratios[0]:.2f}-{ratios[-1]:.2f}x "
                 + ("(target >= 1)" if veth_mtu == "1500" else "(the target is at MTU 1500)")))
print("| figure | doorbell | TCP baseline (same run) | ratio |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
EOF
echo
echo "hand-off probe (M/s, where the machine put its CPUs): ${probe_start} before the first figure, ${probe_end} after the last; before each latency round: $lat_probes (a cache line's round trip: $lat_lines ns)${veth_probes:+; before each veth round: $veth_probes}"
