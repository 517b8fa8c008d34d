//! ibv_rc_pingpong, in safe Rust, between two doorbell NICs in one process.
//!
//! Like the rdma-core example it allocates a buffer, creates one CQ and one
//! RC QP per side, connects them with the same attributes (path MTU, PSNs,
//! timeout 14, retry 7, RNR 7, min RNR timer 12), keeps `rx_depth` receives
//! posted, and bounces `iters` SENDs of `size` bytes, inline when the QP
//! allows. It prints the same summary lines.
//!
//! ```text
//! cargo run --release --example rc_pingpong -- [size] [iters] [rx_depth] [mtu]
//! ```

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use doorbell_rt::{Fabric, LiveNic};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, SendFlags, SendWr,
    Wc, WcOpcode, WcStatus, WrOpcode,
};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

struct Side {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    ctx: Context,
}

fn side(nic: Arc<LiveNic>, size: usize, rx_depth: u32) -> Result<Side, Box<dyn std::error::Error>> {
    let ctx = Context::open(nic)?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(size.max(1), Access(Access::LOCAL_WRITE))?;
    let cq = ctx.create_cq(rx_depth + 1)?;
    let cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap,
        sq_sig_all: false,
    })?;
    Ok(Side { qp, cq, mr, ctx })
}

fn post_recvs(s: &Side, n: u32, size: u32) -> Result<(), Box<dyn std::error::Error>> {
    let sge = s.mr.sge(0, size)?;
    for _ in 0..n {
        s.qp.post_recv(&[RecvWr {
            wr_id: RECV_WRID,
            sg_list: &[sge],
        }])?;
    }
    Ok(())
}

/// One side's loop: the client sends first; each side keeps one send and
/// one receive in flight, as rc_pingpong does with its `pending` bits.
fn run(s: Side, size: u32, iters: u32, rx_depth: u32, client: bool) -> Result<(), String> {
    let inline = s.qp.caps().max_inline_data >= size;
    let flags = if inline {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    };
    let sge = s.mr.sge(0, size).map_err(|e| e.to_string())?;
    let send = || {
        s.qp.post_send(&[SendWr {
            wr_id: SEND_WRID,
            sg_list: &[sge],
            opcode: WrOpcode::Send,
            flags,
            ud: None,
        }])
    };
    let mut routs = rx_depth;
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut pending = RECV_WRID;
    if client {
        send().map_err(|e| e.to_string())?;
        pending |= SEND_WRID;
    }
    let mut wc = [Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        qp_num: Default::default(),
        src_qp: 0,
        grh: false,
        vendor_err: 0,
    }; 2];
    while rcnt < iters || scnt < iters {
        let n = s.cq.poll(&mut wc).map_err(|e| e.to_string())?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {:?} for wr_id {}",
                    w.status, w.wr_id
                ));
            }
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    rcnt += 1;
                    routs -= 1;
                    if routs <= 1 {
                        post_recvs(&s, rx_depth - routs, size).map_err(|e| e.to_string())?;
                        routs = rx_depth;
                    }
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending &= !w.wr_id;
            if scnt < iters && pending == 0 {
                send().map_err(|e| e.to_string())?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
        if n == 0 {
            thread::yield_now();
        }
    }
    let _ = s.ctx;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let size = args.first().copied().unwrap_or(4096);
    let iters = args.get(1).copied().unwrap_or(1000);
    let rx_depth = args.get(2).copied().unwrap_or(500).max(2);
    let mtu = args.get(3).copied().unwrap_or(1024);
    let fabric = Fabric::new();
    let server_nic = Arc::new(LiveNic::start(
        "doorbell0",
        &fabric,
        [127, 0, 0, 2],
        Default::default(),
    )?);
    let client_nic = Arc::new(LiveNic::start(
        "doorbell1",
        &fabric,
        [127, 0, 0, 3],
        Default::default(),
    )?);
    let server = side(server_nic, size as usize, rx_depth)?;
    let client = side(client_nic, size as usize, rx_depth)?;
    // The out-of-band exchange: GID, QPN and a starting PSN each way.
    let es = RcEndpoint {
        gid: server.ctx.gid(),
        qpn: server.qp.qpn(),
        psn: Psn::new(0x12_3456),
    };
    let ec = RcEndpoint {
        gid: client.ctx.gid(),
        qpn: client.qp.qpn(),
        psn: Psn::new(0xab_cdef),
    };
    println!(
        "  local address:  QPN {:#08x}, PSN {:#08x}, GID ::ffff:127.0.0.3",
        ec.qpn.get(),
        ec.psn.get()
    );
    println!(
        "  remote address: QPN {:#08x}, PSN {:#08x}, GID ::ffff:127.0.0.2",
        es.qpn.get(),
        es.psn.get()
    );
    server.qp.connect_rc(&es, &ec, mtu)?;
    client.qp.connect_rc(&ec, &es, mtu)?;
    post_recvs(&server, rx_depth, size)?;
    post_recvs(&client, rx_depth, size)?;
    let start = Instant::now();
    let srv = thread::spawn(move || run(server, size, iters, rx_depth, false));
    run(client, size, iters, rx_depth, true)?;
    srv.join().map_err(|_| "server thread panicked")??;
    let secs = start.elapsed().as_secs_f64();
    let bytes = u64::from(size) * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{iters} iters in {secs:.2} seconds = {:.2} usec/iter",
        secs * 1e6 / f64::from(iters)
    );
    Ok(())
}
