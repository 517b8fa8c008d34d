//! Connecting RC and UC QPs the way ibv_rc_pingpong does: the endpoint
//! peers exchange out of band, and INIT → RTR → RTS with its attributes.

use doorbell_hif::{AddressVector, QpAttrs, QpState};
use doorbell_types::Qpn;

use crate::error::VerbsError;
use crate::qp::Qp;

impl Qp {
    /// Convenience: moves an RC QP through INIT, RTR and RTS to `remote`
    /// with ibv_rc_pingpong's attributes (one READ or atomic outstanding
    /// each way).
    pub fn connect_rc(
        &self,
        local: &RcEndpoint,
        remote: &RcEndpoint,
        mtu: u32,
    ) -> Result<(), VerbsError> {
        self.connect_rc_with(local, remote, mtu, 1)
    }

    /// Like [`Qp::connect_rc`], allowing `rd_atomic` READs and atomics
    /// outstanding each way (`max_rd_atomic`, `max_dest_rd_atomic`).
    pub fn connect_rc_with(
        &self,
        local: &RcEndpoint,
        remote: &RcEndpoint,
        mtu: u32,
        rd_atomic: u8,
    ) -> Result<(), VerbsError> {
        use doorbell_hif::Access;
        let access = Access(
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        );
        self.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                access: Some(access),
                ..Default::default()
            },
        )?;
        self.modify(
            QpState::Rtr,
            &QpAttrs {
                av: Some(AddressVector {
                    dgid: remote.gid,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                    sl: 0,
                }),
                path_mtu: Some(mtu),
                dest_qpn: Some(remote.qpn),
                rq_psn: Some(remote.psn),
                max_dest_rd_atomic: Some(rd_atomic),
                min_rnr_timer: Some(12),
                ..Default::default()
            },
        )?;
        self.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(local.psn),
                timeout: Some(14),
                retry_cnt: Some(7),
                rnr_retry: Some(7),
                max_rd_atomic: Some(rd_atomic),
                ..Default::default()
            },
        )
    }
}

impl Qp {
    /// Convenience: moves a UC QP through INIT, RTR and RTS to `remote`
    /// with UC's attributes (RC's, without the reliable ones: no READ or
    /// atomic depths, no RNR timer, no ACK timeout or retries). Peers may
    /// RDMA WRITE into this QP's memory regions.
    pub fn connect_uc(
        &self,
        local: &RcEndpoint,
        remote: &RcEndpoint,
        mtu: u32,
    ) -> Result<(), VerbsError> {
        use doorbell_hif::Access;
        self.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                access: Some(Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE)),
                ..Default::default()
            },
        )?;
        self.modify(
            QpState::Rtr,
            &QpAttrs {
                av: Some(AddressVector {
                    dgid: remote.gid,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                    sl: 0,
                }),
                path_mtu: Some(mtu),
                dest_qpn: Some(remote.qpn),
                rq_psn: Some(remote.psn),
                ..Default::default()
            },
        )?;
        self.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(local.psn),
                ..Default::default()
            },
        )
    }
}

/// What two RC (or UC) peers exchange out of band to connect
/// (ibv_rc_pingpong's `pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcEndpoint {
    /// GID.
    pub gid: [u8; 16],
    /// QPN.
    pub qpn: Qpn,
    /// First PSN it sends.
    pub psn: doorbell_types::Psn,
}
