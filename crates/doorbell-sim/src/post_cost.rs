//! What a post costs the CPU, charged from what the provider reports it did
//! ([`PostReport`]): the model never keeps a second description of a post.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use doorbell_types::{Duration, Instant};
use doorbell_verbs::{PostObserver, PostReport, Ring};

use crate::timeline::RingObs;
use crate::world::{Cpu, lock};

/// CPU costs of building and ringing, from the profile's `[cpu]` table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BuildCosts {
    /// Starting a post and building one control segment.
    pub(crate) ctrl: Duration,
    /// Each further 16-byte segment.
    pub(crate) segment: Duration,
    /// Copying inline data, per 64 bytes.
    pub(crate) inline64: Duration,
    /// Doorbell-record update and the barriers around the doorbell.
    pub(crate) barrier: Duration,
    /// Taking and releasing a shared bfreg's lock, uncontended.
    pub(crate) lock: Duration,
}

impl BuildCosts {
    /// CPU time to build what `r` says was written, before the doorbell.
    pub(crate) fn build(&self, r: &PostReport) -> Duration {
        self.ctrl
            .mul(r.wqes)
            .add(self.segment.mul(r.segments))
            .add(self.inline64.mul(r.inline_chunks))
            .add(self.barrier)
    }
}

/// Charges the posting core for each post of one context, and serialises
/// the posts that share a bfreg's lock. The MMIO stores themselves are
/// charged by the simulated MMIO path.
pub(crate) struct PostCosts {
    pub(crate) cpu: Arc<Mutex<Cpu>>,
    pub(crate) costs: BuildCosts,
    /// When each shared bfreg's lock is next free, by gross bfreg index.
    pub(crate) lock_free: Mutex<BTreeMap<u32, Instant>>,
    /// Posts that took a lock, and the time they waited for it.
    pub(crate) locked: Mutex<(u64, Duration)>,
    /// What each ring was, while a timeline is recorded.
    pub(crate) rings: Mutex<Option<Vec<RingObs>>>,
}

impl PostObserver for PostCosts {
    fn before_ring(&self, r: &PostReport) {
        let mut cpu = lock(&self.cpu);
        let core = cpu.current;
        cpu.charge(core, self.costs.build(r));
        let mut waited = None;
        if r.locked {
            let free = lock(&self.lock_free)
                .get(&r.bfreg)
                .copied()
                .unwrap_or_default();
            // Waiting for the lock is time, not work.
            let wait = free.since(cpu.t[core]);
            let from = cpu.t[core];
            cpu.t[core] = cpu.t[core].add(wait);
            waited = Some((from, cpu.t[core]));
            cpu.charge(core, self.costs.lock);
            let mut locked = lock(&self.locked);
            locked.0 += 1;
            locked.1 = locked.1.add(wait);
        }
        if let Some(log) = lock(&self.rings).as_mut() {
            log.push(RingObs {
                built: cpu.t[core],
                lock_wait: waited,
                blueflame: matches!(r.ring, Ring::BlueFlame { .. }),
            });
        }
    }

    fn after_ring(&self, r: &PostReport) {
        if r.locked {
            let cpu = lock(&self.cpu);
            let released = cpu.t[cpu.current];
            lock(&self.lock_free).insert(r.bfreg, released);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_types::Qpn;

    #[test]
    fn build_cost_follows_the_report() {
        let c = BuildCosts {
            ctrl: Duration::from_ns(10),
            segment: Duration::from_ns(2),
            inline64: Duration::from_ns(3),
            barrier: Duration::from_ns(5),
            lock: Duration::from_ns(7),
        };
        let r = PostReport {
            qpn: Qpn::new(1),
            wqes: 16,
            segments: 32,
            inline_bytes: 16 * 8,
            inline_chunks: 16,
            ring: Ring::Doorbell,
            bfreg: 24,
            locked: false,
        };
        // 16 × 10 + 32 × 2 + 16 × 3 + 5, one barrier per call.
        assert_eq!(c.build(&r), Duration::from_ns(160 + 64 + 48 + 5));
    }
}
