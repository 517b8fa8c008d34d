//! rdma_cm programs when the other side fails, as two processes on
//! doorbell: a REQ to a port nobody listens on is refused (REJ 8) and the
//! client told so at once; a peer that exits in the middle of a
//! connection leaves its partner DISCONNECTED, as the kernel's rdma_cm
//! does when a process exits; a peer killed outright fails its partner's
//! sends with retry exceeded, as a host that lost power would, rather than
//! leaving it hanging. (Single lost MADs, random loss and vanished peers at
//! the CM's level are doorbell-cma's `faults` tests.)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use doorbell_cprobe::program::{self, finish, text};

use crate::clients::{ATTEMPTS, addr, met_no_listener, pair_outputs, tool};
use crate::lib_dir;

fn cm_exit() -> PathBuf {
    let c = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/cm_exit.c");
    let dir = lib_dir().parent().expect("lib dir has a parent");
    program::build(&c, dir, &[], &["rdmacm", "ibverbs"])
}

#[test]
fn a_req_to_a_port_nobody_listens_on_is_rejected_at_once() {
    let (sa, ca) = (addr(30, 2), addr(30, 3));
    let mut server = tool(&["rping", "-s", "-a", &sa, "-p", "7000"], &sa)
        .spawn()
        .expect("start rping");
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    let client = tool(&["rping", "-c", "-a", &sa, "-p", "7001", "-C", "1"], &ca)
        .spawn()
        .expect("start rping");
    let out = finish(client, 30, "the rping client");
    let _ = server.kill();
    let _ = server.wait();
    let t = t.elapsed();
    assert!(
        !out.status.success(),
        "connected to nobody:\n{}",
        text(&out)
    );
    assert!(
        text(&out).contains("RDMA_CM_EVENT_REJECTED, error 8"),
        "REJ 8 (invalid service ID) reaches the client:\n{}",
        text(&out)
    );
    assert!(t < Duration::from_secs(5), "the REJ took {t:?}");
}

#[test]
fn a_peer_that_exits_mid_connection_leaves_its_partner_disconnected() {
    let exe = cm_exit();
    let exe = exe.to_str().expect("a UTF-8 path");
    let (s, c) = pair_outputs(
        31,
        &["rping", "-s", "-a", "{server}", "-v"],
        &[exe, "{server}", "7174"],
    );
    let _ = std::fs::remove_file(exe);
    assert!(
        c.status.success() && text(&c).contains("connected"),
        "the client:\n{}",
        text(&c)
    );
    assert!(
        text(&s).contains("DISCONNECT EVENT"),
        "the server heard of the exit:\n{}",
        text(&s)
    );
}

/// perftest's client can meet its server before it listens for the data
/// QPs ([`met_no_listener`]): the pair is then started again.
#[test]
fn a_killed_peer_fails_its_partners_sends_instead_of_hanging() {
    let (sa, ca) = (addr(32, 2), addr(32, 3));
    let mut attempt = 0;
    let (out, t) = loop {
        attempt += 1;
        let mut server = tool(&["ib_send_bw", "-R", "-D", "30"], &sa)
            .spawn()
            .expect("start ib_send_bw");
        std::thread::sleep(Duration::from_millis(700));
        let client = tool(&["ib_send_bw", "-R", "-D", "30", &sa], &ca)
            .spawn()
            .expect("start ib_send_bw");
        std::thread::sleep(Duration::from_secs(2));
        server.kill().expect("kill the server");
        let _ = server.wait();
        let t = Instant::now();
        let out = finish(client, 20, "the ib_send_bw client");
        if attempt < ATTEMPTS && met_no_listener(&out) {
            eprintln!("the client met its server before it listened (attempt {attempt}), again");
            continue;
        }
        break (out, t);
    };
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Failed status 12"),
        "IBV_WC_RETRY_EXC_ERR for the sends to nobody:\n{}",
        text(&out)
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}
