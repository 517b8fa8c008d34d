//! rdma-core's own provider on doorbell: with `DOORBELL_PROVIDER=mlx5`
//! Debian's unmodified libmlx5 drives the device, and Debian's unmodified
//! tools run on it as two processes. What proves that libmlx5 did the work:
//! its own formatting of the firmware version (doorbell's provider prints
//! a name), and, in each process's `DOORBELL_STATS`, CQ arms and (for the
//! `ibv_wr_*` API) send doorbells taken from doorbell records, which only a
//! provider that maps the UAR pages itself makes the device read.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use doorbell_cprobe::program::{finish, text};
use serde_json::Value;

use crate::clients::{addr, client};
use crate::library::{lib_dir, run};

fn hosted(prog: &str, nic_addr: &str) -> Command {
    let mut c = client(prog, nic_addr);
    // These tests count every packet and DMA; on a machine other tests
    // load, a peer held for longer than the 10 ms floor of adaptive
    // retransmission would draw an early resend (decision record 0027).
    c.env("DOORBELL_PROVIDER", "mlx5")
        .env("DOORBELL_ADAPTIVE_RETRANSMIT", "off");
    c
}

#[test]
fn ibv_devinfo_runs_on_libmlx5() {
    let out = run(hosted("ibv_devinfo", &addr(40, 2)).arg("-v"));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("hca_id:\tdoorbell0"), "{all}");
    // libmlx5 prints the raw firmware version as major.minor.sub.
    assert!(all.contains("fw_ver:\t\t\t\t0.1.0000"), "{all}");
    assert!(all.contains("PORT_ACTIVE"), "{all}");
    assert!(all.contains("link_layer:\t\tEthernet"), "{all}");
    assert!(all.contains(", RoCE v2"), "{all}");
    // The same tool on doorbell's own provider reports another firmware.
    let own = run(&mut client("ibv_devinfo", &addr(40, 3)));
    assert!(
        text(&own).contains("fw_ver:\t\t\t\tdoorbell "),
        "{}",
        text(&own)
    );
}

#[test]
fn an_unknown_provider_is_named_in_the_error() {
    let mut c = client("ibv_devinfo", &addr(40, 4));
    c.env("DOORBELL_PROVIDER", "mlx4");
    let out = run(&mut c);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("DOORBELL_PROVIDER=mlx4"), "{all}");
    assert!(all.contains("`mlx5`"), "{all}");
}

/// Runs `tool` as a server and a client on libmlx5 with `args`, each with
/// a stats file; returns their outputs and stats.
fn pingpong(tool: &str, net: u8, port: u16, args: &[&str]) -> [(Output, Value); 2] {
    let port = (port + (std::process::id() % 1000) as u16).to_string();
    let dir = lib_dir().parent().expect("lib dir has a parent").to_owned();
    // Two tests may run the same tool at once: the net tells them apart.
    let stats = |who: &str| {
        dir.join(format!(
            "hosted-{tool}-{net}-{who}-{}.json",
            std::process::id()
        ))
    };
    let start = |who: &str, host: u8, peer: Option<&str>| {
        let mut c = hosted(tool, &addr(net, host));
        c.args(["-d", "doorbell0", "-g", "0", "-p", &port])
            .args(args)
            .args(peer)
            .env("DOORBELL_STATS", stats(who))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().expect("start the tool")
    };
    let server = start("server", 2, None);
    std::thread::sleep(Duration::from_millis(300));
    let client = start("client", 3, Some("127.0.0.1"));
    let c = finish(client, 60, &format!("the {tool} client"));
    let s = finish(server, 60, &format!("the {tool} server"));
    [("server", s), ("client", c)].map(|(who, out)| {
        let file = stats(who);
        let json = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{who}'s stats ({e}):\n{}", text(&out)));
        let _ = std::fs::remove_file(&file);
        let v: Value = serde_json::from_str(&json).expect("stats are JSON");
        (out, v)
    })
}

/// How the doorbells of one side reached the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rang {
    /// Through the wrapped `post_send`: read back from the register and
    /// handed over as the MMIO writes they were (a few may be taken from
    /// the record by the watcher first).
    Stores,
    /// Without a call (`ibv_wr_*`): taken from the doorbell records.
    Records,
}

/// Both sides ran to the end, `iters` doorbells at least reached the device
/// the way `rang` says, and none was refused.
fn assert_ran_on_libmlx5(sides: &[(Output, Value); 2], iters: u64, rang: Rang) {
    for (out, v) in sides {
        let all = text(out);
        assert!(out.status.success(), "{all}");
        assert!(all.contains(&format!("{iters} iters in")), "{all}");
        let d = &v["doorbells"];
        let by_record = d["by_record"].as_u64().unwrap_or(0);
        let stores: u64 = v["qps"]
            .as_array()
            .map(|q| q.iter().filter_map(|q| q["mmio_writes"].as_u64()).sum())
            .unwrap_or(0);
        match rang {
            Rang::Stores => assert!(
                stores >= iters && by_record < iters / 4,
                "{stores} stores and {by_record} from records: {v:#}\n{all}"
            ),
            Rang::Records => assert!(by_record >= iters, "{v:#}\n{all}"),
        }
        assert_eq!(d["bad"], 0, "{v:#}");
        let mmio = d["mmio"].as_str().unwrap_or("");
        assert_eq!(
            mmio.starts_with("observed, except"),
            by_record + d["arms_by_record"].as_u64().unwrap_or(0) > 0,
            "the stats say which MMIO counts are inferred: {v:#}"
        );
        assert_eq!(v["packets"]["retransmits"], 0, "{v:#}");
    }
}

#[test]
fn ibv_rc_pingpong_runs_on_libmlx5() {
    let sides = pingpong(
        "ibv_rc_pingpong",
        41,
        31515,
        &["-n", "200", "-s", "4096", "-c"],
    );
    assert_ran_on_libmlx5(&sides, 200, Rang::Stores);
    for (_, v) in &sides {
        assert_eq!(
            v["doorbells"]["arms_by_record"], 0,
            "no events asked: {v:#}"
        );
    }
}

#[test]
fn ibv_rc_pingpong_with_events_runs_on_libmlx5() {
    let sides = pingpong(
        "ibv_rc_pingpong",
        42,
        32515,
        &["-n", "100", "-s", "64", "-e"],
    );
    assert_ran_on_libmlx5(&sides, 100, Rang::Stores);
    for (out, v) in &sides {
        // Each completion event is waited for after an arm: libmlx5's arm
        // stores are taken from the CQ's record and handed over as the arm
        // doorbells they were, CQ stores that no QP is charged for.
        assert_eq!(v["doorbells"]["arms_by_record"], 0, "{v:#}");
        let total = v["total"]["mmio_writes"].as_u64().unwrap_or(0);
        let qps: u64 = v["qps"]
            .as_array()
            .map(|q| q.iter().filter_map(|q| q["mmio_writes"].as_u64()).sum())
            .unwrap_or(0);
        assert!(
            total - qps >= 100,
            "{total} stores, {qps} of QPs: {v:#}\n{}",
            text(out)
        );
    }
}

#[test]
fn ibv_rc_pingpong_on_the_wr_api_runs_on_libmlx5() {
    // `-N`: ibv_wr_* posting, whose doorbells libmlx5 rings without any
    // call this library sees: the records are watched.
    let sides = pingpong("ibv_rc_pingpong", 43, 25515, &["-n", "100", "-N"]);
    assert_ran_on_libmlx5(&sides, 100, Rang::Records);
}

#[test]
fn ibv_ud_pingpong_runs_on_libmlx5() {
    let sides = pingpong("ibv_ud_pingpong", 44, 26515, &["-n", "100", "-s", "1024"]);
    assert_ran_on_libmlx5(&sides, 100, Rang::Stores);
}

#[test]
fn ibv_srq_pingpong_runs_on_libmlx5() {
    let sides = pingpong("ibv_srq_pingpong", 45, 27515, &["-n", "100", "-q", "4"]);
    assert_ran_on_libmlx5(&sides, 100, Rang::Stores);
}

/// perftest on libmlx5: a bandwidth and a latency test, on both of its
/// posting paths (the `ibv_wr_*` API it picks for a ConnectX-4 part ID, and
/// `ibv_post_send`).
#[test]
fn perftest_runs_on_libmlx5() {
    let env = [("DOORBELL_PROVIDER", "mlx5")];
    for old in [false, true] {
        let mut bw = vec!["-s", "65536", "-n", "200"];
        let mut lat = vec!["-s", "8", "-n", "200"];
        if old {
            bw.push("--use_old_post_send");
            lat.push("--use_old_post_send");
        }
        let what = if old { "ibv_post_send" } else { "ibv_wr_*" };
        let rows = crate::perftest::run_env("ib_write_bw", &bw, &env);
        assert_eq!(rows, [(65536, 200)], "ib_write_bw on {what}");
        let rows = crate::perftest::run_env("ib_send_lat", &lat, &env);
        assert_eq!(rows, [(8, 200)], "ib_send_lat on {what}");
    }
}

/// Builds `c/fake_provider.c` as a shared library registering through
/// `verbs_register_driver_<pabi>`, with `defines` (`-DNAME`) too.
fn fake_provider(pabi: u32, defines: &[&str]) -> std::path::PathBuf {
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let tag: String = defines.iter().map(|d| format!("-{d}")).collect();
    let out = dir.join(format!(
        "libfake-provider-{pabi}{tag}-{}.so",
        std::process::id()
    ));
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fake_provider.c");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", &format!("-DPABI={pabi}")])
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc (scripts/setup.sh installs gcc)");
    assert!(st.success(), "cc failed for {}", src.display());
    out
}

#[test]
fn a_provider_of_an_unknown_private_abi_is_refused_with_the_reason() {
    // rdma-core v57 renamed the registration: the library does not define
    // it, so the provider cannot even load.
    let v57 = fake_provider(57, &[]);
    let mut c = hosted("ibv_devinfo", &addr(46, 2));
    c.env("DOORBELL_PROVIDER_LIB", &v57);
    let out = run(&mut c);
    let all = text(&out);
    let _ = std::fs::remove_file(&v57);
    assert!(all.contains("No IB devices found"), "{all}");
    assert!(all.contains("verbs_register_driver_57"), "{all}");
    assert!(
        all.contains("private ABI 34 as rdma-core v44 to v52"),
        "{all}"
    );
    // A provider of ABI 34 for a kernel ABI doorbell's driver does not speak.
    let v34 = fake_provider(34, &[]);
    let mut c = hosted("ibv_devinfo", &addr(46, 3));
    c.env("DOORBELL_PROVIDER_LIB", &v34);
    let out = run(&mut c);
    let all = text(&out);
    let _ = std::fs::remove_file(&v34);
    assert!(all.contains("No IB devices found"), "{all}");
    assert!(all.contains("kernel ABI versions 7..7"), "{all}");
}

/// `ibv_devinfo` on the fake provider built with `defines`, under
/// `timeout` (a run that hangs fails here); its output.
fn devinfo_on_a_fake_provider(defines: &[&str], nic_addr: &str) -> String {
    let lib = fake_provider(34, defines);
    let mut c = hosted("timeout", nic_addr);
    c.args(["20", "ibv_devinfo"])
        .env("DOORBELL_PROVIDER_LIB", &lib);
    let out = run(&mut c);
    let all = text(&out);
    let _ = std::fs::remove_file(&lib);
    assert_ne!(out.status.code(), Some(124), "ibv_devinfo hung: {all}");
    all
}

/// That the load went on after what the fake provider's constructor
/// did, and refused the provider for the kernel ABI it registered for.
fn refused_for_its_abi(all: &str) {
    assert!(all.contains("kernel ABI versions 7..7"), "{all}");
    assert!(all.contains("No IB devices found"), "{all}");
}

#[test]
fn a_provider_that_calls_back_while_it_loads_is_answered_not_waited_for() {
    // Its constructor asks for the device list while the library holds
    // the lock under which it loads the provider: the nested call finds
    // no device, and says why, rather than waiting for ever on a lock its
    // own thread holds.
    let all = devinfo_on_a_fake_provider(&["REENTER"], &addr(46, 4));
    assert!(all.contains("nested device list of 0"), "{all}");
    assert!(all.contains("called back into libibverbs"), "{all}");
    refused_for_its_abi(&all);
    // And a provider that goes on to register well is hosted: here the
    // constructor loads Debian's libmlx5 after its nested call.
    let all = devinfo_on_a_fake_provider(&["REENTER", "LOAD_MLX5"], &addr(46, 6));
    assert!(all.contains("nested device list of 0"), "{all}");
    assert!(all.contains("hca_id:\tdoorbell0"), "{all}");
    assert!(all.contains("PORT_ACTIVE"), "{all}");
}

#[test]
fn a_provider_that_forks_while_it_loads_is_not_held_up_by_the_fork_handlers() {
    // Its constructor forks while the library holds the lock under which
    // it loads the provider, which the fork handlers take: they must not
    // wait for it in the thread that holds it.
    let all = devinfo_on_a_fake_provider(&["FORK"], &addr(46, 5));
    assert!(all.contains("forked child exited 7"), "{all}");
    refused_for_its_abi(&all);
}

/// `/dev/infiniband/uverbs0` while it lives: UCX lists an IB device only if
/// its node is a character device it may read and write
/// (`uct_ib_device_is_accessible`). Made (as root) only if missing, and
/// removed again when the last test holding it is done, so that nothing
/// else sees it after the tests. The UCX tests run at once: they share it.
struct UverbsNode;

/// How many [`UverbsNode`]s live, and what the first one made.
static UVERBS_NODE: std::sync::Mutex<(usize, bool, bool)> =
    std::sync::Mutex::new((0, false, false));

impl UverbsNode {
    const DIR: &str = "/dev/infiniband";
    const NODE: &str = "/dev/infiniband/uverbs0";

    fn ensure() -> Self {
        let mut st = UVERBS_NODE.lock().unwrap_or_else(|e| e.into_inner());
        if st.0 == 0 {
            let dir = std::path::Path::new(Self::DIR);
            let made_dir = !dir.exists();
            if made_dir {
                std::fs::create_dir(dir).unwrap_or_else(|e| {
                    panic!("UCX needs {} ({e}): the test runs as root", Self::NODE)
                });
            }
            let made_node = !std::path::Path::new(Self::NODE).exists();
            if made_node {
                // uverbs0's numbers; UCX only checks that it is a character
                // device.
                let ok = Command::new("mknod")
                    .args([Self::NODE, "c", "231", "192"])
                    .status()
                    .expect("run mknod");
                assert!(
                    ok.success(),
                    "mknod {} failed: the test runs as root",
                    Self::NODE
                );
            }
            *st = (0, made_dir, made_node);
        }
        st.0 += 1;
        Self
    }
}

impl Drop for UverbsNode {
    fn drop(&mut self) {
        let mut st = UVERBS_NODE.lock().unwrap_or_else(|e| e.into_inner());
        st.0 -= 1;
        if st.0 > 0 {
            return;
        }
        if st.2 {
            let _ = std::fs::remove_file(Self::NODE);
        }
        if st.1 {
            let _ = std::fs::remove_dir(Self::DIR);
        }
    }
}

/// Which user-space provider drives the device under UCX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    /// rdma-core's libmlx5, hosted.
    Mlx5,
    /// doorbell's own.
    Doorbell,
}

/// Runs UCX's `ucx_perftest` UCT `test` over `tl` as a server and a client
/// on libmlx5; returns the client's output and stats.
fn ucx_perftest(net: u8, port: u16, tl: &str, test: &str, iters: u32) -> (Output, Value) {
    ucx_perftest_on(Provider::Mlx5, net, port, tl, test, iters)
}

/// [`ucx_perftest`] on `provider`.
fn ucx_perftest_on(
    provider: Provider,
    net: u8,
    port: u16,
    tl: &str,
    test: &str,
    iters: u32,
) -> (Output, Value) {
    let port = (port + (std::process::id() % 1000) as u16).to_string();
    let dir = lib_dir().parent().expect("lib dir has a parent").to_owned();
    let stats = dir.join(format!(
        "hosted-ucx-{tl}-{test}-{}.json",
        std::process::id()
    ));
    let start = |host: u8, args: &[&str]| {
        let mut c = match provider {
            Provider::Mlx5 => hosted("ucx_perftest", &addr(net, host)),
            Provider::Doorbell => {
                let mut c = client("ucx_perftest", &addr(net, host));
                c.env("DOORBELL_ADAPTIVE_RETRANSMIT", "off");
                c
            }
        };
        // UCX's defaults: it asks libmlx5 for 128-byte CQEs (to inline up
        // to 64 bytes of a receive in a CQE), which the device writes.
        c.args(["-p", &port])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let server = start(2, &[]).spawn().expect("start ucx_perftest");
    std::thread::sleep(Duration::from_millis(300));
    let n = iters.to_string();
    let client = start(
        3,
        &[
            "127.0.0.1",
            "-d",
            "doorbell0:1",
            "-x",
            tl,
            "-t",
            test,
            "-n",
            &n,
        ],
    )
    .env("DOORBELL_STATS", &stats)
    .spawn()
    .expect("start ucx_perftest");
    let c = finish(client, 60, &format!("the ucx_perftest {tl} {test} client"));
    let s = finish(server, 60, &format!("the ucx_perftest {tl} {test} server"));
    assert!(s.status.success(), "{}", text(&s));
    let json = std::fs::read_to_string(&stats)
        .unwrap_or_else(|e| panic!("the client's stats ({e}):\n{}", text(&c)));
    let _ = std::fs::remove_file(&stats);
    (c, serde_json::from_str(&json).expect("stats are JSON"))
}

/// UCX on libmlx5: the ConnectX-4 PCI IDs the library writes for
/// `ibdev_path` make UCX offer `rc_mlx5`, whose WQEs, BlueFlame copies and
/// CQ polls are UCX's own (through mlx5dv), never a verbs call.
#[test]
fn ucx_perftest_runs_on_rc_mlx5() {
    let _node = UverbsNode::ensure();
    for (i, test) in ["am_lat", "put_lat", "am_bw"].into_iter().enumerate() {
        let (out, v) = ucx_perftest(47, 28515 + 10 * i as u16, "rc_mlx5", test, 500);
        assert_ucx_ran_on_libmlx5(&out, &v, test, 500);
    }
}

/// The Final line's iteration count of a `ucx_perftest` run.
fn ucx_final(all: &str, test: &str) -> String {
    all.lines()
        .find_map(|l| l.strip_prefix("Final:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("{test}: no Final line in:\n{all}"))
        .to_owned()
}

/// A `ucx_perftest` client on libmlx5 ran all `iters` of `test`, with no
/// bad doorbell and no packet sent twice; UCX rang without a call, so the
/// device took its doorbells from the records.
fn assert_ucx_ran_on_libmlx5(out: &Output, v: &Value, test: &str, iters: u32) {
    let all = text(out);
    assert!(out.status.success(), "{test}: {all}");
    assert_eq!(ucx_final(&all, test), iters.to_string(), "{test}: {all}");
    let d = &v["doorbells"];
    assert_eq!(d["bad"], 0, "{test}: {v:#}");
    assert!(d["by_record"].as_u64().unwrap_or(0) > 0, "{test}: {v:#}");
    assert_eq!(v["packets"]["retransmits"], 0, "{test}: {v:#}");
}

/// UCX's `ud_mlx5` on libmlx5: UD QPs whose WQEs (with their address
/// vectors) UCX writes itself. UCX drops a datagram whose GRH does not name
/// one of the port's GIDs, and finds that GID by the packet type mlx5
/// reports in the CQE's SL bits (IPv4: in the GRH's last 4 bytes); UD has
/// no RDMA, so `put_lat` is not among the tests.
#[test]
fn ucx_perftest_runs_on_ud_mlx5() {
    let _node = UverbsNode::ensure();
    for (i, test) in ["am_lat", "am_bw"].into_iter().enumerate() {
        let (out, v) = ucx_perftest(48, 28615 + 10 * i as u16, "ud_mlx5", test, 500);
        // UD is never resent by the NIC: UCX's own reliability would
        // send a lost datagram again as a new one.
        assert_ucx_ran_on_libmlx5(&out, &v, test, 500);
        assert!(v["packets"]["tx"].as_u64() >= Some(500), "{test}: {v:#}");
    }
}

/// UCX's `ud_verbs` on doorbell's own provider: the same UD protocol
/// through `ibv_post_send` and `ibv_poll_cq`, where UCX reads the packet
/// type from `ibv_wc.sl`.
#[test]
fn ucx_perftest_runs_on_ud_verbs_on_doorbells_own_provider() {
    let _node = UverbsNode::ensure();
    let (out, v) = ucx_perftest_on(Provider::Doorbell, 49, 28715, "ud_verbs", "am_lat", 500);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert_eq!(ucx_final(&all, "am_lat"), "500", "{all}");
    assert_eq!(v["doorbells"]["bad"], 0, "{v:#}");
    assert!(v["packets"]["rx"].as_u64() >= Some(500), "{v:#}");
}
