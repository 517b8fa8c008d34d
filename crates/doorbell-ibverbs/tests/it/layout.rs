//! The `abi` types against the installed `<infiniband/verbs.h>`: a C probe
//! (see [`crate::c_probe`]) prints `sizeof`, `_Alignof`, and every declared
//! field's `offsetof` and `sizeof`; the Rust side gives `size_of`, `align_of`,
//! `offset_of!` and the field type's size. All mismatches are reported
//! together. Anonymous C structs and unions are named through `__typeof__`.
//! Not checked here (not in the installed headers): `verbs_device` (its
//! `ops` at 664 is asserted at compile time) and the union
//! `ibv_send_wr_mw_tso` (its two members are checked).

#![allow(unsafe_code)]

use core::mem::{align_of, offset_of, size_of};

use ibverbs::abi::*;

use crate::c_probe::Print;

struct Field {
    rust: &'static str,
    c: &'static str,
    offset: usize,
    size: usize,
}

struct Layout {
    rust: &'static str,
    c: &'static str,
    c_size: Option<&'static str>,
    size: usize,
    align: usize,
    fields: Vec<Field>,
}

/// The size of the field that `project` names; the closure is never called.
fn size_of_field<T, F>(_project: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! field_size {
    (struct, $t:ident, $f:ident) => {
        size_of_field(|s: &$t| &s.$f)
    };
    (union, $t:ident, $f:ident) => {
        size_of_field(|s: &$t| {
            // SAFETY: the closure is never called; only its type is used.
            unsafe { &s.$f }
        })
    };
}

macro_rules! layouts {
    ($(
        $kind:ident $t:ident = $c:literal $(size $cs:literal)? { $($f:ident $(= $cf:literal)?),* $(,)? }
    )*) => {
        vec![$(Layout {
            rust: stringify!($t),
            c: $c,
            c_size: None $(.or(Some($cs)))?,
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$(Field {
                rust: stringify!($f),
                c: layouts!(@c $f $($cf)?),
                offset: offset_of!($t, $f),
                size: field_size!($kind, $t, $f),
            }),*],
        }),*]
    };
    (@c $f:ident) => { stringify!($f) };
    (@c $f:ident $cf:literal) => { $cf };
}

fn all() -> Vec<Layout> {
    layouts! {
    union ibv_gid = "union ibv_gid" { raw, global }
    struct ibv_gid_global = "__typeof__(((union ibv_gid *)0)->global)" { subnet_prefix, interface_id }
    struct ibv_global_route = "struct ibv_global_route" { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    struct ibv_grh = "struct ibv_grh" { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
    struct ibv_ah_attr = "struct ibv_ah_attr" { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    struct ibv_gid_entry = "struct ibv_gid_entry" { gid, gid_index, port_num, gid_type, ndev_ifindex }
    struct _ibv_device_ops = "struct _ibv_device_ops" { _dummy1, _dummy2 }
    struct ibv_device = "struct ibv_device" { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    struct ibv_context_ops = "struct ibv_context_ops" { _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd, _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw, _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq, _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq, _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp, _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah, _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event }
    struct ibv_context = "struct ibv_context" { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
    struct verbs_context = "struct verbs_context" { query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow, create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm, modify_flow_action_esp, destroy_flow_action, create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq, post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq, create_wq, query_rt_values, create_cq_ex, priv_ = "priv", query_device_ex, ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context }
    struct ibv_device_attr = "struct ibv_device_attr" { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt }
    struct ibv_odp_caps_per_transport = "__typeof__(((struct ibv_odp_caps *)0)->per_transport_caps)" { rc_odp_caps, uc_odp_caps, ud_odp_caps }
    struct ibv_odp_caps = "struct ibv_odp_caps" { general_caps, per_transport_caps }
    struct ibv_tso_caps = "struct ibv_tso_caps" { max_tso, supported_qpts }
    struct ibv_rss_caps = "struct ibv_rss_caps" { supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function }
    struct ibv_packet_pacing_caps = "struct ibv_packet_pacing_caps" { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
    struct ibv_tm_caps = "struct ibv_tm_caps" { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
    struct ibv_cq_moderation_caps = "struct ibv_cq_moderation_caps" { max_cq_count, max_cq_period }
    struct ibv_pci_atomic_caps = "struct ibv_pci_atomic_caps" { fetch_add, swap, compare_swap }
    struct ibv_device_attr_ex = "struct ibv_device_attr_ex" { orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex }
    struct ibv_query_device_ex_input = "struct ibv_query_device_ex_input" { comp_mask }
    struct ibv_port_attr = "struct ibv_port_attr" { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2 }
    struct _compat_ibv_port_attr = "struct ibv_port_attr" size "offsetof(struct ibv_port_attr, port_cap_flags2)" { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags }
    struct ibv_qp_cap = "struct ibv_qp_cap" { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    struct ibv_qp_attr = "struct ibv_qp_attr" { qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit }
    struct ibv_qp_init_attr = "struct ibv_qp_init_attr" { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    struct ibv_rx_hash_conf = "struct ibv_rx_hash_conf" { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
    struct ibv_qp_init_attr_ex = "struct ibv_qp_init_attr_ex" { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags }
    struct ibv_qp_open_attr = "struct ibv_qp_open_attr" { comp_mask, qp_num, xrcd, qp_context, qp_type }
    struct ibv_srq_attr = "struct ibv_srq_attr" { max_wr, max_sge, srq_limit }
    struct ibv_srq_init_attr = "struct ibv_srq_init_attr" { srq_context, attr }
    struct ibv_tm_cap = "struct ibv_tm_cap" { max_num_tags, max_ops }
    struct ibv_srq_init_attr_ex = "struct ibv_srq_init_attr_ex" { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
    struct ibv_cq_init_attr_ex = "struct ibv_cq_init_attr_ex" { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain }
    struct ibv_poll_cq_attr = "struct ibv_poll_cq_attr" { comp_mask }
    struct ibv_moderate_cq = "struct ibv_moderate_cq" { cq_count, cq_period }
    struct ibv_modify_cq_attr = "struct ibv_modify_cq_attr" { attr_mask, moderate }
    struct ibv_values_ex = "struct ibv_values_ex" { comp_mask, raw_clock }
    struct ibv_alloc_dm_attr = "struct ibv_alloc_dm_attr" { length, log_align_req, comp_mask }
    struct ibv_qp_rate_limit_attr = "struct ibv_qp_rate_limit_attr" { rate_limit, max_burst_sz, typical_pkt_sz, comp_mask }
    struct ibv_td_init_attr = "struct ibv_td_init_attr" { comp_mask }
    struct ibv_parent_domain_init_attr = "struct ibv_parent_domain_init_attr" { pd, td, comp_mask, alloc, free, pd_context }
    struct ibv_flow_attr = "struct ibv_flow_attr" { comp_mask, type_ = "type", size, priority, num_of_specs, port, flags }
    struct ibv_ece = "struct ibv_ece" { vendor_id, options, comp_mask }
    struct ibv_pd = "struct ibv_pd" { context, handle }
    struct ibv_td = "struct ibv_td" { context }
    struct ibv_xrcd = "struct ibv_xrcd" { context }
    struct ibv_mr = "struct ibv_mr" { context, pd, addr, length, handle, lkey, rkey }
    struct ibv_mw = "struct ibv_mw" { context, pd, rkey, handle, type_ = "type" }
    struct ibv_mw_bind_info = "struct ibv_mw_bind_info" { mr, addr, length, mw_access_flags }
    struct ibv_mw_bind = "struct ibv_mw_bind" { wr_id, send_flags, bind_info }
    struct ibv_dm = "struct ibv_dm" { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle }
    struct ibv_comp_channel = "struct ibv_comp_channel" { context, fd, refcnt }
    struct ibv_cq = "struct ibv_cq" { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed }
    struct ibv_cq_ex = "struct ibv_cq_ex" { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns }
    struct ibv_srq = "struct ibv_srq" { context, srq_context, pd, handle, mutex, cond, events_completed }
    struct ibv_wq = "struct ibv_wq" { context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond, events_completed, comp_mask }
    struct ibv_rwq_ind_table = "struct ibv_rwq_ind_table" { context, ind_tbl_handle, ind_tbl_num, comp_mask }
    struct ibv_flow = "struct ibv_flow" { comp_mask, context, handle }
    struct ibv_ah = "struct ibv_ah" { context, pd, handle }
    struct ibv_qp = "struct ibv_qp" { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed }
    struct ibv_qp_ex = "struct ibv_qp_ex" { qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write }
    struct ibv_data_buf = "struct ibv_data_buf" { addr, length }
    struct ibv_sge = "struct ibv_sge" { addr, length, lkey }
    struct ibv_send_wr_rdma = "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)" { remote_addr, rkey }
    struct ibv_send_wr_atomic = "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)" { remote_addr, compare_add, swap, rkey }
    struct ibv_send_wr_ud = "__typeof__(((struct ibv_send_wr *)0)->wr.ud)" { ah, remote_qpn, remote_qkey }
    union ibv_send_wr_wr = "__typeof__(((struct ibv_send_wr *)0)->wr)" { rdma, atomic, ud }
    struct ibv_send_wr_xrc = "__typeof__(((struct ibv_send_wr *)0)->qp_type.xrc)" { remote_srqn }
    union ibv_send_wr_qp_type = "__typeof__(((struct ibv_send_wr *)0)->qp_type)" { xrc }
    struct ibv_send_wr_bind_mw = "__typeof__(((struct ibv_send_wr *)0)->bind_mw)" { mw, rkey, bind_info }
    struct ibv_send_wr_tso = "__typeof__(((struct ibv_send_wr *)0)->tso)" { hdr, hdr_sz, mss }
    struct ibv_send_wr = "struct ibv_send_wr" { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, mw_or_tso = "bind_mw" }
    struct ibv_recv_wr = "struct ibv_recv_wr" { wr_id, next, sg_list, num_sge }
    struct ibv_wc = "struct ibv_wc" { wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits }
    union ibv_async_event_element = "__typeof__(((struct ibv_async_event *)0)->element)" { cq, qp, srq, wq, port_num }
    struct ibv_async_event = "struct ibv_async_event" { element, event_type }
    }
}

/// The structs of `<rdma/rdma_cma.h>` that the rdma_cm API hands out.
fn cma() -> Vec<Layout> {
    layouts! {
    struct rdma_event_channel = "struct rdma_event_channel" { fd }
    struct rdma_conn_param = "struct rdma_conn_param" { private_data, private_data_len, responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq, qp_num }
    struct rdma_ud_param = "struct rdma_ud_param" { private_data, private_data_len, ah_attr, qp_num, qkey }
    union rdma_cm_event_param = "__typeof__(((struct rdma_cm_event *)0)->param)" { conn, ud }
    struct rdma_cm_event = "struct rdma_cm_event" { id, listen_id, event, status, param }
    struct ibv_sa_path_rec = "struct ibv_sa_path_rec" { dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector, packet_life_time, preference }
    struct rdma_ib_addr = "struct rdma_ib_addr" { sgid, dgid, pkey }
    struct rdma_addr = "struct rdma_addr" { src_storage, dst_storage, ibaddr = "addr.ibaddr" }
    struct rdma_route = "struct rdma_route" { addr, path_rec, num_paths }
    struct rdma_cm_id = "struct rdma_cm_id" { verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type }
    struct rdma_addrinfo = "struct rdma_addrinfo" { ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next }
    }
}

/// The kernel uAPI structs the library answers libmlx5's commands with.
fn uverbs() -> Vec<Layout> {
    use ibverbs::abi::uapi::*;
    layouts! {
    struct ib_uverbs_cmd_hdr = "struct ib_uverbs_cmd_hdr" { command, in_words, out_words }
    struct ib_uverbs_ex_cmd_hdr = "struct ib_uverbs_ex_cmd_hdr" { response, provider_in_words, provider_out_words, cmd_hdr_reserved }
    struct ib_uverbs_get_context = "struct ib_uverbs_get_context" { response }
    struct ib_uverbs_get_context_resp = "struct ib_uverbs_get_context_resp" { async_fd, num_comp_vectors }
    struct ib_uverbs_alloc_pd = "struct ib_uverbs_alloc_pd" { response }
    struct ib_uverbs_alloc_pd_resp = "struct ib_uverbs_alloc_pd_resp" { pd_handle }
    struct ib_uverbs_ex_create_cq = "struct ib_uverbs_ex_create_cq" { user_handle, cqe, comp_vector, comp_channel, comp_mask, flags, reserved }
    struct ib_uverbs_create_cq_resp = "struct ib_uverbs_create_cq_resp" { cq_handle, cqe }
    struct ib_uverbs_ex_create_cq_resp = "struct ib_uverbs_ex_create_cq_resp" { base, comp_mask, response_length }
    struct ib_uverbs_create_qp = "struct ib_uverbs_create_qp" { response, user_handle, pd_handle, send_cq_handle, recv_cq_handle, srq_handle, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, sq_sig_all, qp_type, is_srq, reserved }
    struct ib_uverbs_create_qp_resp = "struct ib_uverbs_create_qp_resp" { qp_handle, qpn, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, reserved }
    struct ib_uverbs_create_srq = "struct ib_uverbs_create_srq" { response, user_handle, pd_handle, max_wr, max_sge, srq_limit }
    struct ib_uverbs_create_srq_resp = "struct ib_uverbs_create_srq_resp" { srq_handle, max_wr, max_sge, srqn }
    struct ib_uverbs_reg_mr_resp = "struct ib_uverbs_reg_mr_resp" { mr_handle, lkey, rkey }
    struct ib_uverbs_create_ah_resp = "struct ib_uverbs_create_ah_resp" { ah_handle }
    }
}

/// mlx5's driver data of those commands.
fn mlx5_abi() -> Vec<Layout> {
    use ibverbs::abi::uapi::*;
    layouts! {
    struct mlx5_ib_alloc_ucontext_req_v2 = "struct mlx5_ib_alloc_ucontext_req_v2" { total_num_bfregs, num_low_latency_bfregs, flags, comp_mask, max_cqe_version, reserved0, reserved1, reserved2, lib_caps }
    struct mlx5_ib_alloc_ucontext_resp = "struct mlx5_ib_alloc_ucontext_resp" { qp_tab_size, bf_reg_size, tot_bfregs, cache_line_size, max_sq_desc_sz, max_rq_desc_sz, max_send_wqebb, max_recv_wr, max_srq_recv_wr, num_ports, flow_action_flags, comp_mask, response_length, cqe_version, cmds_supp_uhw, eth_min_inline, clock_info_versions, hca_core_clock_offset, log_uar_size, num_uars_per_page, num_dyn_bfregs, dump_fill_mkey }
    struct mlx5_ib_alloc_pd_resp = "struct mlx5_ib_alloc_pd_resp" { pdn }
    struct mlx5_ib_create_cq = "struct mlx5_ib_create_cq" { buf_addr, db_addr, cqe_size, cqe_comp_en, cqe_comp_res_format, flags, uar_page_index, reserved0, reserved1 }
    struct mlx5_ib_create_cq_resp = "struct mlx5_ib_create_cq_resp" { cqn, reserved }
    struct mlx5_ib_create_qp = "struct mlx5_ib_create_qp" { buf_addr, db_addr, sq_wqe_count, rq_wqe_count, rq_wqe_shift, flags, uidx, bfreg_index, sq_buf_addr, ece_options, dci_streams, reserved }
    struct mlx5_ib_create_qp_resp = "struct mlx5_ib_create_qp_resp" { bfreg_index, ece_options, comp_mask, tirn, tisn, rqn, sqn, reserved1, tir_icm_addr }
    struct mlx5_ib_create_srq = "struct mlx5_ib_create_srq" { buf_addr, db_addr, flags, reserved0, uidx, reserved1 }
    struct mlx5_ib_create_srq_resp = "struct mlx5_ib_create_srq_resp" { srqn, reserved }
    struct mlx5_ib_create_ah_resp = "struct mlx5_ib_create_ah_resp" { response_length, dmac, reserved }
    }
}

#[test]
fn uapi_matches_ib_user_verbs_h() {
    let probe = doorbell_cprobe::Probe::new("rdma/ib_user_verbs.h", env!("CARGO_TARGET_TMPDIR"));
    check(uverbs(), probe, "rdma/ib_user_verbs.h");
}

#[test]
fn uapi_matches_mlx5_abi_h() {
    let probe = doorbell_cprobe::Probe::new("rdma/mlx5-abi.h", env!("CARGO_TARGET_TMPDIR"));
    check(mlx5_abi(), probe, "rdma/mlx5-abi.h");
}

#[test]
fn abi_matches_verbs_h() {
    check(all(), crate::c_probe::probe(), "infiniband/verbs.h");
}

#[test]
fn cma_abi_matches_rdma_cma_h() {
    let probe = doorbell_cprobe::Probe::new("rdma/rdma_cma.h", env!("CARGO_TARGET_TMPDIR"));
    check(cma(), probe, "rdma/rdma_cma.h");
}

/// Compares `layouts` with what `probe` (of `header`) prints.
fn check(layouts: Vec<Layout>, mut probe: doorbell_cprobe::Probe, header: &str) {
    for l in &layouts {
        let size = l
            .c_size
            .map_or_else(|| format!("sizeof({})", l.c), str::to_owned);
        probe.num(&format!("{}.size", l.rust), &size);
        probe.num(&format!("{}.align", l.rust), &format!("_Alignof({})", l.c));
        for f in &l.fields {
            probe.block(
                "",
                &[
                    Print::num(
                        format!("{}.{}.off", l.rust, f.rust),
                        format!("offsetof({}, {})", l.c, f.c),
                    ),
                    Print::num(
                        format!("{}.{}.size", l.rust, f.rust),
                        format!("sizeof((({} *)0)->{})", l.c, f.c),
                    ),
                ],
            );
        }
    }
    let printed = probe.run("abi");
    let mut bad = Vec::new();
    let mut fields = 0;
    let mut check = |what: String, c: u64, rust: usize| {
        if c != rust as u64 {
            bad.push(format!("{what}: C {c}, abi {rust}"));
        }
    };
    for l in &layouts {
        check(
            format!("{} size", l.rust),
            printed.num(&format!("{}.size", l.rust)),
            l.size,
        );
        check(
            format!("{} align", l.rust),
            printed.num(&format!("{}.align", l.rust)),
            l.align,
        );
        for f in &l.fields {
            fields += 1;
            let key = format!("{}.{}", l.rust, f.rust);
            check(
                format!("{key} offset"),
                printed.num(&format!("{key}.off")),
                f.offset,
            );
            check(
                format!("{key} size"),
                printed.num(&format!("{key}.size")),
                f.size,
            );
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatch(es) between abi and <{header}> (generated C: {}):\n  {}",
        bad.len(),
        printed.source().display(),
        bad.join("\n  ")
    );
    eprintln!("checked {} types, {fields} fields", layouts.len());
}
