//! Writes a sample chart and a sample critical path, to look at.
//!
//! ```text
//! cargo run -p doorbell-plot --example demo -- chart.png path.svg
//! ```
//! The format follows each file's extension (`.svg` or `.png`); the
//! critical path is also printed as text.

use std::path::PathBuf;

use doorbell_plot::{Chart, Lane, Mark, PathStep, RefLine, Scale, Series};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let chart_path = args
        .next()
        .unwrap_or_else(|| PathBuf::from("demo-chart.png"));
    let path_path = args
        .next()
        .unwrap_or_else(|| PathBuf::from("demo-path.png"));

    let sizes: Vec<f64> = (1..=23).map(|e| 2f64.powi(e)).collect();
    let line_gbps = 56.0;
    // A made-up NIC: a per-configuration peak rate, then the wire's limit.
    let configs = [
        ("inline, BlueFlame", 34.0, 220.0),
        ("DMA read of the WQE", 24.0, 220.0),
        ("unsignalled, postlist 16", 62.0, 220.0),
    ];
    let mut rate = Vec::new();
    let mut bandwidth = Vec::new();
    for (label, peak_mops, inline_max) in configs {
        let mops: Vec<(f64, f64)> = sizes
            .iter()
            .map(|&s| {
                let peak: f64 = if s > inline_max {
                    peak_mops * 0.8
                } else {
                    peak_mops
                };
                let wire = line_gbps * 1e3 / (8.0 * (s + 58.0));
                (s, peak.min(wire))
            })
            .collect();
        bandwidth.push(Series {
            label: label.into(),
            points: mops.iter().map(|&(s, m)| (s, m * s * 8.0 / 1e3)).collect(),
        });
        rate.push(Series {
            label: label.into(),
            points: mops,
        });
    }
    let charts = [
        Chart {
            title: "RC RDMA WRITE, 1 QP: message rate".into(),
            x_label: "message size (bytes)".into(),
            y_label: "message rate (Mops)".into(),
            x_scale: Scale::Log2,
            y_scale: Scale::Log10,
            series: rate,
            marks: vec![Mark {
                label: "ConnectX-3 (Kalia16) 35 Mops".into(),
                x: 32.0,
                y: 35.0,
            }],
            ..Chart::default()
        },
        Chart {
            title: "RC RDMA WRITE, 1 QP: bandwidth".into(),
            x_label: "message size (bytes)".into(),
            y_label: "bandwidth (Gb/s)".into(),
            x_scale: Scale::Log2,
            y_scale: Scale::Linear,
            series: bandwidth,
            marks: vec![Mark {
                label: "perftest 54.3 Gb/s".into(),
                x: 65536.0,
                y: 54.3,
            }],
            lines: vec![RefLine {
                label: "line rate 56 Gb/s".into(),
                y: line_gbps,
            }],
            ..Chart::default()
        },
    ];
    doorbell_plot::draw_charts(&chart_path, &charts)?;

    let step = |number, name: &str, lane, start_ns, end_ns| PathStep {
        number,
        name: name.into(),
        lane,
        start_ns,
        end_ns,
    };
    let steps = [
        step(0, "WQE write (CPU)", Lane::Host, 0.0, 38.0),
        step(1, "doorbell / BlueFlame MMIO", Lane::Pcie, 38.0, 190.0),
        step(2, "WQE DMA read", Lane::Nic, 190.0, 190.0),
        step(3, "payload DMA read", Lane::Nic, 190.0, 420.0),
        step(4, "wire and ACK", Lane::Wire, 420.0, 1180.0),
        step(5, "CQE DMA write and poll", Lane::Pcie, 1180.0, 1460.0),
    ];
    let title = "RC RDMA WRITE 64 B, BlueFlame: one post's critical path";
    doorbell_plot::draw_critical_path(&path_path, title, &steps)?;
    print!("{}", doorbell_plot::critical_path_text(title, &steps, 60));
    println!("wrote {} and {}", chart_path.display(), path_path.display());
    Ok(())
}
