//! Compile-time checks of the sizes and offsets the reference measured.

#![allow(non_camel_case_types, non_snake_case)]

use core::mem::{offset_of, size_of};

use super::*;

// ---------------------------------------------------------------------------
// Compile-time checks against the sizes and offsets the reference measured
// (x86_64, v44 headers). tests/it/layout.rs checks every field against the
// installed header as well.

macro_rules! assert_layout {
    ($t:ty, $size:expr $(, $field:ident = $off:expr)* $(,)?) => {
        const _: () = assert!(size_of::<$t>() == $size);
        $(const _: () = assert!(offset_of!($t, $field) == $off);)*
    };
}

assert_layout!(ibv_gid, 16);
assert_layout!(ibv_global_route, 24, flow_label = 16, sgid_index = 20);
assert_layout!(ibv_ah_attr, 32, dlid = 24, is_global = 29, port_num = 30);
assert_layout!(
    ibv_device,
    664,
    node_type = 16,
    transport_type = 20,
    name = 24,
    dev_name = 88,
    dev_path = 152,
    ibdev_path = 408,
);
assert_layout!(verbs_device, 712, ops = 664);
assert_layout!(
    ibv_context_ops,
    256,
    poll_cq = 88,
    req_notify_cq = 96,
    post_srq_recv = 160
);
assert_layout!(ibv_context_ops, 256, post_send = 200, post_recv = 208);
assert_layout!(
    ibv_context,
    328,
    ops = 8,
    cmd_fd = 264,
    async_fd = 268,
    num_comp_vectors = 272,
    mutex = 280,
    abi_compat = 320,
);
assert_layout!(
    verbs_context,
    648,
    query_port = 0,
    alloc_parent_domain = 112,
    alloc_td = 128,
    create_cq_ex = 200,
    query_device_ex = 216,
    open_qp = 256,
    create_qp_ex = 264,
    create_srq_ex = 280,
    sz = 312,
    context = 320,
);
assert_layout!(ibv_pd, 16);
assert_layout!(ibv_td, 8);
assert_layout!(ibv_td_init_attr, 4);
assert_layout!(
    ibv_parent_domain_init_attr,
    48,
    comp_mask = 16,
    alloc = 24,
    free = 32,
    pd_context = 40
);
assert_layout!(ibv_mr, 48, lkey = 36, rkey = 40);
assert_layout!(
    ibv_cq,
    128,
    context = 0,
    channel = 8,
    cq_context = 16,
    cqe = 28
);
assert_layout!(
    ibv_cq_ex,
    288,
    status = 132,
    wr_id = 136,
    start_poll = 144,
    next_poll = 152,
    end_poll = 160,
    read_opcode = 168,
    read_completion_wallclock_ns = 280,
);
assert_layout!(ibv_qp, 160, qp_num = 52, state = 56, qp_type = 60);
assert_layout!(
    ibv_qp_ex,
    352,
    wr_id = 168,
    wr_flags = 176,
    wr_rdma_write = 224,
    wr_send = 240,
    wr_set_sge = 304,
    wr_start = 320,
    wr_complete = 328,
    wr_abort = 336,
);
assert_layout!(ibv_srq, 128);
assert_layout!(ibv_ah, 24);
assert_layout!(ibv_comp_channel, 16, fd = 8);
assert_layout!(
    ibv_wc,
    48,
    status = 8,
    opcode = 12,
    byte_len = 20,
    imm_data = 24,
    qp_num = 28,
    wc_flags = 36,
);
assert_layout!(ibv_sge, 16);
assert_layout!(
    ibv_send_wr,
    128,
    sg_list = 16,
    opcode = 28,
    send_flags = 32,
    imm_data = 36,
    wr = 40,
);
assert_layout!(ibv_recv_wr, 32);
assert_layout!(ibv_qp_attr, 144);
assert_layout!(ibv_qp_init_attr, 64);
assert_layout!(
    ibv_qp_init_attr_ex,
    136,
    comp_mask = 60,
    send_ops_flags = 128
);
assert_layout!(ibv_port_attr, 52, port_cap_flags2 = 48);
assert_layout!(_compat_ibv_port_attr, 48);
assert_layout!(ibv_device_attr, 232);
assert_layout!(ibv_device_attr_ex, 400, comp_mask = 232);
assert_layout!(ibv_async_event, 16, event_type = 8);
assert_layout!(ibv_srq_attr, 12);
assert_layout!(ibv_srq_init_attr, 24);
assert_layout!(ibv_mw, 32);
assert_layout!(ibv_gid_entry, 32);
