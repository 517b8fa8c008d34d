//! The pictures of `doorbell sim`: one post's critical path (`--explain`)
//! and a sweep's charts (`--plot`), drawn by `doorbell-plot`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use doorbell_plot::{Chart, Lane, Mark, PathStep, RefLine, Scale, Series};
use doorbell_sim::published::{self, Varied};
use doorbell_sim::{Profile, Report};

use super::{Sweep, SweepRow};

/// One post's critical path as the seed's figure shows it: the host builds
/// the WQE and rings, the doorbell crosses the root complex, the NIC reads
/// the WQE and the payload, the packet and its ACK cross the wire, and the
/// CQE comes back over PCIe to the poll.
pub(super) fn critical_path(r: &Report) -> Vec<PathStep> {
    let st = &r.steps;
    let doorbell = if r.workload.blueflame {
        "doorbell / BlueFlame MMIO"
    } else {
        "doorbell MMIO"
    };
    let wire = if r.workload.qp_type == doorbell_hif::QpType::Rc {
        "wire and ACK"
    } else {
        "wire"
    };
    let steps = [
        ("WQE write (CPU)", Lane::Host, st.wqe_write),
        (doorbell, Lane::Pcie, st.doorbell),
        ("WQE DMA read", Lane::Nic, st.wqe_dma_read),
        ("payload DMA read", Lane::Nic, st.payload_dma_read),
        (wire, Lane::Wire, st.wire_and_ack),
        ("CQE DMA write and poll", Lane::Pcie, st.cqe_dma_write),
    ];
    let mut at = 0.0;
    steps
        .iter()
        .enumerate()
        .map(|(i, (name, lane, ns))| {
            let s = PathStep {
                number: i as u8,
                name: name.to_string(),
                lane: *lane,
                start_ns: at,
                end_ns: at + ns.max(0.0),
            };
            at = s.end_ns;
            s
        })
        .collect()
}

/// The figure's title.
pub(super) fn critical_path_title(r: &Report) -> String {
    let w = &r.workload;
    format!(
        "one {} {} of {} B on {}, unloaded: {:.0} ns",
        format!("{:?}", w.qp_type).to_uppercase(),
        w.op.name().to_uppercase(),
        w.size,
        r.profile,
        r.steps.total
    )
}

/// Prints the critical path of `r` as text and, given `file`, draws it
/// there (SVG or PNG by the extension).
pub(super) fn explain(r: &Report, file: Option<&Path>) -> Result<String> {
    let steps = critical_path(r);
    let title = critical_path_title(r);
    if let Some(path) = file {
        doorbell_plot::draw_critical_path(path, &title, &steps)
            .with_context(|| format!("--explain {}", path.display()))?;
    }
    Ok(doorbell_plot::critical_path_text(&title, &steps, 72))
}

/// Where a sweep's row goes on the x axis, and the series it belongs to.
fn place(s: Sweep, row: &SweepRow, categories: &[String]) -> (f64, String) {
    let w = &row.report.workload;
    match s {
        Sweep::Features => {
            let x = categories
                .iter()
                .position(|c| *c == row.config)
                .unwrap_or(0);
            (x as f64, row.profile.clone())
        }
        Sweep::Threads => {
            let series = if w.thread_domains {
                "thread domains (lockless)"
            } else {
                "shared bfregs (locks)"
            };
            (f64::from(w.threads), format!("{}, {series}", row.profile))
        }
        Sweep::Sizes => (f64::from(w.size), row.profile.clone()),
    }
}

/// Draws a sweep into `path`: message rate and bandwidth against the
/// swept variable, one series per configuration, the published figures
/// of the profile where the sweep ran their workload, and the link's
/// limits as reference lines.
pub(super) fn plot(rows: &[SweepRow], s: Sweep, profiles: &[Profile], path: &Path) -> Result<()> {
    let mut categories: Vec<String> = Vec::new();
    if s == Sweep::Features {
        for r in rows {
            if !categories.contains(&r.config) {
                categories.push(r.config.clone());
            }
        }
    }
    let mut rate: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut bw: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut marks: Vec<Mark> = Vec::new();
    for row in rows {
        let (x, series) = place(s, row, &categories);
        rate.entry(series.clone())
            .or_default()
            .push((x, row.report.msg_rate_mops));
        bw.entry(series)
            .or_default()
            .push((x, row.report.bandwidth_gbps));
        let varied = match s {
            Sweep::Sizes => Varied::Size,
            Sweep::Threads => Varied::Threads,
            Sweep::Features => Varied::Nothing,
        };
        for f in published::figures() {
            if !f.applies_to(&row.profile, &row.report.workload, varied)
                || marks.iter().any(|m| m.label.starts_with(f.id))
            {
                continue;
            }
            let fx = match s {
                Sweep::Sizes => f64::from(f.workload.size),
                Sweep::Threads => f64::from(f.workload.threads),
                Sweep::Features => x,
            };
            marks.push(Mark {
                label: format!("{} ({}) {} Mops", f.id, f.source, f.mops),
                x: fx,
                y: f.mops,
            });
        }
    }
    let mut lines = Vec::new();
    for p in profiles {
        lines.push(RefLine {
            label: format!("{}: port {} Gb/s", p.name, p.network.port_gbps),
            y: p.network.port_gbps,
        });
        if let Ok(link) = p.link_model() {
            let g = link.link.usable_gbps();
            lines.push(RefLine {
                label: format!("{}: PCIe usable {g:.1} Gb/s", p.name),
                y: g,
            });
        }
    }
    let first = &rows[0].report.workload;
    let what = format!(
        "{} {} ",
        format!("{:?}", first.qp_type).to_uppercase(),
        first.op.name().to_uppercase()
    );
    let (x_label, x_scale, of) = match s {
        Sweep::Features => (
            "feature".to_string(),
            Scale::Linear,
            format!("{} B", first.size),
        ),
        Sweep::Threads => (
            "posting threads".to_string(),
            Scale::Log2,
            format!("{} B", first.size),
        ),
        Sweep::Sizes => (
            "message size (bytes)".to_string(),
            Scale::Log2,
            "perftest -a".to_string(),
        ),
    };
    let cats = (s == Sweep::Features).then(|| categories.clone());
    let series = |m: BTreeMap<String, Vec<(f64, f64)>>| {
        m.into_iter()
            .map(|(label, points)| Series { label, points })
            .collect::<Vec<_>>()
    };
    let charts = [
        Chart {
            title: format!("{what}message rate, {of}"),
            x_label: x_label.clone(),
            y_label: "message rate (Mops)".into(),
            x_scale,
            y_scale: if s == Sweep::Sizes {
                Scale::Log10
            } else {
                Scale::Linear
            },
            x_categories: cats.clone(),
            series: series(rate),
            marks,
            lines: Vec::new(),
        },
        Chart {
            title: format!("{what}bandwidth, {of}"),
            x_label,
            y_label: "bandwidth (Gb/s)".into(),
            x_scale,
            y_scale: Scale::Linear,
            x_categories: cats,
            series: series(bw),
            marks: Vec::new(),
            lines,
        },
    ];
    doorbell_plot::draw_charts(path, &charts).with_context(|| format!("--plot {}", path.display()))
}
