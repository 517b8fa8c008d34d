//! The critical path as monospace text, for a terminal.

use std::fmt::Write;

use crate::model::PathStep;
use crate::path;
use crate::ticks;

/// See [`crate::critical_path_text`].
pub(crate) fn render(title: &str, steps: &[PathStep], width: usize) -> String {
    let width = width.clamp(10, 400);
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    if steps.is_empty() {
        out.push_str("(no steps)\n");
        return out;
    }
    let valid: Vec<PathStep> = steps.iter().filter(|s| s.is_valid()).cloned().collect();
    let ordered = path::sorted(&valid);
    let (t0, t1) = path::span(&ordered);
    let name_w = steps
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let lane_w = steps
        .iter()
        .map(|s| s.lane.name().chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let scale_left = ticks::number_label(t0);
    let scale_right = format!("{} ns", ticks::number_label(t1));
    let scale_gap = width
        .saturating_sub(scale_left.len() + scale_right.len())
        .max(1);
    let _ = writeln!(
        out,
        " # {:<name_w$}  {:<lane_w$}  {:>8}  {:>8}  {:>8}  {scale_left}{:scale_gap$}{scale_right}",
        "step", "lane", "start ns", "end ns", "dur ns", ""
    );
    let col = |t: f64| {
        (((t - t0) / (t1 - t0)) * width as f64)
            .round()
            .clamp(0.0, width as f64) as usize
    };
    let mut sum = 0.0;
    for s in &ordered {
        let (c0, c1) = (col(s.start_ns), col(s.end_ns));
        let bar = if s.end_ns == s.start_ns {
            format!("{:c0$}+", "", c0 = c0.min(width - 1))
        } else {
            let c0 = c0.min(width - 1);
            format!("{:c0$}{}", "", "#".repeat(c1.max(c0 + 1) - c0))
        };
        sum += s.duration_ns();
        let _ = writeln!(
            out,
            "{:>2} {:<name_w$}  {:<lane_w$}  {:>8.1}  {:>8.1}  {:>8.1}  {}",
            s.number,
            s.name,
            s.lane.name(),
            s.start_ns,
            s.end_ns,
            s.duration_ns(),
            bar.trim_end()
        );
    }
    for s in steps.iter().filter(|s| !s.is_valid()) {
        let _ = writeln!(
            out,
            "{:>2} {:<name_w$}  {:<lane_w$}  invalid times (start {} ns, end {} ns), not drawn",
            s.number,
            s.name,
            s.lane.name(),
            s.start_ns,
            s.end_ns
        );
    }
    if ordered.is_empty() {
        out.push_str("total: no step with valid times\n");
        return out;
    }
    let first = ordered
        .iter()
        .map(|s| s.start_ns)
        .fold(f64::INFINITY, f64::min);
    let last = ordered
        .iter()
        .map(|s| s.end_ns)
        .fold(f64::NEG_INFINITY, f64::max);
    let total = last - first;
    let _ = write!(out, "total {total:.1} ns");
    if (sum - total).abs() > 1e-6 * total.max(1.0) {
        let _ = write!(
            out,
            " (the steps add up to {sum:.1} ns: they overlap or leave gaps)"
        );
    }
    out.push('\n');
    out
}
