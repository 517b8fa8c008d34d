//! Copies between a buffer of ours and memory the application may unmap at
//! any moment, at the speed of a plain copy: the copy is one instruction
//! (`rep movsb`) that a SIGSEGV/SIGBUS handler recognises by its address.
//! A fault there, at an address on the application's side of the copy,
//! resumes at a fixup that returns the bytes left, so the copy fails
//! instead of the process; any other fault, and any such signal another
//! process or thread sends, goes on to the handler that was there before
//! (or the default action), as the kernel would have delivered it. This is
//! how a kernel's `copy_to_user` survives a bad user pointer (its
//! exception table), and it saves the system call per access that
//! `process_vm_writev` costs (half of a receiving NIC's time for 8-byte
//! WRITEs; decision record 0028).
//!
//! # When it is used
//! [`usable`] says so only if all of these hold; otherwise the caller copies
//! through the kernel (the `vm` module), which is always correct:
//!
//! - the target is x86-64 Linux (elsewhere this module is not built);
//! - the handlers were installed (once per process, on first use);
//! - they are still the process's SIGSEGV and SIGBUS handlers when
//!   [`check_installed`] last looked (a program that installs its own
//!   handler later, without chaining to ours, turns this path off at its
//!   next registration), and ours has not put a previous one back;
//! - the calling thread does not block SIGSEGV or SIGBUS (a synchronous
//!   fault with its signal blocked kills the process whatever the handler),
//!   looked at on its first copy and again every [`RECHECK_EVERY`] times
//!   the thread asks ([`usable`]: once a copy, or once for a read of many
//!   pieces).
//!
//! (`unsafe_code` is allowed for this module alone, where `procmem.rs`
//! declares it.)

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

// Two copies, `doorbell_guarded_read(dst, src, len)` (from the
// application's memory at `src`) and `doorbell_guarded_write(dst, src,
// len)` (into it at `dst`), each returning the number of bytes it did not
// copy (0: all of them). The `rep movsb` at `..._at` is the only
// instruction of each that touches either buffer; a fault in it leaves
// RCX = bytes left, RSI and RDI at the byte it stopped on, and RIP at the
// instruction, and the handler moves RIP to the fixup. The symbols are
// hidden: a shared library built from this crate exports none of them.
core::arch::global_asm!(
    ".pushsection .text.doorbell_guarded_copy,\"ax\",@progbits",
    ".p2align 4",
    ".globl doorbell_guarded_read",
    ".hidden doorbell_guarded_read",
    ".type doorbell_guarded_read,@function",
    "doorbell_guarded_read:",
    "    .cfi_startproc",
    "    mov rcx, rdx",
    ".globl doorbell_guarded_read_at",
    ".hidden doorbell_guarded_read_at",
    "doorbell_guarded_read_at:",
    "    rep movsb",
    "    xor eax, eax",
    "    ret",
    ".globl doorbell_guarded_read_fixup",
    ".hidden doorbell_guarded_read_fixup",
    "doorbell_guarded_read_fixup:",
    "    mov rax, rcx",
    "    ret",
    "    .cfi_endproc",
    ".size doorbell_guarded_read, . - doorbell_guarded_read",
    ".p2align 4",
    ".globl doorbell_guarded_write",
    ".hidden doorbell_guarded_write",
    ".type doorbell_guarded_write,@function",
    "doorbell_guarded_write:",
    "    .cfi_startproc",
    "    mov rcx, rdx",
    ".globl doorbell_guarded_write_at",
    ".hidden doorbell_guarded_write_at",
    "doorbell_guarded_write_at:",
    "    rep movsb",
    "    xor eax, eax",
    "    ret",
    ".globl doorbell_guarded_write_fixup",
    ".hidden doorbell_guarded_write_fixup",
    "doorbell_guarded_write_fixup:",
    "    mov rax, rcx",
    "    ret",
    "    .cfi_endproc",
    ".size doorbell_guarded_write, . - doorbell_guarded_write",
    ".popsection",
);

unsafe extern "C" {
    fn doorbell_guarded_read(dst: *mut u8, src: *const u8, len: usize) -> usize;
    fn doorbell_guarded_write(dst: *mut u8, src: *const u8, len: usize) -> usize;
    static doorbell_guarded_read_at: u8;
    static doorbell_guarded_read_fixup: u8;
    static doorbell_guarded_write_at: u8;
    static doorbell_guarded_write_fixup: u8;
}

/// The signals a bad address raises: SIGSEGV (unmapped, or a write to a
/// read-only page) and SIGBUS (a file mapping past its end).
const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// Copies in a thread between two looks at its signal mask.
const RECHECK_EVERY: u32 = 256;

/// The action of each of [`SIGNALS`] before ours, for what is not ours: a
/// leaked `Box`, or null if unknown (then the default action). Leaked, so
/// that the handler may read it at any time.
static PREVIOUS: [AtomicPtr<libc::sigaction>; 2] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];
/// False once a check found our handlers replaced, our handler put a
/// previous action back, or installing failed.
static ACTIVE: AtomicBool = AtomicBool::new(true);

thread_local! {
    /// This thread's verdict on its signal mask (true: neither signal
    /// blocked), and the copies left before it is looked at again.
    static THREAD_OK: Cell<(bool, u32)> = const { Cell::new((false, 0)) };
}

/// True if the handlers are in and still the process's, as far as the
/// last look found: what [`usable`] asks first, without the thread's
/// mask, for each copy of a read whose thread was found fit once.
pub(super) fn active() -> bool {
    installed() && ACTIVE.load(Ordering::Relaxed)
}

/// True if a guarded copy may be used in this thread now (module docs).
pub(super) fn usable() -> bool {
    if !installed() || !ACTIVE.load(Ordering::Relaxed) {
        return false;
    }
    THREAD_OK
        .try_with(|t| {
            let (ok, left) = t.get();
            if left > 0 {
                t.set((ok, left - 1));
                return ok;
            }
            let ok = thread_takes_faults();
            t.set((ok, RECHECK_EVERY));
            ok
        })
        .unwrap_or(false)
}

/// Looks whether our handlers are still the process's; if a program
/// replaced one, guarded copies stop for good (the kernel's path takes
/// over). Called at each registration, where a system call is cheap.
pub(super) fn check_installed() {
    if !installed() || !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    for sig in SIGNALS {
        let mut cur = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: a query (null new action) that writes only `cur`, a live
        // local of the right type.
        let rc = unsafe { libc::sigaction(sig, std::ptr::null(), cur.as_mut_ptr()) };
        // SAFETY: zeroed is a valid sigaction, and on success the kernel
        // filled it in.
        let cur = unsafe { cur.assume_init() };
        if rc != 0 || cur.sa_sigaction != on_fault as *const () as usize {
            ACTIVE.store(false, Ordering::Relaxed);
            return;
        }
    }
}

/// Copies `buf.len()` bytes from address `addr` into `buf`; `Err(())` if
/// a page of the range is not mapped readable.
pub(super) fn read(addr: u64, buf: &mut [u8]) -> Result<(), ()> {
    // SAFETY: `buf` is live and exclusively ours for its length. `addr` is
    // memory no Rust reference points into (`ProcessMemory::grant`'s
    // contract), read only by the instruction the handler recovers; the
    // caller checked `usable()`, so a fault there returns here.
    let left =
        unsafe { doorbell_guarded_read(buf.as_mut_ptr(), addr as usize as *const u8, buf.len()) };
    if left == 0 { Ok(()) } else { Err(()) }
}

/// Copies `data` to address `addr`; `Err(())` if a page of the range is not
/// mapped writable (the bytes before it are then written).
pub(super) fn write(addr: u64, data: &[u8]) -> Result<(), ()> {
    // SAFETY: `data` is live for its length and only read. `addr` is memory
    // no Rust reference points into (`ProcessMemory::grant`'s contract),
    // written only by the instruction the handler recovers, as a device's
    // DMA would write it; the caller checked `usable()`, so a fault there
    // returns here.
    let left =
        unsafe { doorbell_guarded_write(addr as usize as *mut u8, data.as_ptr(), data.len()) };
    if left == 0 { Ok(()) } else { Err(()) }
}

/// Whether the handlers are in: [`NOT_YET`], [`IN`] or [`REFUSED`].
static INSTALLED: AtomicU8 = AtomicU8::new(NOT_YET);
const NOT_YET: u8 = 0;
const IN: u8 = 1;
const REFUSED: u8 = 2;

/// Held while the handlers go in. A lock, not a `OnceLock`: the runtime's
/// fork handlers hold it across a `fork()` (decision record 0068), so a
/// fork while another thread installs them waits for it, where a
/// `OnceLock` would be left running in the child, whose first copy would
/// then wait for ever for a thread it does not have. A leaf lock: only
/// `sigaction` and an allocation run under it.
static INSTALLING: Mutex<()> = Mutex::new(());

/// [`INSTALLING`], held (for the runtime's fork handlers).
pub(super) fn hold_for_fork() -> MutexGuard<'static, ()> {
    INSTALLING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Installs the handlers, once per process; tells whether they are in.
fn installed() -> bool {
    match INSTALLED.load(Ordering::Acquire) {
        NOT_YET => {}
        state => return state == IN,
    }
    let _installing = hold_for_fork();
    match INSTALLED.load(Ordering::Acquire) {
        NOT_YET => {}
        state => return state == IN,
    }
    let ok = SIGNALS
        .iter()
        .zip(&PREVIOUS)
        .all(|(&sig, prev)| install(sig, prev));
    if !ok {
        ACTIVE.store(false, Ordering::Relaxed);
    }
    // Release: a thread that sees IN sees the handlers' slots filled.
    INSTALLED.store(if ok { IN } else { REFUSED }, Ordering::Release);
    ok
}

/// Keeps `a` for the handler to read for ever.
fn keep(slot: &AtomicPtr<libc::sigaction>, a: libc::sigaction) {
    slot.store(Box::into_raw(Box::new(a)), Ordering::Release);
}

fn install(sig: libc::c_int, prev: &AtomicPtr<libc::sigaction>) -> bool {
    // The action now, kept before ours goes in so that the handler never
    // runs without it; then ours, swapped in by one call that also says
    // what it replaced, kept too if a thread changed it in between.
    let mut before = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a query that writes only `before`, a live local.
    if unsafe { libc::sigaction(sig, std::ptr::null(), before.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: zeroed is a valid sigaction, and the kernel filled it in.
    let before = unsafe { before.assume_init() };
    keep(prev, before);
    let mut new = MaybeUninit::<libc::sigaction>::zeroed();
    let mut replaced = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: `new` is a zeroed sigaction (valid: empty mask, no flags),
    // filled in field by field; sigaction reads it and writes `replaced`.
    // The handler is an `extern "C"` function of the SA_SIGINFO shape that
    // lives as long as the process. SA_ONSTACK: a stack overflow elsewhere
    // reaches the previous handler on the alternate stack it expects.
    let ok = unsafe {
        let n = new.as_mut_ptr();
        (*n).sa_sigaction = on_fault as *const () as usize;
        (*n).sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut (*n).sa_mask);
        libc::sigaction(sig, n, replaced.as_mut_ptr()) == 0
    };
    if !ok {
        return false;
    }
    // SAFETY: the kernel filled `replaced` in.
    let replaced = unsafe { replaced.assume_init() };
    if replaced.sa_sigaction != before.sa_sigaction || replaced.sa_flags != before.sa_flags {
        keep(prev, replaced);
    }
    true
}

/// True if the calling thread does not block either of [`SIGNALS`].
fn thread_takes_faults() -> bool {
    let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: a query of the calling thread's mask (null new set) that
    // writes only `set`; sigismember only reads it.
    unsafe {
        if libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), set.as_mut_ptr()) != 0 {
            return false;
        }
        SIGNALS
            .iter()
            .all(|&s| libc::sigismember(set.as_ptr(), s) == 0)
    }
}

/// True if the fault in `uc` is one of our copies', at an address on the
/// application's side of it; then RIP now points at the copy's fixup.
///
/// # Safety
/// `uc` is the context the kernel passed an SA_SIGINFO handler, and
/// `info` its siginfo, for a signal the kernel raised for a fault.
unsafe fn resume_copy(info: *const libc::siginfo_t, uc: *mut libc::ucontext_t) -> bool {
    // SAFETY: the caller's contract; the registers are read, and RIP is
    // written only to a fixup, which leaves the copy with RCX (the bytes
    // left) as its result.
    unsafe {
        let g = &mut (*uc).uc_mcontext.gregs;
        let rip = g[libc::REG_RIP as usize] as usize;
        let (foreign, fixup) = if rip == std::ptr::addr_of!(doorbell_guarded_read_at) as usize {
            (
                g[libc::REG_RSI as usize],
                std::ptr::addr_of!(doorbell_guarded_read_fixup),
            )
        } else if rip == std::ptr::addr_of!(doorbell_guarded_write_at) as usize {
            (
                g[libc::REG_RDI as usize],
                std::ptr::addr_of!(doorbell_guarded_write_fixup),
            )
        } else {
            return false;
        };
        // The application's side: from where the copy stopped, for the
        // bytes it had left. A fault on our own buffer is a bug of ours,
        // and goes on like any other.
        let (at, left) = (foreign as usize, g[libc::REG_RCX as usize] as usize);
        let addr = (*info).si_addr() as usize;
        if addr < at || addr - at >= left.max(1) {
            return false;
        }
        g[libc::REG_RIP as usize] = fixup as i64;
        true
    }
}

/// Puts `prev` (null: the default action) back for `sig`, and stops
/// guarded copies: our handler is no longer there to catch them.
fn restore(sig: libc::c_int, prev: *const libc::sigaction) {
    ACTIVE.store(false, Ordering::Relaxed);
    let dfl = MaybeUninit::<libc::sigaction>::zeroed();
    let a = if prev.is_null() { dfl.as_ptr() } else { prev };
    // SAFETY: `a` is a kept previous action or a zeroed sigaction
    // (SIG_DFL, empty mask); sigaction only reads it.
    unsafe { libc::sigaction(sig, a, std::ptr::null_mut()) };
}

/// The handler: resumes a fault of a copy at its fixup; delivers anything
/// else as the kernel would have without us. Async-signal-safe: it reads
/// the context and atomics, and calls only `sigaction`, `pthread_sigmask`
/// and `raise`.
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // si_code > 0: raised by the kernel for a fault; <= 0: sent by a
    // process (kill, tgkill, sigqueue), never ours to resume.
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_fault = !info.is_null() && unsafe { (*info).si_code } > 0;
    // SAFETY: as above, and `ctx` is the ucontext of that signal.
    if from_fault && unsafe { resume_copy(info, ctx.cast()) } {
        return;
    }
    let slot = SIGNALS.iter().position(|&s| s == sig).unwrap_or(0);
    let prev = PREVIOUS[slot].load(Ordering::Acquire).cast_const();
    let handler = if prev.is_null() {
        libc::SIG_DFL
    } else {
        // SAFETY: a non-null pointer in PREVIOUS is a leaked Box, never
        // freed.
        unsafe { (*prev).sa_sigaction }
    };
    match handler {
        libc::SIG_IGN if !from_fault => {}
        libc::SIG_DFL | libc::SIG_IGN => {
            // A fault returns to its instruction, which faults again under
            // the action put back, as without us. A sent signal is raised
            // again: blocked while this handler runs, it is delivered under
            // the default action as the handler returns.
            restore(sig, prev);
            if !from_fault {
                // SAFETY: raise is async-signal-safe.
                unsafe { libc::raise(sig) };
            }
        }
        h => {
            // SAFETY: `prev` is non-null here (a handler was kept). The
            // previous handler is called as the kernel would have: reset
            // first if it asked (SA_RESETHAND), under its own mask (plus
            // the signal unless SA_NODEFER; the kernel restores the
            // thread's mask when this handler returns), by the shape its
            // flags declare.
            unsafe {
                let flags = (*prev).sa_flags;
                if flags & libc::SA_RESETHAND != 0 {
                    restore(sig, std::ptr::null());
                }
                let mut mask = (*prev).sa_mask;
                if flags & libc::SA_NODEFER == 0 {
                    libc::sigaddset(&mut mask, sig);
                } else {
                    let mut one = MaybeUninit::<libc::sigset_t>::zeroed();
                    libc::sigemptyset(one.as_mut_ptr());
                    libc::sigaddset(one.as_mut_ptr(), sig);
                    libc::pthread_sigmask(libc::SIG_UNBLOCK, one.as_ptr(), std::ptr::null_mut());
                }
                libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
                if flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(h);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                    f(sig);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap2::MmapMut;

    /// A thread installs the handlers when another forks: the child, which
    /// has no copy of that thread, must find their lock free (the fork
    /// waits for it), not wait for ever on its first copy. Runs in a
    /// process of its own, where no other test's thread holds a lock of
    /// its own across the fork.
    #[test]
    fn a_child_forked_while_the_handlers_go_in_finds_their_lock_free() {
        if !doorbell_cprobe::alone::in_own_process(
            "procmem::guard::tests::a_child_forked_while_the_handlers_go_in_finds_their_lock_free",
        ) {
            return;
        }
        crate::process::os::tests::a_child_forked_while_held_finds_it_free(
            hold_for_fork,
            || {
                drop(hold_for_fork());
                installed()
            },
            "the signal handlers' lock",
        );
        doorbell_cprobe::alone::passed();
    }

    /// Sets the protection of the `i`th page of `map`.
    fn protect(map: &MmapMut, i: usize, prot: libc::c_int) {
        let at = map.as_ptr() as usize + i * 4096;
        // SAFETY: a page of a mapping this test owns; no reference into it
        // is used while it is not readable and writable.
        let rc = unsafe { libc::mprotect(at as *mut libc::c_void, 4096, prot) };
        assert_eq!(rc, 0);
    }

    // Pages are made inaccessible with mprotect, not unmapped: another
    // test thread could map something new into a hole.
    #[test]
    fn copies_succeed_and_faults_fail_the_copy_only() {
        assert!(usable(), "the test threads block neither signal");
        let mut map = MmapMut::map_anon(2 * 4096).unwrap();
        map[4090..4096].copy_from_slice(b"abcdef");
        let at = map.as_ptr() as u64;
        let mut b = [0u8; 6];
        read(at + 4090, &mut b).unwrap();
        assert_eq!(&b, b"abcdef");
        write(at + 10, b"xyz").unwrap();
        assert_eq!(&map[10..13], b"xyz");

        // Read-only: reads work, a write faults (SEGV_ACCERR).
        protect(&map, 1, libc::PROT_READ);
        read(at + 4096, &mut b).unwrap();
        assert_eq!(write(at + 4100, b"no"), Err(()));
        // No access at all: reads fault too.
        protect(&map, 1, libc::PROT_NONE);
        assert_eq!(read(at + 4096, &mut b), Err(()));
        protect(&map, 1, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(&map[4096..4104], &[0; 8], "nothing was written");
        check_installed();
        assert!(usable(), "our handlers are still in");
    }

    #[test]
    fn a_write_across_into_a_hole_writes_the_bytes_before_it() {
        assert!(usable());
        let mut map = MmapMut::map_anon(2 * 4096).unwrap();
        let at = map.as_ptr() as u64;
        protect(&map, 1, libc::PROT_NONE);
        assert_eq!(write(at + 4092, b"12345678"), Err(()));
        protect(&map, 1, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(&map[4092..4100], b"1234\0\0\0\0");
        map[0] = 1;
    }

    #[test]
    fn a_file_mapping_past_its_end_fails_with_sigbus_caught() {
        assert!(usable());
        let f = tempfile_of(4096);
        // SAFETY: a shared mapping of a file only this test uses.
        let map = unsafe { memmap2::MmapOptions::new().len(8192).map_mut(&f) }.unwrap();
        let at = map.as_ptr() as u64;
        write(at, b"in").unwrap();
        assert_eq!(write(at + 4096, b"past"), Err(()));
        let mut b = [0u8; 2];
        assert_eq!(read(at + 4100, &mut b), Err(()));
        drop(map);
    }

    fn tempfile_of(len: u64) -> std::fs::File {
        let path = std::env::temp_dir().join(format!("doorbell-guard-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(len).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    const CHILD: &str = "DOORBELL_GUARD_TEST_CHILD";

    extern "C" fn theirs(_: libc::c_int) {
        // SAFETY: _exit is async-signal-safe and ends the process.
        unsafe { libc::_exit(42) }
    }

    /// Runs the test `name` alone in a fresh copy of this test binary,
    /// where it calls `child` and then ends; returns how that process
    /// ended. For tests whose last step is a real fault.
    fn in_child(name: &str, child: impl FnOnce()) -> std::process::Output {
        if std::env::var_os(CHILD).is_some() {
            child();
            // SAFETY: _exit ends the child at once; reached only if the
            // fault `child` ends with did not end it first.
            unsafe { libc::_exit(7) }
        }
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap()
    }

    /// An address that was mapped and no longer is (the child runs one
    /// thread, so nothing maps there meanwhile).
    fn unmapped() -> u64 {
        let map = MmapMut::map_anon(4096).unwrap();
        map.as_ptr() as u64
    }

    /// A guarded copy to an unmapped page fails; then a real store there,
    /// which must fault the process for real.
    fn caught_then_real_fault() {
        assert!(usable());
        let at = unmapped();
        assert_eq!(write(at, b"caught"), Err(()));
        assert_eq!(read(at, &mut [0u8; 4]), Err(()));
        // SAFETY: deliberately not: a real fault of the test's own.
        unsafe { std::ptr::write_volatile(at as *mut u8, 1) };
    }

    /// Installs `theirs` for SIGSEGV (before doorbell's, in a child).
    fn install_theirs() {
        let mut act = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: installs `theirs` as a plain handler; `act` is a zeroed
        // sigaction with only the handler set.
        unsafe {
            (*act.as_mut_ptr()).sa_sigaction = theirs as *const () as usize;
            libc::sigaction(libc::SIGSEGV, act.as_ptr(), std::ptr::null_mut());
        }
    }

    /// A SIGSEGV another process or thread sends is delivered as without
    /// doorbell: here, with the default action, it kills.
    #[test]
    fn a_sent_sigsegv_is_delivered_as_without_us() {
        let name = "procmem::guard::tests::a_sent_sigsegv_is_delivered_as_without_us";
        let out = in_child(name, || {
            let dfl = MaybeUninit::<libc::sigaction>::zeroed();
            // SAFETY: puts the default action back (a zeroed sigaction),
            // so that ours is installed over it; then sends the signal.
            unsafe {
                libc::sigaction(libc::SIGSEGV, dfl.as_ptr(), std::ptr::null_mut());
                assert!(usable());
                libc::raise(libc::SIGSEGV);
            }
        });
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "the child: {out:?}"
        );
    }

    /// A fault on doorbell's own side of a copy (a bug of ours) is not
    /// taken for the application's: it goes on to the previous handler.
    #[test]
    fn a_fault_on_our_own_side_of_a_copy_is_not_swallowed() {
        let name = "procmem::guard::tests::a_fault_on_our_own_side_of_a_copy_is_not_swallowed";
        let out = in_child(name, || {
            install_theirs();
            assert!(usable());
            let src = [7u8; 16];
            // SAFETY: deliberately not: a read whose own buffer (`dst`) is
            // unmapped, which must reach `theirs`.
            unsafe { doorbell_guarded_read(unmapped() as *mut u8, src.as_ptr(), 16) };
        });
        assert_eq!(out.status.code(), Some(42), "the child: {out:?}");
    }

    /// A program's own SIGSEGV handler, installed before doorbell's, still
    /// gets the program's own faults; a fault of a guarded copy never
    /// reaches it.
    #[test]
    fn faults_that_are_not_ours_reach_the_programs_handler() {
        let name = "procmem::guard::tests::faults_that_are_not_ours_reach_the_programs_handler";
        let out = in_child(name, || {
            install_theirs();
            caught_then_real_fault();
        });
        assert_eq!(out.status.code(), Some(42), "the child: {out:?}");
    }

    /// With no handler of the program's, a fault that is not ours kills
    /// the process with SIGSEGV, as without doorbell. (The previous
    /// handler here is std's stack-overflow one, which puts the default
    /// back for a fault that is no overflow.)
    #[test]
    fn faults_that_are_not_ours_still_kill_by_default() {
        let name = "procmem::guard::tests::faults_that_are_not_ours_still_kill_by_default";
        let out = in_child(name, caught_then_real_fault);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "the child: {out:?}"
        );
    }
}
