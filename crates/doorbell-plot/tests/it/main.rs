//! Integration tests of doorbell-plot: the pictures parse, carry their
//! labels, and bad input is a typed error, never a panic.

mod charts;
mod errors;
mod path;

use doorbell_plot::{Chart, Lane, Mark, PathStep, RefLine, Scale, Series};

/// Two charts as the simulator's sweeps give them.
pub(crate) fn sample_charts() -> Vec<Chart> {
    let sizes: Vec<f64> = (1..=23).map(|e| 2f64.powi(e)).collect();
    let series = |label: &str, peak: f64| Series {
        label: label.into(),
        points: sizes
            .iter()
            .map(|&s| (s, peak.min(7000.0 / (s + 58.0))))
            .collect(),
    };
    vec![
        Chart {
            title: "message rate".into(),
            x_label: "message size (bytes)".into(),
            y_label: "Mops".into(),
            x_scale: Scale::Log2,
            y_scale: Scale::Log10,
            series: vec![
                series("inline BlueFlame", 34.0),
                series("WQE read by DMA", 24.0),
            ],
            marks: vec![Mark {
                label: "K11 (Kalia16) 80 Mops".into(),
                x: 32.0,
                y: 80.0,
            }],
            ..Chart::default()
        },
        Chart {
            title: "bandwidth".into(),
            x_label: "message size (bytes)".into(),
            y_label: "Gb/s".into(),
            x_scale: Scale::Log2,
            y_scale: Scale::Linear,
            series: vec![Series {
                label: "ConnectX-3 profile".into(),
                points: sizes.iter().map(|&s| (s, 56.0 * s / (s + 300.0))).collect(),
            }],
            marks: vec![Mark {
                label: "perftest 54 Gb/s".into(),
                x: 65536.0,
                y: 54.0,
            }],
            lines: vec![RefLine {
                label: "line rate 56 Gb/s".into(),
                y: 56.0,
            }],
            ..Chart::default()
        },
    ]
}

/// One post's steps, BlueFlame: no WQE read (a step of no length).
pub(crate) fn sample_steps() -> Vec<PathStep> {
    let step = |number, name: &str, lane, start_ns, end_ns| PathStep {
        number,
        name: name.into(),
        lane,
        start_ns,
        end_ns,
    };
    vec![
        step(0, "WQE write (CPU)", Lane::Host, 0.0, 38.0),
        step(1, "doorbell / BlueFlame MMIO", Lane::Pcie, 38.0, 190.0),
        step(2, "WQE DMA read", Lane::Nic, 190.0, 190.0),
        step(3, "payload DMA read", Lane::Nic, 190.0, 420.0),
        step(4, "wire and ACK", Lane::Wire, 420.0, 1180.0),
        step(5, "CQE DMA write and poll", Lane::Pcie, 1180.0, 1460.0),
    ]
}

/// Every piece of text in an SVG document.
pub(crate) fn svg_texts(doc: &roxmltree::Document<'_>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            let text: String = n
                .descendants()
                .filter(|t| t.is_text())
                .filter_map(|t| t.text())
                .collect();
            text.trim().to_string()
        })
        .collect()
}

/// Width and height from a PNG's IHDR, after checking its signature.
pub(crate) fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().unwrap());
    (be(16..20), be(20..24))
}
