//! The adaptive retransmission timeout: a smoothed round trip and its
//! variation, as TCP keeps them (RFC 6298), from which the requester
//! decides how long a silence means a lost packet.
//!
//! The QP's `timeout` attribute stays the limit: the adaptive timeout is
//! never longer, and it only sends again early; it never fails the QP,
//! which still happens on the QP's own ACK timer and `retry_cnt`.

use doorbell_types::Duration;

/// The estimate of one QP's round trip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// The smoothed round trip; `None` before the first sample.
    srtt: Option<Duration>,
    /// The smoothed mean deviation of the samples.
    rttvar: Duration,
}

impl RttEstimator {
    /// Takes one sample: the time from sending a packet that was sent once
    /// to the acknowledgement that covered it (Karn's rule: a packet sent
    /// again gives no sample, since the answer may be to either copy).
    pub fn sample(&mut self, rtt: Duration) {
        let r = rtt.as_ps();
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = Duration::from_ps(r / 2);
            }
            Some(s) => {
                let s = s.as_ps();
                // RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R|, then
                // SRTT <- 7/8 SRTT + 1/8 R.
                let dev = s.abs_diff(r);
                self.rttvar = Duration::from_ps(self.rttvar.as_ps() / 4 * 3 + dev / 4);
                self.srtt = Some(Duration::from_ps(s / 8 * 7 + r / 8));
            }
        }
    }

    /// The smoothed round trip, once a sample was taken.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The retransmission timeout, SRTT + max(`floor`, 4 RTTVAR): RFC
    /// 6298's formula, with `floor` in the place of its clock granularity.
    /// A silence must outlast the round trip by at least `floor`: where
    /// round trips never vary (a simulation), RTTVAR decays to nothing,
    /// and an ACK due exactly one SRTT later would otherwise be taken for
    /// lost. `None` before the first sample (there is nothing to adapt to,
    /// so the QP's own timeout applies).
    pub fn rto(&self, floor: Duration) -> Option<Duration> {
        let s = self.srtt?;
        Some(s.add(self.rttvar.mul(4).max(floor)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: fn(u64) -> Duration = Duration::from_us;

    #[test]
    fn no_timeout_before_the_first_sample() {
        assert_eq!(RttEstimator::default().rto(US(1)), None);
    }

    #[test]
    fn the_first_sample_gives_three_round_trips() {
        let mut e = RttEstimator::default();
        e.sample(US(100));
        assert_eq!(e.srtt(), Some(US(100)));
        assert_eq!(e.rto(US(1)), Some(US(300)));
        assert_eq!(e.rto(US(500)), Some(US(600)), "the floor beyond SRTT");
    }

    #[test]
    fn steady_samples_converge_on_the_round_trip() {
        let mut e = RttEstimator::default();
        e.sample(US(1000));
        for _ in 0..200 {
            e.sample(US(10));
        }
        let rto = e.rto(Duration::ZERO).unwrap();
        assert!(rto >= US(10) && rto < US(11), "{rto:?}");
    }

    #[test]
    fn a_round_trip_that_never_varies_still_gets_the_floor_beyond_it() {
        let mut e = RttEstimator::default();
        for _ in 0..200 {
            e.sample(US(17));
        }
        assert_eq!(e.srtt(), Some(US(17)));
        assert_eq!(e.rto(US(16)), Some(US(33)));
    }

    #[test]
    fn jitter_widens_the_timeout() {
        let (mut calm, mut jumpy) = (RttEstimator::default(), RttEstimator::default());
        for i in 0..100 {
            calm.sample(US(50));
            jumpy.sample(US(if i % 2 == 0 { 20 } else { 80 }));
        }
        assert!(jumpy.rto(Duration::ZERO).unwrap() > calm.rto(Duration::ZERO).unwrap().mul(2));
    }
}
