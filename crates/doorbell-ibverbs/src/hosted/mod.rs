//! Hosting rdma-core's own provider: with `DOORBELL_PROVIDER=mlx5` the
//! device is driven by Debian's unmodified `libmlx5.so.1`, and this library
//! plays what a real system has under it: libibverbs' core (the device
//! list, the op tables, the private calls of IBVERBS_PRIVATE_34) and the
//! kernel's uverbs and mlx5_ib (the `ibv_cmd_*` commands, answered through
//! `doorbell-driver` as mlx5_ib answers them). Decision record 0023.
//!
//! # How a context comes to be
//! 1. The first device list loads libmlx5 (unless the program linked it);
//!    its constructor calls `verbs_register_driver_34` with its device ops.
//! 2. The device is made by the provider's `alloc_device` from a sysfs-like
//!    description (driver id mlx5, ABI version 1), then completed as
//!    libibverbs' `try_driver` does.
//! 3. `ibv_open_device` makes the command fd (a memfd: libmlx5 maps its UAR
//!    pages from it) and calls the provider's `alloc_context`, which calls
//!    back `_verbs_init_and_alloc_context` (a [`HostedCtx`] is made),
//!    `ibv_cmd_get_context` (the driver's ucontext is made from libmlx5's
//!    bfreg request), `verbs_set_ops` and the queries.
//!
//! # Doorbells
//! libmlx5 rings with plain stores into the mapped pages, which the device
//! does not see. The public `post_send` and `req_notify_cq` are wrapped: after
//! the provider's, the device is told of a store on the QP's (or CQ's)
//! register page and reads the doorbell record (`Mmio::record_doorbell`).
//! So the counters stay exact in count; which register (doorbell or
//! BlueFlame) is inferred, and the stats say so.
//!
//! # Which objects are hosted
//! Objects of a hosted context are the provider's own structs; this library
//! never registers them as handles. A public verb that is given a pointer
//! that is not one of its handles looks at the object's `context` (its
//! first field, as for every verbs object) and, if that is a hosted
//! context, calls the provider's op, as libibverbs does. That look happens
//! only while a hosted device exists, so that the default library keeps
//! refusing made-up pointers without reading them.

#![allow(unsafe_code)]

mod cmd;
pub(crate) mod context;
mod io;
mod qp;
pub(crate) mod srq;
mod sysfs;
mod uar;
pub(crate) mod verbs;
mod watch;

use core::ffi::{CStr, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use doorbell_rt::ProcessNicConfig;
use libc::{EDEADLK, EINVAL};

use crate::abi::consts::*;
use crate::abi::private34::{RDMA_DRIVER_MLX5, VERBS_MATCH_DRIVER_ID, verbs_match_ent};
use crate::abi::*;

/// Which user-space provider drives the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    /// doorbell's own (`doorbell-verbs`), the default.
    Doorbell,
    /// rdma-core's libmlx5, hosted.
    Mlx5,
}

impl Provider {
    /// `DOORBELL_PROVIDER`: `doorbell` (or unset) or `mlx5`.
    pub(crate) fn from_env() -> Result<Self, String> {
        match std::env::var("DOORBELL_PROVIDER").as_deref() {
            Err(_) | Ok("" | "doorbell") => Ok(Self::Doorbell),
            Ok("mlx5") => Ok(Self::Mlx5),
            Ok(other) => Err(format!(
                "DOORBELL_PROVIDER={other}: expected `doorbell` (the default) or `mlx5` \
                 (rdma-core's libmlx5 hosted on doorbell)"
            )),
        }
    }
}

/// The provider's ops, as its constructor registered them (static data of
/// the provider library, which is never unloaded).
#[derive(Clone, Copy)]
struct Registered(*const verbs_device_ops);

// SAFETY: a pointer to the provider's immutable static `verbs_device_ops`.
unsafe impl Send for Registered {}

/// The registered providers. A leaf lock (decision record 0068).
static DRIVERS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

/// The hosting's process-wide locks (the providers, the contexts), held
/// (for `forks`). The loading lock is not among them: it is no leaf, and
/// the fork handlers take it before any other ([`hold_loading_for_fork`]).
pub(crate) struct ForkHeld {
    _drivers: std::sync::MutexGuard<'static, Vec<Registered>>,
    _contexts: std::sync::RwLockWriteGuard<
        'static,
        std::collections::BTreeMap<usize, std::sync::Arc<context::HostedCtx>>,
    >,
}

/// Each of [`ForkHeld`]'s locks alone, by name: for the test that holds
/// one at a time.
#[cfg(test)]
pub(crate) fn each_lock_for_test() -> Vec<crate::events::OneLock> {
    vec![
        ("hosted loading", || Box::new(hold_loading_for_fork())),
        ("hosted drivers", || Box::new(crate::events::lock(&DRIVERS))),
        ("hosted contexts", || Box::new(context::contexts_write())),
    ]
}

/// Takes [`LOADING`], which waits for a thread that loads libmlx5 (for
/// `forks`, before any other lock). `None` in the thread that holds it,
/// making the device: a provider's constructor that forks. Its child,
/// the copy of that thread, lets the lock go as the parent does, once
/// the device is made.
pub(crate) fn hold_loading_for_fork() -> Option<std::sync::MutexGuard<'static, ()>> {
    if MAKING.get() {
        return None;
    }
    Some(crate::events::lock(&LOADING))
}

/// Takes [`ForkHeld`]'s locks, in that order.
pub(crate) fn hold_for_fork() -> ForkHeld {
    ForkHeld {
        _drivers: crate::events::lock(&DRIVERS),
        _contexts: context::contexts_write(),
    }
}

/// `verbs_register_driver_34`: records a provider of private ABI 34.
pub(crate) fn register(ops: *const verbs_device_ops) {
    if !ops.is_null() {
        crate::events::lock(&DRIVERS).push(Registered(ops));
    }
}

/// The provider named `name` registered last.
fn registered(name: &CStr) -> Option<&'static verbs_device_ops> {
    crate::events::lock(&DRIVERS).iter().rev().find_map(|r| {
        // SAFETY: registered pointers are the providers' static ops.
        let ops = unsafe { &*r.0 };
        if ops.name.is_null() {
            return None;
        }
        // SAFETY: a provider's `name` is a static C string.
        (unsafe { CStr::from_ptr(ops.name) } == name).then_some(ops)
    })
}

/// The hosted device: the provider's `verbs_device`, never freed (C may
/// keep a device pointer after freeing the list).
pub(crate) struct HostedDevice {
    pub(crate) vdev: *mut verbs_device,
    pub(crate) ops: &'static verbs_device_ops,
    pub(crate) config: ProcessNicConfig,
    pub(crate) guid: u64,
}

// SAFETY: the device struct is written once, before it is published, and
// only read after; the ops are the provider's static data.
unsafe impl Send for HostedDevice {}
// SAFETY: as above.
unsafe impl Sync for HostedDevice {}

impl HostedDevice {
    pub(crate) fn ibv_device(&self) -> *mut ibv_device {
        // SAFETY: `vdev` is the provider's live verbs_device; its public
        // part is first.
        unsafe { core::ptr::addr_of_mut!((*self.vdev).device) }
    }
}

static DEVICE: OnceLock<Result<HostedDevice, c_int>> = OnceLock::new();

/// Held while [`DEVICE`] is made, which loads libmlx5: so a `fork()`
/// while another thread loads it waits until the device is made or has
/// failed (the fork handlers take this lock first, decision record 0068),
/// where the `OnceLock` alone would be left running in the child, which
/// would wait for ever for a thread it does not have. Not a leaf: the
/// provider's constructor takes [`DRIVERS`] while it is held. The loading
/// thread takes it with no lock held; the forking thread takes it before
/// the library's others, though after the runtime's state lock and stores,
/// which nothing under it takes: no NIC exists before the hosted device,
/// and neither libmlx5's constructor nor its `alloc_device` starts one.
static LOADING: Mutex<()> = Mutex::new(());

thread_local! {
    /// This thread holds [`LOADING`] and is making the hosted device: a
    /// call back into the library from the provider's constructor (or its
    /// `alloc_device`) is refused rather than waiting for ever on the
    /// lock its own thread holds.
    static MAKING: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// [`MAKING`] set while it lives (cleared however the making ends).
struct Making;

impl Making {
    fn begin() -> Self {
        MAKING.set(true);
        Self
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        MAKING.set(false);
    }
}

/// Set once a hosted device exists: only then are objects' `context`
/// fields read to find hosted ones.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The hosted device for `config`, made on first use: loads libmlx5 if no
/// one has, and has its `alloc_device` make the device.
pub(crate) fn device(config: &ProcessNicConfig, guid: u64) -> Result<&'static HostedDevice, c_int> {
    let made = match DEVICE.get() {
        Some(made) => made,
        None if MAKING.get() => {
            eprintln!(
                "libibverbs.so.1 (doorbell): the provider called back into libibverbs while \
                 it was being loaded (from its constructor or alloc_device); that call \
                 finds no device"
            );
            return Err(EDEADLK);
        }
        None => {
            let _loading = crate::events::lock(&LOADING);
            let _making = Making::begin();
            DEVICE.get_or_init(|| {
                #[cfg(test)]
                tests::pause_while_loading();
                make_device(config, guid).map_err(|e| {
                    eprintln!("libibverbs.so.1 (doorbell): {e}");
                    EINVAL
                })
            })
        }
    };
    made.as_ref().map_err(|&e| e)
}

fn make_device(config: &ProcessNicConfig, guid: u64) -> Result<HostedDevice, String> {
    // DOORBELL_PROVIDER_LIB: another build of libmlx5 (by path or name).
    let lib = std::env::var("DOORBELL_PROVIDER_LIB")
        .ok()
        .filter(|v| !v.is_empty());
    if lib.is_some() || registered(c"mlx5").is_none() {
        let name = lib.as_deref().unwrap_or("libmlx5.so.1");
        let cname = std::ffi::CString::new(name)
            .map_err(|_| format!("DOORBELL_PROVIDER_LIB={name:?} holds a NUL byte"))?;
        // SAFETY: a NUL-terminated name; RTLD_NOW makes a provider of an
        // unknown private ABI (whose verbs_register_driver_NN this library
        // does not define) fail here, with dlerror's text.
        let h = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            // SAFETY: dlerror returns NULL or a C string valid until the
            // next dl call on this thread.
            let why = unsafe {
                let e = libc::dlerror();
                if e.is_null() {
                    "unknown error".to_string()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                }
            };
            return Err(format!(
                "DOORBELL_PROVIDER=mlx5: cannot load {name} ({why}); libmlx5.so.1 comes \
                 with Debian's ibverbs-providers, and doorbell hosts providers of \
                 rdma-core's private ABI 34 as rdma-core v44 to v52 have it"
            ));
        }
    }
    // The provider registered last is the one just loaded.
    let ops = registered(c"mlx5").ok_or_else(|| {
        "DOORBELL_PROVIDER=mlx5: the provider loaded but did not register itself \
         with verbs_register_driver_34: it is not a provider of private ABI 34"
            .to_string()
    })?;
    if !(ops.match_min_abi_version..=ops.match_max_abi_version).contains(&1) {
        return Err(format!(
            "DOORBELL_PROVIDER=mlx5: libmlx5 drives kernel ABI versions {}..{}, \
             doorbell's driver speaks 1",
            ops.match_min_abi_version, ops.match_max_abi_version
        ));
    }
    let alloc = ops
        .alloc_device
        .ok_or("DOORBELL_PROVIDER=mlx5: libmlx5 has no alloc_device")?;
    // SAFETY: verbs_sysfs_dev is plain data; zero is its empty state, as
    // libibverbs callocs it.
    let mut sysfs: Box<verbs_sysfs_dev> = Box::new(unsafe { core::mem::zeroed() });
    crate::tables::copy_str(&mut sysfs.sysfs_name, "uverbs0");
    crate::tables::copy_str(&mut sysfs.ibdev_name, &config.name);
    // Where UCX finds the PCI IDs of a ConnectX-4 (module sysfs).
    let ibdev_path = sysfs::ibdev_path(&config.name);
    crate::tables::copy_str(&mut sysfs.ibdev_path, &ibdev_path);
    sysfs.node_guid = guid;
    sysfs.driver_id = RDMA_DRIVER_MLX5;
    sysfs.node_type = IBV_NODE_CA;
    sysfs.num_ports = 1;
    sysfs.abi_ver = 1;
    // The entry a driver-id match would have found.
    sysfs.match_ = first_driver_id_entry(ops);
    let sysfs = Box::into_raw(sysfs);
    // SAFETY: the provider's alloc_device with a complete description that
    // lives for ever; it reads `abi_ver` and callocs its device.
    let vdev = unsafe { alloc(sysfs) };
    if vdev.is_null() {
        return Err("DOORBELL_PROVIDER=mlx5: libmlx5's alloc_device failed".into());
    }
    // SAFETY: the provider's fresh device; completed as libibverbs'
    // try_driver does before anyone sees it.
    unsafe {
        let v = &mut *vdev;
        v.ops = ops;
        v.refcount = 1;
        v.sysfs = sysfs;
        v.device.node_type = IBV_NODE_CA;
        v.device.transport_type = IBV_TRANSPORT_IB;
        crate::tables::copy_str(&mut v.device.dev_name, "uverbs0");
        crate::tables::copy_str(
            &mut v.device.dev_path,
            "/sys/class/infiniband_verbs/uverbs0",
        );
        crate::tables::copy_str(&mut v.device.name, &config.name);
        crate::tables::copy_str(&mut v.device.ibdev_path, &ibdev_path);
    }
    ACTIVE.store(true, Ordering::Release);
    Ok(HostedDevice {
        vdev,
        ops,
        config: config.clone(),
        guid,
    })
}

/// The provider's first match entry of kind driver id, if any.
fn first_driver_id_entry(ops: &verbs_device_ops) -> *const verbs_match_ent {
    let mut e = ops.match_table;
    if e.is_null() {
        return e;
    }
    // SAFETY: the table is the provider's static array, ended by a zeroed
    // entry (kind VERBS_MATCH_SENTINEL); it is read up to that entry.
    unsafe {
        while (*e).kind != 0 {
            if (*e).kind == VERBS_MATCH_DRIVER_ID && (*e).u == u64::from(RDMA_DRIVER_MLX5) {
                return e;
            }
            e = e.add(1);
        }
    }
    core::ptr::null()
}

/// The hosted device, if `dev` is it.
pub(crate) fn is_device(dev: *mut ibv_device) -> Option<&'static HostedDevice> {
    let d = DEVICE.get()?.as_ref().ok()?;
    (d.ibv_device() == dev).then_some(d)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    /// How long the making of the hosted device pauses before it loads
    /// libmlx5, in milliseconds (for the fork test).
    pub(crate) static PAUSE_MS: AtomicU64 = AtomicU64::new(0);
    /// Set once a making of the hosted device has begun.
    pub(crate) static LOADING_BEGAN: AtomicBool = AtomicBool::new(false);

    /// Inside the device's `OnceLock`: says so, then pauses.
    pub(super) fn pause_while_loading() {
        LOADING_BEGAN.store(true, Ordering::Release);
        std::thread::sleep(Duration::from_millis(PAUSE_MS.load(Ordering::Relaxed)));
    }
}
