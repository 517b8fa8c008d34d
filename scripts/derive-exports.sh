#!/usr/bin/env bash
# Re-derives the export set of doorbell's libibverbs.so.1 from the installed
# Debian binaries and compares it with crates/doorbell-ibverbs/exports.txt.
#
#   scripts/derive-exports.sh            # diff the derived list against the file
#   scripts/derive-exports.sh --write    # rewrite the file from the derived list
#
# Needs the clients installed by scripts/setup.sh and objdump (binutils).
# Exit status: 0 when the file matches, 1 when it differs, 2 on other errors.
#
# The rule (see the header of exports.txt):
#   imports = every undefined IBVERBS_* symbol of the clients below;
#   public  = every default-version (@@) symbol of Debian's own libibverbs.so.1
#             in a public node (IBVERBS_1.x), i.e. the whole public v44 API;
#   exports = imports + public, each with the node and kind (func/object) that
#             Debian's libibverbs.so.1 gives it. An import the real library
#             does not define, or defines in another node, is an error.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
file="$repo_root/crates/doorbell-ibverbs/exports.txt"
real=/usr/lib/x86_64-linux-gnu/libibverbs.so.1
lib=/usr/lib/x86_64-linux-gnu

die() {
    printf 'derive-exports.sh: error: %s\n' "$*" >&2
    exit 2
}
command -v objdump >/dev/null 2>&1 || die "objdump missing (package binutils; run scripts/setup.sh)"
[[ -e $real ]] || die "$real missing (package libibverbs1)"

# The clients: rdma-core's tools, perftest, rdmacm-utils, the providers that
# perftest/pyverbs/UCX load (libmlx5, libefa, librdmacm), UCX's IB transport
# and pyverbs' extension modules.
clients() {
    local f
    for f in /usr/bin/ib_* /usr/bin/ibv_* \
        /usr/bin/{cmtime,mckey,rcopy,rdma_client,rdma_server,rdma_xclient,rdma_xserver} \
        /usr/bin/{riostream,rping,rstream,ucmatose,udaddy,udpong} \
        "$lib"/lib{mlx5,efa,rdmacm}.so.1 \
        "$lib"/ucx/libuct_ib.so.0 \
        /usr/lib/python3/dist-packages/pyverbs/*.so \
        /usr/lib/python3/dist-packages/pyverbs/providers/*/*.so; do
        [[ -f $f ]] && printf '%s\n' "$f"
    done
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

mapfile -t files < <(clients)
((${#files[@]} > 0)) || die "no client binaries found: run scripts/setup.sh"
for must in /usr/bin/ib_write_bw /usr/bin/rping "$lib/libmlx5.so.1" \
    /usr/lib/python3/dist-packages/pyverbs/device.cpython-311-x86_64-linux-gnu.so; do
    [[ -e $must ]] || die "$must missing: run scripts/setup.sh"
done

# objdump -T columns: ADDR FLAGS... SECTION SIZE VERSION NAME. Undefined
# references print their version in parentheses.
for f in "${files[@]}"; do objdump -T "$f"; done |
    awk 'NF > 2 && /\*UND\*/ && $(NF-1) ~ /^\(IBVERBS_/ { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' |
    sort -u >"$tmp/imports"

# Definitions of the real library: default versions only (no parentheses),
# without the ABS symbols that name the nodes themselves.
objdump -T "$real" |
    awk 'NF > 2 && !/\*UND\*/ && !/\*ABS\*/ && $(NF-1) ~ /^IBVERBS_/ {
        kind = ($0 ~ / DO /) ? "object" : "func"; print $NF, $(NF-1), kind }' |
    sort -u >"$tmp/real"

awk 'NR == FNR { def[$1] = $2; next }
     !($1 in def) { printf "import %s@%s is not defined by the real library\n", $1, $2; bad = 1 }
     ($1 in def) && def[$1] != $2 { printf "import %s@%s: the real library defines it in %s\n", $1, $2, def[$1]; bad = 1 }
     END { exit bad }' "$tmp/real" "$tmp/imports" >&2 || die "imports disagree with $real"

# Union, ordered by node (public nodes by minor number, then private) and name.
awk 'NR == FNR { want[$1] = 1; next } ($1 in want) || $2 !~ /PRIVATE/' "$tmp/imports" "$tmp/real" |
    awk '{ key = ($2 ~ /^IBVERBS_1\./) ? sprintf("0 %04d", substr($2, 11)) : "1 " $2; print key, $0 }' |
    sort -k1,1 -k2,2 -k3,3 | cut -d' ' -f3- >"$tmp/derived"

header() {
    cat <<HDR
# Symbols exported by doorbell's libibverbs.so.1: one "symbol version kind"
# per line, kind = func | object. This file is the only list; build.rs turns it
# into the linker's version script and tests/it/symbols.rs checks the built
# library against it. Re-derive with scripts/derive-exports.sh.
#
# How it was derived (Debian 12, rdma-core 44.0-2, perftest 4.5, UCX 1.13.1,
# python3-pyverbs 44.0-2):
#   imports: for f in /usr/bin/ib_* /usr/bin/ibv_* <rdmacm-utils binaries>
#              /usr/lib/x86_64-linux-gnu/lib{mlx5,efa,rdmacm}.so.1
#              /usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0
#              /usr/lib/python3/dist-packages/pyverbs/*.so
#              /usr/lib/python3/dist-packages/pyverbs/providers/*/*.so
#            do objdump -T \$f; done   -> the *UND* symbols with (IBVERBS_*)
#   public:  objdump -T /usr/lib/x86_64-linux-gnu/libibverbs.so.1
#            -> its default-version definitions in IBVERBS_1.x nodes
#   exports = imports + public, node and kind as the real library has them.
# Left out: the real library's compat versions (ibv_*@IBVERBS_1.0 beside a
# default @@IBVERBS_1.1, for binaries linked before 2006) and the private
# symbols no client imports (ibv_cmd_create_cq, __ioctl_final_num_attrs, ...).
#
# Version nodes: IBVERBS_1.x chain in order of x (each names the previous
# one as its parent, 1.0 has none); IBVERBS_PRIVATE_34 stands alone.
# IBVERBS_1.7 holds only ibv_reg_mr_iova, which no client imports (programs get
# ibv_reg_mr_iova2 from the inline wrapper) but which keeps the node.
# Counts: $(awk '{ print $2 }' "$tmp/derived" | uniq -c | awk '{ printf "%s %s, ", $2, $1 }' | sed 's/, $//')
# ($(wc -l <"$tmp/derived") in all; $(wc -l <"$tmp/imports") imported by the clients).
HDR
}

{
    header
    cat "$tmp/derived"
} >"$tmp/file"

if [[ ${1:-} == --write ]]; then
    cp "$tmp/file" "$file"
    printf 'derive-exports.sh: wrote %s (%s symbols)\n' "$file" "$(wc -l <"$tmp/derived")"
    exit 0
fi

[[ -e $file ]] || die "$file missing: run with --write"
if diff -u <(grep -v '^#' "$file" | grep -v '^$') "$tmp/derived"; then
    printf 'derive-exports.sh: %s matches (%s symbols)\n' "$file" "$(wc -l <"$tmp/derived")"
else
    printf 'derive-exports.sh: %s differs from the derived list (- file, + derived)\n' "$file" >&2
    exit 1
fi
