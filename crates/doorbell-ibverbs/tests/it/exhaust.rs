//! A process that exits without destroying anything (`tests/c/abandon.c`),
//! connected by RC to a QP of this test process over UDP (and the shared
//! memory between NICs of one host): its peer's next WRITE is retried and
//! completes with IBV_WC_RETRY_EXC_ERR after the timeout and retry count
//! it was given, as with a host that died; and a new process opens the
//! device at the same address at once: the kernel took back the socket,
//! the rendezvous name and the memfds, and nothing of the NIC outlived
//! its process.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_cprobe::program;
use doorbell_pcie::LinkConfig;
use doorbell_rt::LiveNic;
use doorbell_types::{Psn, Qpn};
use doorbell_verbs::{
    Access, Context, ProviderConfig, QpCaps, QpInitAttr, QpState, QpType, RcEndpoint, RcOptions,
    RemoteAddr, SendFlags, SendWr, Wc, WcStatus, WrOpcode,
};

use crate::clients::addr;
use crate::library::lib_dir;

fn c_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

fn build() -> PathBuf {
    let dir = lib_dir().parent().expect("lib dir has a parent");
    program::build(
        &c_dir().join("abandon.c"),
        dir,
        &[Path::new(&c_dir())],
        &["ibverbs"],
    )
}

fn abandon(exe: &Path, mode: &str, nic_addr: &str, env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        .env("DOORBELL_ADDR", nic_addr)
        .env_remove("DOORBELL_NAME")
        .env_remove("LD_PRELOAD")
        .env("ABANDON", mode)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

const FROM_PEER: &[u8] = b"from the peer\0";
const FROM_C: &[u8] = b"from the C side\0";

/// One run: the C side exits (`mode`), the peer's WRITE then fails with
/// RETRY_EXC_ERR, and a new process opens the device at the same address.
fn peer_of_an_abandoning_process(mode: &str, net: u8) {
    let exe = build();
    let (c_addr, peer_addr) = (addr(net, 1), addr(net, 2));
    let ip: std::net::Ipv4Addr = peer_addr.parse().unwrap();
    let nic = Arc::new(LiveNic::start_udp("peer0", ip.octets(), LinkConfig::default()).unwrap());
    let ctx = Context::with_config(nic.clone(), ProviderConfig::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 8,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    let full = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = pd.reg_mr(4096, Access(full)).unwrap();
    let env = [
        ("PEER_ADDR", peer_addr.clone()),
        ("PEER_QPN", qp.qpn().get().to_string()),
        ("PEER_VA", mr.addr().to_string()),
        ("PEER_RKEY", mr.rkey().raw().to_string()),
    ];
    let mut child = abandon(&exe, mode, &c_addr, &env).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let (c_qpn, c_va, c_rkey) = loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("abandon.c ended before its QP was up:\n{seen}");
        }
        seen.push_str(&line);
        if let Some(rest) = line.strip_prefix("qp ") {
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            break (v[0] as u32, v[1], v[2] as u32);
        }
    };
    // Connect, with a short ACK timeout (4.096 µs × 2^12, about 17 ms) and
    // three retries, so that the failure comes soon.
    let c_ip: std::net::Ipv4Addr = c_addr.parse().unwrap();
    let gid = c_ip.to_ipv6_mapped().octets();
    let me = RcEndpoint {
        gid: ip.to_ipv6_mapped().octets(),
        qpn: qp.qpn(),
        psn: Psn::new(0),
    };
    let them = RcEndpoint {
        gid,
        qpn: Qpn::new(c_qpn),
        psn: Psn::new(0),
    };
    let o = RcOptions {
        timeout: 12,
        retry_cnt: 3,
        rnr_retry: 2,
        ..RcOptions::default()
    };
    qp.connect_rc_opts(&me, &them, &o).unwrap();
    let wait = |what: &str| -> Wc {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut wc = [Wc::default(); 1];
        loop {
            if cq.poll(&mut wc).unwrap() == 1 {
                return wc[0];
            }
            assert!(Instant::now() < deadline, "no completion for {what}");
            std::thread::yield_now();
        }
    };
    let write = |wr_id: u64| {
        let sge = [mr.sge(2048, FROM_PEER.len() as u32).unwrap()];
        qp.post_send(&[SendWr {
            wr_id,
            sg_list: &sge,
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: c_va,
                rkey: doorbell_types::Rkey::from_raw(c_rkey),
            }),
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    };
    // While the C side lives, the peer's WRITE lands.
    mr.write(2048, FROM_PEER).unwrap();
    write(1);
    let wc = wait("the WRITE to a live process");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    seen.push_str(&rest);
    assert!(status.success(), "exit {status}:\n{seen}");
    assert!(seen.contains("\n0 failed"), "{seen}");
    assert!(!seen.contains("FAIL"), "{seen}");
    let mut got = vec![0u8; FROM_C.len()];
    mr.read(0, &mut got).unwrap();
    assert_eq!(got, FROM_C, "the C side's WRITE arrived");
    // The process is gone with its QP, MR, CQ, PD and NIC undestroyed. The
    // peer's next WRITE is retried retry_cnt times and fails.
    let sent = Instant::now();
    write(2);
    let wc = wait("the WRITE to a dead process");
    let took = sent.elapsed();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RetryExcErr));
    assert!(
        took >= Duration::from_millis(50),
        "the first send and three retries, 17 ms apart: {took:?}"
    );
    assert_eq!(qp.query().unwrap().0, QpState::Err);
    let (_, counters) = nic.counters(None);
    assert_eq!(counters.req_transport_retries_exceeded, 1);
    assert!(counters.local_ack_timeout_err >= 3, "{counters:?}");
    // A new process opens the device at the same address at once.
    let again = abandon(&exe, "reopen", &c_addr, &[]).output().unwrap();
    let _ = std::fs::remove_file(&exe);
    let text = program::text(&again);
    assert!(again.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("\n0 failed"),
        "{text}"
    );
    eprintln!("{mode}: the peer's WRITE failed after {took:?}");
}

#[test]
fn a_process_that_calls_exit_without_destroying_anything_fails_its_peer_like_hardware() {
    peer_of_an_abandoning_process("exit", 71);
}

#[test]
fn a_process_that_returns_from_main_without_destroying_anything_fails_its_peer_like_hardware() {
    peer_of_an_abandoning_process("return", 72);
}
