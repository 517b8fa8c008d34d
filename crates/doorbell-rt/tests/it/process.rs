//! The process's NIC ([`ProcessNic`]): one per process, shared while held,
//! restarted after the last drop, talking to itself, one address per
//! process, blocking signals in its threads, and fresh in a child after
//! `fork()`.
//!
//! The NIC is process-global, so the tests that acquire it take [`serial`]
//! first. Automatically picked addresses come from subnets of this test
//! binary's own (`127.P.20-22.x`, see [`lo`]), never from 127.0.0.x. The
//! tests that need a process of their own (two processes; fork) run this
//! binary again as a child with `DOORBELL_IT_ROLE` set, which makes
//! [`child_role`] do that job instead of returning at once.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};

use doorbell_hif::DeviceLink;
use doorbell_rt::{ProcessNic, ProcessNicConfig, ProcessNicError, RtError};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, Qp, QpInitAttr, QpType, RcEndpoint, RemoteAddr, SendFlags, SendWr,
    WcOpcode, WcStatus, WrOpcode,
};

use crate::common::{FULL, pattern, post, wait};
use crate::net::{Timers, caps, connect_qp, lo};

const ROLE_VAR: &str = "DOORBELL_IT_ROLE";
const FIRST_VAR: &str = "DOORBELL_IT_FIRST";

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn cfg(name: &str) -> ProcessNicConfig {
    ProcessNicConfig {
        name: name.to_owned(),
        ..ProcessNicConfig::default()
    }
}

/// One context on the process's NIC with two RC QPs connected to each
/// other through the NIC's own address.
struct Looped {
    qa: Qp,
    qb: Qp,
    cq: Cq,
    mr: Mr,
    ctx: Context,
}

impl Looped {
    fn new(p: &ProcessNic) -> Self {
        let link: Arc<dyn DeviceLink> = p.nic().clone();
        let ctx = Context::open(link).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = || {
            pd.create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                cap: caps(16),
                sq_sig_all: false,
                srq: None,
            })
            .unwrap()
        };
        let (qa, qb) = (qp(), qp());
        let mr = pd.reg_mr(1 << 16, Access(FULL)).unwrap();
        let ea = RcEndpoint {
            gid: ctx.gid(),
            qpn: qa.qpn(),
            psn: Psn::new(0x10),
        };
        let eb = RcEndpoint {
            gid: ctx.gid(),
            qpn: qb.qpn(),
            psn: Psn::new(0x20),
        };
        connect_qp(&qa, &ea, &eb, Timers::default());
        connect_qp(&qb, &eb, &ea, Timers::default());
        Self {
            qa,
            qb,
            cq,
            mr,
            ctx,
        }
    }

    /// Posts an RDMA WRITE of `len` bytes of `seed`'s pattern from the
    /// MR's start to its second half, from QP A to QP B; returns the data.
    fn post_write(&self, len: usize, seed: u8) -> Vec<u8> {
        let data = pattern(len, seed);
        self.mr.write(0, &data).unwrap();
        let sge = [self.mr.sge(0, len as u32).unwrap()];
        let remote = RemoteAddr {
            addr: self.mr.addr() + (1 << 15),
            rkey: self.mr.rkey(),
        };
        post(
            &self.qa,
            SendWr {
                wr_id: 7,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite(remote),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        );
        data
    }

    /// RDMA WRITEs `len` bytes from the MR's start to its second half,
    /// from QP A to QP B, and checks they arrived.
    fn write(&self, len: usize, seed: u8) {
        let data = self.post_write(len, seed);
        let w = wait(&self.cq, 1)[0];
        assert_eq!(
            (w.wr_id, w.status, w.opcode),
            (7, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0u8; len];
        self.mr.read(1 << 15, &mut got).unwrap();
        assert_eq!(got, data);
        let _ = (&self.qb, &self.ctx);
    }
}

#[test]
fn acquires_share_one_nic_until_the_last_drop_stops_it() {
    let _s = serial();
    let first = lo(20, 2);
    let a = ProcessNic::acquire_from(&cfg("share"), first).unwrap();
    // Another configuration shares the running NIC: it is read at start.
    let b = ProcessNic::acquire_from(&cfg("other"), lo(20, 9)).unwrap();
    assert!(Arc::ptr_eq(a.nic(), b.nic()));
    assert!(Arc::ptr_eq(a.memory(), b.memory()));
    assert_eq!((a.addr(), b.addr()), (first, first));
    assert_eq!((a.name(), b.name()), ("share", "share"));
    assert_eq!(
        a.nic().gid()[10..],
        [0xff, 0xff, first[0], first[1], first[2], first[3]]
    );
    let nic = Arc::downgrade(a.nic());
    let c = a.clone();
    drop(a);
    drop(b);
    assert!(nic.upgrade().is_some(), "a clone still holds it");
    drop(c);
    assert!(nic.upgrade().is_none(), "the last drop stopped it");
    // The port was unbound: a new NIC starts on the same address.
    let d = ProcessNic::acquire_from(&cfg("again"), first).unwrap();
    assert_eq!((d.addr(), d.name()), (first, "again"));
    assert!(!d.nic().is_forked_copy());
}

#[test]
fn a_nic_talks_to_itself_two_qps_of_one_context() {
    let _s = serial();
    let p = ProcessNic::acquire_from(&cfg("self"), lo(20, 2)).unwrap();
    let l = Looped::new(&p);
    for (i, len) in [1usize, 4096, 20_000].into_iter().enumerate() {
        l.write(len, i as u8);
    }
    // Through the NIC's own ring (shared memory, as to any NIC of this
    // host), not the kernel's UDP stack. (The last ACK may still be in the
    // ring when the WRITE completes: counts are read once it is taken.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let pc = loop {
        let pc = p.nic().port_counters();
        if pc.shm_rx_frames == pc.shm_tx_frames || std::time::Instant::now() > deadline {
            break pc;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(pc.shm_tx_frames > 0, "{pc:?}");
    assert_eq!(pc.shm_rx_frames, pc.shm_tx_frames, "{pc:?}");
    assert_eq!((pc.tx_datagrams, pc.rx_datagrams), (0, 0), "{pc:?}");
    drop(l);
    drop(p);
    // With shared memory off, through the kernel and back to the socket.
    let off = ProcessNicConfig {
        shm: false,
        ..cfg("self")
    };
    let p = ProcessNic::acquire_from(&off, lo(20, 2)).unwrap();
    let l = Looped::new(&p);
    l.write(4096, 7);
    let pc = p.nic().port_counters();
    assert!(pc.tx_datagrams > 0 && pc.rx_datagrams > 0, "{pc:?}");
    assert_eq!((pc.shm_tx_frames, pc.shm_rx_frames), (0, 0), "{pc:?}");
    drop(l);
    // The same holds on a restarted NIC.
    drop(p);
    let p = ProcessNic::acquire_from(&cfg("self"), lo(20, 2)).unwrap();
    Looped::new(&p).write(100, 9);
}

#[test]
fn a_taken_or_foreign_address_is_refused_and_the_search_skips_taken_ones() {
    let _s = serial();
    let taken = lo(20, 200);
    let _squatter = UdpSocket::bind((Ipv4Addr::from(taken), 4791)).unwrap();
    let fixed = ProcessNicConfig {
        name: "fixed".into(),
        addr: Some(taken),
        link_down: None,
        shm: true,
        udp_gso: true,
        pcap: None,
        ..cfg("fixed")
    };
    let e = ProcessNic::acquire(&fixed).unwrap_err();
    assert_eq!(e, ProcessNicError::AddressInUse { addr: taken });
    assert_eq!(e.errno(), libc::EADDRINUSE);
    // Picked automatically from the taken one: the next.
    let p = ProcessNic::acquire_from(&cfg("auto"), taken).unwrap();
    assert_eq!(p.addr(), lo(20, 201));
    drop(p);
    // Nothing free from .254 on (the only one searched is taken).
    let _squatter2 = UdpSocket::bind((Ipv4Addr::from(lo(20, 254)), 4791)).unwrap();
    let e = ProcessNic::acquire_from(&cfg("auto"), lo(20, 254)).unwrap_err();
    assert_eq!(
        e,
        ProcessNicError::NoFreeAddress {
            first: lo(20, 254),
            last: lo(20, 254)
        }
    );
    // An address this host does not have (TEST-NET-1).
    let foreign = ProcessNicConfig {
        name: "foreign".into(),
        addr: Some([192, 0, 2, 1]),
        link_down: None,
        shm: true,
        udp_gso: true,
        pcap: None,
        ..cfg("foreign")
    };
    let e = ProcessNic::acquire(&foreign).unwrap_err();
    assert!(
        matches!(
            e,
            ProcessNicError::Start {
                addr: [192, 0, 2, 1],
                source: RtError::Socket {
                    kind: std::io::ErrorKind::AddrNotAvailable,
                    ..
                }
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL);
    assert!(e.to_string().contains("192.0.2.1"), "{e}");
}

#[test]
fn the_config_comes_from_the_environment_and_bad_values_are_named() {
    let get = |vars: &'static [(&'static str, &'static str)]| {
        ProcessNicConfig::from_lookup(move |k| {
            vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).into())
        })
    };
    assert_eq!(get(&[]).unwrap(), ProcessNicConfig::default());
    assert_eq!(ProcessNicConfig::default().name, "doorbell0");
    assert_eq!(
        get(&[("DOORBELL_NAME", "mlx5_7"), ("DOORBELL_ADDR", "10.1.2.3")]).unwrap(),
        ProcessNicConfig {
            name: "mlx5_7".into(),
            addr: Some([10, 1, 2, 3]),
            link_down: None,
            shm: true,
            udp_gso: true,
            pcap: None,
            ..cfg("mlx5_7")
        }
    );
    let f = get(&[(
        "DOORBELL_FAULTS",
        "loss=0.05, dup=0.01,reorder=0.02,corrupt=0.001,seed=7,delay_us=50",
    )])
    .unwrap()
    .faults
    .unwrap();
    assert_eq!(
        (f.loss, f.duplicate, f.reorder, f.corrupt, f.seed),
        (0.05, 0.01, 0.02, 0.001, 7)
    );
    assert_eq!(f.max_delay, doorbell_types::Duration::from_us(50));
    for bad in [
        "loss",
        "loss=2",
        "loss=x",
        "drop=0.1",
        "loss=0.6,dup=0.6",
        "seed=-1",
    ] {
        let e = ProcessNicConfig::from_lookup(|k| (k == "DOORBELL_FAULTS").then(|| bad.into()))
            .unwrap_err();
        assert!(e.to_string().starts_with("DOORBELL_FAULTS="), "{bad}: {e}");
        assert_eq!(e.errno(), libc::EINVAL);
    }
    assert_eq!(
        get(&[("DOORBELL_TRACE", "/tmp/t.json")]).unwrap().trace,
        Some("/tmp/t.json".into())
    );
    assert_eq!(get(&[("DOORBELL_TRACE", "")]).unwrap().trace, None);
    // Empty means unset: pick one.
    assert_eq!(get(&[("DOORBELL_ADDR", "")]).unwrap().addr, None);
    assert!(!get(&[("DOORBELL_SHM", "off")]).unwrap().shm);
    assert!(!get(&[("DOORBELL_SHM", "0")]).unwrap().shm);
    assert!(get(&[("DOORBELL_SHM", "1")]).unwrap().shm);
    let e = get(&[("DOORBELL_SHM", "maybe")]).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(e.to_string().contains("DOORBELL_SHM=\"maybe\""), "{e}");
    assert!(!get(&[("DOORBELL_UDP_GSO", "off")]).unwrap().udp_gso);
    assert!(get(&[]).unwrap().udp_gso);
    assert!(get(&[]).unwrap().direct_copy);
    assert!(!get(&[("DOORBELL_DIRECT_COPY", "off")]).unwrap().direct_copy);
    let e = get(&[("DOORBELL_DIRECT_COPY", "fast")]).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(
        e.to_string().contains("DOORBELL_DIRECT_COPY=\"fast\""),
        "{e}"
    );
    let adaptive = |v: &'static str| {
        let vars: &'static [(&str, &str)] =
            Box::leak(Box::new([("DOORBELL_ADAPTIVE_RETRANSMIT", v)]));
        get(vars).map(|c| c.adaptive_retransmit_floor)
    };
    let live = Some(doorbell_rt::LIVE_ADAPTIVE_RETRANSMIT_FLOOR);
    assert_eq!(get(&[]).unwrap().adaptive_retransmit_floor, live);
    assert_eq!(adaptive("on"), Ok(live));
    assert_eq!(adaptive(""), Ok(live));
    assert_eq!(adaptive("off"), Ok(None));
    assert_eq!(adaptive("0"), Ok(None));
    assert_eq!(
        adaptive("250"),
        Ok(Some(doorbell_types::Duration::from_us(250)))
    );
    for bad in ["-5", "1ms", "60000001", "often"] {
        let e = adaptive(bad).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(
            e.to_string()
                .starts_with(&format!("DOORBELL_ADAPTIVE_RETRANSMIT={bad:?}")),
            "{e}"
        );
    }
    for bad in [
        "1.2.3",
        "256.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        " 1.2.3.4",
        "host",
    ] {
        let vars: &'static [(&str, &str)] = Box::leak(Box::new([("DOORBELL_ADDR", bad)]));
        let e = get(vars).unwrap_err();
        assert_eq!(
            e,
            ProcessNicError::BadAddr {
                var: "DOORBELL_ADDR",
                value: bad.into()
            }
        );
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(
            e.to_string().starts_with(&format!("DOORBELL_ADDR={bad:?}")),
            "{e}"
        );
    }
    let long: &'static str = "n".repeat(64).leak();
    for bad in ["", "a/b", long] {
        let vars: &'static [(&str, &str)] = Box::leak(Box::new([("DOORBELL_NAME", bad)]));
        let e = get(vars).unwrap_err();
        assert_eq!(
            e,
            ProcessNicError::BadName {
                var: "DOORBELL_NAME",
                value: bad.into()
            }
        );
        assert_eq!(e.errno(), libc::EINVAL);
    }
    let longest: &'static str = "n".repeat(63).leak();
    let vars: &'static [(&str, &str)] = Box::leak(Box::new([("DOORBELL_NAME", longest)]));
    assert_eq!(get(vars).unwrap().name.len(), 63);
    // A configuration made by hand is checked by acquire.
    let e = ProcessNic::acquire(&cfg("")).unwrap_err();
    assert!(matches!(e, ProcessNicError::BadName { .. }));
}

/// The signals blocked in a thread of this process (`SigBlk` of its
/// status), `tid` or "thread-self".
fn sig_blocked(task: &str) -> u64 {
    let path = if task == "thread-self" {
        "/proc/thread-self/status".to_owned()
    } else {
        format!("/proc/self/task/{task}/status")
    };
    let s = std::fs::read_to_string(&path).unwrap();
    let hex = s
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

#[test]
fn the_nics_threads_block_signals_and_the_caller_keeps_its_mask() {
    let _s = serial();
    let before = sig_blocked("thread-self");
    let p = ProcessNic::acquire_from(&cfg("sigchk"), lo(20, 2)).unwrap();
    assert_eq!(
        sig_blocked("thread-self"),
        before,
        "the caller's mask is restored"
    );
    // The device thread is "doorbell-sigchk", the interrupt handler
    // "sigchk-irq"; the receive thread's name, "doorbell-sigchk-rx", is too
    // long for Linux and is not set, so it keeps the name of the thread
    // that spawned it: this one.
    let me = std::fs::read_link("/proc/thread-self").unwrap();
    let me = me.file_name().unwrap().to_string_lossy().into_owned();
    let comm_of = |tid: &str| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
            .map(|c| c.trim_end().to_owned())
            .unwrap_or_default()
    };
    let my_comm = comm_of(&me);
    let mut ours = Vec::new();
    let mut all = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let tid = t.unwrap().file_name().into_string().unwrap();
        let comm = comm_of(&tid);
        if comm == "doorbell-sigchk" || comm == "sigchk-irq" || (comm == my_comm && tid != me) {
            ours.push((tid.clone(), sig_blocked(&tid)));
        }
        all.push(comm);
    }
    assert_eq!(
        ours.len(),
        4,
        "device, interrupt and the two receive threads: {ours:?} of {all:?}"
    );
    for (tid, mask) in ours {
        for sig in [
            libc::SIGALRM,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGCHLD,
            libc::SIGPIPE,
        ] {
            assert_ne!(
                mask & bit(sig),
                0,
                "thread {tid} has signal {sig} unblocked: {mask:x}"
            );
        }
    }
    drop(p);
}

/// Runs this test binary again, running only [`child_role`] as `role`.
fn child(role: &str, first: [u8; 4]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "process::child_role",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE_VAR, role)
    .env(FIRST_VAR, Ipv4Addr::from(first).to_string());
    c
}

#[test]
fn two_processes_pick_different_addresses() {
    let first = lo(21, 2);
    let spawn = || {
        child("hold", first)
            .env("DOORBELL_NAME", "twoproc")
            .env_remove("DOORBELL_ADDR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    };
    let mut kids = [spawn(), spawn()];
    let mut addrs = Vec::new();
    // Kept open until the children end: they print after the address.
    let mut outs = Vec::new();
    for k in &mut kids {
        let mut out = BufReader::new(k.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert_ne!(
                out.read_line(&mut line).unwrap(),
                0,
                "child ended without an address"
            );
            // After the harness's "test process::child_role ... ".
            if let Some((_, rest)) = line.trim_end().split_once("holding ") {
                addrs.push(rest.to_owned());
                break;
            }
        }
        outs.push(out);
    }
    // Each holds its NIC until its stdin closes.
    for k in &mut kids {
        drop(k.stdin.take());
    }
    for k in &mut kids {
        assert!(k.wait().unwrap().success());
    }
    drop(outs);
    let [x, y, _, _] = first;
    let want = |h| format!("twoproc {x}.{y}.21.{h}");
    addrs.sort();
    assert_eq!(addrs, [want(2), want(3)]);
}

#[test]
fn after_fork_the_child_starts_its_own_nic_and_the_parents_keeps_working() {
    let out = child("fork", lo(22, 2))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("fork: parent ok"),
        "{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// Sockets among this process's open descriptors.
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Not a test on its own: the job of a child process that
/// [`two_processes_pick_different_addresses`] or the fork test started;
/// returns at once otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        return;
    };
    let first: Ipv4Addr = std::env::var(FIRST_VAR).unwrap().parse().unwrap();
    let first = first.octets();
    match role.as_str() {
        "hold" => {
            let cfg = ProcessNicConfig::from_env().unwrap();
            let p = ProcessNic::acquire_from(&cfg, first).unwrap();
            println!("holding {} {}", p.name(), Ipv4Addr::from(p.addr()));
            let _ = std::io::stdin().read_line(&mut String::new());
            drop(p);
        }
        "fork" => fork_role(first),
        "squat" => squat_role(first),
        "emfile" => emfile_role(first),
        other => panic!("unknown role {other}"),
    }
}

/// A NIC whose process has no descriptor left when a peer of this host
/// connects to its rendezvous: the accept fails, the connection stays
/// queued, and the listener stays readable. The NIC's receiver thread must
/// not go round that at full speed.
/// Starts a child in `role` for address `at`, its stdin and stdout
/// piped, and reads its stdout until a line holds one of `words`; returns
/// the child, the rest of its stdout and that line.
fn child_saying(
    role: &str,
    at: [u8; 4],
    words: &[&str],
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    String,
) {
    let mut c = child(role, at)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    // (The harness prints its "test ... " before the child's own words.)
    while !words.iter().any(|w| line.contains(w)) {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
    }
    (c, out, line)
}

/// The rendezvous of the NIC at `at` (an abstract socket name).
fn rendezvous(at: [u8; 4]) -> std::os::unix::net::SocketAddr {
    use std::os::linux::net::SocketAddrExt;
    let [a, b, c, d] = at;
    let name = format!("doorbell-roce/{a}.{b}.{c}.{d}");
    std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap()
}

#[test]
fn a_nic_out_of_descriptors_does_not_spin_on_its_rendezvous() {
    use std::io::Write;
    let at = lo(71, 2);
    let (mut c, out, _) = child_saying("emfile", at, &["ready"]);
    // A peer at the rendezvous, which the child cannot accept.
    let _peer = std::os::unix::net::UnixStream::connect_addr(&rendezvous(at)).unwrap();
    writeln!(c.stdin.as_mut().unwrap(), "measure").unwrap();
    let mut cpu = None;
    for l in out.lines() {
        let l = l.unwrap();
        if let Some((_, ns)) = l.split_once("cpu ") {
            cpu = ns
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
        }
    }
    assert!(c.wait().unwrap().success());
    let cpu = cpu.expect("the child's CPU time");
    // Its threads sleep, but for one look at the rendezvous every 100 ms;
    // spinning, the receiver thread alone would take the whole 500 ms.
    assert!(
        cpu < 150_000_000,
        "the NIC's threads took {} ms of CPU in 500 ms",
        cpu / 1_000_000
    );
}

/// The rendezvous of an address is an abstract socket name, which
/// whoever binds it first holds. A NIC must not talk to a listener of
/// another user there: it would hand that user every frame, WRITE
/// payloads included. Its sender asks the listener's credentials and
/// goes to UDP at once, without a handshake that would wait for an answer
/// that never comes. Needs root, to make the other user's listener; under
/// CI, which runs as root, not being root is a failure.
#[test]
fn a_sender_refuses_a_rendezvous_held_by_another_user() {
    let at = lo(73, 2);
    let (mut c, _out, line) = child_saying("squat", at, &["squatting", "cannot squat"]);
    if line.contains("cannot squat") {
        drop(c.stdin.take());
        let _ = c.wait();
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "CI must run as root to test another user's rendezvous: {line}"
        );
        eprintln!("skipped: {}", line.trim());
        return;
    }
    let asked = std::time::Instant::now();
    let got = doorbell_rt::RawPeer::connect(lo(73, 9), at);
    let took = asked.elapsed();
    drop(c.stdin.take());
    assert!(c.wait().unwrap().success());
    assert!(
        got.is_none(),
        "a ring was made with another user's listener"
    );
    assert!(
        took < std::time::Duration::from_millis(250),
        "refused at once, not after the handshake's timeout: {took:?}"
    );
}

/// [`a_sender_refuses_a_rendezvous_held_by_another_user`]'s child: binds
/// the rendezvous of `at` as user `nobody` and never accepts.
#[allow(unsafe_code)]
fn squat_role(at: [u8; 4]) {
    // SAFETY: setuid changes only this process's credentials (every
    // thread's, as glibc applies it).
    if unsafe { libc::setuid(65534) } != 0 {
        println!("cannot squat: setuid: {}", std::io::Error::last_os_error());
        return;
    }
    let _l = std::os::unix::net::UnixListener::bind_addr(&rendezvous(at)).unwrap();
    println!("squatting");
    let _ = std::io::stdin().read_line(&mut String::new());
}

/// [`a_nic_out_of_descriptors_does_not_spin_on_its_rendezvous`]'s child.
#[allow(unsafe_code)]
fn emfile_role(at: [u8; 4]) {
    let nic = doorbell_rt::LiveNic::start_udp("emfile", at, doorbell_pcie::LinkConfig::default())
        .unwrap();
    // SAFETY: dup and close of the lowest free descriptor, which nothing
    // else holds; getrlimit and setrlimit write and read only `lim`.
    unsafe {
        let free = libc::dup(0);
        assert!(free >= 0);
        libc::close(free);
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        // No descriptor can be made from here on.
        lim.rlim_cur = free as libc::rlim_t;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    println!("ready");
    let _ = std::io::stdin().read_line(&mut String::new());
    let cpu = || {
        // SAFETY: clock_gettime writes only `t` (and needs no descriptor).
        unsafe {
            let mut t = std::mem::zeroed::<libc::timespec>();
            libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t);
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        }
    };
    let before = cpu();
    std::thread::sleep(std::time::Duration::from_millis(500));
    println!("cpu {}", cpu() - before);
    drop(nic);
}

#[allow(unsafe_code)]
fn fork_role(first: [u8; 4]) {
    let p = ProcessNic::acquire_from(&cfg("forked"), first).unwrap();
    let looped = Looped::new(&p);
    looped.write(3000, 1);
    // The UDP socket, the shared-memory rendezvous, and the two ends of
    // the NIC's connection to itself.
    assert_eq!(sockets(), 4);
    let rings = p.nic().port_counters().shm_peers_out;
    let mut held = Some((looped, p));
    // SAFETY: this process runs this one test on this thread; its other
    // threads (the harness's main thread, waiting, and the NIC's) hold no
    // lock the child takes: the NIC's state lock is held across the fork
    // by the handler under test. The child leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A hang (joining a thread the child lacks) ends the child.
            // SAFETY: alarm only sets a timer; SIGALRM's default action
            // ends the process.
            unsafe { libc::alarm(30) };
            let (looped, p) = held.take().unwrap();
            // The parent's socket is no longer the child's.
            assert_eq!(sockets(), 0);
            assert!(p.nic().is_forked_copy());
            // A doorbell on the parent's context goes nowhere, and takes
            // nothing from the rings the parent's NIC shares with it.
            looped.post_write(64, 9);
            let q = ProcessNic::acquire_from(&cfg("child"), first).unwrap();
            assert!(!Arc::ptr_eq(q.nic(), p.nic()), "a fresh NIC");
            assert_eq!(q.name(), "child");
            assert_ne!(q.addr(), p.addr(), "the parent still has its address");
            Looped::new(&q).write(5000, 2);
            assert_eq!(sockets(), 4);
            // The parent's objects, dropped here, wait for no thread.
            drop(looped);
            drop(p);
            drop(q);
            assert_eq!(sockets(), 0);
            // And the child's NIC restarts as the parent's does.
            let r = ProcessNic::acquire_from(&cfg("child"), first).unwrap();
            Looped::new(&r).write(64, 5);
        }));
        // SAFETY: _exit ends the child without running the harness's
        // exit paths a second time.
        unsafe { libc::_exit(if ok.is_ok() { 0 } else { 1 }) }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a live local.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: status {status:#x}"
    );
    // The parent's NIC and context go on.
    let (looped, p) = held.take().unwrap();
    looped.write(7000, 3);
    // The child's copy of the port marked none of the parent's rings
    // closed (they are shared memory): no new ring was needed.
    assert_eq!(p.nic().port_counters().shm_peers_out, rings);
    drop(looped);
    drop(p);
    let again = ProcessNic::acquire_from(&cfg("forked"), first).unwrap();
    assert_eq!(again.addr(), first);
    Looped::new(&again).write(10, 4);
    println!("fork: parent ok");
}
