//! The process's own NIC: the one a C program's first `ibv_open_device`
//! starts.
//!
//! # Model
//! A process has at most one NIC of its own. [`ProcessNic::acquire`] starts
//! it on the first call: a [`LiveNic`] named [`ProcessNicConfig::name`],
//! whose port is a UDP socket on port 4791 ([`Port::Udp`], RoCEv2), serving
//! the process's own memory ([`ProcessMemory`]). Every later call, while
//! any [`ProcessNic`] of it lives, gets the same NIC; when the last one is
//! dropped the NIC stops (its threads are joined and its port unbound), and
//! a later call starts a new one. A NIC delivers frames addressed to itself
//! (the kernel loops them back to its socket), so two QPs of one process
//! can talk to each other.
//!
//! The address is [`ProcessNicConfig::addr`] if set (between hosts: the
//! host's own address). Otherwise the NIC takes the first loopback address
//! from 127.0.0.2 up to 127.0.0.254 whose port 4791 is free, so that
//! several processes on one host need no configuration: the address is
//! picked when the NIC starts, not before, and is known only from
//! [`ProcessNic::addr`]. The name needs no NIC: a device list can show
//! [`ProcessNicConfig::name`] before anything is opened.
//!
//! # Guarantees
//! - Starting and stopping are serialised: an acquire that comes while the
//!   last holder is still stopping the NIC waits for the port to be
//!   unbound, then starts a new NIC on the same address.
//! - The NIC's threads (device thread, UDP receive thread) run with every
//!   blockable signal blocked, so a program's `alarm()` or `SIGINT` is
//!   delivered to one of its own threads, never to ours.
//! - After `fork()` the child has none of the NIC's threads. A
//!   `pthread_atfork` child handler, registered by the first acquire,
//!   forgets the parent's NIC there: nothing of it is joined or stopped, its
//!   socket is released (so the parent can unbind and rebind the address),
//!   and the next acquire in the child starts a fresh NIC. A copy of the
//!   parent's NIC that the child still holds answers nothing
//!   ([`LiveNic::is_forked_copy`]) and can be dropped safely.
//!
//! # Limits
//! - The configuration is read by the acquire that starts the NIC; while it
//!   runs, acquires with another configuration share it.
//! - The NIC stops when the last [`ProcessNic`] *and* every clone of
//!   [`ProcessNic::nic`] are gone: a clone kept longer keeps the port bound,
//!   and a new NIC then needs another address. Drop the clones first.
//! - In a child after `fork()`, a fixed address is still the parent's, so an
//!   acquire there fails with [`ProcessNicError::AddressInUse`]; an address
//!   picked automatically moves on to the next free one.

#[allow(unsafe_code)]
pub(crate) mod os;

use std::ffi::OsString;
use std::fmt;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::{LiveNic, NicOptions, Port, ProcessMemory, RtError};

/// First address tried when none is configured.
pub const AUTO_FIRST: [u8; 4] = [127, 0, 0, 2];
/// Last host number tried when none is configured (127.0.0.254).
pub const AUTO_LAST_HOST: u8 = 254;

/// How the process's NIC is set up: its device name and address.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessNicConfig {
    /// The device name (`ibv_get_device_name`): 1 to 63 bytes, without
    /// `/` or NUL.
    pub name: String,
    /// The port's IPv4 address; `None`: the first free one of
    /// 127.0.0.2..=127.0.0.254, picked when the NIC starts.
    pub addr: Option<[u8; 4]>,
    /// Take the port's link down once, as an administrator would: `None`,
    /// never.
    pub link_down: Option<LinkDown>,
    /// Frames to NICs of this host through shared memory (the default);
    /// `false`: every frame through the UDP socket, where a capture on the
    /// interface sees it ([`Self::SHM_VAR`]).
    pub shm: bool,
    /// Runs of equal datagrams leave as one segmented send (UDP GSO; the
    /// default); `false`: one send per datagram, so that a capture on lo
    /// or a veth shows every packet ([`Self::UDP_GSO_VAR`]).
    pub udp_gso: bool,
    /// Write every frame the NIC sends and receives to this pcapng file
    /// ([`Self::PCAP_VAR`]; [`crate::pcap`]).
    pub pcap: Option<std::path::PathBuf>,
    /// Where the program's user writes the NIC's timeline
    /// ([`Self::TRACE_VAR`]; [`crate::NicOptions::trace`]): the NIC
    /// records one when this is set.
    pub trace: Option<std::path::PathBuf>,
    /// Random faults on every frame the NIC sends ([`Self::FAULTS_VAR`];
    /// [`crate::Faults`]): to try a program under loss, reordering,
    /// duplication and corruption.
    pub faults: Option<crate::Faults>,
    /// Adaptive retransmission's floor, or `None` for resends
    /// on the QP's ACK timeout alone ([`Self::ADAPTIVE_VAR`];
    /// [`crate::NicOptions::adaptive_retransmit_floor`]).
    pub adaptive_retransmit_floor: Option<doorbell_types::Duration>,
    /// Registered buffers are copied with their page faults caught (the
    /// default); `false`: every copy through the kernel
    /// ([`Self::DIRECT_COPY_VAR`]; [`ProcessMemory::through_kernel`]).
    pub direct_copy: bool,
    /// How long the shared-memory port's receiving thread spins after its
    /// last frame ([`Self::SPIN_VAR`]; [`crate::NicOptions::shm_spin`]).
    pub shm_spin: Duration,
    /// How long a CQ poll that took only responses waits for the peer's
    /// answer ([`Self::LINGER_VAR`]; [`crate::NicOptions::shm_linger`]).
    pub shm_linger: Duration,
}

/// When the port's link goes down after the NIC starts, and for how long
/// (`DOORBELL_LINK_DOWN=AT_MS:FOR_MS`): what `ip link set down`, then `up`,
/// does to a real port, so that a program's handling of
/// `IBV_EVENT_PORT_ERR` and `IBV_EVENT_PORT_ACTIVE` can be tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkDown {
    /// Milliseconds after the NIC starts.
    pub at_ms: u64,
    /// Milliseconds it stays down.
    pub for_ms: u64,
}

impl Default for ProcessNicConfig {
    fn default() -> Self {
        Self {
            name: Self::DEFAULT_NAME.to_owned(),
            addr: None,
            link_down: None,
            shm: true,
            udp_gso: true,
            pcap: None,
            trace: None,
            faults: None,
            adaptive_retransmit_floor: Some(crate::LIVE_ADAPTIVE_RETRANSMIT_FLOOR),
            direct_copy: true,
            shm_spin: Duration::ZERO,
            shm_linger: crate::SHM_LINGER,
        }
    }
}

impl ProcessNicConfig {
    /// The variable naming the device; unset: [`Self::DEFAULT_NAME`].
    pub const NAME_VAR: &'static str = "DOORBELL_NAME";
    /// The variable giving the port's IPv4 address; unset or empty: picked
    /// automatically.
    pub const ADDR_VAR: &'static str = "DOORBELL_ADDR";
    /// The variable that takes the link down once ([`LinkDown`]).
    pub const LINK_DOWN_VAR: &'static str = "DOORBELL_LINK_DOWN";
    /// The variable that turns shared memory between NICs of this host on
    /// (`1`, `on`; unset: on) or off (`0`, `off`).
    pub const SHM_VAR: &'static str = "DOORBELL_SHM";
    /// The variable that turns UDP segmentation offload on (`1`, `on`;
    /// unset: on) or off (`0`, `off`).
    pub const UDP_GSO_VAR: &'static str = "DOORBELL_UDP_GSO";
    /// The variable naming a pcapng file for the NIC's frames; unset or
    /// empty: none.
    pub const PCAP_VAR: &'static str = "DOORBELL_PCAP";
    /// The variable naming a file for the NIC's timeline (Chrome
    /// trace-event JSON); unset or empty: none.
    pub const TRACE_VAR: &'static str = "DOORBELL_TRACE";
    /// The variable that puts random faults on the frames the NIC sends:
    /// comma-separated `loss=P`, `dup=P`, `reorder=P`, `corrupt=P` (each a
    /// probability per frame, together at most 1), `delay_us=N` (the longest
    /// hold of a reordered frame, default 200) and `seed=N` (default 1),
    /// e.g. `loss=0.02,reorder=0.01,seed=7`; unset or empty: none.
    pub const FAULTS_VAR: &'static str = "DOORBELL_FAULTS";
    /// The variable that sets adaptive retransmission: `on` (unset or
    /// empty: on, with its floor [`crate::LIVE_ADAPTIVE_RETRANSMIT_FLOOR`],
    /// the least an ACK must be late beyond the round trip), `off` (resend
    /// only when a QP's ACK timeout expires, as a NIC without it does), or
    /// the floor in microseconds.
    pub const ADAPTIVE_VAR: &'static str = "DOORBELL_ADAPTIVE_RETRANSMIT";
    /// The variable that sets how the NIC reaches a program's registered
    /// buffers: `on` (unset: on), a plain copy whose page faults a SIGSEGV
    /// and SIGBUS handler catches, so a buffer unmapped under its MR fails
    /// the access instead of the process; `off`, every copy through the
    /// kernel (`process_vm_writev`), slower, for a program whose own
    /// SIGSEGV or SIGBUS handler does not hand on faults it did not cause.
    pub const DIRECT_COPY_VAR: &'static str = "DOORBELL_DIRECT_COPY";
    /// The variable that sets [`Self::shm_spin`], in microseconds (unset
    /// or empty: 0).
    pub const SPIN_VAR: &'static str = "DOORBELL_SPIN_US";
    /// The variable that sets [`Self::shm_linger`], in microseconds
    /// (unset or empty: 5; 0: a poll never waits).
    pub const LINGER_VAR: &'static str = "DOORBELL_LINGER_US";
    /// The longest [`Self::SPIN_VAR`] or [`Self::LINGER_VAR`] accepted:
    /// one second.
    pub const MAX_WAIT_US: u64 = 1_000_000;
    /// The device name when [`Self::NAME_VAR`] is unset.
    pub const DEFAULT_NAME: &'static str = "doorbell0";
    /// Longest device name, in bytes: `ibv_device.name` is 64 bytes with
    /// its NUL.
    pub const MAX_NAME_LEN: usize = 63;

    /// The configuration that [`Self::NAME_VAR`] and [`Self::ADDR_VAR`]
    /// give in the process's environment.
    pub fn from_env() -> Result<Self, ProcessNicError> {
        Self::from_lookup(|var| std::env::var_os(var))
    }

    /// The configuration that the variables give, as `get` reads them
    /// (`None`: unset). An error names the variable and its value.
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> Result<Self, ProcessNicError> {
        let name = match get(Self::NAME_VAR) {
            None => Self::DEFAULT_NAME.to_owned(),
            Some(v) => {
                let value = v.into_string().map_err(|v| ProcessNicError::BadName {
                    var: Self::NAME_VAR,
                    value: v.to_string_lossy().into_owned(),
                })?;
                check_name(&value)?;
                value
            }
        };
        let addr = match get(Self::ADDR_VAR) {
            None => None,
            Some(v) if v.is_empty() => None,
            Some(v) => Some(parse_addr(Self::ADDR_VAR, &v.to_string_lossy())?),
        };
        let link_down = match get(Self::LINK_DOWN_VAR) {
            None => None,
            Some(v) if v.is_empty() => None,
            Some(v) => Some(parse_link_down(&v.to_string_lossy())?),
        };
        let switch = |var: &'static str| match get(var) {
            None => Ok(true),
            Some(v) => match v.to_string_lossy().trim() {
                "" | "1" | "on" | "yes" | "true" => Ok(true),
                "0" | "off" | "no" | "false" => Ok(false),
                other => Err(ProcessNicError::BadSwitch {
                    var,
                    value: other.to_owned(),
                }),
            },
        };
        let shm = switch(Self::SHM_VAR)?;
        let udp_gso = switch(Self::UDP_GSO_VAR)?;
        let direct_copy = switch(Self::DIRECT_COPY_VAR)?;
        let pcap = get(Self::PCAP_VAR)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from);
        let trace = get(Self::TRACE_VAR)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from);
        let faults = match get(Self::FAULTS_VAR) {
            None => None,
            Some(v) if v.is_empty() => None,
            Some(v) => Some(parse_faults(&v.to_string_lossy())?),
        };
        let adaptive_retransmit_floor = match get(Self::ADAPTIVE_VAR) {
            None => Some(crate::LIVE_ADAPTIVE_RETRANSMIT_FLOOR),
            Some(v) => parse_adaptive(&v.to_string_lossy())?,
        };
        let micros = |var: &'static str, default: Duration| match get(var) {
            None => Ok(default),
            Some(v) if v.is_empty() => Ok(default),
            Some(v) => parse_wait(var, &v.to_string_lossy()),
        };
        let shm_spin = micros(Self::SPIN_VAR, Duration::ZERO)?;
        let shm_linger = micros(Self::LINGER_VAR, crate::SHM_LINGER)?;
        Ok(Self {
            name,
            addr,
            link_down,
            shm,
            udp_gso,
            pcap,
            trace,
            faults,
            adaptive_retransmit_floor,
            direct_copy,
            shm_spin,
            shm_linger,
        })
    }

    /// Checks what [`Self::from_lookup`] checks, for a configuration made
    /// by hand.
    pub fn validate(&self) -> Result<(), ProcessNicError> {
        check_name(&self.name)?;
        if let Some(a) = self.addr
            && !is_unicast(a)
        {
            return Err(ProcessNicError::BadAddr {
                var: Self::ADDR_VAR,
                value: Ipv4Addr::from(a).to_string(),
            });
        }
        Ok(())
    }
}

/// [`ProcessNicConfig::ADAPTIVE_VAR`]'s value: adaptive retransmission's
/// floor, or `None` for off.
pub fn parse_adaptive(value: &str) -> Result<Option<doorbell_types::Duration>, ProcessNicError> {
    match value.trim() {
        "" | "1" | "on" | "yes" | "true" => Ok(Some(crate::LIVE_ADAPTIVE_RETRANSMIT_FLOOR)),
        "0" | "off" | "no" | "false" => Ok(None),
        v => match v.parse::<u64>() {
            Ok(us) if (1..=60_000_000).contains(&us) => {
                Ok(Some(doorbell_types::Duration::from_us(us)))
            }
            _ => Err(ProcessNicError::BadAdaptive {
                var: ProcessNicConfig::ADAPTIVE_VAR,
                value: value.to_owned(),
            }),
        },
    }
}

/// A wait in microseconds, 0 to [`ProcessNicConfig::MAX_WAIT_US`], as
/// `var` gives it.
fn parse_wait(var: &'static str, value: &str) -> Result<Duration, ProcessNicError> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&us| us <= ProcessNicConfig::MAX_WAIT_US)
        .map(Duration::from_micros)
        .ok_or_else(|| ProcessNicError::BadWait {
            var,
            value: value.to_owned(),
        })
}

/// [`ProcessNicConfig::FAULTS_VAR`]'s value.
pub fn parse_faults(value: &str) -> Result<crate::Faults, ProcessNicError> {
    let bad = |why: String| ProcessNicError::BadFaults {
        var: ProcessNicConfig::FAULTS_VAR,
        value: value.to_owned(),
        why,
    };
    let mut f = crate::Faults::new(1);
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (key, v) = item
            .split_once('=')
            .ok_or_else(|| bad(format!("{item:?} is not KEY=VALUE")))?;
        let p = || -> Result<f64, ProcessNicError> {
            let p: f64 = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("{key}={v:?} is not a number")))?;
            if (0.0..=1.0).contains(&p) {
                Ok(p)
            } else {
                Err(bad(format!("{key}={v} is not a probability (0 to 1)")))
            }
        };
        let n = || -> Result<u64, ProcessNicError> {
            v.trim()
                .parse()
                .map_err(|_| bad(format!("{key}={v:?} is not a whole number")))
        };
        match key.trim() {
            "loss" => f.loss = p()?,
            "dup" | "duplicate" => f.duplicate = p()?,
            "reorder" => f.reorder = p()?,
            "corrupt" => f.corrupt = p()?,
            "seed" => f.seed = n()?,
            "delay_us" => f.max_delay = doorbell_types::Duration::from_us(n()?),
            other => {
                return Err(bad(format!(
                    "unknown key {other:?} (loss, dup, reorder, corrupt, delay_us, seed)"
                )));
            }
        }
    }
    if f.loss + f.duplicate + f.reorder + f.corrupt > 1.0 {
        return Err(bad("the probabilities add up to more than 1".into()));
    }
    Ok(f)
}

fn parse_link_down(value: &str) -> Result<LinkDown, ProcessNicError> {
    let bad = || ProcessNicError::BadLinkDown {
        var: ProcessNicConfig::LINK_DOWN_VAR,
        value: value.to_owned(),
    };
    let (at, dur) = value.split_once(':').ok_or_else(bad)?;
    Ok(LinkDown {
        at_ms: at.trim().parse().map_err(|_| bad())?,
        for_ms: dur.trim().parse().map_err(|_| bad())?,
    })
}

fn check_name(name: &str) -> Result<(), ProcessNicError> {
    let ok = !name.is_empty()
        && name.len() <= ProcessNicConfig::MAX_NAME_LEN
        && !name.contains(['/', '\0']);
    if ok {
        Ok(())
    } else {
        Err(ProcessNicError::BadName {
            var: ProcessNicConfig::NAME_VAR,
            value: name.to_owned(),
        })
    }
}

fn is_unicast(a: [u8; 4]) -> bool {
    let ip = Ipv4Addr::from(a);
    !(ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast())
}

/// Parses a dotted-quad unicast IPv4 address, the value of `var`.
fn parse_addr(var: &'static str, value: &str) -> Result<[u8; 4], ProcessNicError> {
    value
        .parse::<Ipv4Addr>()
        .ok()
        .map(|ip| ip.octets())
        .filter(|&a| is_unicast(a))
        .ok_or_else(|| ProcessNicError::BadAddr {
            var,
            value: value.to_owned(),
        })
}

/// Why the process's NIC could not be configured or started. Each is
/// fatal to the one `ibv_open_device` that met it, never to the process:
/// a later acquire tries again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessNicError {
    /// A variable (or a configuration field it sets) is not a unicast
    /// IPv4 address.
    #[error("{var}={value:?} is not a unicast IPv4 address (a.b.c.d)")]
    BadAddr {
        /// The variable, [`ProcessNicConfig::ADDR_VAR`].
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A link-down schedule that is not `AT_MS:FOR_MS`.
    #[error(
        "{var}={value:?}: expected AT_MS:FOR_MS, e.g. 200:300 (down 200 ms after start, for 300 ms)"
    )]
    BadLinkDown {
        /// The variable, [`ProcessNicConfig::LINK_DOWN_VAR`].
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A fault list that does not parse.
    #[error("{var}={value:?}: {why}")]
    BadFaults {
        /// The variable, [`ProcessNicConfig::FAULTS_VAR`].
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// An adaptive retransmission setting that is neither on, off nor a
    /// time.
    #[error(
        "{var}={value:?}: expected on (the default), off, or the least an ACK may be late beyond the round trip, in microseconds (1 to 60000000, e.g. 200)"
    )]
    BadAdaptive {
        /// The variable, [`ProcessNicConfig::ADAPTIVE_VAR`].
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A wait that is not a whole number of microseconds up to a second.
    #[error("{var}={value:?}: expected a whole number of microseconds, 0 to 1000000")]
    BadWait {
        /// The variable ([`ProcessNicConfig::SPIN_VAR`] or
        /// [`ProcessNicConfig::LINGER_VAR`]).
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A switch variable is neither on nor off.
    #[error("{var}={value:?}: expected 1 or on (the default), or 0 or off")]
    BadSwitch {
        /// The variable ([`ProcessNicConfig::SHM_VAR`] or
        /// [`ProcessNicConfig::UDP_GSO_VAR`]).
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A device name that is empty, longer than 63 bytes, or holds `/`
    /// or NUL.
    #[error("{var}={value:?}: a device name is 1 to 63 bytes, without '/'")]
    BadName {
        /// The variable, [`ProcessNicConfig::NAME_VAR`].
        var: &'static str,
        /// Its value (lossily, if it was not UTF-8).
        value: String,
    },
    /// The configured address has a socket on UDP port 4791 already
    /// (another NIC, in this process or another).
    #[error("{}:4791 is in use (another doorbell NIC?); choose another address", Ipv4Addr::from(*.addr))]
    AddressInUse {
        /// The address.
        addr: [u8; 4],
    },
    /// No address configured, and every one searched is in use.
    #[error("no free address in {}..={}: each has a socket on UDP port 4791", Ipv4Addr::from(*.first), Ipv4Addr::from(*.last))]
    NoFreeAddress {
        /// First address tried.
        first: [u8; 4],
        /// Last address tried.
        last: [u8; 4],
    },
    /// The live runtime could not start the NIC (socket, thread).
    #[error("cannot start the NIC on {}", Ipv4Addr::from(*.addr))]
    Start {
        /// The address it was to use.
        addr: [u8; 4],
        /// What the runtime said.
        #[source]
        source: RtError,
    },
    /// `pthread_atfork` refused to register the fork handler.
    #[error("cannot register the fork handler (errno {errno})")]
    AtFork {
        /// What it returned.
        errno: i32,
    },
}

impl ProcessNicError {
    /// The `errno` a C caller reports this as: `EINVAL` for a bad
    /// setting, `EADDRINUSE` for a taken address, `EADDRNOTAVAIL` for an
    /// address not on this host, `EAGAIN` when a thread could not start,
    /// `EIO` otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            Self::BadAddr { .. }
            | Self::BadName { .. }
            | Self::BadLinkDown { .. }
            | Self::BadFaults { .. }
            | Self::BadAdaptive { .. }
            | Self::BadSwitch { .. }
            | Self::BadWait { .. } => libc::EINVAL,
            Self::AddressInUse { .. } | Self::NoFreeAddress { .. } => libc::EADDRINUSE,
            Self::AtFork { errno } => *errno,
            Self::Start { source, .. } => match source {
                RtError::Link(_) => libc::EINVAL,
                RtError::AddressInUse(_) => libc::EADDRINUSE,
                RtError::Spawn => libc::EAGAIN,
                RtError::Capture { kind, .. } => match kind {
                    std::io::ErrorKind::PermissionDenied => libc::EACCES,
                    std::io::ErrorKind::NotFound => libc::ENOENT,
                    _ => libc::EIO,
                },
                RtError::Socket { kind, .. } => match kind {
                    std::io::ErrorKind::AddrNotAvailable => libc::EADDRNOTAVAIL,
                    std::io::ErrorKind::PermissionDenied => libc::EACCES,
                    std::io::ErrorKind::OutOfMemory => libc::ENOMEM,
                    _ => libc::EIO,
                },
            },
        }
    }
}

/// The process's NIC, shared by every holder. See the module docs.
#[derive(Clone)]
pub struct ProcessNic {
    shared: Arc<Shared>,
}

/// One started NIC. Fields drop in order: the NIC stops first, then
/// `_stop` tells waiting acquires that its port is free.
struct Shared {
    nic: Arc<LiveNic>,
    memory: Arc<ProcessMemory>,
    name: String,
    addr: [u8; 4],
    _stop: StopMark,
}

/// Marks the NIC `id` stopped when dropped.
struct StopMark {
    id: u64,
}

impl Drop for StopMark {
    fn drop(&mut self) {
        let mut st = lock_state();
        if st.running == Some(self.id) {
            st.running = None;
            st.port_fd = None;
            STOPPED.notify_all();
        }
    }
}

/// What the process knows of its NIC.
struct State {
    /// The running NIC, if any holder is left.
    live: Weak<Shared>,
    /// The NIC that runs or is still stopping.
    running: Option<u64>,
    next_id: u64,
    /// The running NIC's socket, released in a forked child.
    port_fd: Option<RawFd>,
}

static STATE: Mutex<State> = Mutex::new(State {
    live: Weak::new(),
    running: None,
    next_id: 0,
    port_fd: None,
});
/// Signalled when a NIC has stopped.
static STOPPED: Condvar = Condvar::new();

fn lock_state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// In a forked child, with the state locked (by the prepare handler):
/// forgets the parent's NIC without touching its threads or objects.
fn forget_in_child(st: &mut State) {
    if let Some(fd) = st.port_fd.take() {
        os::release_fd(fd);
    }
    crate::shm::each_socket(os::release_fd);
    // Dropping the weak reference could free memory; leak it instead.
    std::mem::forget(std::mem::take(&mut st.live));
    st.running = None;
}

impl ProcessNic {
    /// The process's NIC: started by the first call (UDP port on
    /// `cfg.addr`, or on the first free address of
    /// 127.0.0.2..=127.0.0.254, serving a [`ProcessMemory`]), shared by
    /// every later call while any `ProcessNic` lives; the last drop stops
    /// it; a later acquire starts a new one. `cfg` is read only when the
    /// NIC starts.
    pub fn acquire(cfg: &ProcessNicConfig) -> Result<ProcessNic, ProcessNicError> {
        Self::acquire_from(cfg, AUTO_FIRST)
    }

    /// [`ProcessNic::acquire`], but an address picked automatically is the
    /// first free one from `first` up to host number 254 of its /24 (tests
    /// use a subnet of their own). A configured address is used as is.
    pub fn acquire_from(
        cfg: &ProcessNicConfig,
        first: [u8; 4],
    ) -> Result<ProcessNic, ProcessNicError> {
        cfg.validate()?;
        register_fork_handlers().map_err(|errno| ProcessNicError::AtFork { errno })?;
        let mut st = lock_state();
        loop {
            if let Some(shared) = st.live.upgrade() {
                return Ok(ProcessNic { shared });
            }
            if st.running.is_none() {
                break;
            }
            // The last holder is stopping it: wait until the port is free.
            st = STOPPED.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let (nic, memory, addr) = start(cfg, first)?;
        let id = st.next_id;
        st.next_id += 1;
        st.port_fd = nic.port_fd();
        let shared = Arc::new(Shared {
            nic,
            memory,
            name: cfg.name.clone(),
            addr,
            _stop: StopMark { id },
        });
        st.live = Arc::downgrade(&shared);
        st.running = Some(id);
        if let Some(plan) = cfg.link_down {
            take_link_down(Arc::downgrade(&shared.nic), plan);
        }
        Ok(ProcessNic { shared })
    }

    /// The NIC, the device link of a verbs context. Clones keep it running
    /// (see the module's limits).
    pub fn nic(&self) -> &Arc<LiveNic> {
        &self.shared.nic
    }

    /// The process memory the NIC serves: `ibv_reg_mr` grants the
    /// application's buffers to it.
    pub fn memory(&self) -> &Arc<ProcessMemory> {
        &self.shared.memory
    }

    /// The port's IPv4 address (GID 0 is its IPv4-mapped form).
    pub fn addr(&self) -> [u8; 4] {
        self.shared.addr
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
}

impl fmt::Debug for ProcessNic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessNic")
            .field("name", &self.shared.name)
            .field("addr", &Ipv4Addr::from(self.shared.addr))
            .finish_non_exhaustive()
    }
}

/// Plays the administrator of [`LinkDown`]: a thread, with every signal
/// blocked, that takes the link down and up again through the device's
/// PAOS register, unless the NIC has stopped by then.
fn take_link_down(nic: Weak<LiveNic>, plan: LinkDown) {
    let set = move |up: bool| {
        if let Some(n) = nic.upgrade() {
            let _ =
                doorbell_hif::DeviceLink::exec(&*n, doorbell_hif::Command::AccessPaos(Some(up)));
        }
    };
    let _blocked = os::SignalsBlocked::all();
    let _ = std::thread::Builder::new()
        .name("doorbell-link".into())
        .spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(plan.at_ms));
            set(false);
            std::thread::sleep(std::time::Duration::from_millis(plan.for_ms));
            set(true);
        });
}

type Started = (Arc<LiveNic>, Arc<ProcessMemory>, [u8; 4]);

/// Starts the NIC on the configured address, or on the first free one
/// from `first`, with every signal blocked in the threads it spawns.
fn start(cfg: &ProcessNicConfig, first: [u8; 4]) -> Result<Started, ProcessNicError> {
    let [a, b, c, h] = first;
    let last = [a, b, c, AUTO_LAST_HOST];
    let candidates: Vec<[u8; 4]> = match cfg.addr {
        Some(addr) => vec![addr],
        None => (h..=AUTO_LAST_HOST).map(|h| [a, b, c, h]).collect(),
    };
    for addr in candidates {
        let memory = Arc::new(if cfg.direct_copy {
            ProcessMemory::new()
        } else {
            ProcessMemory::through_kernel()
        });
        let opts = NicOptions {
            memory: Some(memory.clone()),
            shm: cfg.shm,
            udp_gso: cfg.udp_gso,
            shm_spin: cfg.shm_spin,
            shm_linger: cfg.shm_linger,
            adaptive_retransmit_floor: cfg.adaptive_retransmit_floor,
            pcap: cfg.pcap.clone(),
            trace: cfg.trace.is_some(),
            relay_queue: cfg
                .faults
                .as_ref()
                .map_or(crate::fault::DEFAULT_QUEUE_LIMIT, |f| f.queue_limit),
            faults: cfg
                .faults
                .clone()
                .map(|f| Box::new(crate::RandomFaults::new(f)) as Box<dyn crate::FaultPolicy>),
            ..NicOptions::default()
        };
        let started = {
            // Threads inherit the mask of the thread that creates them.
            let _blocked = os::SignalsBlocked::all();
            LiveNic::start_with(&cfg.name, addr, Port::Udp, opts)
        };
        match started {
            Ok(nic) => return Ok((Arc::new(nic), memory, addr)),
            Err(RtError::AddressInUse(_)) if cfg.addr.is_none() => continue,
            Err(RtError::AddressInUse(addr)) => {
                return Err(ProcessNicError::AddressInUse { addr });
            }
            Err(source) => return Err(ProcessNicError::Start { addr, source }),
        }
    }
    Err(ProcessNicError::NoFreeAddress { first, last })
}

/// Registers the runtime's fork handlers now, rather than when its first
/// process NIC starts (they hold its state and spare stores across a
/// `fork()`, and count forks for its NICs). For a library with handlers
/// of its own, from its load-time constructor: prepare handlers run in
/// the reverse order of their registration, so the runtime's, registered
/// after the library's, take their locks first; and no once-only guard of
/// the registration is left half run by a fork in another thread.
/// `Err(errno)` if `pthread_atfork` refused (for want of memory).
pub fn register_fork_handlers() -> Result<(), i32> {
    let _ = crate::forks::generation();
    os::register_fork_handlers()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn a_link_down_schedule_is_at_ms_colon_for_ms() {
        let c =
            ProcessNicConfig::from_lookup(lookup(&[("DOORBELL_LINK_DOWN", "300:200")])).unwrap();
        assert_eq!(
            c.link_down,
            Some(LinkDown {
                at_ms: 300,
                for_ms: 200
            })
        );
        for bad in ["300", "a:1", "1:", "-1:5"] {
            let e =
                ProcessNicConfig::from_lookup(lookup(&[("DOORBELL_LINK_DOWN", bad)])).unwrap_err();
            assert!(matches!(e, ProcessNicError::BadLinkDown { .. }), "{bad}");
            assert_eq!(e.errno(), libc::EINVAL);
        }
        let none = ProcessNicConfig::from_lookup(lookup(&[("DOORBELL_LINK_DOWN", "")])).unwrap();
        assert_eq!(none.link_down, None);
    }

    #[test]
    fn the_shared_memory_waits_are_microseconds_up_to_a_second() {
        let unset = ProcessNicConfig::from_lookup(lookup(&[])).unwrap();
        assert_eq!(unset.shm_spin, Duration::ZERO);
        assert_eq!(unset.shm_linger, crate::SHM_LINGER);
        let set = ProcessNicConfig::from_lookup(lookup(&[
            ("DOORBELL_SPIN_US", " 20 "),
            ("DOORBELL_LINGER_US", "0"),
        ]))
        .unwrap();
        assert_eq!(set.shm_spin, Duration::from_micros(20));
        assert_eq!(set.shm_linger, Duration::ZERO);
        let most = ProcessNicConfig::from_lookup(lookup(&[("DOORBELL_LINGER_US", "1000000")]));
        assert_eq!(most.unwrap().shm_linger, Duration::from_secs(1));
        for var in ["DOORBELL_SPIN_US", "DOORBELL_LINGER_US"] {
            for bad in ["5us", "-1", "1.5", "1000001", "x"] {
                let e = ProcessNicConfig::from_lookup(lookup(&[(var, bad)])).unwrap_err();
                assert_eq!(
                    e,
                    ProcessNicError::BadWait {
                        var: if var == "DOORBELL_SPIN_US" {
                            ProcessNicConfig::SPIN_VAR
                        } else {
                            ProcessNicConfig::LINGER_VAR
                        },
                        value: bad.to_owned()
                    },
                    "{var}={bad}"
                );
                assert_eq!(e.errno(), libc::EINVAL);
                assert!(e.to_string().contains(var), "{e}");
            }
        }
    }

    #[test]
    fn errors_map_to_the_errno_a_c_caller_reports() {
        let bad = ProcessNicConfig::from_lookup(lookup(&[("DOORBELL_ADDR", "x")])).unwrap_err();
        assert_eq!(bad.errno(), libc::EINVAL);
        let inuse = ProcessNicError::AddressInUse {
            addr: [127, 0, 0, 2],
        };
        assert_eq!(inuse.errno(), libc::EADDRINUSE);
        assert_eq!(
            inuse.to_string(),
            "127.0.0.2:4791 is in use (another doorbell NIC?); choose another address"
        );
        let start = |source| ProcessNicError::Start {
            addr: [10, 0, 0, 1],
            source,
        };
        assert_eq!(start(RtError::Spawn).errno(), libc::EAGAIN);
        let sock = |kind| {
            start(RtError::Socket {
                addr: [10, 0, 0, 1],
                kind,
            })
        };
        assert_eq!(
            sock(std::io::ErrorKind::AddrNotAvailable).errno(),
            libc::EADDRNOTAVAIL
        );
        assert_eq!(sock(std::io::ErrorKind::Other).errno(), libc::EIO);
        assert_eq!(
            ProcessNicError::NoFreeAddress {
                first: [127, 0, 0, 2],
                last: [127, 0, 0, 254]
            }
            .errno(),
            libc::EADDRINUSE
        );
    }
}
