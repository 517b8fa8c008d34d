//! Which doorbell register each QP of one context gets: a static bfreg by
//! the kernel's policy, or with thread domains a dynamic register of each
//! QP's own.

use std::sync::Arc;

use anyhow::Result;
use doorbell_hif::DeviceLink;
use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fabric, LiveNic};
use doorbell_verbs::{Context, ProviderConfig, QpCaps, QpInitAttr, QpType};
use serde::Serialize;

/// One QP's placement (the JSON object of `doorbell layout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QpPlacement {
    /// QP number.
    pub qpn: u32,
    /// Gross bfreg index (four per UAR) the provider received
    /// (MLX5_IB_INVALID_BFREG, 2^31, for a thread domain's register).
    pub bfreg_index: u32,
    /// For a QP of a thread domain, the dynamic bfreg index it rings.
    pub dyn_bfreg: Option<u32>,
    /// The context's UAR page it lies in, from 0 (static UARs first, then
    /// the dynamic ones).
    pub uar_page: u32,
    /// Byte offset of the register in that UAR.
    pub uar_offset: u32,
    /// Whether its doorbells may use BlueFlame.
    pub blueflame: bool,
    /// Whether its doorbells take the register's lock.
    pub lock: bool,
}

/// Opens one context with `cfg` and creates `qps` RC QPs in it.
pub fn run(qps: u32, cfg: ProviderConfig) -> Result<(Vec<QpPlacement>, (u32, u32))> {
    run_with(qps, cfg, false)
}

/// As [`run`]; with `thread_domains`, each QP is created in a parent domain
/// with a thread domain of its own, and so rings a dynamic register.
pub fn run_with(
    qps: u32,
    cfg: ProviderConfig,
    thread_domains: bool,
) -> Result<(Vec<QpPlacement>, (u32, u32))> {
    let fabric = Fabric::new();
    let nic = Arc::new(LiveNic::start(
        "layout",
        &fabric,
        [127, 0, 0, 2],
        LinkConfig::default(),
    )?);
    let ctx = Context::with_config(nic as Arc<dyn DeviceLink>, cfg)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut kept = Vec::new();
    let mut rows = Vec::new();
    for _ in 0..qps {
        let in_pd = if thread_domains {
            pd.parent_domain(Some(&ctx.alloc_td()?))?
        } else {
            pd.clone()
        };
        let qp = in_pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap,
            sq_sig_all: false,
            srq: None,
        })?;
        let p = ctx.placement(&qp);
        rows.push(QpPlacement {
            qpn: qp.qpn().get(),
            bfreg_index: p.bfreg_index,
            dyn_bfreg: p.dyn_bfreg,
            uar_page: p.uar_page,
            uar_offset: p.uar_offset,
            blueflame: p.blueflame,
            lock: p.lock,
        });
        kept.push(qp);
    }
    Ok((rows, ctx.bfreg_counts()))
}

/// The human-readable table.
pub fn render(rows: &[QpPlacement], (total, low): (u32, u32)) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} RC QPs in one context: {total} static bfregs in {} UARs, {low} of them low-latency (dedicated)",
        rows.len(),
        total / 2
    );
    let dynamic = rows.iter().filter(|r| r.dyn_bfreg.is_some()).count();
    if dynamic > 0 {
        let _ = writeln!(
            s,
            "{dynamic} of them in parent domains with thread domains: a dynamic register each (\"dyn n\"), no lock"
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>8} {:>8} {:>8} {:>8} {:>10} {:>5}",
        "qpn", "bfreg", "UAR page", "offset", "BlueFlame", "lock"
    );
    for r in rows {
        let bfreg = match r.dyn_bfreg {
            Some(d) => format!("dyn {d}"),
            None => r.bfreg_index.to_string(),
        };
        let _ = writeln!(
            s,
            "{:>#8x} {:>8} {:>8} {:>#8x} {:>10} {:>5}",
            r.qpn,
            bfreg,
            r.uar_page,
            r.uar_offset,
            if r.blueflame { "yes" } else { "no" },
            if r.lock { "yes" } else { "no" }
        );
    }
    s
}
