//! The process's bound ports, per port space: who holds which port on which
//! address, and the choice of an ephemeral port (Linux's default
//! `ip_local_port_range`, 32768 to 60999).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use crate::{CmError, PortSpace};

const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

struct Holder {
    owner: u64,
    ip: IpAddr,
    reuse: bool,
}

/// The ports held, and where the next ephemeral search starts.
#[derive(Default)]
pub(crate) struct Table {
    held: BTreeMap<(PortSpace, u16), Vec<Holder>>,
    next: u16,
}

/// A leaf lock: nothing is taken or waited for while it is held.
static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// The lock of the port table, held (for [`crate::hold_for_fork`]).
pub(crate) fn hold() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn overlap(a: IpAddr, b: IpAddr) -> bool {
    a.is_unspecified() || b.is_unspecified() || a == b
}

/// Takes `port` (0: an ephemeral one) of `ps` on `ip` for id `owner`;
/// returns the port. Two ids may share a port only on addresses that do not
/// overlap (the wildcard overlaps every one), or when both set REUSEADDR.
pub(crate) fn bind(
    ps: PortSpace,
    ip: IpAddr,
    port: u16,
    reuse: bool,
    owner: u64,
) -> Result<u16, CmError> {
    let mut guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let t = guard.get_or_insert_with(|| Table {
        next: *EPHEMERAL.start() + (std::process::id() % 1000) as u16 * 23,
        ..Table::default()
    });
    let free = |t: &Table, p: u16| {
        t.held
            .get(&(ps, p))
            .is_none_or(|hs| hs.iter().all(|h| !overlap(h.ip, ip) || (h.reuse && reuse)))
    };
    let port = if port != 0 {
        if !free(t, port) {
            return Err(CmError::AddrInUse);
        }
        port
    } else {
        let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let start = t.next.clamp(*EPHEMERAL.start(), *EPHEMERAL.end());
        let pick = (0..span)
            .map(|i| {
                let off = (u32::from(start - EPHEMERAL.start()) + i) % span;
                EPHEMERAL.start() + off as u16
            })
            .find(|&p| free(t, p))
            .ok_or(CmError::NoPort)?;
        t.next = if pick == *EPHEMERAL.end() {
            *EPHEMERAL.start()
        } else {
            pick + 1
        };
        pick
    };
    t.held
        .entry((ps, port))
        .or_default()
        .push(Holder { owner, ip, reuse });
    Ok(port)
}

/// Gives back what `owner` holds of `port` in `ps`.
pub(crate) fn release(ps: PortSpace, port: u16, owner: u64) {
    let mut guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = guard.as_mut()
        && let Some(hs) = t.held.get_mut(&(ps, port))
    {
        hs.retain(|h| h.owner != owner);
        if hs.is_empty() {
            t.held.remove(&(ps, port));
        }
    }
}
