//! Where the ticks of an axis go and how they are labelled.
//!
//! Pure arithmetic on `f64`, no drawing: every function here returns values
//! in the data's own units (not exponents), sorted ascending.

/// Labels `value` with a binary prefix when it is a whole multiple of
/// 2^10, 2^20 or 2^30: 2 → `2`, 1024 → `1K`, 65536 → `64K`,
/// 8388608 → `8M`, 3072 → `3K`. Other values get [`number_label`].
pub(crate) fn pow2_label(value: f64) -> String {
    const UNITS: [(f64, &str); 4] = [
        (1_099_511_627_776.0, "T"),
        (1_073_741_824.0, "G"),
        (1_048_576.0, "M"),
        (1024.0, "K"),
    ];
    if value.is_finite() && value >= 1024.0 && value.fract() == 0.0 {
        for (unit, suffix) in UNITS {
            let q = value / unit;
            if q >= 1.0 && q.fract() == 0.0 {
                return format!("{q}{suffix}");
            }
        }
    }
    number_label(value)
}

/// Labels `value` with at most four significant decimals and no trailing
/// zeros: `0`, `0.25`, `12.5`, `80`, `1000000`.
pub(crate) fn number_label(value: f64) -> String {
    if !value.is_finite() {
        return String::from("?");
    }
    if value == 0.0 {
        return String::from("0");
    }
    let magnitude = value.abs().log10().floor();
    let decimals = (3.0 - magnitude).clamp(0.0, 9.0) as usize;
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    if text == "-0" {
        String::from("0")
    } else {
        text
    }
}

/// Labels a tick of a linear axis whose ticks are `step` apart: as many
/// decimals as the step needs, so 0.5-steps read `0.5, 1, 1.5`.
pub(crate) fn linear_label(value: f64, step: f64) -> String {
    if !value.is_finite() {
        return String::from("?");
    }
    let decimals = if step > 0.0 && step.is_finite() {
        (-(step.log10().floor())).clamp(0.0, 9.0) as usize
    } else {
        3
    };
    let text = format!("{value:.decimals$}");
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        String::from("0")
    } else {
        text
    }
}

/// A step of 1, 2 or 5 times a power of ten giving at most `max_ticks`
/// ticks over `span` (at least one tick).
pub(crate) fn nice_step(span: f64, max_ticks: usize) -> f64 {
    let max_ticks = max_ticks.max(2) as f64;
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / (max_ticks - 1.0);
    let power = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * power >= raw {
            return m * power;
        }
    }
    10.0 * power
}

/// Multiples of `step` inside `[lo, hi]`.
pub(crate) fn linear_ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && step.is_finite() && step > 0.0) || hi < lo {
        return Vec::new();
    }
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last.min(first + 1000))
        .map(|k| k as f64 * step)
        .collect()
}

/// Powers of two inside `[lo, hi]`, every `k`-th one counted from the
/// smallest, `k` chosen so there are at most `max_ticks` of them.
pub(crate) fn log2_ticks(lo: f64, hi: f64, max_ticks: usize) -> Vec<f64> {
    let Some((first, last)) = exponent_range(lo, hi, 2.0) else {
        return Vec::new();
    };
    let count = (last - first + 1) as usize;
    let max_ticks = max_ticks.max(2);
    let every = count.div_ceil(max_ticks).max(1) as i32;
    (first..=last)
        .step_by(every as usize)
        .map(|e| 2f64.powi(e))
        .collect()
}

/// Every power of two inside `[lo, hi]`.
pub(crate) fn log2_minor_ticks(lo: f64, hi: f64) -> Vec<f64> {
    exponent_range(lo, hi, 2.0)
        .map(|(first, last)| (first..=last).map(|e| 2f64.powi(e)).collect())
        .unwrap_or_default()
}

/// Ticks of a base-10 axis over `[lo, hi]`: the powers of ten, or, when
/// fewer than three of them fall inside, also their doubles and fives, and
/// then every multiple 1..9, whichever first gives at least three ticks
/// without passing `max_ticks`.
pub(crate) fn log10_ticks(lo: f64, hi: f64, max_ticks: usize) -> Vec<f64> {
    let mut best = decade_multiples(lo, hi, &[1.0]);
    for set in [
        &[1.0, 2.0, 5.0][..],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ] {
        if best.len() >= 3 {
            break;
        }
        let more = decade_multiples(lo, hi, set);
        if more.len() <= max_ticks.max(3) {
            best = more;
        }
    }
    if best.len() > max_ticks.max(2) {
        let every = best.len().div_ceil(max_ticks.max(2));
        best = best.into_iter().step_by(every).collect();
    }
    best
}

/// Multiples 1..9 of the powers of ten inside `[lo, hi]` (the light grid).
pub(crate) fn log10_minor_ticks(lo: f64, hi: f64) -> Vec<f64> {
    decade_multiples(lo, hi, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
}

fn decade_multiples(lo: f64, hi: f64, multiples: &[f64]) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi >= lo) {
        return Vec::new();
    }
    let (first, last) = (lo.log10().floor(), hi.log10().floor());
    if first < -300.0 || last > 300.0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for e in (first as i32)..=(last as i32) {
        for m in multiples {
            let v = m * 10f64.powi(e);
            if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                out.push(v);
            }
        }
    }
    out
}

/// The smallest and largest integer exponents `e` with `base^e` in
/// `[lo, hi]`, or `None` when the range is not positive and finite.
fn exponent_range(lo: f64, hi: f64, base: f64) -> Option<(i32, i32)> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi >= lo) {
        return None;
    }
    let first = (lo.log(base) - 1e-9).ceil();
    let last = (hi.log(base) + 1e-9).floor();
    if first > last || first < -1000.0 || last > 1000.0 {
        return None;
    }
    Some((first as i32, last as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_labels_use_binary_prefixes() {
        assert_eq!(pow2_label(2.0), "2");
        assert_eq!(pow2_label(64.0), "64");
        assert_eq!(pow2_label(512.0), "512");
        assert_eq!(pow2_label(1024.0), "1K");
        assert_eq!(pow2_label(4096.0), "4K");
        assert_eq!(pow2_label(65536.0), "64K");
        assert_eq!(pow2_label(1_048_576.0), "1M");
        assert_eq!(pow2_label(8_388_608.0), "8M");
        assert_eq!(pow2_label(1_073_741_824.0), "1G");
        assert_eq!(pow2_label(3072.0), "3K");
        assert_eq!(pow2_label(0.5), "0.5");
        assert_eq!(pow2_label(1000.0), "1000");
    }

    #[test]
    fn log2_ticks_from_2_bytes_to_8_mib() {
        let all = log2_ticks(2.0, 8_388_608.0, 100);
        assert_eq!(all.len(), 23);
        assert_eq!(all[0], 2.0);
        assert_eq!(all[22], 8_388_608.0);
        let labels: Vec<String> = log2_ticks(2.0, 8_388_608.0, 12)
            .into_iter()
            .map(pow2_label)
            .collect();
        assert_eq!(
            labels,
            [
                "2", "8", "32", "128", "512", "2K", "8K", "32K", "128K", "512K", "2M", "8M"
            ]
        );
    }

    #[test]
    fn log2_ticks_of_thread_counts() {
        let labels: Vec<String> = log2_ticks(0.8, 80.0, 10)
            .into_iter()
            .map(pow2_label)
            .collect();
        assert_eq!(labels, ["1", "2", "4", "8", "16", "32", "64"]);
    }

    #[test]
    fn log_ticks_of_bad_ranges_are_empty() {
        assert!(log2_ticks(0.0, 8.0, 10).is_empty());
        assert!(log2_ticks(f64::NAN, 8.0, 10).is_empty());
        assert!(log10_ticks(-1.0, 8.0, 10).is_empty());
        assert!(linear_ticks(0.0, f64::INFINITY, 1.0).is_empty());
    }

    #[test]
    fn log10_ticks_add_multiples_on_short_ranges() {
        assert_eq!(log10_ticks(0.5, 2000.0, 10), [1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(log10_ticks(15.0, 90.0, 5), [20.0, 50.0]);
        assert_eq!(log10_ticks(15.0, 90.0, 10).len(), 8);
        assert_eq!(log10_ticks(15.0, 45.0, 10), [20.0, 30.0, 40.0]);
    }

    #[test]
    fn nice_steps_and_linear_labels() {
        assert_eq!(nice_step(100.0, 11), 10.0);
        assert_eq!(nice_step(87.0, 6), 20.0);
        assert_eq!(nice_step(0.9, 10), 0.1);
        assert_eq!(linear_ticks(0.0, 87.0, 20.0), [0.0, 20.0, 40.0, 60.0, 80.0]);
        assert_eq!(linear_label(1.5, 0.5), "1.5");
        assert_eq!(linear_label(40.0, 20.0), "40");
        assert_eq!(linear_label(-0.0, 0.1), "0");
        assert_eq!(number_label(12.5), "12.5");
        assert_eq!(number_label(80.0), "80");
        assert_eq!(number_label(0.25), "0.25");
    }
}
