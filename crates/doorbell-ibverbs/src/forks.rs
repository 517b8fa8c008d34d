//! The library's process-wide locks across `fork()` (decision record 0068).
//!
//! A `pthread_atfork` prepare handler takes every process-wide lock of the
//! library and of doorbell-cma ([`hold`]) in the forking thread and keeps
//! their guards in that thread's thread-local; the parent handler drops
//! them; the child handler (in the child's only thread, the copy of the
//! forking one, with the same thread-locals) forgets what threads it does
//! not have were doing, then drops them. So a child never finds a lock held
//! by a thread it does not have: its calls into the library (a device
//! list, a CM id, an event) do not hang, though objects the parent made
//! belong to threads the child does not have and fail there (a fresh
//! `ibv_open_device` works). The process's NIC does the same for its own
//! locks (`doorbell_rt`'s `process/os.rs`), whose handlers the
//! constructor here registers too.
//!
//! Every one of these locks but the first is a leaf: while one is held, no
//! other lock is taken, nothing is waited for (no device command, no round
//! trip to the NIC's thread, no event) and nothing is dropped that would.
//! The first, the hosting's loading lock, is held while libmlx5 loads,
//! whose constructor takes the hosting's providers lock; the thread that
//! loads takes it with no lock held, and nothing under it takes the
//! runtime's locks (`hosted::LOADING`). So the order below cannot
//! deadlock against any thread, and neither can the runtime's handler,
//! which takes its state, spare stores and signal handlers' lock before
//! this one runs (this one is registered first, when the library is
//! loaded, and prepare handlers run in reverse order of registration).
//!
//! The `unsafe` here is registering the handlers, placing their
//! registration among the library's constructors, and the test's fork
//! (`unsafe_code` is allowed for this module alone, as for the FFI
//! modules).

#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::MutexGuard;
use std::sync::atomic::AtomicBool;

use crate::events::{ROUTER, Router};
use crate::handles::Kind;

/// Every process-wide lock of the library and of doorbell-cma, held, in
/// the order they are taken (fields drop in the same order).
pub(crate) struct Held {
    _loading: Option<MutexGuard<'static, ()>>,
    rdma_cm: crate::rdma_cm::ForkHeld,
    _device: MutexGuard<'static, Option<Result<&'static crate::device::Device, core::ffi::c_int>>>,
    _watch: MutexGuard<'static, crate::stats::Watch>,
    _hosted: crate::hosted::ForkHeld,
    _router: MutexGuard<'static, Router>,
    _live: MutexGuard<'static, BTreeMap<usize, Kind>>,
    _cma: doorbell_cma::ForkHeld,
}

/// Takes every lock, in one order: the hosting's loading lock (which waits
/// for a thread loading libmlx5, whose constructor takes the hosting's
/// providers lock), rdma_cm's (devices, their CM services, default PDs,
/// events and answers handed out, destroyed channels), the device's
/// description, the statistics, the hosting's (providers,
/// contexts), the event router, the live handles, then doorbell-cma's
/// (services, ports).
pub(crate) fn hold() -> Held {
    Held {
        _loading: crate::hosted::hold_loading_for_fork(),
        rdma_cm: crate::rdma_cm::hold_for_fork(),
        _device: crate::device::hold_for_fork(),
        _watch: crate::stats::hold_for_fork(),
        _hosted: crate::hosted::hold_for_fork(),
        _router: crate::events::lock(&ROUTER),
        _live: crate::handles::hold_for_fork(),
        _cma: doorbell_cma::hold_for_fork(),
    }
}

thread_local! {
    /// Every lock, held by this thread across a `fork()`.
    static HELD: Cell<Option<Held>> = const { Cell::new(None) };
}

/// Set as the prepare handler starts, for the test's thread that holds
/// the locks until a fork waits for them.
#[cfg(test)]
static PREPARING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn prepare() {
    // Relaxed: a flag alone, nothing is published with it.
    #[cfg(test)]
    PREPARING.store(true, std::sync::atomic::Ordering::Relaxed);
    // The thread-local first: its first use registers its destructor,
    // which takes the loader's lock; a thread loading libmlx5 holds that
    // lock while its constructor registers with the hosting (`DRIVERS`).
    // A thread that is exiting has no thread-locals left; it then forks
    // without the locks, as if no handler were registered.
    if HELD.try_with(|_| ()).is_err() {
        return;
    }
    let held = hold();
    let _ = HELD.try_with(|h| h.set(Some(held)));
}

extern "C" fn parent() {
    let _ = HELD.try_with(|h| drop(h.take()));
}

extern "C" fn child() {
    let _ = HELD.try_with(|h| {
        if let Some(mut held) = h.take() {
            held.rdma_cm.forget_in_child();
            drop(held);
        }
    });
}

/// Registers the handlers when the library is loaded, before any of its
/// code runs and so before any of the locks is first taken: an ELF
/// constructor, as C libraries register theirs. (Registered from the
/// exports instead, this module would sit in a circle with them: the
/// exports' boundary would call it, and it takes the locks of the modules
/// whose exports go through that boundary.)
// SAFETY: `.init_array` holds pointers to functions the loader calls
// with no arguments it needs (glibc passes argc, argv and envp, which an
// `extern "C" fn()` ignores), once, before any other code of the library
// runs; `register_at_load` only registers handlers and never unwinds.
// `#[used]` keeps the entry where nothing names it.
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER_AT_LOAD: extern "C" fn() = register_at_load;

extern "C" fn register_at_load() {
    register();
    // The runtime's after the library's, so that their prepare runs first
    // (decision record 0068); a failure leaves them to its first NIC.
    let _ = doorbell_rt::register_fork_handlers();
}

/// Registers the fork handlers, once per process (a child inherits them).
/// A failure (ENOMEM) leaves forks as they were without the handlers. A
/// flag, not a `Once`, which a fork while another thread ran it would
/// leave running in the child.
fn register() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, std::sync::atomic::Ordering::AcqRel) {
        // SAFETY: the handlers are `extern "C"` functions without arguments
        // that live as long as the library (pthread_atfork unregisters them
        // if it is unloaded) and never unwind: they only lock, move guards
        // and reset a flag.
        let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    /// How long the parent waits for its child before calling it hung.
    const CHILD_WAIT: Duration = Duration::from_secs(10);

    /// Every process-wide lock of the library and of doorbell-cma, each
    /// taken alone through its own module, not through [`hold`] (whose
    /// list is what is tested).
    fn each_lock() -> Vec<crate::events::OneLock> {
        let mut all = crate::rdma_cm::each_lock_for_test();
        all.extend(crate::hosted::each_lock_for_test());
        all.extend([
            (
                "device",
                (|| Box::new(crate::device::hold_for_fork())) as fn() -> Box<dyn std::any::Any>,
            ),
            ("statistics", || Box::new(crate::stats::hold_for_fork())),
            ("event router", || Box::new(crate::events::lock(&ROUTER))),
            ("live handles", || Box::new(crate::handles::hold_for_fork())),
            ("cma services", || {
                doorbell_cma::hold_one_for_fork(0).expect("the services' lock")
            }),
            ("cma ports", || {
                doorbell_cma::hold_one_for_fork(1).expect("the ports' lock")
            }),
        ]);
        all
    }

    /// The test's list holds every lock there is: as many as the two
    /// crates' sources declare (`static NAME: Mutex<..>` or `RwLock<..>`).
    /// A lock added to them without a place in the list fails here.
    #[test]
    fn the_test_knows_every_lock() {
        fn statics(dir: &std::path::Path) -> usize {
            let mut n = 0;
            for e in std::fs::read_dir(dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    n += statics(&path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    n += text
                        .lines()
                        .filter(|l| {
                            let l = l
                                .trim_start()
                                .trim_start_matches("pub(crate) ")
                                .trim_start_matches("pub ");
                            l.starts_with("static ")
                                && (l.contains(": Mutex<")
                                    || l.contains(": std::sync::Mutex<")
                                    || l.contains(": RwLock<"))
                        })
                        .count();
                }
            }
            n
        }
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let declared = statics(&here.join("src")) + statics(&here.join("../doorbell-cma/src"));
        assert_eq!(each_lock().len(), declared);
    }

    /// Every process-wide value of the workspace's crates made on first
    /// use behind a `Once`, `OnceLock` or `LazyLock` (a `static` of one),
    /// each with why a fork while another thread makes it cannot leave it
    /// running for the child (decision record 0068). A new one fails here
    /// until it is judged and listed.
    #[test]
    fn the_test_knows_every_once() {
        const KNOWN: &[(&str, &str, &str)] = &[
            (
                "doorbell-ibverbs/src/hosted/mod.rs",
                "DEVICE",
                "made under the loading lock, which the handlers hold",
            ),
            ("doorbell-ibverbs/src/fuzzing.rs", "SHARED", "fuzzing only"),
            (
                "doorbell-plot/src/font.rs",
                "DONE",
                "not linked into the C library",
            ),
            (
                "doorbell-rt/src/buffers.rs",
                "SHARED",
                "the spare stores: the runtime's prepare handler gets each, waiting for its making",
            ),
        ];
        fn scan(dir: &std::path::Path, crates: &std::path::Path, out: &mut Vec<(String, String)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    scan(&path, crates, out);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let file = path.strip_prefix(crates).unwrap().display().to_string();
                    for l in std::fs::read_to_string(&path).unwrap().lines() {
                        let l = l
                            .trim_start()
                            .trim_start_matches("pub(crate) ")
                            .trim_start_matches("pub ");
                        let Some(rest) = l.strip_prefix("static ") else {
                            continue;
                        };
                        let Some((name, ty)) = rest.split_once(": ") else {
                            continue;
                        };
                        let ty = ty.trim_start_matches("std::sync::");
                        if ty.starts_with("OnceLock<")
                            || ty.starts_with("LazyLock<")
                            || ty.starts_with("Once ")
                        {
                            out.push((file.clone(), name.to_string()));
                        }
                    }
                }
            }
        }
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let crates = crates.canonicalize().unwrap();
        let mut found = Vec::new();
        for e in std::fs::read_dir(&crates).unwrap() {
            let src = e.unwrap().path().join("src");
            if src.is_dir() {
                scan(&src, &crates, &mut found);
            }
        }
        found.sort();
        found.dedup();
        let mut known: Vec<(String, String)> = KNOWN
            .iter()
            .map(|(f, n, _)| ((*f).to_string(), (*n).to_string()))
            .collect();
        known.sort();
        assert_eq!(found, known, "a once-only static to judge against fork");
    }

    /// For each lock of the library in turn, a thread holds it alone when
    /// another forks (as a call that opens the devices, allocates a PD or
    /// hands out an event holds one): the child, which has no copy of that
    /// thread, must find it free (the fork waits for it), not hang when it
    /// takes every lock. A lock the handlers leave out is held at the fork,
    /// and its child hangs. Runs in a process of its own, where no other
    /// test's thread holds a lock across the fork.
    #[test]
    fn a_child_forked_while_a_lock_is_held_finds_it_free() {
        if !doorbell_cprobe::alone::in_own_process(
            "forks::tests::a_child_forked_while_a_lock_is_held_finds_it_free",
        ) {
            return;
        }
        // The handlers were registered when the binary was loaded
        // (`REGISTER_AT_LOAD`): nothing here registers them.
        for (name, take) in each_lock() {
            // A thread opening the devices when the process forks: the
            // child must not wait for it.
            crate::rdma_cm::hold_for_fork().set_opening_for_test(true);
            PREPARING.store(false, Ordering::Relaxed);
            let (held, is_held) = std::sync::mpsc::channel();
            let holder = std::thread::spawn(move || {
                let one = take();
                held.send(()).unwrap();
                // Until the fork below waits for the lock (or, where the
                // handlers leave it out, long after it has happened).
                let start = Instant::now();
                while !PREPARING.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(2)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(50));
                drop(one);
            });
            is_held.recv().unwrap();
            let status = in_a_child(child_takes_the_locks);
            holder.join().unwrap();
            // The parent handler released them too.
            drop(hold());
            crate::rdma_cm::hold_for_fork().set_opening_for_test(false);
            assert!(
                exited_well(status),
                "{name}: the child hung or failed: status {status:?}"
            );
        }
        doorbell_cprobe::alone::passed();
    }

    /// A child forked after rdma_cm opened the devices opens devices of
    /// its own. The parent's are contexts of the parent's NIC, of whose
    /// threads the child has none: a PD asked of one is refused there.
    /// The child's `rdma_get_devices` must give another context, of a NIC
    /// the child starts, that makes a PD. Runs in a process of its own,
    /// whose NIC no other test shares.
    #[test]
    fn a_child_forked_after_rdma_cm_opened_the_devices_opens_its_own() {
        if !doorbell_cprobe::alone::in_own_process(
            "forks::tests::a_child_forked_after_rdma_cm_opened_the_devices_opens_its_own",
        ) {
            return;
        }
        let parents = first_cm_device();
        assert!(!parents.is_null(), "rdma_get_devices in the parent");
        assert!(makes_a_pd(parents), "a PD on the parent's device");
        let status = in_a_child(|| {
            let refused = !makes_a_pd(parents);
            let mine = first_cm_device();
            refused && !mine.is_null() && mine != parents && makes_a_pd(mine)
        });
        assert!(
            exited_well(status),
            "the child's rdma_cm device: status {status:?}"
        );
        assert!(makes_a_pd(parents), "the parent's device after the fork");
        doorbell_cprobe::alone::passed();
    }

    /// A thread is making the hosted device (inside its `OnceLock`, where
    /// libmlx5 is loaded) when another forks: the fork must wait for it,
    /// so that the child finds the device made (or failed), not a making
    /// left running by a thread it does not have, on which its first
    /// hosted call would wait for ever. Runs in a process of its own.
    #[test]
    fn a_child_forked_while_the_hosted_device_is_made_finds_it_made() {
        use crate::hosted::tests::{LOADING_BEGAN, PAUSE_MS};
        if !doorbell_cprobe::alone::in_own_process(
            "forks::tests::a_child_forked_while_the_hosted_device_is_made_finds_it_made",
        ) {
            return;
        }
        let config = doorbell_rt::ProcessNicConfig::from_env().expect("the default NIC");
        PAUSE_MS.store(300, Ordering::Relaxed);
        let maker = {
            let config = config.clone();
            std::thread::spawn(move || {
                let _ = crate::hosted::device(&config, 1);
            })
        };
        while !LOADING_BEGAN.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let status = in_a_child(|| {
            let _ = crate::hosted::device(&config, 1);
            true
        });
        maker.join().unwrap();
        assert!(
            exited_well(status),
            "the child hung on the hosted device: status {status:?}"
        );
        doorbell_cprobe::alone::passed();
    }

    /// A CM id the parent made is the parent's CM's, which has no thread
    /// in a child (and whose lock that thread may have held at the fork):
    /// in the child, a listen on it fails with ENODEV, rather than
    /// succeed and never hear a request, and destroying it takes nothing
    /// of the parent's CM. The parent's id still listens.
    #[test]
    fn a_child_forked_after_making_a_cm_id_cannot_use_it_and_can_destroy_it() {
        if !doorbell_cprobe::alone::in_own_process(
            "forks::tests::a_child_forked_after_making_a_cm_id_cannot_use_it_and_can_destroy_it",
        ) {
            return;
        }
        const RDMA_PS_TCP: crate::abi::rdma_port_space = 0x0106;
        assert!(!first_cm_device().is_null(), "the parent's device");
        let mut id = core::ptr::null_mut();
        // SAFETY: `id` is a live local to write the new id to; a NULL
        // channel asks for a synchronous id.
        let rc = unsafe {
            crate::rdma_cm::doorbell_rdma_create_id(
                core::ptr::null_mut(),
                &mut id,
                core::ptr::null_mut(),
                RDMA_PS_TCP,
            )
        };
        assert_eq!(rc, 0, "rdma_create_id");
        // SAFETY: sockaddr_in is plain data; all-zero is the wildcard
        // address, port 0 (an ephemeral one).
        let mut any: libc::sockaddr_in = unsafe { core::mem::zeroed() };
        any.sin_family = libc::AF_INET as libc::sa_family_t;
        // SAFETY: `id` is live, `any` a sockaddr_in read through the
        // generic pointer, as C callers pass it.
        let rc = unsafe { crate::rdma_cm::doorbell_rdma_bind_addr(id, (&raw mut any).cast()) };
        assert_eq!(rc, 0, "rdma_bind_addr");
        let status = in_a_child(|| {
            let refused = crate::rdma_cm::doorbell_rdma_listen(id, 1) == -1
                && crate::boundary::errno() == libc::ENODEV;
            refused && crate::rdma_cm::doorbell_rdma_destroy_id(id) == 0
        });
        assert!(
            exited_well(status),
            "the child's listen on the parent's id: status {status:?}"
        );
        assert_eq!(
            crate::rdma_cm::doorbell_rdma_listen(id, 1),
            0,
            "the parent listens"
        );
        assert_eq!(crate::rdma_cm::doorbell_rdma_destroy_id(id), 0);
        doorbell_cprobe::alone::passed();
    }

    /// rdma_cm's first device, or NULL.
    fn first_cm_device() -> *mut crate::abi::ibv_context {
        let mut n = 0;
        // SAFETY: `n` is a live local to write the count to; the list is
        // read within its count and freed once.
        unsafe {
            let list = crate::rdma_cm::doorbell_rdma_get_devices(&mut n);
            if list.is_null() {
                return core::ptr::null_mut();
            }
            let first = if n > 0 { *list } else { core::ptr::null_mut() };
            crate::rdma_cm::doorbell_rdma_free_devices(list);
            first
        }
    }

    /// Whether `ctx` makes a PD (which is then freed).
    fn makes_a_pd(ctx: *mut crate::abi::ibv_context) -> bool {
        let pd = crate::pd::ibv_alloc_pd(ctx);
        !pd.is_null() && crate::pd::ibv_dealloc_pd(pd) == 0
    }

    /// In the child: C calls that take the live handles, the destroyed
    /// channels and the events handed out (each refusing a NULL), then
    /// each lock alone through its own module (so one that [`hold`] leaves
    /// out is still taken), then every lock at once; and no opening of the
    /// devices to wait for.
    fn child_takes_the_locks() -> bool {
        let mut event = core::ptr::null_mut();
        // SAFETY: `event` is a live local to write an event pointer to;
        // the NULL channel and event are refused without being read.
        let refused = unsafe {
            crate::rdma_cm::doorbell_rdma_get_cm_event(core::ptr::null_mut(), &mut event) == -1
                && crate::rdma_cm::doorbell_rdma_ack_cm_event(core::ptr::null_mut()) == -1
        };
        for (_, take) in each_lock() {
            drop(take());
        }
        let all = hold();
        let opening = all.rdma_cm.opening_for_test();
        drop(all);
        refused && !opening
    }

    /// Forks (in a process of one test: [`doorbell_cprobe::alone`]); the
    /// child runs `child`, which makes library calls only, and leaves with
    /// _exit (0 if `child` said true). The child's wait status, as
    /// [`wait_for`] gives it.
    fn in_a_child(child: impl FnOnce() -> bool) -> Option<libc::c_int> {
        // SAFETY: fork in a process of this one test; the child runs
        // `child` and leaves with _exit, running none of the harness's
        // exit paths a second time.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = child();
            // SAFETY: as above.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        wait_for(pid)
    }

    /// Whether a child ended on its own with status 0.
    fn exited_well(status: Option<libc::c_int>) -> bool {
        status.is_some_and(|s| libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0)
    }

    /// The child's wait status, or `None` if it has not ended after
    /// [`CHILD_WAIT`] (it is then killed).
    fn wait_for(pid: libc::pid_t) -> Option<libc::c_int> {
        let start = Instant::now();
        let mut status = 0;
        while start.elapsed() < CHILD_WAIT {
            // SAFETY: `pid` is our child; `status` is a live local.
            match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
                0 => std::thread::sleep(Duration::from_millis(10)),
                r if r == pid => return Some(status),
                _ => return None,
            }
        }
        // SAFETY: `pid` is our child, not yet reaped; it is killed and
        // reaped here.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
        None
    }
}
