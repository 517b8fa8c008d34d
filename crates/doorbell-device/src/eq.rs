//! Event queues: EQE write-back by DMA, MSI-X, and the EQ doorbell.
//!
//! An EQ is a ring of 64-byte EQEs in host memory that host software (the
//! kernel's interrupt handler) created with CREATE_EQ, naming the event
//! types it takes, the UAR of its doorbell and its MSI-X vector. For each
//! event the device writes one EQE, owner byte last, with owner
//! `(pi >> log_size) & 1`. If the EQ is armed it then raises the vector (a
//! posted write on the bus) and disarms: one interrupt covers every EQE
//! until software re-arms through the doorbell, which also hands back the
//! consumer index. Arming an EQ that holds unconsumed EQEs raises the
//! vector at once, so no event waits for the next one.

use std::collections::{BTreeMap, VecDeque};

use doorbell_host::PAGE_SIZE;
use doorbell_layout::eqe::{EQ_DOORBELL_LEN, EQE_LEN, EqDoorbell, Eqe64};
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{Duration, Eqn, HostAddr, Instant, UarIndex};

use doorbell_hif::{CmdError, EqParams, NicEvent, ObjKind, Param};

use crate::dma::dma_write;

/// Largest EQ: 2^22 EQEs (the PRM's `log_eq_size` is 5 bits; mlx5_core
/// asks for at most a few thousand).
const MAX_LOG_EQ_SIZE: u8 = 22;
/// EQ numbers are 8 bits (the EQ doorbell's top byte).
const MAX_EQS: usize = 256;

/// The device's EQs and what they produced.
#[derive(Default)]
pub(crate) struct Eqs {
    eqs: BTreeMap<Eqn, Eq>,
    next: u32,
    /// MSI-X vectors raised, oldest first.
    interrupts: VecDeque<u16>,
    /// Events no EQ takes (a device nobody created EQs on), for
    /// `Nic::poll_event`.
    unrouted: VecDeque<NicEvent>,
}

impl Eqs {
    /// CREATE_EQ, once the caller has checked that the UAR exists.
    pub(crate) fn create(&mut self, p: EqParams) -> Result<Eqn, CmdError> {
        if self.eqs.len() >= MAX_EQS {
            return Err(CmdError::Exhausted(ObjKind::Eq));
        }
        if p.log_size > MAX_LOG_EQ_SIZE {
            return Err(CmdError::BadParam {
                name: Param::LogEqSize,
                value: p.log_size.into(),
            });
        }
        let bytes = (EQE_LEN as u64) << p.log_size;
        if (p.pas.len() as u64) < bytes.div_ceil(PAGE_SIZE) {
            return Err(CmdError::BadParam {
                name: Param::EqPasEntries,
                value: p.pas.len() as u64,
            });
        }
        // The next free 8-bit number.
        let n = (0..MAX_EQS as u32)
            .map(|i| Eqn::new((self.next + i) % MAX_EQS as u32))
            .find(|e| !self.eqs.contains_key(e))
            .ok_or(CmdError::Exhausted(ObjKind::Eq))?;
        self.next = (n.get() + 1) % MAX_EQS as u32;
        self.eqs.insert(n, Eq::new(p));
        Ok(n)
    }

    /// DESTROY_EQ.
    pub(crate) fn destroy(&mut self, n: Eqn) -> Result<(), CmdError> {
        self.eqs
            .remove(&n)
            .map(|_| ())
            .ok_or(CmdError::NoSuchObject {
                kind: ObjKind::Eq,
                id: n.get(),
            })
    }

    /// Whether an EQ rings through `uar`.
    pub(crate) fn uses(&self, uar: UarIndex) -> bool {
        self.eqs.values().any(|e| e.uar() == uar)
    }

    /// Writes each raised event into the first EQ that takes it, no
    /// earlier than when it was raised and `cost` after the previous one;
    /// returns how many were lost to a full or faulting EQ.
    pub(crate) fn deliver(
        &mut self,
        events: &mut VecDeque<(NicEvent, Instant)>,
        dma: &mut impl Dma,
        cost: Duration,
    ) -> u64 {
        // (Asked after every packet taken, which mostly raised none.)
        if events.is_empty() {
            return 0;
        }
        let mut lost = 0;
        let mut t = Instant::ZERO;
        for (event, at) in events.drain(..) {
            let Some(eq) = self.eqs.values_mut().find(|e| e.takes(&event)) else {
                self.unrouted.push_back(event);
                continue;
            };
            t = t.max(at).add(cost);
            match eq.post(dma, &mut t, event) {
                EqePost::Written(Some(v)) => self.interrupts.push_back(v),
                EqePost::Written(None) => {}
                EqePost::Overrun | EqePost::DmaFault => lost += 1,
            }
        }
        lost
    }

    /// An EQ doorbell write through `uar`; false if it names no EQ of that
    /// UAR or is not one 4-byte word.
    pub(crate) fn doorbell(
        &mut self,
        now: Instant,
        uar: UarIndex,
        data: &[u8],
        arm: bool,
        dma: &mut impl Dma,
    ) -> bool {
        let Ok(bytes) = <[u8; EQ_DOORBELL_LEN]>::try_from(data) else {
            return false;
        };
        let db = EqDoorbell::parse(&bytes);
        match self.eqs.get_mut(&Eqn::new(db.eqn.into())) {
            Some(eq) if eq.uar() == uar => {
                let mut t = now;
                if let Some(v) = eq.doorbell(dma, &mut t, db.ci, arm) {
                    self.interrupts.push_back(v);
                }
                true
            }
            _ => false,
        }
    }

    /// The next MSI-X vector raised.
    pub(crate) fn poll_interrupt(&mut self) -> Option<u16> {
        self.interrupts.pop_front()
    }

    /// The next event no EQ took.
    pub(crate) fn poll_unrouted(&mut self) -> Option<NicEvent> {
        self.unrouted.pop_front()
    }
}

/// The tag of every EQE write: EQs belong to no QP.
const EQE_TAG: DmaTag = DmaTag {
    qpn: None,
    purpose: DmaPurpose::Eqe,
};

/// What the device knows of one EQ.
pub(crate) struct Eq {
    p: EqParams,
    /// Number of EQEs (a power of two).
    nent: u32,
    /// Free-running producer counter.
    pi: u32,
    /// Consumer index from the last doorbell, extended to `pi`'s epoch.
    ci: u32,
    armed: bool,
}

/// What posting one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EqePost {
    /// Written; `Some(vector)` if it raised an interrupt.
    Written(Option<u16>),
    /// The EQ is full: the event is lost.
    Overrun,
    /// The DMA failed.
    DmaFault,
}

impl Eq {
    pub(crate) fn new(p: EqParams) -> Self {
        Self {
            nent: 1 << p.log_size,
            p,
            pi: 0,
            ci: 0,
            // mlx5_core arms each EQ right after creating it; until then
            // EQEs collect without an interrupt.
            armed: false,
        }
    }

    pub(crate) fn uar(&self) -> UarIndex {
        self.p.uar
    }

    /// Whether this EQ takes events of `event`'s type.
    pub(crate) fn takes(&self, event: &NicEvent) -> bool {
        let t = u8::from(event.eqe_type());
        t < 64 && self.p.events & (1u64 << t) != 0
    }

    fn slot_addr(&self, index: u32) -> Option<HostAddr> {
        let off = u64::from(index & (self.nent - 1)) * EQE_LEN as u64;
        let page = self.p.pas.get((off / PAGE_SIZE) as usize)?;
        page.checked_add(off % PAGE_SIZE)
    }

    /// Writes `event` as the next EQE, then raises the vector if armed.
    pub(crate) fn post(&mut self, dma: &mut impl Dma, t: &mut Instant, event: NicEvent) -> EqePost {
        if self.pi.wrapping_sub(self.ci) >= self.nent {
            return EqePost::Overrun;
        }
        let mut buf = [0u8; EQE_LEN];
        let mut eqe = Eqe64::new_unchecked(&mut buf[..]);
        event.write_eqe(&mut eqe);
        eqe.set_owner((self.pi >> self.p.log_size) & 1 != 0);
        let Some(addr) = self.slot_addr(self.pi) else {
            return EqePost::DmaFault;
        };
        // One write whose last byte is the owner: the handler never sees
        // the owner before the body.
        if !dma_write(dma, t, EQE_TAG, addr, &buf) {
            return EqePost::DmaFault;
        }
        self.pi = self.pi.wrapping_add(1);
        EqePost::Written(self.fire(dma, t))
    }

    /// The EQ doorbell: takes the consumer index (24 bits, extended to the
    /// producer's epoch) and, with `arm`, re-arms; returns the vector if
    /// arming found EQEs waiting.
    pub(crate) fn doorbell(
        &mut self,
        dma: &mut impl Dma,
        t: &mut Instant,
        ci24: u32,
        arm: bool,
    ) -> Option<u16> {
        let back = self.pi.wrapping_sub(ci24) & 0x00ff_ffff;
        // A consumer index ahead of the producer is software's bug: keep
        // the old one.
        if back <= self.pi.wrapping_sub(self.ci) {
            self.ci = self.pi.wrapping_sub(back);
        }
        if arm {
            self.armed = true;
            if self.pi != self.ci {
                return self.fire(dma, t);
            }
        }
        None
    }

    fn fire(&mut self, dma: &mut impl Dma, t: &mut Instant) -> Option<u16> {
        if !self.armed {
            return None;
        }
        self.armed = false;
        *t = dma.raise_msix(*t, self.p.vector).max(*t);
        Some(self.p.vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_host::{HostMemory, HostRam};
    use doorbell_layout::eqe::{self, EqDoorbell};
    use doorbell_pcie::{Bus, LinkConfig};
    use doorbell_types::Cqn;
    use std::sync::Arc;

    fn setup(log_size: u8) -> (Arc<HostRam>, Bus, Eq, HostAddr) {
        let mem = Arc::new(HostRam::new());
        let bytes = (EQE_LEN as u64) << log_size;
        let buf = mem.alloc(bytes.max(PAGE_SIZE)).unwrap();
        let pas = mem.pin(buf, bytes.max(PAGE_SIZE)).unwrap();
        let bus = Bus::new(LinkConfig::default(), mem.clone() as Arc<dyn HostMemory>);
        let eq = Eq::new(EqParams {
            log_size,
            uar: UarIndex::new(1),
            vector: 3,
            events: 1 << u8::from(eqe::EventType::Comp),
            pas,
        });
        (mem, bus, eq, buf)
    }

    fn owner_at(mem: &HostRam, buf: HostAddr, i: u64) -> u8 {
        let mut b = [0u8; EQE_LEN];
        mem.read(buf.checked_add(i * EQE_LEN as u64).unwrap(), &mut b)
            .unwrap();
        b[eqe::field::OWNER]
    }

    #[test]
    fn one_interrupt_until_rearmed_and_rearming_with_backlog_fires() {
        let (mem, mut bus, mut eq, buf) = setup(2);
        let mut t = Instant::ZERO;
        let ev = NicEvent::Completion(Cqn::new(5));
        // Not armed yet: written, no interrupt.
        assert_eq!(eq.post(&mut bus, &mut t, ev), EqePost::Written(None));
        // Arming with one EQE outstanding fires at once.
        assert_eq!(eq.doorbell(&mut bus, &mut t, 0, true), Some(3));
        assert_eq!(eq.post(&mut bus, &mut t, ev), EqePost::Written(None));
        // The handler consumed both and re-arms: nothing waits, no interrupt.
        assert_eq!(eq.doorbell(&mut bus, &mut t, 2, true), None);
        assert_eq!(eq.post(&mut bus, &mut t, ev), EqePost::Written(Some(3)));
        let c = bus.counters();
        assert_eq!(
            (c.writes(DmaPurpose::Eqe), c.writes(DmaPurpose::Msix)),
            (3, 2)
        );
        assert_eq!(owner_at(&mem, buf, 0), 0, "first pass writes owner 0");
    }

    #[test]
    fn a_full_eq_overruns_and_the_second_pass_flips_the_owner() {
        let (mem, mut bus, mut eq, buf) = setup(1);
        let mut t = Instant::ZERO;
        let ev = NicEvent::Completion(Cqn::new(1));
        for _ in 0..2 {
            assert!(matches!(eq.post(&mut bus, &mut t, ev), EqePost::Written(_)));
        }
        assert_eq!(eq.post(&mut bus, &mut t, ev), EqePost::Overrun);
        let db = EqDoorbell::parse(&EqDoorbell { eqn: 0, ci: 2 }.emit());
        eq.doorbell(&mut bus, &mut t, db.ci, false);
        assert!(matches!(
            eq.post(&mut bus, &mut t, ev),
            EqePost::Written(None)
        ));
        assert_eq!(owner_at(&mem, buf, 0), 1);
        // A consumer index past the producer is ignored.
        eq.doorbell(&mut bus, &mut t, 9, false);
        assert!(matches!(eq.post(&mut bus, &mut t, ev), EqePost::Written(_)));
        assert_eq!(eq.post(&mut bus, &mut t, ev), EqePost::Overrun);
    }
}
