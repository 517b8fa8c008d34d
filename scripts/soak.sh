#!/usr/bin/env bash
# A long soak: mixed RC traffic on many QPs between two processes on the C
# library, every frame both ways under random faults, for as long as asked.
#
#   scripts/soak.sh SECONDS [QPS] [FAULTS]
#
# QPS defaults to 32 and FAULTS (DOORBELL_FAULTS) to
# loss=0.02,dup=0.005,reorder=0.01,corrupt=0.005. The program is
# crates/doorbell-ibverbs/tests/c/soak.c: WRITEs read back, READs, SENDs,
# fetch-and-adds and compare-and-swaps, every byte and every atomic
# checked, completions in posting order. At the end each side's counters
# (DOORBELL_STATS) are checked too: the faults were met (retransmissions,
# bad ICRCs seen, gaps and repeats at the responder) and nothing gave up
# (no retry exceeded). Exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

secs=${1:?usage: scripts/soak.sh SECONDS [QPS] [FAULTS]}
qps=${2:-32}
faults=${3:-loss=0.02,dup=0.005,reorder=0.01,corrupt=0.005}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "soak.sh: building doorbell and the soak program"
cargo build --release --locked -q -p doorbell-cli
doorbell=target/release/doorbell
cc -std=gnu11 -O2 -Wall -o "$work/soak" crates/doorbell-ibverbs/tests/c/soak.c \
    -I crates/doorbell-ibverbs/tests/c -libverbs

port=$((20000 + $$ % 10000))
run_side() { # run_side NAME ADDR SEED ARGS...
    local name=$1 addr=$2 seed=$3
    shift 3
    DOORBELL_FAULTS="$faults,seed=$seed" DOORBELL_STATS="$work/$name.json" \
        "$doorbell" run --addr "$addr" -- "$work/soak" -p "$port" -q "$qps" "$@" \
        >"$work/$name.out" 2>&1
}
echo "soak.sh: $qps QPs for $secs s, faults $faults"
run_side server 127.0.0.2 1 &
server=$!
sleep 0.5
status=0
run_side client 127.0.0.3 2 -t "$secs" 127.0.0.1 || status=$?
wait "$server" || status=$?
cat "$work/client.out" "$work/server.out"
/usr/bin/python3 - "$work" <<'PY' || status=1
import json, sys
work = sys.argv[1]
ok = True
def need(cond, what):
    global ok
    print(("ok " if cond else "FAIL ") + what)
    ok &= cond
c = json.load(open(f"{work}/client.json"))
s = json.load(open(f"{work}/server.json"))
for side, d in (("client", c), ("server", s)):
    hw = d["hw_counters"]
    need(hw["req_transport_retries_exceeded"] == 0, f"{side}: no QP gave up on its retries")
    need(hw["req_rnr_retries_exceeded"] == 0, f"{side}: no QP gave up on RNR")
    need(d["doorbells"]["bad"] == 0, f"{side}: no doorbell was refused")
need(c["packets"]["retransmits"] > 0, "the client sent again what was lost")
need(c["hw_counters"]["rx_icrc_encapsulated"] + s["hw_counters"]["rx_icrc_encapsulated"] > 0,
     "corrupted frames were caught by their ICRC")
need(s["hw_counters"]["out_of_sequence"] > 0, "the server saw gaps")
print("soak.sh: client sent %d packets (%d again), server %d"
      % (c["packets"]["tx"], c["packets"]["retransmits"], s["packets"]["tx"]))
sys.exit(0 if ok else 1)
PY
if [[ $status -ne 0 ]]; then
    echo "soak.sh: FAILED"
    exit 1
fi
echo "soak.sh: passed"
