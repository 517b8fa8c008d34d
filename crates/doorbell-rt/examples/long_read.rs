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

/// `what` failed with `e`, as the example reports it.
fn failed(what: &str) -> impl FnOnce(doorbell_verbs::VerbsError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn side(nic: Arc<LiveNic>, len: usize) -> Result<Side, String> {
    let ctx =
        Context::with_config(nic, ProviderConfig::default()).map_err(failed("open a context"))?;
    let pd = ctx.alloc_pd().map_err(failed("allocate a PD"))?;
    let cq = ctx.create_cq(16).map_err(failed("create a CQ"))?;
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
                ..QpCaps::default()
            },
            sq_sig_all: false,
            srq: None,
        })
        .map_err(failed("create a QP"))?;
    let mr = pd
        .reg_mr(len, Access(Access::LOCAL_WRITE | Access::REMOTE_READ))
        .map_err(failed("register the MR (a smaller MIB needs less memory)"))?;
    Ok(Side { ctx, cq, qp, mr })
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
    match run(mib, relay) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("long_read: {e}");
            std::process::exit(1);
        }
    }
}

/// Times one READ of `mib` MiB, through a fault relay if `relay`; the
/// line to print, or what failed.
fn run(mib: u32, relay: bool) -> Result<String, String> {
    let len = mib as usize * 1024 * 1024;
    let fabric = Fabric::new();
    let start = |name, ip| {
        let opts = if relay {
            NicOptions::with_faults(Faults::new(1))
        } else {
            NicOptions::default()
        };
        LiveNic::start_with(name, ip, Port::Fabric(&fabric), opts)
            .map(Arc::new)
            .map_err(|e| format!("start a NIC: {e}"))
    };
    let a = side(start("nic-a", [127, 0, 0, 2])?, len)?;
    let b = side(start("nic-b", [127, 0, 0, 3])?, len)?;
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
    a.qp.connect_rc(&ea, &eb, 4096)
        .map_err(failed("connect A"))?;
    b.qp.connect_rc(&eb, &ea, 4096)
        .map_err(failed("connect B"))?;
    let last = len as u64 - 8;
    b.mr.write(last, &[7; 8])
        .map_err(failed("mark B's last bytes"))?;
    let before = peak_mib();
    let t0 = Instant::now();
    let sge = [a
        .mr
        .sge(0, len as u32)
        .map_err(failed("describe A's buffer"))?];
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
    .map_err(failed("post the READ"))?;
    let mut wc = [Wc::default()];
    let deadline = t0 + Duration::from_secs(60);
    while a.cq.poll(&mut wc).map_err(failed("poll A's CQ"))? == 0 {
        if Instant::now() > deadline {
            return Err("the READ did not complete within 60 s".into());
        }
        std::thread::yield_now();
    }
    let took = t0.elapsed();
    if wc[0].status != WcStatus::Success {
        return Err(format!("the READ completed in error: {:?}", wc[0]));
    }
    let mut end = [0u8; 8];
    a.mr.read(last, &mut end)
        .map_err(failed("read A's last bytes"))?;
    if end != [7; 8] {
        return Err(format!("the READ brought {end:?} where B holds [7; 8]"));
    }
    Ok(format!(
        "long_read: {mib} MiB{}: {:.1} ms, {:.2} GB/s; peak resident memory {before} MiB before, {} MiB after",
        if relay { " through a fault relay" } else { "" },
        took.as_secs_f64() * 1e3,
        len as f64 / took.as_secs_f64() / 1e9,
        peak_mib()
    ))
}
