//! A listener accepts a connection whose MADs doorbell did not build.
//!
//! The active side is `tests/it/scapy_req.py`: scapy's RoCE layer for the
//! BTH and ICRC, and CM messages laid out from the IBA tables (REQ with
//! rdma_cm's IP CM header, RTU, DREQ), sent from a plain UDP socket on
//! 127.P.91.3:4791 to a NIC on a UDP port at 127.P.91.2. The listener must
//! report the REQ with what the script put in it, and its REP (checked and
//! decoded by the script, ICRC included), the connection coming up on the
//! script's RTU and the DREP to its DREQ must be what the IBA says.
//!
//! Needs the venv with scapy that `scripts/setup.sh` makes: without it the
//! test fails and says so, it does not pass silently.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_cma::{AcceptParams, CmEvent, CmEventKind, CmId, CmService, Detail, IdState};
use doorbell_cma::{PortSpace, gid_of};
use doorbell_pcie::LinkConfig;
use doorbell_rt::LiveNic;
use doorbell_verbs::{Context, QpState};

use super::{Log, rc_qp};

/// The third byte of this test's loopback subnet, 127.P.91.0/24.
const NET: u8 = 91;
/// The port the listener is bound to.
const SERVICE_PORT: u16 = 7491;
/// What the script's REQ says of itself.
const SRC_PORT: u16 = 40123;
const QPN: u32 = 0x00ab_cdef;
const PSN: u32 = 0x0012_3456;
const COMM_ID: u32 = 0x5ca9_0001;
const CA_GUID: u64 = 0x5ca9_5ca9_0000_0003;
const TID: u64 = 0x0000_0001_5ca9_0000;
/// How long any one step may take.
const STEP: Duration = Duration::from_secs(3);

/// 127.P.91.`host`, P from the process id, as the other crates' tests
/// pick their loopback addresses.
fn lo(host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 1 + (std::process::id() % 250) as u8, NET, host)
}

/// The running script, stopped on drop.
struct Script {
    child: Option<Child>,
}

impl Script {
    fn start(python: &Path) -> Self {
        let args = [
            lo(3).to_string(),
            lo(2).to_string(),
            SERVICE_PORT.to_string(),
            SRC_PORT.to_string(),
            format!("{QPN:#x}"),
            format!("{PSN:#x}"),
            format!("{COMM_ID:#x}"),
            format!("{CA_GUID:#x}"),
            format!("{TID:#x}"),
        ];
        let child = Command::new(python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/scapy_req.py"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the venv's python runs");
        Self { child: Some(child) }
    }

    fn stdin(&mut self) -> &mut ChildStdin {
        self.child
            .as_mut()
            .and_then(|c| c.stdin.as_mut())
            .expect("the script's stdin")
    }

    fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Stops the script and panics with `what` and all it printed.
    fn fail(&mut self, what: &str) -> ! {
        let mut child = self.child.take().expect("the script");
        let _ = child.kill();
        let out = child.wait_with_output().expect("the script's output");
        panic!(
            "{what}\nscapy_req.py ({}) printed:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits for the script to end well and returns its JSON line.
    fn finish(mut self) -> serde_json::Value {
        let deadline = Instant::now() + STEP;
        while !self.has_exited() {
            if Instant::now() > deadline {
                self.fail("the script did not end");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let out = self
            .child
            .take()
            .expect("the script")
            .wait_with_output()
            .expect("the script's output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "scapy_req.py failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The first event of `kind` for `token`; fails if the script ends first
/// or it does not come within [`STEP`], with what `nic` counted (a frame
/// dropped for its ICRC or Q_Key shows there).
fn event(log: &Log, token: u64, kind: CmEventKind, script: &mut Script, nic: &LiveNic) -> CmEvent {
    let deadline = Instant::now() + STEP;
    loop {
        let mut got = log.0.lock().unwrap();
        if let Some(i) = got.iter().position(|e| e.kind == kind && e.id == token) {
            return got.remove(i);
        }
        let seen = format!("{got:?}");
        drop(got);
        if script.has_exited() || Instant::now() > deadline {
            let counted = nic.counters(None).1;
            script.fail(&format!(
                "no {kind:?} for id {token}; events: {seen}; the NIC counted {counted:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn v4(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip), port)
}

/// REQ, REP, RTU, DREQ and DREP between a listener and the script.
#[test]
fn the_listener_accepts_a_req_that_scapy_built() {
    let python = doorbell_cprobe::program::scapy_python(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    );
    let nic = LiveNic::start_udp("scapy-req", lo(2).octets(), LinkConfig::default())
        .unwrap_or_else(|e| panic!("a NIC on {}:4791: {e}", lo(2)));
    let nic = Arc::new(nic);
    let ctx = Context::open(nic.clone()).unwrap();
    let svc = CmService::start(&ctx).unwrap();
    let log = Arc::new(Log::default());
    let listener = CmId::new(log.clone(), 1, PortSpace::Tcp, vec![ctx.clone()]);
    listener.bind_addr(v4(lo(2), SERVICE_PORT)).unwrap();
    listener.listen(8).unwrap();
    let mut script = Script::start(&python);

    // The REQ as the listener reports it: what the script wrote.
    let req = event(&log, 1, CmEventKind::ConnectRequest, &mut script, &nic);
    let Detail::ConnectRequest(r) = req.detail else {
        panic!("a request without its REQ: {req:?}")
    };
    let q = &r.req;
    assert_eq!(
        q.service_id,
        0x0000_0000_0106_0000 | u64::from(SERVICE_PORT)
    );
    assert_eq!((q.remote_qpn.get(), q.starting_psn.get()), (QPN, PSN));
    assert_eq!(q.remote_ca_guid, CA_GUID);
    assert_eq!(q.qp_type, doorbell_cmsm::QpType::Rc);
    assert_eq!(
        (q.responder_resources, q.initiator_depth),
        (2, 3),
        "the script's initiator depth and responder resources, swapped"
    );
    assert_eq!((q.retry_count, q.rnr_retry_count), (7, 7));
    assert_eq!(
        (q.path_mtu, q.pkey, q.flow_control, q.srq),
        (3, 0xffff, true, false)
    );
    assert_eq!(q.primary_path.local_gid.octets(), gid_of(lo(3).into()));
    assert_eq!(q.primary_path.remote_gid.octets(), ctx.gid());
    assert_eq!(r.peer.ip_addr(), IpAddr::V4(lo(3)));
    assert_eq!(r.peer.qpn.get(), 1, "from the script's QP 1");
    let user = doorbell_cma::IP_CM_HEADER_LEN;
    assert_eq!(&q.private_data[user..user + 10], b"from scapy");

    // The id of the request: addressed as the IP CM header says.
    let child = CmId::from_request(&listener, log.clone(), 2, &r).unwrap();
    assert_eq!(child.src(), Some(v4(lo(2), SERVICE_PORT)));
    assert_eq!(
        child.dst(),
        Some(v4(lo(3), SRC_PORT)),
        "the header's source"
    );
    let (qp, _cq, _mr) = rc_qp(&ctx);
    child.set_qp(Some(qp.qpn().get()));
    let a = child.conn_attrs().unwrap();
    assert_eq!((a.dest_qpn, a.rq_psn, a.path_mtu), (QPN, PSN, 3));
    assert_eq!(a.dgid, gid_of(lo(3).into()));
    qp.modify(QpState::Rtr, &a.rtr()).unwrap();
    qp.modify(QpState::Rts, &a.rts()).unwrap();
    child
        .accept(&AcceptParams {
            private_data: b"scapy welcome".to_vec(),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            flow_control: true,
            qp_num: None,
            srq: false,
        })
        .unwrap();

    // The script's RTU brings the connection up; then its DREQ takes it
    // down, and our disconnect is the DREP.
    event(&log, 2, CmEventKind::Established, &mut script, &nic);
    assert_eq!(child.state(), IdState::Connected);
    if writeln!(script.stdin(), "dreq").is_err() {
        script.fail("the script stopped before its DREQ");
    }
    event(&log, 2, CmEventKind::Disconnected, &mut script, &nic);
    child.disconnect().unwrap();
    let seen = script.finish();
    println!("{seen}");

    // What the script read in the REP and the DREP.
    let comm_id = u64::from(r.conn.comm_id());
    for (msg, tid) in [("rep", TID), ("drep", TID + 1)] {
        let m = &seen[msg];
        let header = [
            ("opcode", 0x64),
            ("pkey", 0xffff),
            ("dest_qp", 1),
            ("src_qp", 1),
            ("qkey", 0x8001_0000),
            ("base_version", 1),
            ("mgmt_class", 0x07),
            ("class_version", 2),
            ("method", 0x03),
            ("status", 0),
            ("tid", tid),
            ("local_comm_id", comm_id),
            ("remote_comm_id", u64::from(COMM_ID)),
        ];
        for (field, want) in header {
            assert_eq!(m[field].as_u64(), Some(want), "{msg}.{field}: {m}");
        }
        assert_eq!(m["icrc_ok"], true, "scapy's ICRC of the {msg}: {m}");
    }
    let rep = &seen["rep"];
    let rep_fields = [
        ("local_qpn", u64::from(qp.qpn().get())),
        ("starting_psn", u64::from(a.sq_psn)),
        ("responder_resources", 1),
        ("initiator_depth", 1),
        ("end_to_end_flow_control", 1),
        ("rnr_retry_count", 7),
        ("srq", 0),
    ];
    for (field, want) in rep_fields {
        assert_eq!(rep[field].as_u64(), Some(want), "rep.{field}: {rep}");
    }
    assert_ne!(rep["local_ca_guid"].as_u64(), Some(0), "{rep}");
    let welcome: String = b"scapy welcome"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(rep["private_data"].as_str(), Some(welcome.as_str()));

    let stats = svc.stats();
    assert_eq!(
        (stats.received, stats.bad_mads, stats.unmatched),
        (3, 0, 0),
        "REQ, RTU and DREQ, each parsed and matched: {stats:?}"
    );
}
