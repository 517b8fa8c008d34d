//! A live NIC in steady use takes nothing from the allocator: once warm, a
//! ping-pong of 8-byte SENDs and a stream of 64 KiB WRITEs allocate nothing
//! in any thread: the program's, the NICs' workers, the ports' receive
//! threads. Frames live in reused buffers, batches of them in reused
//! lists, and a NIC's inbox keeps its memory.
//!
//! The test binary counts every allocation of the process, so its tests
//! take turns ([`one_at_a_time`]). A thread that seldom runs a NIC (its
//! worker, woken by a timer; a port's receive thread) may still find no
//! spare buffer in its first turns and allocate one: the bound is one
//! allocation in a hundred messages, where a hot path that allocated would
//! make thousands. On a loaded machine the work moves between threads as
//! they get the CPU, and each thread that takes a NIC's work over for the
//! first time fills its own spares once: so the warm-up is repeated, a
//! few times at most, until one of its runs keeps within the bound.
//!
//! With `STEADY_WHO` set, a count over its bound comes with the stack of
//! each allocation it counted.
#![allow(unreachable_pub, missing_docs, dead_code, unsafe_code)]

#[path = "../it/common.rs"]
mod common;
#[path = "../it/net.rs"]
mod net;

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use doorbell_rt::NicOptions;
use doorbell_verbs::{RecvWr, RemoteAddr, SendFlags, SendWr, Wc, WcOpcode, WrOpcode};

use common::{Pair, Side, pair_on_process_memory};
use net::{Timers, caps, exact, lo, udp_only, udp_pair};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Whether each allocation's stack is kept (`STEADY_WHO`, while counting).
static WHO: AtomicBool = AtomicBool::new(false);
/// The stacks kept, with their threads' names.
static STACKS: Mutex<Vec<(String, Backtrace)>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while this thread keeps a stack: what that allocates is not
    /// counted, nor kept.
    static KEEPING: Cell<bool> = const { Cell::new(false) };
}

/// Counts an allocation (and keeps its stack with [`WHO`]).
fn noted() {
    if KEEPING.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if WHO.load(Ordering::Relaxed) {
        KEEPING.set(true);
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        let stack = Backtrace::force_capture();
        STACKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, stack));
        KEEPING.set(false);
    }
}

// SAFETY: every call is handed to the system allocator unchanged; the
// counter is a static atomic, which takes no memory, and the stacks are
// kept (with `STEADY_WHO` only) by ordinary allocations, which the flag
// of the thread that makes them keeps out of the count and from
// recursing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        noted();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        noted();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        noted();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations of the whole process so far.
fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Where a test starts to count: a profiler may start there too
/// (`valgrind --tool=callgrind --zero-before='*counting_starts*'
/// --dump-before='*counting_ends*'` shows who allocated).
#[inline(never)]
fn counting_starts() -> u64 {
    STACKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    WHO.store(std::env::var_os("STEADY_WHO").is_some(), Ordering::Relaxed);
    std::hint::black_box(allocations())
}

/// Where a test stops counting (for a profiler's `--dump-before`).
#[inline(never)]
fn counting_ends(before: u64) -> u64 {
    let n = allocations() - before;
    WHO.store(false, Ordering::Relaxed);
    std::hint::black_box(n)
}

/// Runs `step`, which moves `n` messages, until a run of it allocates at
/// most one in [`PER_ALLOCATION`] of them, [`WARM_RUNS`] times at most
/// (module docs).
fn warm(n: usize, mut step: impl FnMut()) {
    for _ in 0..WARM_RUNS {
        let before = allocations();
        step();
        if allocations() - before <= n as u64 / PER_ALLOCATION {
            return;
        }
    }
}

/// The tests count the process's allocations: one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

const WARM: usize = 3000;
const COUNTED: usize = 3000;
/// Messages (round trips, packets) per allocation allowed, at least.
const PER_ALLOCATION: u64 = 100;
/// Warm-up runs at most ([`warm`]).
const WARM_RUNS: usize = 5;

/// Polls `s`'s CQ until a receive completes; every completion must be
/// good. Allocates nothing.
fn until_received(s: &Side) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wc = [Wc::default(); 4];
    loop {
        let n = s.cq.poll(&mut wc).unwrap();
        let mut received = false;
        for w in &wc[..n] {
            assert!(w.is_ok(), "{w:?}");
            received |= w.opcode == WcOpcode::Recv;
        }
        if received {
            return;
        }
        if n == 0 {
            assert!(Instant::now() < deadline, "no receive completion");
        }
    }
}

/// Polls `s`'s CQ until `n` completions came, all good.
fn until_completed(s: &Side, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wc = [Wc::default(); 4];
    let mut got = 0;
    while got < n {
        let k = s.cq.poll(&mut wc[..(n - got).min(4)]).unwrap();
        for w in &wc[..k] {
            assert!(w.is_ok(), "{w:?}");
        }
        got += k;
        if k == 0 {
            assert!(Instant::now() < deadline, "{got} of {n} completions");
        }
    }
}

fn recv(s: &Side) {
    let sge = [s.mr.sge(0, 64).unwrap()];
    s.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &sge,
    }])
    .unwrap();
}

fn send_inline(s: &Side) {
    let sge = [s.mr.sge(64, 8).unwrap()];
    s.qp.post_send(&[SendWr {
        wr_id: 2,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ud: None,
    }])
    .unwrap();
}

/// `rounds` round trips of an 8-byte inline SEND, each answered by the
/// peer's; a receive is posted again for each one taken.
fn ping_pong(p: &Pair, rounds: usize) {
    for _ in 0..rounds {
        send_inline(&p.a);
        until_received(&p.b);
        recv(&p.b);
        send_inline(&p.b);
        until_received(&p.a);
        recv(&p.a);
    }
}

/// Allocations of the process during `counted` round trips, after `WARM`.
fn ping_pong_allocations(p: &Pair) -> u64 {
    for s in [&p.a, &p.b] {
        for _ in 0..4 {
            recv(s);
        }
    }
    warm(WARM, || ping_pong(p, WARM));
    let before = counting_starts();
    ping_pong(p, COUNTED);
    counting_ends(before)
}

/// `n` 64 KiB WRITEs from A to B, one at a time: 64 packets each over
/// the in-process fabric (MTU 1024), 16 over the ports (MTU 4096).
fn writes(p: &Pair, n: usize) {
    let sge = [p.a.mr.sge(0, 64 << 10).unwrap()];
    let to = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    for _ in 0..n {
        p.a.qp
            .post_send(&[SendWr {
                wr_id: 3,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite(to),
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
        until_completed(&p.a, 1);
    }
}

/// Allocations of the process during `COUNTED / 10` WRITEs of `packets`
/// packets each, once warm.
fn write_allocations(p: &Pair, packets: usize) -> u64 {
    warm(WARM / 10 * packets, || writes(p, WARM / 10));
    let before = counting_starts();
    writes(p, COUNTED / 10);
    counting_ends(before)
}

/// At most one allocation in [`PER_ALLOCATION`] of the `n` messages.
fn expect_few(made: u64, n: usize, what: &str) {
    if made <= n as u64 / PER_ALLOCATION {
        return;
    }
    let stacks = std::mem::take(&mut *STACKS.lock().unwrap_or_else(|e| e.into_inner()));
    let mut who = String::new();
    for (thread, stack) in &stacks {
        who += &format!("--- in thread {thread}:\n{stack}\n");
    }
    if stacks.is_empty() {
        who = "(STEADY_WHO=1 shows their stacks)".into();
    }
    panic!("{made} allocations for {n} {what}\n{who}");
}

/// Both figures for `p`, whose WRITEs are `packets` packets each.
fn expect_few_for(p: &Pair, packets: usize) {
    expect_few(ping_pong_allocations(p), COUNTED, "round trips");
    expect_few(
        write_allocations(p, packets),
        COUNTED / 10 * packets,
        "packets of 64 KiB WRITEs",
    );
}

#[test]
fn nics_of_one_process_allocate_nothing_once_warm() {
    let _turn = one_at_a_time();
    expect_few_for(&pair_on_process_memory(), 64);
}

fn over_ports(opts: impl Fn() -> NicOptions, net: u8) -> Pair {
    udp_pair(
        [lo(net, 2), lo(net, 3)],
        [opts(), opts()],
        caps(32),
        1 << 20,
        Timers {
            mtu: 4096,
            ..Timers::default()
        },
    )
}

#[test]
fn nics_over_shared_memory_allocate_nothing_once_warm() {
    let _turn = one_at_a_time();
    let p = over_ports(|| exact(NicOptions::default()), 60);
    expect_few_for(&p, 16);
    let (pa, pb) = (p.a.nic.port_counters(), p.b.nic.port_counters());
    assert!(pa.shm_tx_frames > 0 && pb.shm_tx_frames > 0, "{pa:?}");
}

#[test]
fn nics_over_udp_allocate_nothing_once_warm() {
    let _turn = one_at_a_time();
    let p = over_ports(udp_only, 61);
    expect_few_for(&p, 16);
    let (pa, pb) = (p.a.nic.port_counters(), p.b.nic.port_counters());
    assert!(pa.tx_datagrams > 0 && pb.tx_datagrams > 0, "{pa:?}");
}
