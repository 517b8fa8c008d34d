//! Memory keys: the table that turns (key, address, length) into host pages.

use doorbell_host::PAGE_SIZE;
use doorbell_types::{HostAddr, Mkey, Pdn};

use doorbell_hif::{Access, MkeyParams};

/// Why a key did not grant an access. The caller maps each to the syndrome
/// of its side (local protection, remote access).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No such key, or a stale variant byte.
    BadKey,
    /// The key belongs to another protection domain.
    PdMismatch,
    /// The key does not grant the access.
    NoAccess,
    /// The range is outside the region.
    OutOfBounds,
}

/// Indices an mkey has room for (24 bits).
const MKEY_INDICES: usize = 1 << 24;

struct Entry {
    variant: u8,
    p: MkeyParams,
}

/// The mkey table. Index 0 is never used and index 1 with variant 0 is the
/// reserved scatter terminator, so allocation starts at 2; `max` keys can
/// be made (the `max_mkeys` the device reports), at most as many as the
/// 24-bit index leaves after those two.
pub(crate) struct MkeyTable {
    entries: Vec<Option<Entry>>,
    next_variant: u8,
    max: usize,
}

impl MkeyTable {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            entries: Vec::new(),
            next_variant: 0,
            max,
        }
    }

    pub(crate) fn create(&mut self, p: MkeyParams) -> Option<Mkey> {
        let slot = (2..self.entries.len()).find(|&i| self.entries[i].is_none());
        let index = match slot {
            Some(i) => i,
            None => {
                let i = self.entries.len().max(2);
                if i - 2 >= self.max || i >= MKEY_INDICES {
                    return None;
                }
                self.entries.resize_with(i + 1, || None);
                i
            }
        };
        let variant = self.next_variant;
        self.next_variant = self.next_variant.wrapping_add(1);
        self.entries[index] = Some(Entry { variant, p });
        Some(Mkey::from_parts(index as u32, variant))
    }

    /// Replaces the context of `key`, which keeps its index and variant.
    pub(crate) fn modify(&mut self, key: Mkey, p: MkeyParams) -> bool {
        match self.entries.get_mut(key.index() as usize) {
            Some(Some(e)) if e.variant == key.variant() => {
                e.p = p;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn destroy(&mut self, key: Mkey) -> bool {
        match self.entries.get_mut(key.index() as usize) {
            Some(e @ Some(_)) if e.as_ref().is_some_and(|x| x.variant == key.variant()) => {
                *e = None;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn count_in_pd(&self, pd: Pdn) -> usize {
        self.entries
            .iter()
            .flatten()
            .filter(|e| e.p.pd == pd)
            .count()
    }

    /// Checks `key` for `[addr, addr + len)` with `need` access bits in `pd`
    /// and calls `f` with each run of contiguous host memory, in order.
    pub(crate) fn translate(
        &self,
        key: Mkey,
        pd: Pdn,
        need: u32,
        addr: u64,
        len: u64,
        mut f: impl FnMut(HostAddr, u64, u64),
    ) -> Result<(), KeyError> {
        let e = self.entry_for(key, pd, need, addr, len)?;
        // Walk the pages, merging runs that are contiguous in host memory.
        let mut run: Option<(HostAddr, u64, u64)> = None; // (host, bytes, offset into message)
        let mut done = 0u64;
        e.pages(addr, len, |host, n| {
            run = match run {
                Some((h, b, o)) if h.checked_add(b) == Some(host) => Some((h, b + n, o)),
                Some((h, b, o)) => {
                    f(h, b, o);
                    Some((host, n, done))
                }
                None => Some((host, n, done)),
            };
            done += n;
        })?;
        if let Some((h, b, o)) = run {
            f(h, b, o);
        }
        Ok(())
    }

    /// What [`Self::translate`] answers for `[addr, addr + len)`, without
    /// the runs: the key check of a WQE's local buffers, whose bytes are
    /// read or written later.
    pub(crate) fn check(
        &self,
        key: Mkey,
        pd: Pdn,
        need: u32,
        addr: u64,
        len: u64,
    ) -> Result<(), KeyError> {
        let e = self.entry_for(key, pd, need, addr, len)?;
        if len == 0 {
            return Ok(());
        }
        // The walk fails only where the MTT lacks a page, the last first,
        // or where the first page's bytes run past 2^64 (every later page
        // is taken from its start).
        let page0 = e.p.start & !(PAGE_SIZE - 1);
        let first = (addr - page0) / PAGE_SIZE;
        let last = (addr + len - 1 - page0) / PAGE_SIZE;
        let base =
            e.p.mtt
                .get(first as usize)
                .filter(|_| last < e.p.mtt.len() as u64);
        base.and_then(|b| b.checked_add(addr % PAGE_SIZE))
            .map(|_| ())
            .ok_or(KeyError::OutOfBounds)
    }

    /// The entry of `key`, if it grants `need` in `pd` over `[addr, addr +
    /// len)`.
    fn entry_for(
        &self,
        key: Mkey,
        pd: Pdn,
        need: u32,
        addr: u64,
        len: u64,
    ) -> Result<&Entry, KeyError> {
        let e = self
            .entries
            .get(key.index() as usize)
            .and_then(Option::as_ref)
            .filter(|e| e.variant == key.variant())
            .ok_or(KeyError::BadKey)?;
        if e.p.pd != pd {
            return Err(KeyError::PdMismatch);
        }
        if !Access(e.p.access.0).allows(need) {
            return Err(KeyError::NoAccess);
        }
        let end = addr.checked_add(len).ok_or(KeyError::OutOfBounds)?;
        let limit =
            e.p.start
                .checked_add(e.p.len)
                .ok_or(KeyError::OutOfBounds)?;
        if addr < e.p.start || end > limit {
            return Err(KeyError::OutOfBounds);
        }
        Ok(e)
    }
}

impl Entry {
    /// Calls `f` with the host address and length of each piece of
    /// `[addr, addr + len)` that lies in one page, in order (none for no
    /// bytes), the range within the key's; fails, having called `f` for
    /// the pieces before, where the MTT lacks a page or names one whose
    /// bytes run past 2^64. (Always inlined: it is the loop of every
    /// payload's translation, on the path of every packet.)
    #[inline(always)]
    fn pages(&self, addr: u64, len: u64, mut f: impl FnMut(HostAddr, u64)) -> Result<(), KeyError> {
        let page0 = self.p.start & !(PAGE_SIZE - 1);
        let end = addr + len;
        let mut at = addr;
        while at < end {
            let page = ((at - page0) / PAGE_SIZE) as usize;
            let in_page = at % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(end - at);
            let base = *self.p.mtt.get(page).ok_or(KeyError::OutOfBounds)?;
            // A page address from the driver's MTT: one that runs past
            // 2^64 is outside any memory the device can reach.
            let host = base.checked_add(in_page).ok_or(KeyError::OutOfBounds)?;
            f(host, n);
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pd: u32, access: u32, start: u64, len: u64, mtt: &[u64]) -> MkeyParams {
        MkeyParams {
            pd: Pdn::new(pd),
            access: Access(access),
            start,
            len,
            mtt: mtt.iter().map(|&a| HostAddr::new(a)).collect(),
        }
    }

    #[test]
    fn keys_start_at_index_two_and_variants_change() {
        let mut t = MkeyTable::new(16);
        let a = t.create(params(1, 0, 0, 1, &[0x1000])).unwrap();
        assert_eq!(a.index(), 2);
        assert!(t.destroy(a));
        let b = t.create(params(1, 0, 0, 1, &[0x1000])).unwrap();
        assert_eq!(b.index(), 2);
        assert_ne!(a, b, "a re-used index gets a new variant");
        assert_eq!(
            t.translate(a, Pdn::new(1), 0, 0, 1, |_, _, _| {}),
            Err(KeyError::BadKey)
        );
    }

    #[test]
    fn translation_checks_pd_access_bounds() {
        let mut t = MkeyTable::new(16);
        let k = t
            .create(params(
                1,
                Access::REMOTE_READ,
                0x5000_0100,
                0x100,
                &[0x9000],
            ))
            .unwrap();
        let pd = Pdn::new(1);
        assert_eq!(
            t.translate(k, Pdn::new(2), 0, 0x5000_0100, 8, |_, _, _| {}),
            Err(KeyError::PdMismatch)
        );
        assert_eq!(
            t.translate(k, pd, Access::REMOTE_WRITE, 0x5000_0100, 8, |_, _, _| {}),
            Err(KeyError::NoAccess)
        );
        assert_eq!(
            t.translate(k, pd, 0, 0x5000_01f9, 8, |_, _, _| {}),
            Err(KeyError::OutOfBounds)
        );
        let mut got = vec![];
        t.translate(k, pd, Access::REMOTE_READ, 0x5000_0180, 16, |h, n, o| {
            got.push((h.get(), n, o))
        })
        .unwrap();
        assert_eq!(got, vec![(0x9180, 16, 0)]);
    }

    #[test]
    fn a_check_answers_as_a_translation_does() {
        let mut t = MkeyTable::new(16);
        let pd = Pdn::new(1);
        // Three pages from an unaligned start; a table whose MTT lacks the
        // third; one whose first page runs past 2^64; one whose last does
        // (its bytes are taken from the page's start: no overflow).
        let keys = [
            params(
                1,
                Access::LOCAL_WRITE,
                0x7000_0100,
                3 * 4096,
                &[0x10000, 0x40000, 0x11000, 0x12000],
            ),
            params(
                1,
                Access::LOCAL_WRITE,
                0x7000_0100,
                3 * 4096,
                &[0x10000, 0x40000],
            ),
            params(1, 0, 0x100, 8192, &[u64::MAX - 0x80, 0x2000, 0x3000]),
            params(1, 0, 0, 8192, &[0x1000, u64::MAX - 0x80]),
        ]
        .map(|p| t.create(p).unwrap());
        let other = t.create(params(2, 0, 0, 4096, &[0x1000])).unwrap();
        for &k in keys.iter().chain([&other]) {
            for (addr, len) in [
                (0, 0),
                (0, 1),
                (0x80, 1),
                (0x100, 8),
                (0x100, 4096),
                (0xf80, 0x100),
                (0x1f80, 0x100),
                (0x1000, 4096),
                (0x7000_0100, 0),
                (0x7000_0100, 8),
                (0x7000_0ff8, 16),
                (0x7000_0100, 3 * 4096),
                (0x7000_1100, 2 * 4096),
                (0x7000_0100, 3 * 4096 + 1),
                (u64::MAX - 4, 8),
            ] {
                for need in [0, Access::LOCAL_WRITE, Access::REMOTE_READ] {
                    let walked = t.translate(k, pd, need, addr, len, |_, _, _| {});
                    assert_eq!(
                        t.check(k, pd, need, addr, len),
                        walked,
                        "{k:?} {addr:#x}+{len:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn runs_merge_only_when_pages_are_contiguous() {
        let mut t = MkeyTable::new(16);
        let k = t
            .create(params(1, 0, 0, 3 * 4096, &[0x10000, 0x11000, 0x40000]))
            .unwrap();
        let mut got = vec![];
        t.translate(k, Pdn::new(1), 0, 100, 3 * 4096 - 100, |h, n, o| {
            got.push((h.get(), n, o))
        })
        .unwrap();
        assert_eq!(
            got,
            vec![(0x10064, 8192 - 100, 0), (0x40000, 4096, 8192 - 100)]
        );
    }
}
