#!/usr/bin/env bash
# Installs what the workspace's tests need on a Debian (12, bookworm) machine.
#
#   scripts/setup.sh            # as root, or as a user with sudo
#
# Idempotent: every requirement is checked first (a file, a command, a Python
# import) and apt runs only if something is missing, so a second run takes well
# under a second. Uses only Debian's package archive and PyPI.
#
# What it provides:
#   - rdma-core's public headers (infiniband/verbs.h, infiniband/mlx5dv.h) and
#     pkg-config data: libibverbs-dev. On Debian 12 mlx5dv.h ships in
#     libibverbs-dev itself, so the rdma-core package is not needed.
#   - ibverbs-utils (ibv_devinfo, ibv_rc_pingpong, ...), iproute2 (ip netns,
#     veth), tshark (RoCEv2 dissector), gcc and pkg-config.
#   - The C clients of doorbell's libibverbs.so.1 (crates/doorbell-ibverbs),
#     whose imports define its export set and whose loading its tests check:
#     perftest (ib_write_bw, ...), rdmacm-utils (rping, ...), python3-pyverbs,
#     ibverbs-providers (Debian's libmlx5/libefa, which perftest and pyverbs
#     load), and binutils (objdump, readelf, and ld.bfd, which links the
#     library). UCX (libucx0, ucx-utils) too when the archive has it: its
#     libuct_ib is one more importer.
#   - For doorbell's librdmacm.so.1 (crates/doorbell-rdmacm): librdmacm-dev
#     (<rdma/rdma_cma.h>, which its C tests compile against) and qperf, one
#     more rdma_cm client.
#   - The TCP baselines of the live-speed benchmarks (scripts/bench-tools.sh):
#     sockperf and iperf3.
#   - nftables (nft), with which the two-namespace soak has the kernel drop
#     packets.
#   - cargo-fuzz (`cargo install cargo-fuzz --locked`, from crates.io) for
#     the fuzz targets of fuzz/ (scripts/fuzz.sh), which also need rustup's
#     nightly toolchain (not installed here: the machine has it; a warning
#     says so if it does not).
#   - A Python virtual environment at <repo>/.venv with scapy. Tests and tools
#     run it as <repo>/.venv/bin/python. It is built from Debian's
#     /usr/bin/python3 (python3-venv supplies ensurepip), not from whatever
#     python3 comes first on PATH, so it does not depend on a pyenv install.
#     Set PYTHON=/path/to/python3 to choose another interpreter.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo_root/.venv"
python="${PYTHON:-/usr/bin/python3}"

log() { printf 'setup.sh: %s\n' "$*"; }
die() {
    printf 'setup.sh: error: %s\n' "$*" >&2
    exit 1
}

if [[ $EUID -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    die "not root and no sudo: run this script as root"
fi

# --- Debian packages -------------------------------------------------------

missing=()
want() { # want PACKAGE: queue a package once
    local p
    for p in "${missing[@]}"; do [[ $p == "$1" ]] && return 0; done
    missing+=("$1")
}
need_file() { [[ -e $1 ]] || { log "missing $1 (package $2)"; want "$2"; }; }
need_cmd() { command -v "$1" >/dev/null 2>&1 || { log "missing command $1 (package $2)"; want "$2"; }; }

need_file /usr/include/infiniband/verbs.h libibverbs-dev
need_file /usr/include/infiniband/mlx5dv.h libibverbs-dev
need_cmd ibv_devinfo ibverbs-utils
need_cmd tshark tshark
need_cmd ip iproute2
need_cmd gcc gcc
need_cmd cc gcc
need_cmd pkg-config pkg-config
need_cmd ibv_devices ibverbs-utils
need_cmd ib_write_bw perftest
need_cmd rping rdmacm-utils
need_file /usr/include/rdma/rdma_cma.h librdmacm-dev
need_cmd qperf qperf
need_cmd sockperf sockperf
need_cmd iperf3 iperf3
need_cmd nft nftables
need_file /usr/lib/python3/dist-packages/pyverbs/__init__.py python3-pyverbs
need_file /usr/lib/x86_64-linux-gnu/libmlx5.so.1 ibverbs-providers
need_file /usr/lib/x86_64-linux-gnu/libefa.so.1 ibverbs-providers
need_cmd objdump binutils
need_cmd readelf binutils
need_cmd ld.bfd binutils
# A test whose tool hangs prints the hung process's stacks with it.
need_cmd gdb gdb
# Optional: only where the archive has UCX (Debian 12 does).
ucx_wanted=()
[[ -e /usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0 ]] || ucx_wanted+=(libucx0)
command -v ucx_info >/dev/null 2>&1 || ucx_wanted+=(ucx-utils)
if command -v pkg-config >/dev/null 2>&1 && ! pkg-config --exists libibverbs; then
    log "missing pkg-config data for libibverbs (package libibverbs-dev)"
    want libibverbs-dev
fi

# The venv needs an interpreter whose ensurepip works. Debian splits ensurepip
# out of python3 into python3-venv; only ask apt for it when the interpreter is
# Debian's own.
venv_ok() { [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import scapy' >/dev/null 2>&1; }
if ! venv_ok; then
    if [[ $python != */* ]]; then # a command name: resolve it on PATH
        python="$(command -v "$python")" || die "PYTHON=${PYTHON:-} is not on PATH"
    fi
    if [[ ! -x $python ]]; then
        [[ $python == /usr/bin/python3 ]] || die "PYTHON=$python is not an executable"
        log "missing $python (packages python3, python3-venv)"
        want python3
        want python3-venv
    elif ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        [[ $python == /usr/bin/python3 ]] || die "$python cannot create a venv (no ensurepip)"
        log "$python has no ensurepip (package python3-venv)"
        want python3-venv
    fi
fi

if ((${#missing[@]} == 0 && ${#ucx_wanted[@]} == 0)); then
    log "Debian packages: all present, apt skipped"
else
    export DEBIAN_FRONTEND=noninteractive
    if [[ " ${missing[*]} " == *" tshark "* ]]; then
        # Do not make dumpcap setuid (and do not ask about it).
        log "preseeding wireshark-common/install-setuid=false"
        echo 'wireshark-common wireshark-common/install-setuid boolean false' |
            "${sudo[@]}" debconf-set-selections
    fi
    log "apt-get update"
    "${sudo[@]}" apt-get update -q
    # The optional packages join the list only if the archive has them.
    for p in "${ucx_wanted[@]}"; do
        if [[ -n $(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)"') ]]; then
            log "missing $p (optional, in the archive)"
            want "$p"
        else
            log "optional $p is not in the archive, skipped"
        fi
    done
    if ((${#missing[@]} > 0)); then
        log "apt-get install ${missing[*]}"
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
fi

# --- cargo-fuzz ----------------------------------------------------------------

if cargo fuzz --version >/dev/null 2>&1; then
    log "cargo-fuzz: $(cargo fuzz --version), install skipped"
else
    log "cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked
fi
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    log "warning: no nightly toolchain, which cargo fuzz needs (rustup toolchain install nightly)"
fi

# --- Python venv with scapy --------------------------------------------------

if venv_ok; then
    log "venv: $venv already has scapy, pip skipped"
else
    if [[ -d $venv ]]; then
        # Present but broken or without scapy (e.g. its base interpreter went
        # away): rebuild it from scratch.
        log "venv: rebuilding $venv with $python"
        "$python" -m venv --clear "$venv"
    else
        log "venv: creating $venv with $python"
        "$python" -m venv "$venv"
    fi
    log "venv: pip install scapy"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check scapy
    venv_ok || die "scapy still does not import in $venv"
fi

# --- Summary ---------------------------------------------------------------

scapy_version="$("$venv/bin/python" -c 'import scapy; print(scapy.VERSION)')"
tshark_version="$(tshark --version 2>/dev/null | head -n1 || true)"
log "ok: mlx5dv.h at /usr/include/infiniband/mlx5dv.h"
log "ok: $tshark_version"
log "ok: scapy $scapy_version; use $venv/bin/python"
