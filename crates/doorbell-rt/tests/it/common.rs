//! Two connected RC endpoints on two NICs, and helpers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fabric, LiveNic, NicOptions, Port, ProcessMemory};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, Pd, ProviderConfig, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint,
    RecvWr, SendFlags, SendWr, Sge, Wc, WrOpcode,
};

pub struct Side {
    pub nic: Arc<LiveNic>,
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

pub const FULL: u32 =
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub _fabric: Fabric,
}

pub fn side(
    fabric: &Fabric,
    name: &str,
    ip: [u8; 4],
    cfg: ProviderConfig,
    cap: QpCaps,
    mr_len: usize,
    cqe: u32,
) -> Side {
    let nic = Arc::new(LiveNic::start(name, fabric, ip, LinkConfig::default()).unwrap());
    host(nic, cfg, cap, mr_len, cqe)
}

/// Host software for `nic`: a context, PD, one CQ, an RC QP and an MR.
pub fn host(nic: Arc<LiveNic>, cfg: ProviderConfig, cap: QpCaps, mr_len: usize, cqe: u32) -> Side {
    let ctx = Context::with_config(nic.clone(), cfg).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(cqe).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap,
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    let mr = pd.reg_mr(mr_len, Access(FULL)).unwrap();
    Side {
        nic,
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

pub fn pair_with(cfg: ProviderConfig, cap: QpCaps, mr_len: usize, cqe: u32, mtu: u32) -> Pair {
    let fabric = Fabric::new();
    let a = side(
        &fabric,
        "nic-a",
        [127, 0, 0, 2],
        cfg.clone(),
        cap,
        mr_len,
        cqe,
    );
    let b = side(&fabric, "nic-b", [127, 0, 0, 3], cfg, cap, mr_len, cqe);
    connect(a, b, fabric, mtu)
}

/// The default pair, but each NIC serves the process's own memory
/// ([`ProcessMemory`]) instead of a private address space.
pub fn pair_on_process_memory() -> Pair {
    let fabric = Fabric::new();
    let start = |name, ip| {
        let opts = NicOptions {
            memory: Some(Arc::new(ProcessMemory::new())),
            ..NicOptions::default()
        };
        Arc::new(LiveNic::start_with(name, ip, Port::Fabric(&fabric), opts).unwrap())
    };
    let (cfg, cap) = (ProviderConfig::default(), default_caps());
    let a = host(
        start("nic-a", [127, 0, 0, 2]),
        cfg.clone(),
        cap,
        4 << 20,
        256,
    );
    let b = host(start("nic-b", [127, 0, 0, 3]), cfg, cap, 4 << 20, 256);
    connect(a, b, fabric, 1024)
}

fn connect(a: Side, b: Side, fabric: Fabric, mtu: u32) -> Pair {
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ab_cd01),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x00ff_fff0),
    };
    a.qp.connect_rc(&ea, &eb, mtu).unwrap();
    b.qp.connect_rc(&eb, &ea, mtu).unwrap();
    Pair {
        a,
        b,
        _fabric: fabric,
    }
}

pub fn default_caps() -> QpCaps {
    QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

pub fn pair() -> Pair {
    pair_with(
        ProviderConfig::default(),
        default_caps(),
        4 << 20,
        256,
        1024,
    )
}

/// Polls `cq` until `n` completions arrive or 10 s pass.
pub fn wait(cq: &Cq, n: usize) -> Vec<Wc> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut buf = [Wc::default(); 16];
    while out.len() < n {
        let k = cq.poll(&mut buf).unwrap();
        out.extend_from_slice(&buf[..k]);
        if k == 0 {
            assert!(
                Instant::now() < deadline,
                "timed out with {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

pub fn post_recv(qp: &Qp, wr_id: u64, sges: &[doorbell_verbs::Sge]) {
    qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: sges,
    }])
    .unwrap();
}

pub fn post(qp: &Qp, wr: SendWr<'_>) {
    qp.post_send(&[wr]).unwrap();
}

/// Deterministic pattern bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

/// A signalled work request of `opcode` over `sg`.
pub fn signaled<'a>(wr_id: u64, sg: &'a [Sge], opcode: WrOpcode) -> SendWr<'a> {
    SendWr {
        wr_id,
        sg_list: sg,
        opcode,
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

/// Restricts the calling thread to the first CPU it may run on, as
/// `taskset -c` restricts a process; the threads it starts inherit that.
#[allow(unsafe_code)]
pub fn keep_to_one_cpu() {
    // SAFETY: `cpu_set_t` is plain data, for which all zeroes is the
    // empty set; the CPU_* helpers index within it (`cpu` is below
    // CPU_SETSIZE); pid 0 names the calling thread, and the set outlives
    // both calls, which only read or write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let len = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, len, &mut set), 0);
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .expect("the thread may run on some CPU");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        assert_eq!(libc::sched_setaffinity(0, len, &one), 0);
    }
}
