#!/usr/bin/env python3
"""Fails if any crate's modules import each other in a circle.

    scripts/check-modules.py [--graph]

For every crate under crates/, reads the library's source files (tests,
benches and the binary's main.rs are not part of a crate's module graph),
finds each module's uses of other modules of the same crate (`crate::x`,
`crate::{x, ..}`, `super::x`, and the crate root's own code naming a child
module), and looks for strongly connected components. The crate root counts
as a module: lib.rs re-exporting a child (`pub use x::..`) is not a use, but
lib.rs code calling into a child is. Comments and `#[cfg(test)] mod tests`
blocks are ignored. `--graph` prints every crate's edges.

It reads Rust with regular expressions, not a parser: good enough for this
workspace's style (one `use` per path, modules named in snake case), and it
errs towards reporting an edge that is not there rather than missing one.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def strip(text):
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    return "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))


def module_name(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return "::".join(rel) or "crate"


def graph(src):
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or (f == "main.rs" and dirpath == src):
                continue
            path = os.path.join(dirpath, f)
            name = module_name(src, path)
            text = strip(open(path, encoding="utf-8").read())
            deps = set()
            for m in re.finditer(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
                deps.add(m.group(1))
            for m in re.finditer(r"crate::\{([^}]*)\}", text):
                for item in m.group(1).split(","):
                    item = item.strip().split("::")[0]
                    if item:
                        deps.add(item)
            for m in re.finditer(r"crate::([A-Z][A-Za-z0-9_]*)", text):
                deps.add(m.group(1))
            parent = name.split("::")[:-1] if name != "crate" else []
            for m in re.finditer(r"super::([a-z_][a-z0-9_]*)", text):
                deps.add("::".join(parent + [m.group(1)]))
            for m in re.finditer(r"super::(?:\{|[A-Z])", text):
                deps.add("::".join(parent) or "crate")
            if name == "crate":
                body = "\n".join(
                    l
                    for l in text.split("\n")
                    if not re.match(r"\s*(pub(\(crate\))? )?(use|mod) ", l)
                )
                kids = {os.path.splitext(f)[0] for f in os.listdir(src)}
                for m in re.finditer(r"^use ([a-z_][a-z0-9_]*)::", text, re.M):
                    deps.add(m.group(1))
                for k in kids:
                    if re.search(r"(?<![:\w])" + re.escape(k) + r"::", body):
                        deps.add(k)
            mods[name] = deps
    names = set(mods)

    def resolve(d):
        parts = d.split("::")
        for i in range(len(parts), 0, -1):
            cand = "::".join(parts[:i])
            if cand in names:
                return cand
        return "crate"

    return {m: {resolve(d) for d in ds} - {m} for m, ds in mods.items()}


def cycles(g):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def main():
    show = "--graph" in sys.argv[1:]
    bad = 0
    crates = os.path.join(ROOT, "crates")
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        if not os.path.isdir(src):
            continue
        g = graph(src)
        found = cycles(g)
        if show:
            print(crate)
            for m in sorted(g):
                print(f"  {m}: {', '.join(sorted(g[m])) or '-'}")
        for comp in found:
            bad += 1
            print(f"check-modules: {crate}: modules in a circle: {', '.join(comp)}", file=sys.stderr)
            for m in comp:
                inside = sorted(g[m] & set(comp))
                print(f"    {m} uses {', '.join(inside)}", file=sys.stderr)
    if bad:
        print("check-modules: break each circle by moving what both sides need into a lower module", file=sys.stderr)
        return 1
    print("check-modules: no circle of modules in any crate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
