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
        let o = RcOptions {
            mtu,
            rd_atomic,
            ..RcOptions::default()
        };
        self.connect_rc_opts(local, remote, &o)
    }

    /// Moves an RC QP through INIT, RTR and RTS to `remote` with the path,
    /// depths and timers of `o`, granting peers every remote access.
    pub fn connect_rc_opts(
        &self,
        local: &RcEndpoint,
        remote: &RcEndpoint,
        o: &RcOptions,
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
                path_mtu: Some(o.mtu),
                dest_qpn: Some(remote.qpn),
                rq_psn: Some(remote.psn),
                max_dest_rd_atomic: Some(o.rd_atomic),
                min_rnr_timer: Some(o.min_rnr_timer),
                ..Default::default()
            },
        )?;
        self.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(local.psn),
                timeout: Some(o.timeout),
                retry_cnt: Some(o.retry_cnt),
                rnr_retry: Some(o.rnr_retry),
                max_rd_atomic: Some(o.rd_atomic),
                ..Default::default()
            },
        )
    }
}

/// The path, depths and timers of an RC connection
/// ([`Qp::connect_rc_opts`]); the default is ibv_rc_pingpong's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcOptions {
    /// Path MTU in bytes.
    pub mtu: u32,
    /// READs and atomics outstanding each way.
    pub rd_atomic: u8,
    /// The RNR timer code this side asks of its peer.
    pub min_rnr_timer: u8,
    /// ACK timeout code: 4.096 µs × 2^timeout (0: wait for ever).
    pub timeout: u8,
    /// Retries after a timeout or a sequence NAK.
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (7: for ever).
    pub rnr_retry: u8,
}

impl Default for RcOptions {
    fn default() -> Self {
        Self {
            mtu: 1024,
            rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
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
