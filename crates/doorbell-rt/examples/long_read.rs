//! One long RDMA READ between two NICs of one process, and what it costs:
//! the time it takes and the process's peak resident memory (`VmHWM`)
//! before and after. A READ builds its responses a burst at a time
//! (`NicConfig::read_burst`), so the memory it holds is a burst's frames,
//! not all of its responses; with `relay`, the frames pass through a fault
//! relay (no faults set), where they carry their payloads.
//!
//! ```text
//! cargo run --release -p doorbell-rt --example long_read [-- MIB [relay]]
//! ```
//!
//! MIB (default 256, at most 2047) is the READ's length in MiB.

use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_fault::Faults;
use doorbell_rt::{Fabric, LiveNic, NicOptions, Port};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, ProviderConfig, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint,
    RemoteAddr, SendFlags, SendWr, Wc, WcStatus, WrOpcode,
};

/// One side: its context, CQ, QP and MR of `len` bytes.
struct Side {
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn side(nic: Arc<LiveNic>, len: usize) -> Side {
    let ctx = Context::with_config(nic, ProviderConfig::default()).expect("context");
    let pd = ctx.alloc_pd().expect("PD");
    let cq = ctx.create_cq(16).expect("CQ");
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            srq: None,
        })
        .expect("QP");
    let mr = pd
        .reg_mr(len, Access(Access::LOCAL_WRITE | Access::REMOTE_READ))
        .expect("MR");
    Side { ctx, cq, qp, mr }
}

/// The process's peak resident memory so far, in MiB.
fn peak_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let arg = args.next();
    let mib = match arg.as_deref().map(str::parse::<u32>) {
        None => 256,
        Some(Ok(m)) if (1..=2047).contains(&m) => m,
        Some(_) => {
            eprintln!(
                "long_read: MIB must be a whole number from 1 to 2047, as in `long_read 256`; got {:?}",
                arg.unwrap_or_default()
            );
            std::process::exit(2);
        }
    };
    let relay = match args.next().as_deref() {
        None => false,
        Some("relay") => true,
        Some(other) => {
            eprintln!("long_read: the second argument can only be `relay`; got {other:?}");
            std::process::exit(2);
        }
    };
    let len = mib as usize * 1024 * 1024;
    let fabric = Fabric::new();
    let start = |name, ip| {
        let opts = if relay {
            NicOptions::with_faults(Faults::new(1))
        } else {
            NicOptions::default()
        };
        Arc::new(LiveNic::start_with(name, ip, Port::Fabric(&fabric), opts).expect("NIC"))
    };
    let a = side(start("nic-a", [127, 0, 0, 2]), len);
    let b = side(start("nic-b", [127, 0, 0, 3]), len);
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(1),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(2),
    };
    a.qp.connect_rc(&ea, &eb, 4096).expect("connect A");
    b.qp.connect_rc(&eb, &ea, 4096).expect("connect B");
    let last = len as u64 - 8;
    b.mr.write(last, &[7; 8]).expect("mark B's last bytes");
    let before = peak_mib();
    let t0 = Instant::now();
    let sge = [a.mr.sge(0, len as u32).expect("SGE")];
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::RdmaRead(RemoteAddr {
            addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        }),
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .expect("post the READ");
    let mut wc = [Wc::default()];
    let deadline = t0 + Duration::from_secs(60);
    while a.cq.poll(&mut wc).expect("poll") == 0 {
        assert!(Instant::now() < deadline, "the READ did not complete");
        std::thread::yield_now();
    }
    let took = t0.elapsed();
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    let mut end = [0u8; 8];
    a.mr.read(last, &mut end).expect("read A's last bytes");
    assert_eq!(end, [7; 8], "the READ brought B's last bytes");
    println!(
        "long_read: {mib} MiB{}: {:.1} ms, {:.2} GB/s; peak resident memory {before} MiB before, {} MiB after",
        if relay { " through a fault relay" } else { "" },
        took.as_secs_f64() * 1e3,
        len as f64 / took.as_secs_f64() / 1e9,
        peak_mib()
    );
}
