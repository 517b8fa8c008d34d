//! rdma-core v44's C ABI: the structs that C programs and the inline
//! functions of `<infiniband/verbs.h>` read and write directly, as
//! `#[repr(C)]` Rust types with the header's names.
//!
//! Every size and the offsets the inline code depends on (B.3/B.6 of the
//! reference) are asserted at compile time below; `tests/it/layout.rs`
//! compiles a C probe against the installed header and compares the size,
//! alignment and every declared field's offset and size with these types.
//!
//! Conventions: C enums are `c_uint` (or `c_int` where the enum has a
//! negative value) behind a type alias named like the enum, so values from C
//! stay unvalidated integers until the edge checks them. C's anonymous unions
//! of two 32-bit views (`imm_data`/`invalidated_rkey`) are one `u32` named
//! after the first. Function-pointer slots are `Option<unsafe extern "C" fn>`
//! with the header's signature, `None` being C's NULL; slots whose
//! argument types this crate does not model take [`Opaque`] pointers.
//! Big-endian (`__be*`) fields are plain integers holding network-order bytes.

#![allow(non_camel_case_types, non_snake_case)]

mod attr;
mod base;
mod checks;
mod cma;
pub mod consts;
mod device;
mod object;
pub mod private34;
pub mod uapi;
mod work;

pub use attr::*;
pub use base::*;
pub use cma::*;
pub use device::*;
pub use object::*;
pub use private34::{
    ibv_alloc_pd, ibv_command_buffer, ibv_create_cq_ex, ibv_create_qp, ibv_create_srq,
    ibv_get_context, verbs_context_ops, verbs_device_ops, verbs_mr, verbs_qp, verbs_srq,
    verbs_sysfs_dev,
};
pub use uapi::{
    ib_uverbs_alloc_pd_resp, ib_uverbs_create_ah_resp, ib_uverbs_create_qp_resp,
    ib_uverbs_create_srq_resp, ib_uverbs_ex_create_cq_resp, ib_uverbs_ex_create_qp_resp,
    ib_uverbs_get_context_resp, ib_uverbs_reg_mr_resp,
};
pub use work::*;

/// A C struct this crate only passes by pointer (declared opaque).
#[repr(C)]
pub struct Opaque {
    _private: [u8; 0],
}

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`struct ", stringify!($name), "`, passed only by pointer.")]
        pub type $name = Opaque;
    )*};
}

opaque!(
    ibv_counters,
    ibv_counters_init_attr,
    ibv_counter_attach_attr,
    ibv_flow_action,
    ibv_flow_action_esp_attr,
    ibv_ops_wr,
    ibv_rwq_ind_table_init_attr,
    ibv_wq_attr,
    ibv_wq_init_attr,
    ibv_xrcd_init_attr,
    ibv_wc_tm_info,
    verbs_ex_private,
    verbs_cq,
    verbs_dm,
    verbs_xrcd,
    verbs_counters,
    verbs_flow_action,
    ib_user_path_rec,
    ib_uverbs_qp_attr,
    ib_uverbs_ah_attr,
    ibv_alloc_mw,
    ibv_create_xsrq,
    ibv_create_wq,
    ibv_modify_cq,
    ibv_modify_qp,
    ibv_modify_qp_ex,
    ibv_modify_srq,
    ibv_modify_wq,
    ibv_open_qp,
    ibv_open_xrcd,
    ibv_query_port,
    ibv_query_qp,
    ibv_query_srq,
    ibv_reg_mr,
    ibv_rereg_mr,
    ibv_resize_cq,
    ib_uverbs_alloc_mw_resp,
    ib_uverbs_ex_create_rwq_ind_table_resp,
    ib_uverbs_ex_create_wq_resp,
    ib_uverbs_ex_modify_qp_resp,
    ib_uverbs_ex_query_device_resp,
    ib_uverbs_rereg_mr_resp,
    ib_uverbs_resize_cq_resp,
    ib_uverbs_open_xrcd_resp,
);
