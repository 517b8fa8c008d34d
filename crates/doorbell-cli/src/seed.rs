//! The seed's comparison: what one `ibv_post_send` of a small RDMA WRITE
//! costs on the bus under each configuration, per post.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use doorbell_hif::DeviceLink;
use doorbell_pcie::{Counters, LinkConfig, PerPost};
use doorbell_rt::{Fabric, LiveNic};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, ProviderConfig, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RemoteAddr,
    SendFlags, SendWr, Wc, WrOpcode,
};
use serde::Serialize;

/// One row of DESIGN.md's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedConfig {
    /// 8-byte doorbell, data by pointer, every WR signalled.
    Baseline,
    /// Data copied into the WQE.
    Inline,
    /// The WQE written by BlueFlame, data by pointer.
    BlueFlame,
    /// Both.
    InlineBlueFlame,
    /// `n` WRs per post_send, one doorbell.
    Postlist(u32),
    /// One WR in `n` signalled.
    Unsignaled(u32),
}

impl SeedConfig {
    /// The name used in the table and the JSON `config` key.
    pub fn name(self) -> &'static str {
        match self {
            SeedConfig::Baseline => "baseline",
            SeedConfig::Inline => "inline",
            SeedConfig::BlueFlame => "blueflame",
            SeedConfig::InlineBlueFlame => "inline_blueflame",
            SeedConfig::Postlist(_) => "postlist",
            SeedConfig::Unsignaled(_) => "unsignaled",
        }
    }

    fn blueflame(self) -> bool {
        matches!(self, SeedConfig::BlueFlame | SeedConfig::InlineBlueFlame)
    }

    fn inline(self) -> bool {
        matches!(self, SeedConfig::Inline | SeedConfig::InlineBlueFlame)
    }
}

/// What the comparison runs.
#[derive(Debug, Clone)]
pub struct SeedOptions {
    /// Message size in bytes.
    pub size: u32,
    /// Posts (WRs) per configuration; rounded up to a multiple of the
    /// postlist length and the signalling period.
    pub posts: u32,
    /// WRs per postlist.
    pub postlist: u32,
    /// Signalling period of the unsignalled configuration.
    pub signal_every: u32,
    /// PCIe link parameters.
    pub link: LinkConfig,
}

impl Default for SeedOptions {
    fn default() -> Self {
        Self {
            size: 8,
            posts: 1024,
            postlist: 16,
            signal_every: 16,
            link: LinkConfig::default(),
        }
    }
}

/// One row of the main job: a configuration and its per-post counts (the
/// JSON object the main job prints, the report's keys flattened in).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedRow {
    /// Configuration name.
    pub config: &'static str,
    /// What each post cost on the bus.
    #[serde(flatten)]
    pub per_post: PerPost,
    /// WRs per post_send call (postlist only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postlist_len: Option<u32>,
    /// One WR in this many signalled (unsignaled only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_every: Option<u32>,
}

impl SeedRow {
    fn from_counters(cfg: SeedConfig, c: &Counters, posts: u32) -> Self {
        SeedRow {
            config: cfg.name(),
            per_post: PerPost::from_counters(c, posts.into()),
            postlist_len: match cfg {
                SeedConfig::Postlist(n) => Some(n),
                _ => None,
            },
            signal_every: match cfg {
                SeedConfig::Unsignaled(n) => Some(n),
                _ => None,
            },
        }
    }
}

/// The six configurations of DESIGN.md's table, in its order.
pub fn configs(o: &SeedOptions) -> [SeedConfig; 6] {
    [
        SeedConfig::Baseline,
        SeedConfig::Inline,
        SeedConfig::BlueFlame,
        SeedConfig::InlineBlueFlame,
        SeedConfig::Postlist(o.postlist),
        SeedConfig::Unsignaled(o.signal_every),
    ]
}

struct Endpoints {
    a: Arc<LiveNic>,
    qp: Qp,
    cq: Cq,
    src: doorbell_verbs::Mr,
    dst: doorbell_verbs::Mr,
    _keep: (Arc<LiveNic>, Qp, Context, Context, Fabric),
}

fn connect(cfg: SeedConfig, o: &SeedOptions, sq_depth: u32) -> Result<Endpoints> {
    let fabric = Fabric::new();
    let a = Arc::new(LiveNic::start("seed-a", &fabric, [127, 0, 0, 2], o.link)?);
    let b = Arc::new(LiveNic::start("seed-b", &fabric, [127, 0, 0, 3], o.link)?);
    let provider = ProviderConfig {
        shut_up_bf: !cfg.blueflame(),
        ..ProviderConfig::default()
    };
    let ca = Context::with_config(a.clone() as Arc<dyn DeviceLink>, provider.clone())?;
    let cb = Context::with_config(b.clone() as Arc<dyn DeviceLink>, provider)?;
    let cap = QpCaps {
        max_send_wr: sq_depth,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: o.size.min(256),
    };
    // A CQ deeper than the run: the device never needs to re-read the
    // consumer index, so only the per-post crossings are counted.
    let cqe = (o.posts + 1).next_power_of_two().max(256);
    let mk = |ctx: &Context| -> Result<(Cq, Qp, doorbell_verbs::Mr)> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cqe)?;
        let qp = pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap,
            sq_sig_all: false,
            srq: None,
        })?;
        let mr = pd.reg_mr(
            (o.size as usize).max(64),
            Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE),
        )?;
        Ok((cq, qp, mr))
    };
    let (cq, qp, src) = mk(&ca)?;
    let (_cqb, qpb, dst) = mk(&cb)?;
    let ea = RcEndpoint {
        gid: ca.gid(),
        qpn: qp.qpn(),
        psn: Psn::new(1),
    };
    let eb = RcEndpoint {
        gid: cb.gid(),
        qpn: qpb.qpn(),
        psn: Psn::new(2),
    };
    qp.connect_rc(&ea, &eb, 1024)?;
    qpb.connect_rc(&eb, &ea, 1024)?;
    Ok(Endpoints {
        a,
        qp,
        cq,
        src,
        dst,
        _keep: (b, qpb, ca, cb, fabric),
    })
}

fn wait(cq: &Cq, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [Wc::default(); 16];
    let mut got = 0;
    while got < n {
        let k = cq.poll(&mut wc[..(n - got).min(16)])?;
        if let Some(bad) = wc[..k].iter().find(|w| !w.is_ok()) {
            bail!("a WRITE completed with {:?}", bad.status);
        }
        got += k;
        if k == 0 {
            if Instant::now() > deadline {
                bail!("timed out waiting for completions ({got} of {n})");
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Runs one configuration and returns its per-post counts.
pub fn measure(cfg: SeedConfig, o: &SeedOptions) -> Result<SeedRow> {
    let batch = match cfg {
        SeedConfig::Postlist(n) | SeedConfig::Unsignaled(n) => n.max(1),
        _ => 1,
    };
    let posts = o.posts.max(1).div_ceil(batch) * batch;
    let e = connect(cfg, o, batch.max(16))?;
    let sge = e.src.sge(0, o.size)?;
    let remote = RemoteAddr {
        addr: e.dst.addr(),
        rkey: e.dst.rkey(),
    };
    let flags = |signaled: bool| {
        let mut f = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::default()
        };
        if cfg.inline() {
            f = f | SendFlags::INLINE;
        }
        f
    };
    let wr = |i: u32, signaled: bool| SendWr {
        wr_id: u64::from(i),
        sg_list: std::slice::from_ref(&sge),
        opcode: WrOpcode::RdmaWrite(remote),
        flags: flags(signaled),
        ud: None,
    };
    let qpn = e.qp.qpn();
    let before = e.a.counters(Some(qpn)).0;
    let mut i = 0;
    while i < posts {
        match cfg {
            SeedConfig::Postlist(n) => {
                let list: Vec<SendWr<'_>> = (0..n).map(|k| wr(i + k, true)).collect();
                e.qp.post_send(&list)?;
                wait(&e.cq, n as usize)?;
                i += n;
            }
            SeedConfig::Unsignaled(n) => {
                for k in 0..n {
                    e.qp.post_send(&[wr(i + k, k + 1 == n)])?;
                }
                wait(&e.cq, 1)?;
                i += n;
            }
            _ => {
                e.qp.post_send(&[wr(i, true)])?;
                wait(&e.cq, 1)?;
                i += 1;
            }
        }
    }
    let after = e.a.counters(Some(qpn)).0;
    Ok(SeedRow::from_counters(cfg, &after.since(&before), posts))
}

/// Runs every configuration.
pub fn measure_all(o: &SeedOptions) -> Result<Vec<SeedRow>> {
    configs(o)
        .iter()
        .map(|&c| measure(c, o).with_context(|| format!("measuring {}", c.name())))
        .collect()
}

/// The human-readable table.
pub fn render(rows: &[SeedRow], o: &SeedOptions) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Per-post PCIe crossings of one {}-byte RDMA WRITE, requester side, measured on the live runtime\n\
         ({} posts per row; MPS {} B, MRRS {} B, RCB {} B; DMA reads and writes are operations, TLPs counted apart)\n",
        o.size, o.posts, o.link.mps_bytes, o.link.mrrs_bytes, o.link.rcb_bytes
    );
    let _ = writeln!(
        s,
        "{:<22} {:>6} {:>7} {:>6} {:>8} {:>8} {:>6} {:>8} {:>6} {:>6} {:>6}",
        "config",
        "MMIO",
        "MMIO B",
        "WQE rd",
        "data rd",
        "DMA rd B",
        "CQE wr",
        "DMA wr B",
        "MWr",
        "MRd",
        "CplD"
    );
    for r in rows {
        let name = match (r.postlist_len, r.signal_every) {
            (Some(n), _) => format!("postlist (n = {n})"),
            (_, Some(n)) => format!("unsignaled (1 in {n})"),
            _ => r.config.to_string(),
        };
        let p = &r.per_post;
        let _ = writeln!(
            s,
            "{:<22} {:>6.3} {:>7.1} {:>6.3} {:>8.3} {:>8.1} {:>6.3} {:>8.1} {:>6.3} {:>6.3} {:>6.3}",
            name,
            p.mmio_writes,
            p.mmio_bytes,
            p.wqe_dma_reads,
            p.payload_dma_reads,
            p.dma_read_bytes,
            p.cqe_dma_writes,
            p.dma_write_bytes,
            p.mwr_tlps,
            p.mrd_tlps,
            p.cpld_tlps
        );
    }
    let _ = writeln!(
        s,
        "\nMMIO: CPU stores into the UAR (an 8-byte doorbell, or 64-byte BlueFlame chunks carrying the WQE).\n\
         WQE rd / data rd: DMA reads of the send WQE and of the payload; each is a round trip on the link.\n\
         CQE wr: DMA writes of completions. Inline drops the payload read; BlueFlame drops the WQE read;\n\
         a postlist rings once for n WQEs; signalling 1 in n writes one CQE per n posts."
    );
    s
}
