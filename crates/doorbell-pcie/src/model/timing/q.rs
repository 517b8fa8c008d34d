//! Time inside the timing model, and the search its time-ordered lists use.

use std::collections::VecDeque;

use doorbell_types::{Duration, Instant};

/// Time inside the model: picoseconds × 2³², so that serialising a byte
/// (a few ps at Gen5 x32) loses nothing to rounding.
pub(super) type Q = u128;
pub(super) const Q_SHIFT: u32 = 32;

pub(super) fn q_of(t: Instant) -> Q {
    Q::from(t.as_ps()) << Q_SHIFT
}

pub(super) fn q_of_d(d: Duration) -> Q {
    Q::from(d.as_ps()) << Q_SHIFT
}

pub(super) fn instant_of(q: Q) -> Instant {
    Instant::from_ps(u64::try_from(q.div_ceil(1 << Q_SHIFT)).unwrap_or(u64::MAX))
}

/// The first index at or after `from` where `pred` fails, for a `pred`
/// that holds on a prefix of `v` reaching at least `from`. A search
/// galloping from both ends: the timing model's lists are searched for
/// times just after the watermark (near their front) or at the end of what
/// is reserved (near their back), so this touches a few entries where a
/// binary search would touch `log n` scattered ones.
pub(super) fn partition_from<T>(v: &VecDeque<T>, from: usize, pred: impl Fn(&T) -> bool) -> usize {
    let len = v.len();
    let mut lo = from.min(len);
    if lo == len || !pred(&v[lo]) {
        return lo;
    }
    // `pred` holds at `lo` and fails at `hi` (or `hi` is the end).
    let mut hi = len;
    let mut step = 1;
    while hi - lo > 1 {
        let front = lo.saturating_add(step);
        if front >= hi {
            break;
        }
        if !pred(&v[front]) {
            hi = front;
            break;
        }
        lo = front;
        let back = hi.saturating_sub(step);
        if back <= lo {
            break;
        }
        if pred(&v[back]) {
            lo = back;
            break;
        }
        hi = back;
        step = step.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(&v[mid]) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn galloping_search_finds_the_partition_point() {
        for len in 0..40u32 {
            let v: VecDeque<u32> = (0..len).map(|i| 2 * i).collect();
            for t in 0..2 * len + 2 {
                let want = v.partition_point(|&x| x <= t);
                for from in 0..=want {
                    assert_eq!(
                        partition_from(&v, from, |&x| x <= t),
                        want,
                        "{len} {t} {from}"
                    );
                }
            }
        }
    }
}
