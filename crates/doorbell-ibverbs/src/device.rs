//! The device and its contexts: the device list, opening and closing, and
//! the queries of device, port, GID and P_Key.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;
use std::sync::{Arc, Mutex, MutexGuard};

use doorbell_rt::{ProcessNic, ProcessNicConfig};
use doorbell_verbs::{Context, ProviderConfig};
use libc::{EINVAL, ENODATA, size_t};

use crate::abi::consts::*;
use crate::abi::*;
use crate::attrs::{device_attr_ex_of, device_attr_of, port_attr};
use crate::boundary::{Conv, guard};
use crate::cq::CQ_OPS;
use crate::ctx::{CContext, context};
use crate::events::{self, Dispatcher, Queue, ROUTER};
use crate::handles;
use crate::hosted::{self, Provider};
use crate::qp::QP_OPS;
use crate::route::{Handles, any_context};

/// The one device of this process, allocated once and never freed (C may
/// keep a device pointer after freeing the list, as with rdma-core).
pub(crate) struct Device {
    dev: verbs_device,
    config: ProcessNicConfig,
    /// Which provider drives it (`DOORBELL_PROVIDER`).
    provider: Provider,
}

// SAFETY: the raw pointers in `verbs_device` are all NULL and never
// written; the struct is read-only after creation.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

/// The one device, described on the first call (from the environment)
/// and kept for the life of the process, or why it could not be. A lock,
/// not a `OnceLock`: a fork while another thread describes it waits for it
/// (decision record 0068), where a `OnceLock` would leave the child waiting
/// for a thread it does not have. A leaf lock.
static DEVICE: Mutex<Option<Result<&'static Device, c_int>>> = Mutex::new(None);

/// [`DEVICE`]'s lock, held (for `forks`).
pub(crate) fn hold_for_fork() -> MutexGuard<'static, Option<Result<&'static Device, c_int>>> {
    crate::events::lock(&DEVICE)
}

fn device() -> Result<&'static Device, c_int> {
    *crate::events::lock(&DEVICE).get_or_insert_with(describe)
}

/// The device as the environment describes it, kept for the life of the
/// process.
fn describe() -> Result<&'static Device, c_int> {
    {
        let config = ProcessNicConfig::from_env().map_err(|e| {
            eprintln!("libibverbs.so.1 (doorbell): {e}");
            e.errno()
        })?;
        let provider = Provider::from_env().map_err(|e| {
            eprintln!("libibverbs.so.1 (doorbell): {e}");
            EINVAL
        })?;
        // SAFETY: verbs_device is plain data (integers, arrays, NULL
        // pointers); all-zero is its empty state, as rdma-core callocs it.
        let mut dev: verbs_device = unsafe { core::mem::zeroed() };
        dev.device.node_type = IBV_NODE_CA;
        dev.device.transport_type = IBV_TRANSPORT_IB;
        crate::tables::copy_str(&mut dev.device.name, &config.name);
        crate::tables::copy_str(&mut dev.device.dev_name, "uverbs0");
        crate::tables::copy_str(
            &mut dev.device.dev_path,
            "/sys/class/infiniband_verbs/uverbs0",
        );
        crate::tables::copy_str(
            &mut dev.device.ibdev_path,
            &format!("/sys/class/infiniband/{}", config.name),
        );
        Ok(&*Box::leak(Box::new(Device {
            dev,
            config,
            provider,
        })))
    }
}

fn device_ptr(d: &'static Device) -> *mut ibv_device {
    core::ptr::from_ref(&d.dev.device).cast_mut()
}

/// Checks that `dev` is this library's device.
fn our_device(dev: *mut ibv_device) -> Result<&'static Device, c_int> {
    let d = device()?;
    if dev == device_ptr(d) {
        Ok(d)
    } else {
        Err(EINVAL)
    }
}

/// `ibv_get_device_list`: the one device, NULL-terminated.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard("ibv_get_device_list", Conv::Null, || {
        // With a hosted provider the one device is the provider's.
        let dev = device().and_then(|d| match d.provider {
            Provider::Doorbell => Ok(device_ptr(d)),
            Provider::Mlx5 => hosted::device(&d.config, node_guid(d)).map(|h| h.ibv_device()),
        });
        let list: Box<[*mut ibv_device]> = match dev {
            Ok(p) => vec![p, null_mut()].into_boxed_slice(),
            Err(_) => vec![null_mut()].into_boxed_slice(),
        };
        let n = list.len() - 1;
        if !num_devices.is_null() {
            // SAFETY: non-NULL, and the caller passes an int to write.
            unsafe { *num_devices = n as c_int };
        }
        Ok(Box::into_raw(list).cast::<*mut ibv_device>())
    })
}

/// `ibv_free_device_list`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard("ibv_free_device_list", Conv::Abort, || {
        if list.is_null() {
            return Ok(());
        }
        // The list is one device and a NULL, or only a NULL.
        // SAFETY: `list` came from ibv_get_device_list, whose slice holds a
        // NULL terminator; reading up to it stays inside the slice.
        let len = unsafe {
            let mut n = 0;
            while !(*list.add(n)).is_null() {
                n += 1;
            }
            n + 1
        };
        // SAFETY: the same slice, rebuilt with its length, freed once.
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(list, len)) });
        Ok(())
    })
}

/// `ibv_get_device_name`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard("ibv_get_device_name", Conv::Null, || {
        if let Some(h) = hosted::is_device(dev) {
            // SAFETY: the hosted device's public part, never freed.
            return Ok(unsafe { (*h.ibv_device()).name.as_ptr() });
        }
        Ok(our_device(dev)?.dev.device.name.as_ptr())
    })
}

/// The node GUID: an EUI-64 made of a locally administered prefix and the
/// device name's bytes, fixed for a name (big-endian, as C reads it).
fn node_guid(d: &Device) -> u64 {
    let h = d
        .config
        .name
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    (0x0200_00ff_fe00_0000u64 | (h & 0xff_ffff) | ((h >> 24) & 0xff) << 40).to_be()
}

/// `ibv_get_device_guid`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard("ibv_get_device_guid", Conv::Value(0), || {
        if let Some(h) = hosted::is_device(dev) {
            return Ok(h.guid);
        }
        Ok(node_guid(our_device(dev)?))
    })
}

/// `ibv_get_device_index`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    guard("ibv_get_device_index", Conv::MinusOne, || {
        if hosted::is_device(dev).is_some() {
            return Ok(0);
        }
        our_device(dev).map(|_| 0)
    })
}

/// `ibv_open_device`: starts the process's NIC on the first open.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    guard("ibv_open_device", Conv::Null, || {
        if let Some(r) = hosted::verbs::open_device(dev) {
            return r;
        }
        let d = our_device(dev)?;
        // The NIC's threads start here (and the context's interrupt
        // thread): without the program's signals.
        let (nic, ctx) = crate::events::without_signals(|| {
            let nic = ProcessNic::acquire(&d.config).map_err(|e| e.errno())?;
            let cfg = ProviderConfig::from_env().map_err(|e| e.errno())?;
            let ctx = Context::with_config(nic.nic().clone(), cfg).map_err(|e| e.errno())?;
            Ok::<_, c_int>((nic, ctx))
        })?;
        // SAFETY: verbs_context is function pointers (None when zero),
        // integers, a pthread mutex (all-zero is PTHREAD_MUTEX_INITIALIZER
        // on glibc) and NULL pointers: zero is a valid empty value.
        let mut vctx: verbs_context = unsafe { core::mem::zeroed() };
        vctx.sz = core::mem::size_of::<verbs_context>();
        vctx.query_port = Some(query_port_ex);
        vctx.create_qp_ex = Some(crate::qp_ex::create_qp_ex);
        vctx.query_device_ex = Some(query_device_ex);
        vctx.create_cq_ex = Some(crate::cq_ex::create_cq_ex);
        vctx.create_srq_ex = Some(crate::srq::create_srq_ex);
        vctx.query_rt_values = Some(query_rt_values);
        vctx.alloc_td = Some(crate::pd::alloc_td);
        vctx.dealloc_td = Some(crate::pd::dealloc_td);
        vctx.alloc_parent_domain = Some(crate::pd::alloc_parent_domain);
        let c = &mut vctx.context;
        c.device = dev;
        c.ops.poll_cq = Some(CQ_OPS.poll_cq);
        c.ops.req_notify_cq = Some(CQ_OPS.req_notify_cq);
        c.ops.post_send = Some(QP_OPS.post_send);
        c.ops.post_recv = Some(QP_OPS.post_recv);
        c.ops.post_srq_recv = Some(crate::srq::post_srq_recv);
        let async_events = Queue::new()?;
        c.cmd_fd = -1;
        c.async_fd = async_events.fd.raw();
        c.num_comp_vectors = 1;
        // __VERBS_ABI_IS_EXTENDED: a verbs_context precedes this context.
        c.abi_compat = usize::MAX as *mut c_void;
        let dispatcher = Dispatcher::start(ctx.clone(), Arc::new(Handles))?;
        crate::stats::opened(nic.nic());
        let obj = Box::new(CContext {
            vctx,
            dispatcher: Some(dispatcher),
            ctx,
            nic,
            async_events,
        });
        let h = handles::register(obj);
        events::lock(&ROUTER).contexts.insert(h as usize);
        Ok(h)
    })
}

/// `ibv_get_async_event`: waits for the context's next async event (EAGAIN
/// at once if `async_fd` was made non-blocking and none is there).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_async_event(
    context_: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard("ibv_get_async_event", Conv::MinusOne, || {
        if let Some(r) = hosted::verbs::get_async_event(context_, event) {
            return r;
        }
        let c = context(context_)?;
        if event.is_null() {
            return Err(EINVAL);
        }
        let e = c.async_events.pop()?;
        // SAFETY: checked non-NULL; the caller passes an ibv_async_event.
        unsafe { event.write(e.0) };
        Ok(0)
    })
}

/// `ibv_ack_async_event`: nothing waits on async acknowledgements here.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    guard("ibv_ack_async_event", Conv::Abort, || {
        let _ = event;
        Ok(())
    })
}

/// `ibv_close_device`. Objects still open in the context keep it alive on
/// the Rust side until they are destroyed, as the kernel keeps a ucontext.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    guard("ibv_close_device", Conv::Errno, || {
        if let Some(r) = hosted::verbs::close_device(context) {
            return r;
        }
        let c = handles::take::<CContext>(context)?;
        events::lock(&ROUTER).contexts.remove(&(context as usize));
        crate::stats::closing(c.nic.nic());
        drop(c);
        Ok(0)
    })
}

/// `ibv_query_device`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_device(
    context_: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    guard("ibv_query_device", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::query_device(context_, device_attr) {
            return r;
        }
        let c = context(context_)?;
        if device_attr.is_null() {
            return Err(EINVAL);
        }
        let a = device_attr_of(&c.ctx, node_guid(device()?));
        // SAFETY: checked non-NULL; the caller passes a whole ibv_device_attr.
        unsafe { device_attr.write(a) };
        Ok(0)
    })
}

/// `ibv_query_rt_values_ex`: the device clock now (IBV_VALUES_MASK_RAW_CLOCK),
/// in ticks in `tv_nsec` with `tv_sec` 0, as mlx5 reports it. Other bits
/// are EINVAL.
unsafe extern "C" fn query_rt_values(
    context_: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    guard("ibv_query_rt_values_ex", Conv::Errno, || {
        let c = crate::ctx::context(context_)?;
        // SAFETY: the caller's struct; NULL is refused.
        let v = unsafe { values.as_mut() }.ok_or(EINVAL)?;
        if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
            return Err(EINVAL);
        }
        let mut done = 0;
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            let epoch = c.ctx.wallclock_ns(0).ok_or(libc::EOPNOTSUPP)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            let ns = u128::from(now.saturating_sub(epoch));
            let ticks = ns * u128::from(doorbell_hif::CORE_CLOCK_KHZ) / 1_000_000;
            v.raw_clock.tv_sec = 0;
            v.raw_clock.tv_nsec = i64::try_from(ticks).unwrap_or(i64::MAX) as _;
            done |= IBV_VALUES_MASK_RAW_CLOCK;
        }
        v.comp_mask = done;
        Ok(0)
    })
}

/// `verbs_context.query_device_ex`: [`device_attr_ex_of`], written no
/// further than the caller's `attr_size`.
unsafe extern "C" fn query_device_ex(
    context_: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
) -> c_int {
    guard("ibv_query_device_ex", Conv::Errno, || {
        // SAFETY: NULL or the caller's input struct.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return Err(EINVAL);
        }
        let base = core::mem::size_of::<ibv_device_attr>();
        if attr.is_null() || attr_size < base {
            return Err(EINVAL);
        }
        let a = device_attr_ex_of(&context(context_)?.ctx, node_guid(device()?));
        let n = attr_size.min(core::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct has attr_size bytes; n <= attr_size.
        unsafe {
            core::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&a).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        Ok(0)
    })
}

/// `ibv_query_port@IBVERBS_1.1`: writes the 48-byte compat struct only.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_port(
    context_: *mut ibv_context,
    port_num: u8,
    port_attr_: *mut _compat_ibv_port_attr,
) -> c_int {
    guard("ibv_query_port", Conv::Errno, || {
        if let Some(r) = hosted::verbs::query_port_compat(context_, port_num, port_attr_) {
            return r;
        }
        let a = port_attr(&context(context_)?.ctx, port_num)?;
        if port_attr_.is_null() {
            return Err(EINVAL);
        }
        let n = core::mem::size_of::<_compat_ibv_port_attr>();
        // SAFETY: the first 48 bytes of ibv_port_attr are the compat
        // struct's fields (checked by the layout test); the caller gives 48.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&a).cast::<u8>(),
                port_attr_.cast::<u8>(),
                n,
            )
        };
        Ok(0)
    })
}

/// `verbs_context.query_port`: the inline `ibv_query_port`, with the size
/// of the caller's struct (52 with v44 headers, 56 with later ones).
unsafe extern "C" fn query_port_ex(
    context_: *mut ibv_context,
    port_num: u8,
    port_attr_: *mut ibv_port_attr,
    port_attr_len: size_t,
) -> c_int {
    guard("ibv_query_port", Conv::Errno, || {
        let a = port_attr(&context(context_)?.ctx, port_num)?;
        if port_attr_.is_null() {
            return Err(EINVAL);
        }
        let ours = core::mem::size_of::<ibv_port_attr>();
        // SAFETY: the caller's struct has `port_attr_len` bytes; we write
        // at most that many, zeroing what we do not know past ours.
        unsafe {
            let dst = port_attr_.cast::<u8>();
            core::ptr::write_bytes(dst, 0, port_attr_len);
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&a).cast::<u8>(),
                dst,
                ours.min(port_attr_len),
            );
        }
        Ok(0)
    })
}

/// `ibv_query_gid`: index 0 is the port's IPv4-mapped address; the other
/// entries of the table read as zero.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_gid(
    context_: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard("ibv_query_gid", Conv::MinusOne, || {
        let any = any_context(context_)?;
        let c = any.ctx()?;
        let len = c.query_port().gid_tbl_len;
        if port_num != 1 || index < 0 || index as u32 >= len || gid.is_null() {
            return Err(EINVAL);
        }
        let raw = c.query_gid(index as u32).unwrap_or([0; 16]);
        // SAFETY: checked non-NULL; ibv_gid is 16 bytes.
        unsafe { gid.cast::<[u8; 16]>().write(raw) };
        Ok(0)
    })
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34): RoCE v2 for every entry.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_gid_type(
    context_: *mut ibv_context,
    port_num: u8,
    index: core::ffi::c_uint,
    type_: *mut ibv_gid_type_sysfs,
) -> c_int {
    guard("ibv_query_gid_type", Conv::MinusOne, || {
        let any = any_context(context_)?;
        let c = any.ctx()?;
        if port_num != 1 || index >= c.query_port().gid_tbl_len || type_.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL.
        unsafe { type_.write(1) }; // IBV_GID_TYPE_SYSFS_ROCE_V2
        Ok(0)
    })
}

fn gid_entry(c: &Context, index: u32) -> Option<ibv_gid_entry> {
    let gid = c.query_gid(index)?;
    // SAFETY: ibv_gid_entry is plain data.
    let mut e: ibv_gid_entry = unsafe { core::mem::zeroed() };
    // SAFETY: ibv_gid is a 16-byte union of byte views.
    unsafe {
        core::ptr::from_mut(&mut e.gid)
            .cast::<[u8; 16]>()
            .write(gid)
    };
    e.gid_index = index;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    e.ndev_ifindex = 1;
    Some(e)
}

/// `_ibv_query_gid_ex` (the inline `ibv_query_gid_ex`): ENODATA for an
/// empty entry.
#[unsafe(no_mangle)]
pub extern "C" fn _ibv_query_gid_ex(
    context_: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: size_t,
) -> c_int {
    guard("_ibv_query_gid_ex", Conv::Errno, || {
        let any = any_context(context_)?;
        let c = any.ctx()?;
        if flags != 0 || entry.is_null() || entry_size < core::mem::size_of::<ibv_gid_entry>() {
            return Err(EINVAL);
        }
        if port_num != 1 || gid_index >= c.query_port().gid_tbl_len {
            return Err(EINVAL);
        }
        let e = gid_entry(c, gid_index).ok_or(ENODATA)?;
        // SAFETY: checked non-NULL and large enough.
        unsafe { entry.write(e) };
        Ok(0)
    })
}

/// `_ibv_query_gid_table`: the valid entries, as many as fit.
#[unsafe(no_mangle)]
pub extern "C" fn _ibv_query_gid_table(
    context_: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: size_t,
    flags: u32,
    entry_size: size_t,
) -> libc::ssize_t {
    guard("_ibv_query_gid_table", Conv::NegErrno, || {
        let any = any_context(context_)?;
        let c = any.ctx()?;
        if flags != 0 || entry_size < core::mem::size_of::<ibv_gid_entry>() {
            return Err(EINVAL);
        }
        let valid: Vec<ibv_gid_entry> = (0..c.query_port().gid_tbl_len)
            .filter_map(|i| gid_entry(c, i))
            .collect();
        if valid.len() > max_entries {
            return Err(EINVAL);
        }
        if !valid.is_empty() && entries.is_null() {
            return Err(EINVAL);
        }
        for (i, e) in valid.iter().enumerate() {
            // SAFETY: the caller's array holds max_entries entries of
            // entry_size bytes; i < valid.len() <= max_entries.
            unsafe {
                entries
                    .cast::<u8>()
                    .add(i * entry_size)
                    .cast::<ibv_gid_entry>()
                    .write_unaligned(*e)
            };
        }
        Ok(valid.len() as libc::ssize_t)
    })
}

/// `ibv_query_pkey`: the one entry is the default P_Key.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_pkey(
    context_: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard("ibv_query_pkey", Conv::MinusOne, || {
        any_context(context_)?;
        if port_num != 1 || index != 0 || pkey.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL.
        unsafe { pkey.write(0xffff_u16.to_be()) };
        Ok(0)
    })
}

/// `ibv_get_pkey_index`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_pkey_index(context_: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
    guard("ibv_get_pkey_index", Conv::MinusOne, || {
        any_context(context_)?;
        if port_num == 1 && u16::from_be(pkey) | 0x8000 == 0xffff {
            Ok(0)
        } else {
            Err(libc::ENOENT)
        }
    })
}
