#!/usr/bin/python3
"""Counts the locked (serializing) instructions a profiled run executed.

A locked instruction (a mutex's compare-and-swap, an atomic add, a SeqCst
store, a fence) waits for every earlier store to leave the core; after a
store to a line another core reads (a push into a shared-memory ring) that
is a cache line's crossing, about 150 ns on the 2-core VM of
docs/benchmarks.md. Callgrind prices such an instruction at one; this
script finds them, so that a change to the live path can be checked for
what it waits on as well as for what it executes.

Usage:
    valgrind --tool=callgrind --dump-instr=yes \\
        --callgrind-out-file=/tmp/cg.%p.out target/release/doorbell pingpong ...
    scripts/locked-census.py /tmp/cg.PID.out target/release/doorbell 50000

The third argument divides the counts (the run's round trips, say). The
binary is the one the run executed (the program, or `libibverbs.so` for a
C program run through `doorbell run`); only its instructions are counted.
Prints the total per unit and the busiest instructions with their function.
"""

import collections
import os
import re
import subprocess
import sys

LOCKED = re.compile(r"^(lock\b|xchg\b|mfence\b)")


def locked_instructions(binary):
    """Address -> text of each locked instruction in `binary`."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
        if not m:
            continue
        ins = m.group(2).strip()
        # `xchg %ax,%ax` is a two-byte no-op, not an exchange with memory.
        if LOCKED.match(ins) and "%ax,%ax" not in ins:
            found[int(m.group(1), 16)] = ins
    return found


def costs(path, object_name):
    """(address, function) -> instructions executed there, for the
    instructions of the object whose path ends in `object_name`."""
    names = {"fn": {}, "ob": {}}
    fn = ob = None
    prev = [0, 0]
    skip_next = False
    counts = collections.Counter()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            m = re.match(r"^(c?)(fn|ob)=\((\d+)\)(?: (.*))?$", line)
            if m:
                called, kind, ident, name = m.groups()
                if name:
                    names[kind][ident] = name
                if not called:
                    if kind == "fn":
                        fn = names["fn"].get(ident)
                    else:
                        ob = names["ob"].get(ident)
                continue
            if line.startswith("calls="):
                # The next cost line is the call's inclusive cost.
                skip_next = True
                continue
            if not (line[0].isdigit() or line[0] in "+-*"):
                continue
            parts = line.split()
            pos = []
            for i in range(2):
                p = parts[i]
                if p == "*":
                    v = prev[i]
                elif p[0] in "+-":
                    v = prev[i] + int(p)
                else:
                    v = int(p, 0)
                pos.append(v)
            prev = pos
            if skip_next:
                skip_next = False
                continue
            if ob and ob.endswith(object_name) and len(parts) > 2:
                counts[(pos[0], fn)] += int(parts[2])
    return counts


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, binary, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
    locked = locked_instructions(binary)
    rows = [
        (n, addr, locked[addr], fn or "?")
        for (addr, fn), n in costs(path, os.path.basename(binary)).items()
        if addr in locked
    ]
    rows.sort(reverse=True)
    print(f"locked instructions per unit: {sum(r[0] for r in rows) / per:.1f}")
    for n, addr, ins, fn in rows[:40]:
        print(f"{n / per:7.2f}  {addr:#x}  {ins[:36]:<36}  {fn[:100]}")


if __name__ == "__main__":
    main()
