//! The event queue: events ordered by `(time, sequence)`, so that events at
//! the same instant keep the order in which they were scheduled.
//!
//! The heap holds only `(time, sequence, slot)`; events live in a slab, so
//! that sifting moves 24-byte entries whatever the size of an event.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use doorbell_types::Instant;

/// A min-queue of timed events with FIFO order among equal times.
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `ev` at `at`.
    pub fn push(&mut self, at: Instant, ev: E) {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(ev);
                i
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(Reverse((at, self.seq, slot)));
    }

    /// Takes the earliest event.
    pub fn pop(&mut self) -> Option<(Instant, E)> {
        let Reverse((at, _, slot)) = self.heap.pop()?;
        let ev = self.slab[slot as usize].take()?;
        self.free.push(slot);
        Some((at, ev))
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True if nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_time_events_keep_insertion_order() {
        let mut q = EventQueue::default();
        q.push(Instant::from_ps(5), "b1");
        q.push(Instant::from_ps(1), "a");
        q.push(Instant::from_ps(5), "b2");
        q.push(Instant::from_ps(5), "b3");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!["a", "b1", "b2", "b3"]);
    }

    #[test]
    fn slots_are_reused() {
        let mut q = EventQueue::default();
        for i in 0..100u64 {
            q.push(Instant::from_ps(i), i);
            assert_eq!(q.pop(), Some((Instant::from_ps(i), i)));
        }
        assert_eq!(q.slab.len(), 1);
        assert!(q.is_empty());
    }
}
