//! An axis as plotters sees it: a range, a mapping to pixels, ticks and labels.

use std::ops::Range;

use plotters::coord::ranged1d::{
    KeyPointHint, KeyPointWeight, NoDefaultFormatting, Ranged, ValueFormatter,
};

use crate::model::Scale;
use crate::ticks;

/// How an [`Axis`] places and labels values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AxisKind {
    /// Evenly spaced values.
    Linear,
    /// Base-2 logarithmic, binary-prefix labels.
    Log2,
    /// Base-10 logarithmic.
    Log10,
    /// Indices 0..n labelled with names.
    Category(Vec<String>),
}

impl AxisKind {
    /// The kind for a numeric scale.
    pub(crate) fn from_scale(scale: Scale) -> AxisKind {
        match scale {
            Scale::Linear => AxisKind::Linear,
            Scale::Log2 => AxisKind::Log2,
            Scale::Log10 => AxisKind::Log10,
        }
    }

    /// Whether `v` can be placed on this axis at all.
    pub(crate) fn accepts(&self, v: f64) -> bool {
        match self {
            AxisKind::Linear => v.is_finite(),
            AxisKind::Log2 | AxisKind::Log10 => v.is_finite() && v > 0.0,
            AxisKind::Category(names) => {
                v.is_finite() && v >= 0.0 && v.fract() == 0.0 && (v as usize) < names.len()
            }
        }
    }
}

/// One axis of a chart: its kind and the data range it shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    kind: AxisKind,
    lo: f64,
    hi: f64,
    max_ticks: usize,
}

impl Axis {
    /// An axis showing every value of `values` (the caller has kept only
    /// those the kind accepts), with a margin, and at most `max_ticks`
    /// labelled ticks. `from_zero` makes a linear axis include 0 (for
    /// rates and bandwidths).
    pub(crate) fn fit(kind: AxisKind, values: &[f64], from_zero: bool, max_ticks: usize) -> Axis {
        let (mut lo, mut hi) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        if !(lo.is_finite() && hi.is_finite()) {
            (lo, hi) = (0.0, 1.0);
        }
        match &kind {
            AxisKind::Category(names) => {
                lo = -0.5;
                hi = names.len().max(1) as f64 - 0.5;
            }
            AxisKind::Linear => {
                if from_zero {
                    lo = lo.min(0.0);
                    hi = hi.max(0.0);
                }
                if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
                    let pad = (hi.abs() * 0.1).max(1.0);
                    lo -= pad;
                    hi += pad;
                    if from_zero && lo < 0.0 && values.iter().all(|v| *v >= 0.0) {
                        lo = 0.0;
                    }
                }
                let span = hi - lo;
                if !(from_zero && lo == 0.0) {
                    lo -= span * 0.03;
                }
                hi += span * if from_zero { 0.08 } else { 0.03 };
            }
            AxisKind::Log2 | AxisKind::Log10 => {
                // Room for markers at both ends, more at the top (labels).
                let pad = if hi / lo < 4.0 { 1.5 } else { 1.2 };
                lo /= pad;
                hi *= pad * pad * 1.2;
            }
        }
        Axis {
            kind,
            lo,
            hi,
            max_ticks: max_ticks.max(2),
        }
    }

    /// The axis' kind.
    pub(crate) fn kind(&self) -> &AxisKind {
        &self.kind
    }

    /// The smallest value shown.
    pub(crate) fn lo(&self) -> f64 {
        self.lo
    }

    /// The largest value shown.
    pub(crate) fn hi(&self) -> f64 {
        self.hi
    }

    /// Where bars start: 0 when it is on the axis, else its low end.
    pub(crate) fn base(&self) -> f64 {
        match self.kind {
            AxisKind::Linear if self.lo <= 0.0 && self.hi >= 0.0 => 0.0,
            _ => self.lo,
        }
    }

    fn transform(&self, v: f64) -> f64 {
        match self.kind {
            AxisKind::Log2 => v.log2(),
            AxisKind::Log10 => v.log10(),
            AxisKind::Linear | AxisKind::Category(_) => v,
        }
    }

    /// The labelled ticks.
    pub(crate) fn major_ticks(&self) -> Vec<f64> {
        let max = self.max_ticks;
        match &self.kind {
            AxisKind::Linear => ticks::linear_ticks(self.lo, self.hi, self.linear_step()),
            AxisKind::Log2 => ticks::log2_ticks(self.lo, self.hi, max),
            AxisKind::Log10 => ticks::log10_ticks(self.lo, self.hi, max),
            AxisKind::Category(names) => (0..names.len()).map(|i| i as f64).collect(),
        }
    }

    fn minor_ticks(&self, max: usize) -> Vec<f64> {
        let minor = match &self.kind {
            AxisKind::Linear => ticks::linear_ticks(self.lo, self.hi, self.linear_step() / 2.0),
            AxisKind::Log2 => ticks::log2_minor_ticks(self.lo, self.hi),
            AxisKind::Log10 => ticks::log10_minor_ticks(self.lo, self.hi),
            AxisKind::Category(_) => Vec::new(),
        };
        if minor.len() <= max {
            minor
        } else {
            self.major_ticks()
        }
    }

    fn linear_step(&self) -> f64 {
        ticks::nice_step(self.hi - self.lo, self.max_ticks)
    }

    /// The label of the tick at `v`.
    pub(crate) fn label(&self, v: f64) -> String {
        match &self.kind {
            AxisKind::Linear => ticks::linear_label(v, self.linear_step()),
            AxisKind::Log2 => ticks::pow2_label(v),
            AxisKind::Log10 => ticks::number_label(v),
            AxisKind::Category(names) => names
                .get(v.round().max(0.0) as usize)
                .cloned()
                .unwrap_or_default(),
        }
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (t0, t1, t) = (
            self.transform(self.lo),
            self.transform(self.hi),
            self.transform(*value),
        );
        if !(t.is_finite() && t1 > t0) {
            return limit.0;
        }
        let frac = (t - t0) / (t1 - t0);
        let px = limit.0 as f64 + frac * (limit.1 - limit.0) as f64;
        px.round().clamp(-1e6, 1e6) as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight() {
            KeyPointWeight::Bold => self.major_ticks(),
            KeyPointWeight::Any => self.minor_ticks(hint.max_num_points()),
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, value: &f64) -> String {
        self.label(*value)
    }
}
