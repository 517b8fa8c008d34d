//! What the device reports of itself and its port, as the verbs structs
//! carry it: answered alike for this library's contexts and for a hosted
//! provider's (through its `ibv_cmd_query_*`).

#![allow(unsafe_code)]

use core::ffi::c_int;

use doorbell_verbs::Context;
use libc::EINVAL;

use crate::abi::consts::*;
use crate::abi::*;

/// The extended attributes (`ibv_query_device_ex`): the legacy ones, and
/// of the extended ones the port count and the clock (doorbell has no ODP,
/// TSO, RSS, tag matching, device memory or PCIe atomics: those read as
/// zero).
pub(crate) fn device_attr_ex_of(ctx: &Context, guid: u64) -> ibv_device_attr_ex {
    // SAFETY: ibv_device_attr_ex is plain data; zero is its empty value.
    let mut a: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    a.orig_attr = device_attr_of(ctx, guid);
    a.phys_port_cnt_ex = u32::from(a.orig_attr.phys_port_cnt);
    a.device_cap_flags_ex = u64::from(a.orig_attr.device_cap_flags);
    // CQE timestamps: 63 bits of the device's clock, as mlx5 reports.
    a.completion_timestamp_mask = u64::MAX >> 1;
    a.hca_core_clock = doorbell_hif::CORE_CLOCK_KHZ;
    a
}

/// The device's attributes as `ibv_query_device` reports them, for a
/// context's device with node GUID `guid`.
pub(crate) fn device_attr_of(ctx: &Context, guid: u64) -> ibv_device_attr {
    let caps = ctx.query_device().caps;
    let clamp = |v: u32| v.min(i32::MAX as u32) as c_int;
    // SAFETY: ibv_device_attr is plain data; zero is its empty value.
    let mut a: ibv_device_attr = unsafe { core::mem::zeroed() };
    crate::tables::copy_str(
        &mut a.fw_ver,
        concat!("doorbell ", env!("CARGO_PKG_VERSION")),
    );
    a.node_guid = guid;
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = caps.vendor_id;
    a.vendor_part_id = caps.vendor_part_id;
    a.max_qp = clamp(1 << caps.log_max_qp);
    a.max_qp_wr = clamp(caps.max_send_wqebb.min(caps.max_recv_wr));
    a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
    a.max_sge = clamp(caps.max_rq_desc_sz / 16);
    a.max_sge_rd = a.max_sge;
    a.max_cq = clamp(doorbell_types::Cqn::MAX);
    a.max_cqe = clamp(caps.max_cqe - 1);
    // The device's keys, less the two indices no key gets (0 and the
    // scatter terminator's) where the 24-bit index is what limits them.
    a.max_mr = clamp(caps.max_mkeys.min((1 << 24) - 2));
    a.max_pd = clamp(caps.max_pd);
    // SRQs as the device numbers them (1 to Srqn::MAX); a ring of at least
    // max_wr + 1 WQEs within max_recv_wr; a WQE of a next segment and data
    // segments within max_rq_desc_sz, as mlx5 reports them.
    a.max_srq = clamp(doorbell_types::Srqn::MAX);
    a.max_srq_wr = clamp(caps.max_recv_wr.saturating_sub(1));
    a.max_srq_sge = clamp((caps.max_rq_desc_sz / 16).saturating_sub(1));
    a.max_qp_rd_atom = c_int::from(caps.max_rd_atomic);
    a.max_res_rd_atom = a.max_qp_rd_atom * a.max_qp;
    a.max_qp_init_rd_atom = a.max_qp_rd_atom;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = c_int::MAX;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 16;
    a.phys_port_cnt = 1;
    a
}

fn mtu_enum(bytes: u32) -> ibv_mtu {
    match bytes {
        0..=256 => IBV_MTU_256,
        257..=512 => IBV_MTU_512,
        513..=1024 => IBV_MTU_1024,
        1025..=2048 => IBV_MTU_2048,
        _ => IBV_MTU_4096,
    }
}

pub(crate) fn port_attr(ctx: &Context, port: u8) -> Result<ibv_port_attr, c_int> {
    if port != 1 {
        return Err(EINVAL);
    }
    let p = ctx.query_port();
    // SAFETY: ibv_port_attr is plain data; zero is its empty value.
    let mut a: ibv_port_attr = unsafe { core::mem::zeroed() };
    a.state = if p.active { IBV_PORT_ACTIVE } else { 1 };
    a.max_mtu = mtu_enum(p.max_mtu);
    a.active_mtu = mtu_enum(p.active_mtu);
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.active_width = 2; // 4x
    a.active_speed = 32; // EDR, 25 Gb/s per lane
    // LinkUp, or Disabled for a link taken down.
    a.phys_state = if p.active { 5 } else { 3 };
    a.link_layer = if p.ethernet {
        IBV_LINK_LAYER_ETHERNET as u8
    } else {
        1
    };
    a.max_vl_num = 1;
    Ok(a)
}
