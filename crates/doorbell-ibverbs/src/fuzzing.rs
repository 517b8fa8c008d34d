//! The C entry points fed fuzzed arguments, for the `ibverbs_calls` fuzz
//! target (`doorbell-fuzzing`; feature `fuzzing`).
//!
//! A harness here, not in `doorbell-fuzzing`, because the fast path is
//! reached as C reaches it, through the context's op table, and calling a
//! C function pointer is `unsafe`, which this crate allows in its FFI
//! modules only.
//!
//! The calls keep to what the C ABI lets a program do: every object pointer
//! is one this harness got from the library (possibly destroyed since:
//! the library answers EINVAL for those), every buffer is one the harness
//! owns, and what the fuzzer chooses are the values: opcodes, flags,
//! lengths, keys, remote addresses, attribute masks, QP states and entry
//! counts. A panic that `guard` (module `boundary`) turns into EIO is
//! still a bug, so the harness panics itself when one was caught.

#![allow(unsafe_code)]

use core::ffi::{c_int, c_void};
use core::ptr::{addr_of_mut, null_mut};
use std::sync::OnceLock;

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::panics_caught;
use crate::cq::{ibv_create_cq, ibv_destroy_cq, ibv_resize_cq};
use crate::device::{
    ibv_free_device_list, ibv_get_device_list, ibv_open_device, ibv_query_gid, ibv_query_pkey,
    ibv_query_port,
};
use crate::pd::{ibv_alloc_pd, ibv_dealloc_pd, ibv_dereg_mr, ibv_reg_mr};
use crate::qp::{
    ibv_create_ah, ibv_create_qp, ibv_destroy_ah, ibv_destroy_qp, ibv_modify_qp, ibv_query_qp,
};

/// Steps [`ibverbs_calls`] runs at most.
pub const MAX_STEPS: usize = 32;

/// Bytes of the buffer the harness registers and posts from.
pub const BUF_LEN: usize = 1 << 16;

/// Entries of the completion array `ibv_poll_cq` is given.
const WC_LEN: usize = 16;

/// Reads choices from the front of the input, zeros past its end.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let n = N.min(self.0.len());
        a[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        a
    }
    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.array())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.array())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.array())
    }
}

/// The context every run uses (opening one starts the process's NIC, its
/// threads and its port), and the buffer every MR covers part of. Neither
/// is ever freed, so no DMA the device still has in flight can outlive
/// them.
struct Shared {
    ctx: *mut ibv_context,
    gid: ibv_gid,
    buf: *mut u8,
}

// SAFETY: the pointers are only passed to the library, which is
// thread-safe, and the buffer is only written by the library's device.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let mut n: c_int = 0;
        let list = ibv_get_device_list(&mut n);
        assert!(!list.is_null() && n == 1, "doorbell's device list");
        // SAFETY: the list holds n = 1 device and a NULL.
        let dev = unsafe { *list };
        let ctx = ibv_open_device(dev);
        ibv_free_device_list(list);
        assert!(!ctx.is_null(), "ibv_open_device");
        // SAFETY: ibv_gid is plain data; all-zero is a valid value.
        let mut gid: ibv_gid = unsafe { core::mem::zeroed() };
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0, "GID 0");
        let buf = Box::leak(vec![0u8; BUF_LEN].into_boxed_slice()).as_mut_ptr();
        Shared { ctx, gid, buf }
    })
}

/// The objects of one run.
struct Objects {
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qps: [*mut ibv_qp; 2],
    mrs: Vec<*mut ibv_mr>,
}

/// Target `ibverbs_calls`: a PD, a CQ, two RC QPs connected to each other
/// and an MR, made through the C ABI, then up to [`MAX_STEPS`] calls chosen
/// by the input (see the match in the body: post_send chains, post_recv,
/// poll_cq, req_notify_cq, modify_qp, query_qp, reg_mr / dereg_mr,
/// resize_cq, port / GID / P_Key queries, create_ah / destroy_ah, early
/// destroys), then every object is destroyed. Nothing may crash or panic.
pub fn ibverbs_calls(data: &[u8]) {
    let sh = shared();
    let mut input = Input(data);
    let panics = panics_caught();
    let cqe = c_int::from(input.u8() % 64) + 1;
    let Some(mut o) = setup(sh, cqe) else {
        panic!("the objects of a run could not be made");
    };
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        step(sh, &mut o, &mut input);
        assert_eq!(
            panics_caught(),
            panics,
            "a call panicked (and answered EIO)"
        );
    }
    teardown(o);
    assert_eq!(
        panics_caught(),
        panics,
        "a call panicked (and answered EIO)"
    );
}

fn setup(sh: &Shared, cqe: c_int) -> Option<Objects> {
    let pd = ibv_alloc_pd(sh.ctx);
    let cq = ibv_create_cq(sh.ctx, cqe, null_mut(), null_mut(), 0);
    if pd.is_null() || cq.is_null() {
        return None;
    }
    let mut init = ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        },
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    let qps = [ibv_create_qp(pd, &mut init), ibv_create_qp(pd, &mut init)];
    if qps.iter().any(|q| q.is_null()) {
        return None;
    }
    let access = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC;
    let mr = ibv_reg_mr(pd, sh.buf.cast::<c_void>(), BUF_LEN, access as c_int);
    if mr.is_null() {
        return None;
    }
    for (me, peer) in [(0, 1), (1, 0)] {
        // SAFETY: a live QP this run created.
        let dest = unsafe { (*qps[peer]).qp_num };
        if !connect(sh, qps[me], dest) {
            return None;
        }
    }
    Some(Objects {
        pd,
        cq,
        qps,
        mrs: vec![mr],
    })
}

/// An all-zero QP attribute set.
fn zero_attr() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain data; all-zero is a valid value.
    unsafe { core::mem::zeroed() }
}

/// RESET -> INIT -> RTR -> RTS, to `dest` on this host.
fn connect(sh: &Shared, qp: *mut ibv_qp, dest: u32) -> bool {
    let mut a = zero_attr();
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    let init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    if ibv_modify_qp(qp, &mut a, init as c_int) != 0 {
        return false;
    }
    let mut a = zero_attr();
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid = sh.gid;
    a.ah_attr.grh.hop_limit = 64;
    let rtr = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;
    if ibv_modify_qp(qp, &mut a, rtr as c_int) != 0 {
        return false;
    }
    let mut a = zero_attr();
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    a.timeout = 8;
    a.retry_cnt = 1;
    a.rnr_retry = 1;
    a.max_rd_atomic = 1;
    let rts = IBV_QP_STATE
        | IBV_QP_SQ_PSN
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_MAX_QP_RD_ATOMIC;
    ibv_modify_qp(qp, &mut a, rts as c_int) == 0
}

/// An SGE the fuzzer chooses. With `inside`, its bytes lie in the shared
/// buffer (the library reads inline data from the address itself); else
/// the address may be anything, since only the device, which checks it
/// against the key, reaches it.
fn sge(sh: &Shared, o: &Objects, input: &mut Input<'_>, inside: bool) -> ibv_sge {
    let choice = input.u8();
    let off = usize::from(input.u16()) % BUF_LEN;
    let mut length = u32::from(input.u16());
    let addr = if inside || choice & 1 == 0 {
        length = length.min((BUF_LEN - off) as u32);
        sh.buf as u64 + off as u64
    } else {
        input.u64()
    };
    let lkey = match (choice >> 1) & 3 {
        0 | 1 => o
            .mrs
            .first()
            // SAFETY: a live MR this run registered (the first is never
            // deregistered before teardown).
            .map_or(0, |&mr| unsafe { (*mr).lkey }),
        2 => 0,
        _ => input.u32(),
    };
    ibv_sge { addr, length, lkey }
}

fn remote(sh: &Shared, o: &Objects, input: &mut Input<'_>) -> (u64, u32) {
    let choice = input.u8();
    let addr = if choice & 1 == 0 {
        sh.buf as u64 + u64::from(input.u16())
    } else {
        input.u64()
    };
    let rkey = if choice & 2 == 0 {
        // SAFETY: as in sge().
        o.mrs.first().map_or(0, |&mr| unsafe { (*mr).rkey })
    } else {
        input.u32()
    };
    (addr, rkey)
}

fn qp_of(o: &Objects, input: &mut Input<'_>) -> *mut ibv_qp {
    o.qps[usize::from(input.u8() & 1)]
}

#[allow(clippy::too_many_lines)]
fn step(sh: &Shared, o: &mut Objects, input: &mut Input<'_>) {
    // SAFETY: the context is open for the life of the process; its op
    // table is written once, by ibv_open_device.
    let ops = unsafe { &(*sh.ctx).ops };
    match input.u8() % 14 {
        0 => {
            // ibv_post_send: a chain of one to three WRs.
            let qp = qp_of(o, input);
            let n = usize::from(input.u8() % 3) + 1;
            let mut sges = [[ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; 4]; 3];
            // SAFETY: ibv_send_wr is plain data and pointers; all-zero is a
            // valid (empty) WR.
            let mut wrs: [ibv_send_wr; 3] = unsafe { core::mem::zeroed() };
            for k in 0..n {
                let opcode = match input.u8() {
                    b @ 0..=0x7f => u32::from(b % 7),
                    _ => input.u32(),
                };
                let flags = u32::from(input.u8());
                let inline = flags & IBV_SEND_INLINE != 0;
                let num_sge = usize::from(input.u8() % 5);
                for s in sges[k].iter_mut().take(num_sge) {
                    *s = sge(sh, o, input, inline);
                }
                let (raddr, rkey) = remote(sh, o, input);
                let wr = &mut wrs[k];
                wr.wr_id = k as u64;
                wr.sg_list = sges[k].as_mut_ptr();
                wr.num_sge = num_sge as c_int;
                wr.opcode = opcode;
                wr.send_flags = flags;
                wr.imm_data = input.u32();
                if opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD {
                    wr.wr.atomic = ibv_send_wr_atomic {
                        remote_addr: raddr & !7,
                        compare_add: input.u64(),
                        swap: input.u64(),
                        rkey,
                    };
                } else {
                    wr.wr.rdma = ibv_send_wr_rdma {
                        remote_addr: raddr,
                        rkey,
                    };
                }
            }
            for k in 1..n {
                let next = addr_of_mut!(wrs[k]);
                wrs[k - 1].next = next;
            }
            let mut bad: *mut ibv_send_wr = null_mut();
            if let Some(post) = ops.post_send {
                // SAFETY: a QP of this context (live or destroyed: the
                // library checks), a chain of valid WRs whose SGEs and
                // inline data lie in memory the harness owns, and a place
                // for bad_wr.
                let _ = unsafe { post(qp, wrs.as_mut_ptr(), &mut bad) };
            }
        }
        1 => {
            // ibv_post_recv: one or two WRs.
            let qp = qp_of(o, input);
            let n = usize::from(input.u8() & 1) + 1;
            let mut sges = [[ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; 4]; 2];
            let mut wrs = [ibv_recv_wr {
                wr_id: 0,
                next: null_mut(),
                sg_list: null_mut(),
                num_sge: 0,
            }; 2];
            for k in 0..n {
                let num_sge = usize::from(input.u8() % 5);
                for s in sges[k].iter_mut().take(num_sge) {
                    *s = sge(sh, o, input, false);
                }
                wrs[k].wr_id = 100 + k as u64;
                wrs[k].sg_list = sges[k].as_mut_ptr();
                wrs[k].num_sge = num_sge as c_int;
            }
            if n == 2 {
                let next = addr_of_mut!(wrs[1]);
                wrs[0].next = next;
            }
            let mut bad: *mut ibv_recv_wr = null_mut();
            if let Some(post) = ops.post_recv {
                // SAFETY: as for post_send.
                let _ = unsafe { post(qp, wrs.as_mut_ptr(), &mut bad) };
            }
        }
        2 => {
            // ibv_poll_cq with -1 ..= 16 entries into an array of 16.
            let n = c_int::from(input.u8() % (WC_LEN as u8 + 2)) - 1;
            // SAFETY: ibv_wc is plain data; all-zero is a valid value.
            let mut wc: [ibv_wc; WC_LEN] = unsafe { core::mem::zeroed() };
            if let Some(poll) = ops.poll_cq {
                // SAFETY: a CQ of this context and room for 16 entries.
                let got = unsafe { poll(o.cq, n, wc.as_mut_ptr()) };
                assert!(got <= n.max(0), "ibv_poll_cq returned {got} of {n}");
            }
        }
        3 => {
            let solicited = c_int::from(input.u8());
            if let Some(arm) = ops.req_notify_cq {
                // SAFETY: a CQ of this context.
                let _ = unsafe { arm(o.cq, solicited) };
            }
        }
        4 => {
            // ibv_modify_qp with any mask and values.
            let qp = qp_of(o, input);
            let mut a = zero_attr();
            let mask = input.u32() as c_int;
            a.qp_state = u32::from(input.u8() % 8);
            a.cur_qp_state = u32::from(input.u8() % 8);
            a.path_mtu = u32::from(input.u8() % 7);
            a.qkey = input.u32();
            a.rq_psn = input.u32();
            a.sq_psn = input.u32();
            a.dest_qp_num = input.u32();
            a.qp_access_flags = input.u32();
            a.pkey_index = input.u16();
            a.max_rd_atomic = input.u8();
            a.max_dest_rd_atomic = input.u8();
            a.min_rnr_timer = input.u8();
            a.port_num = input.u8();
            a.timeout = input.u8();
            a.retry_cnt = input.u8();
            a.rnr_retry = input.u8();
            a.ah_attr.is_global = input.u8();
            a.ah_attr.port_num = input.u8();
            a.ah_attr.grh.sgid_index = input.u8();
            a.ah_attr.grh.hop_limit = input.u8();
            a.ah_attr.grh.dgid = if input.u8() & 1 == 0 {
                sh.gid
            } else {
                ibv_gid { raw: input.array() }
            };
            let _ = ibv_modify_qp(qp, &mut a, mask);
        }
        5 => {
            let qp = qp_of(o, input);
            let mut a = zero_attr();
            // SAFETY: ibv_qp_init_attr is plain data and pointers; all-zero
            // is a valid value.
            let mut init: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
            let _ = ibv_query_qp(qp, &mut a, input.u32() as c_int, &mut init);
        }
        6 => {
            // ibv_reg_mr over part of the buffer, with any access flags.
            if o.mrs.len() < 8 {
                let off = usize::from(input.u16()) % BUF_LEN;
                let len = usize::from(input.u16()).min(BUF_LEN - off);
                let access = input.u32() as c_int;
                // SAFETY: off < BUF_LEN, inside the shared buffer.
                let addr = unsafe { sh.buf.add(off) }.cast::<c_void>();
                let mr = ibv_reg_mr(o.pd, addr, len, access);
                if !mr.is_null() {
                    o.mrs.push(mr);
                }
            }
        }
        7 => {
            // ibv_dereg_mr of one made by step 6 (the first stays).
            if o.mrs.len() > 1 {
                let k = 1 + usize::from(input.u8()) % (o.mrs.len() - 1);
                let mr = o.mrs.remove(k);
                let _ = ibv_dereg_mr(mr);
            }
        }
        8 => {
            let cqe = c_int::from(input.u16() as i16);
            let _ = ibv_resize_cq(o.cq, cqe);
        }
        9 => {
            let port = input.u8();
            let index = c_int::from(input.u16() as i16);
            // SAFETY: plain data; all-zero is a valid value.
            let mut attr: _compat_ibv_port_attr = unsafe { core::mem::zeroed() };
            let _ = ibv_query_port(sh.ctx, port, &mut attr);
            // SAFETY: as above.
            let mut gid: ibv_gid = unsafe { core::mem::zeroed() };
            let _ = ibv_query_gid(sh.ctx, port, index, &mut gid);
            let mut pkey = 0u16;
            let _ = ibv_query_pkey(sh.ctx, port, index, &mut pkey);
        }
        10 => {
            // ibv_create_ah with any attributes, destroyed at once.
            // SAFETY: plain data; all-zero is a valid value.
            let mut a: ibv_ah_attr = unsafe { core::mem::zeroed() };
            a.is_global = input.u8();
            a.port_num = input.u8();
            a.sl = input.u8();
            a.static_rate = input.u8();
            a.grh.sgid_index = input.u8();
            a.grh.hop_limit = input.u8();
            a.grh.traffic_class = input.u8();
            a.grh.flow_label = input.u32();
            a.grh.dgid = if input.u8() & 1 == 0 {
                sh.gid
            } else {
                ibv_gid { raw: input.array() }
            };
            let ah = ibv_create_ah(o.pd, &mut a);
            if !ah.is_null() {
                assert_eq!(ibv_destroy_ah(ah), 0, "ibv_destroy_ah");
            }
        }
        11 => {
            // Destroys that the library must refuse while in use.
            let _ = match input.u8() & 1 {
                0 => ibv_dealloc_pd(o.pd),
                _ => ibv_destroy_cq(o.cq),
            };
        }
        12 => {
            // NULL where the functions document it: a NULL WR list posts
            // nothing, and ibv_query_qp's attribute pointers are checked.
            let qp = qp_of(o, input);
            let mut bad: *mut ibv_send_wr = null_mut();
            if let Some(post) = ops.post_send {
                // SAFETY: a QP of this context; a NULL list.
                let _ = unsafe { post(qp, null_mut(), &mut bad) };
            }
            let _ = ibv_query_qp(qp, null_mut(), 0, null_mut());
            let _ = ibv_modify_qp(qp, null_mut(), 0);
        }
        _ => {
            // Give the NIC a moment to answer what was posted.
            std::thread::yield_now();
        }
    }
}

fn teardown(o: Objects) {
    // QPs first (they hold the CQ and the PD), then MRs, CQ, PD.
    for qp in o.qps {
        let _ = ibv_destroy_qp(qp);
    }
    for mr in o.mrs {
        let _ = ibv_dereg_mr(mr);
    }
    assert_eq!(ibv_destroy_cq(o.cq), 0, "ibv_destroy_cq");
    assert_eq!(ibv_dealloc_pd(o.pd), 0, "ibv_dealloc_pd");
}
