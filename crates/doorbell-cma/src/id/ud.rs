//! Datagram ids (RDMA_PS_UDP and RDMA_PS_IPOIB): no connection, only
//! service ID resolution. `rdma_connect` sends a SIDR_REQ; the listener's
//! `rdma_accept` answers with a SIDR_REP naming its QP and Q_Key (its
//! `rdma_reject`, with status Reject); the requester's ESTABLISHED carries
//! them (UNREACHABLE with the status when refused, or -ETIMEDOUT when no
//! answer came), as the kernel's `cma_sidr_rep_handler` reports them.

use std::sync::Arc;

use doorbell_cm::SidrStatus;
use doorbell_cmsm::SidrReqParams;

use super::{CmId, IdState, ip_private_data};
use crate::conn::{AcceptParams, ConnectParams};
use crate::{CmError, EventSink, PortSpace, RDMA_UDP_QKEY, UdReply, UdRequest};

impl CmId {
    /// Whether the id's port space is a datagram one.
    pub fn is_ud(&self) -> bool {
        matches!(self.inner.ps, PortSpace::Udp | PortSpace::Ipoib)
    }

    /// The Q_Key of the id's datagram QP (`RDMA_UDP_QKEY` for UDP and
    /// IPoIB alike: rdma_cm's IPoIB Q_Key comes from a multicast group,
    /// which doorbell does not have).
    pub fn qkey(&self) -> u32 {
        RDMA_UDP_QKEY
    }

    pub(super) fn connect_ud(&self, p: &ConnectParams) -> Result<(), CmError> {
        let mut st = self.st();
        if st.state != IdState::RouteResolved {
            return Err(CmError::Invalid);
        }
        let (Some(src), Some(dst), Some(path)) = (st.src, st.dst, st.path) else {
            return Err(CmError::Invalid);
        };
        if p.private_data.len() > doorbell_cm::ip_cm::SIDR_REQ_USER_PRIVATE_DATA_LEN {
            return Err(CmError::Invalid);
        }
        let pd = ip_private_data(src, dst, &p.private_data);
        let svc = self.service(&st)?;
        let params = SidrReqParams {
            pkey: path.pkey,
            response_timeout: p.cm_response_timeout.min(31),
            max_cm_retries: p.max_cm_retries.min(15),
        };
        let sid = doorbell_cm::service_id(self.cm_ps(), dst.port());
        let peer = doorbell_cmsm::Peer::new(doorbell_wire::Gid::new(path.dgid));
        let owner = self.owner();
        let c = svc.with(|s, now| {
            let c = s
                .agent
                .sidr_request(now, peer, sid, &params, &pd)
                .map_err(|_| CmError::Invalid)?;
            s.own(c, owner);
            Ok(c)
        })??;
        st.conn = Some((svc, c));
        st.state = IdState::Connecting;
        Ok(())
    }

    /// The id of a datagram service request to `listener` (see
    /// [`CmId::from_request`]).
    pub fn from_ud_request(
        listener: &CmId,
        sink: Arc<dyn EventSink>,
        token: u64,
        r: &UdRequest,
    ) -> Result<CmId, CmError> {
        Self::passive(listener, sink, token, r.peer, &r.private_data, r.conn)
    }

    /// What the listener's SIDR_REP said, once the program takes the
    /// event: the agent freed the handle; the id is resolved (or not).
    pub fn on_ud_reply(&self, rep: &UdReply) {
        let mut st = self.st();
        st.conn = None;
        st.state = if rep.status == u8::from(SidrStatus::Success) {
            IdState::Connected
        } else {
            IdState::Disconnected
        };
    }

    pub(super) fn accept_ud(&self, p: &AcceptParams) -> Result<(), CmError> {
        let qpn = self.st().qpn.or(p.qp_num).ok_or(CmError::Invalid)?;
        self.sidr_reply(SidrStatus::Success, qpn, &p.private_data)?;
        self.st().state = IdState::Connected;
        Ok(())
    }

    pub(super) fn reject_ud(&self, private_data: &[u8]) -> Result<(), CmError> {
        self.sidr_reply(SidrStatus::Reject, 0, private_data)?;
        self.st().state = IdState::Disconnected;
        Ok(())
    }

    fn sidr_reply(&self, status: SidrStatus, qpn: u32, private_data: &[u8]) -> Result<(), CmError> {
        let mut st = self.st();
        if st.state != IdState::Requested {
            return Err(CmError::Invalid);
        }
        if private_data.len() > doorbell_cm::sidr::REP_PRIVATE_DATA_LEN {
            return Err(CmError::Invalid);
        }
        let (svc, c) = st.conn.take().ok_or(CmError::Invalid)?;
        let qkey = self.qkey();
        svc.with(|s, _| {
            let r =
                s.agent
                    .sidr_reply(c, status, doorbell_types::Qpn::new(qpn), qkey, private_data);
            s.disown(c);
            r
        })?
        .map_err(|_| CmError::Invalid)
    }
}
