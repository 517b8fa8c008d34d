//! The host's DMA read latency by read size.

use doorbell_types::Duration;

use crate::model::params::ModelError;

/// The host's DMA read latency as a function of the read's size: a few
/// (size, latency) points, interpolated linearly, flat below the first
/// point and extended along the last segment above the last one.
/// [`LinkModel`](crate::model::LinkModel) uses it only up to the last
/// point: a longer read is answered after the longest measured read's
/// delay, and the link's serialisation, tags and credits do the rest.
///
/// A point gives the round trip the device sees on an otherwise idle link,
/// from issuing the read to the arrival of its last byte, whatever MRRS
/// splits it into: what pcie-bench's latency test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLatencyCurve {
    len: usize,
    points: [(u64, Duration); ReadLatencyCurve::MAX_POINTS],
}

impl ReadLatencyCurve {
    /// Most points a curve holds.
    pub const MAX_POINTS: usize = 8;

    /// Neugebauer18's median DMA read latencies on the Xeon E5-2620 v3
    /// (P2): 533 / 627 / 853 / 1133 ns for 8 / 256 / 1024 / 2048 B. The
    /// 64 B figure P1 (547 ns) is left out, so that the P1 calibration test
    /// checks the interpolation (554 ns) instead of reading it back.
    pub const NEUGEBAUER18_P2: [(u64, Duration); 4] = [
        (8, Duration::from_ns(533)),
        (256, Duration::from_ns(627)),
        (1024, Duration::from_ns(853)),
        (2048, Duration::from_ns(1133)),
    ];

    /// A curve through `points`: 1..=8 of them, sizes strictly increasing.
    pub fn new(points: &[(u64, Duration)]) -> Result<Self, ModelError> {
        if points.is_empty() || points.len() > Self::MAX_POINTS {
            return Err(ModelError::CurvePoints { n: points.len() });
        }
        if let Some(i) = points.windows(2).position(|w| w[0].0 >= w[1].0) {
            return Err(ModelError::CurveOrder { index: i + 1 });
        }
        let mut c = ReadLatencyCurve {
            len: points.len(),
            points: [(0, Duration::ZERO); Self::MAX_POINTS],
        };
        c.points[..points.len()].copy_from_slice(points);
        Ok(c)
    }

    /// The same latency for every size.
    pub const fn constant(latency: Duration) -> Self {
        let mut points = [(0, Duration::ZERO); Self::MAX_POINTS];
        points[0] = (0, latency);
        ReadLatencyCurve { len: 1, points }
    }

    /// Neugebauer18's curve ([`Self::NEUGEBAUER18_P2`]).
    pub fn neugebauer18() -> Self {
        let mut points = [(0, Duration::ZERO); Self::MAX_POINTS];
        points[..4].copy_from_slice(&Self::NEUGEBAUER18_P2);
        ReadLatencyCurve { len: 4, points }
    }

    /// The points.
    pub fn points(&self) -> &[(u64, Duration)] {
        &self.points[..self.len]
    }

    /// The longest read the curve measured (its last point's size), or
    /// `None` for a curve of one point, which holds for every size.
    pub fn measured_up_to(&self) -> Option<u64> {
        (self.len > 1).then(|| self.points[self.len - 1].0)
    }

    /// Round-trip latency of an idle-link read of `size_bytes`.
    pub fn at(&self, size_bytes: u64) -> Duration {
        let p = self.points();
        let (seg, x) = match p.iter().position(|&(s, _)| s >= size_bytes) {
            Some(0) => return p[0].1,
            Some(i) => (i - 1, size_bytes),
            None if p.len() == 1 => return p[0].1,
            None => (p.len() - 2, size_bytes),
        };
        let (x0, y0) = (i128::from(p[seg].0), i128::from(p[seg].1.as_ps()));
        let (x1, y1) = (i128::from(p[seg + 1].0), i128::from(p[seg + 1].1.as_ps()));
        let y = y0 + (y1 - y0) * (i128::from(x) - x0) / (x1 - x0);
        Duration::from_ps(u64::try_from(y.max(0)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_interpolates_and_extrapolates() {
        let c = ReadLatencyCurve::neugebauer18();
        assert_eq!(c.at(1), Duration::from_ns(533));
        assert_eq!(c.at(256), Duration::from_ns(627));
        assert_eq!(c.at(1536), Duration::from_ns(993));
        assert_eq!(c.at(4096), Duration::from_ns(1693));
        assert_eq!(
            ReadLatencyCurve::constant(Duration::from_ns(125)).at(9999),
            Duration::from_ns(125)
        );
        assert!(ReadLatencyCurve::new(&[]).is_err());
        assert_eq!(
            ReadLatencyCurve::new(&[(8, Duration::ZERO), (8, Duration::ZERO)]),
            Err(ModelError::CurveOrder { index: 1 })
        );
    }
}
