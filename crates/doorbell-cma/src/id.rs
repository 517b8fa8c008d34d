//! Communication identifiers: binding, address and route resolution, and
//! the options of `rdma_set_option`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use doorbell_verbs::Context;

use doorbell_cmsm::{ConnId, Peer};

mod ud;

use crate::conn::{AcceptParams, ConnAttrs, ConnectParams, Remote, mtu_code};
use crate::service::{CmService, Owner};
use crate::{
    CmError, CmEvent, CmEventKind, ConnRequest, EventSink, Path, PortSpace, gid_of, ip_of, ports,
    with_port,
};

/// Where an id is in its life (the kernel's `enum rdma_cm_state`, the
/// states reached so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdState {
    /// Just created.
    Idle,
    /// Bound to a source address (and, unless the wildcard, a device).
    AddrBound,
    /// Its destination resolved: bound to the local NIC that routes to it.
    AddrResolved,
    /// Its route resolved.
    RouteResolved,
    /// Listening for connection requests.
    Listen,
    /// Its REQ sent, waiting for the peer's answer.
    Connecting,
    /// A connection request it stands for, not yet accepted or rejected.
    Requested,
    /// Accepted or answered: the connection is up or coming up.
    Connected,
    /// Disconnected, or refused.
    Disconnected,
}

struct State {
    state: IdState,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    device: Option<Context>,
    path: Option<Path>,
    tos: u8,
    reuse: bool,
    afonly: bool,
    ack_timeout: Option<u8>,
    qpn: Option<u32>,
    /// Whether it holds its source port in the process's table (an id
    /// made by a connection request shares its listener's).
    holds_port: bool,
    listen: Option<(Arc<CmService>, ConnId)>,
    conn: Option<(Arc<CmService>, ConnId)>,
    local_psn: u32,
    remote: Option<Remote>,
    established_reported: bool,
}

struct Inner {
    token: u64,
    owner: u64,
    ps: PortSpace,
    devices: Vec<Context>,
    sink: Mutex<Arc<dyn EventSink>>,
    st: Mutex<State>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(src) = st.src
            && st.holds_port
        {
            ports::release(self.ps, src.port(), self.owner);
        }
        // The kernel's rdma_destroy_id: leave the CM's state behind cleanly
        // (a REJ or DREQ where the exchange is still open).
        // (Nothing, in a forked child: the CM is the parent's.)
        if let Some((svc, l)) = st.listen.take() {
            let _ = svc.with(|s, _| {
                let _ = s.agent.unlisten(l);
                s.disown(l);
            });
        }
        if let Some((svc, c)) = st.conn.take() {
            let _ = svc.with(|s, now| {
                let _ = s.agent.destroy(now, c);
                s.disown(c);
            });
        }
    }
}

/// A communication identifier (`struct rdma_cm_id`). See the crate docs.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.st();
        f.debug_struct("CmId")
            .field("token", &self.inner.token)
            .field("ps", &self.inner.ps)
            .field("state", &st.state)
            .field("src", &st.src)
            .field("dst", &st.dst)
            .finish()
    }
}

static OWNERS: AtomicU64 = AtomicU64::new(1);

impl CmId {
    /// An id in port space `ps` whose events go to `sink` with `token`,
    /// over the process's `devices` (the contexts `rdma_get_devices` gives).
    pub fn new(sink: Arc<dyn EventSink>, token: u64, ps: PortSpace, devices: Vec<Context>) -> Self {
        Self {
            inner: Arc::new(Inner {
                token,
                owner: OWNERS.fetch_add(1, Ordering::Relaxed),
                ps,
                devices,
                sink: Mutex::new(sink),
                st: Mutex::new(State {
                    state: IdState::Idle,
                    src: None,
                    dst: None,
                    device: None,
                    path: None,
                    tos: 0,
                    reuse: false,
                    afonly: false,
                    ack_timeout: None,
                    qpn: None,
                    holds_port: false,
                    listen: None,
                    conn: None,
                    local_psn: 0,
                    remote: None,
                    established_reported: false,
                }),
            }),
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.inner.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deliver(&self, kind: CmEventKind, status: i32) {
        let sink = self
            .inner
            .sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        sink.deliver(CmEvent {
            id: self.inner.token,
            kind,
            status,
            detail: crate::Detail::None,
        });
    }

    /// The token given at creation.
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// Where the id is in its life.
    pub fn state(&self) -> IdState {
        self.st().state
    }

    /// The bound source address, port included.
    pub fn src(&self) -> Option<SocketAddr> {
        self.st().src
    }

    /// The destination address.
    pub fn dst(&self) -> Option<SocketAddr> {
        self.st().dst
    }

    /// The device the id is bound to.
    pub fn device(&self) -> Option<Context> {
        self.st().device.clone()
    }

    /// The resolved route's path.
    pub fn path(&self) -> Option<Path> {
        self.st().path
    }

    /// Sends the id's later events to `sink` (`rdma_migrate_id`).
    pub fn set_sink(&self, sink: Arc<dyn EventSink>) {
        *self.inner.sink.lock().unwrap_or_else(|e| e.into_inner()) = sink;
        // The CM's events for its listener and connection follow.
        let st = self.st();
        for (svc, c) in st.listen.iter().chain(st.conn.iter()) {
            let owner = self.owner();
            let _ = svc.with(|s, _| s.own(*c, owner));
        }
    }

    /// The device whose port has `ip`.
    fn device_of(&self, ip: IpAddr) -> Option<Context> {
        let want = gid_of(ip);
        self.inner
            .devices
            .iter()
            .find(|c| c.gid() == want || gid_of(ip_of(c.gid())) == want)
            .cloned()
    }

    /// `rdma_bind_addr`: binds `addr` (port 0: an ephemeral one). A specific
    /// address binds the id to the device that has it (ENODEV if none
    /// does); the wildcard binds no device yet.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<(), CmError> {
        let mut st = self.st();
        if st.state != IdState::Idle {
            return Err(CmError::Invalid);
        }
        self.bind_locked(&mut st, addr)
    }

    fn bind_locked(&self, st: &mut State, addr: SocketAddr) -> Result<(), CmError> {
        let device = if addr.ip().is_unspecified() {
            None
        } else {
            Some(self.device_of(addr.ip()).ok_or(CmError::NoDevice)?)
        };
        let port = ports::bind(
            self.inner.ps,
            addr.ip(),
            addr.port(),
            st.reuse,
            self.inner.owner,
        )?;
        st.src = Some(with_port(addr, port));
        st.holds_port = true;
        st.device = device;
        st.state = IdState::AddrBound;
        Ok(())
    }

    /// `rdma_resolve_addr`: binds `src` first if given (the id must be
    /// unbound then), or an unbound id to the local NIC, which routes to
    /// every peer; then reports `AddrResolved`. The wildcard destination is
    /// EINVAL; with no device at all, ENODEV.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        _timeout_ms: i32,
    ) -> Result<(), CmError> {
        if dst.ip().is_unspecified() {
            return Err(CmError::Invalid);
        }
        let mut st = self.st();
        match (st.state, src) {
            (IdState::Idle, Some(s)) => self.bind_locked(&mut st, s)?,
            (IdState::Idle, None) => {
                let nic = self.inner.devices.first().ok_or(CmError::NoDevice)?;
                let ip = match (ip_of(nic.gid()), dst.ip()) {
                    (IpAddr::V4(v4), IpAddr::V6(_)) => IpAddr::V6(v4.to_ipv6_mapped()),
                    (ip, _) => ip,
                };
                self.bind_locked(&mut st, SocketAddr::new(ip, 0))?;
            }
            (IdState::AddrBound | IdState::AddrResolved, None) => {}
            _ => return Err(CmError::Invalid),
        }
        if st.device.is_none() {
            // Bound to the wildcard: the route's source is the NIC's.
            let nic = self.inner.devices.first().ok_or(CmError::NoDevice)?;
            let port = st.src.map_or(0, |s| s.port());
            st.src = Some(SocketAddr::new(ip_of(nic.gid()), port));
            st.device = Some(nic.clone());
        }
        st.dst = Some(dst);
        st.state = IdState::AddrResolved;
        drop(st);
        self.deliver(CmEventKind::AddrResolved, 0);
        Ok(())
    }

    /// `rdma_resolve_route`: the path to the resolved destination, as RoCE
    /// computes it locally; reports `RouteResolved`. EINVAL before the
    /// address resolved.
    pub fn resolve_route(&self, _timeout_ms: i32) -> Result<(), CmError> {
        let mut st = self.st();
        if !matches!(st.state, IdState::AddrResolved | IdState::RouteResolved) {
            return Err(CmError::Invalid);
        }
        let (Some(src), Some(dst), Some(dev)) = (st.src, st.dst, st.device.clone()) else {
            return Err(CmError::Invalid);
        };
        st.path = Some(Path {
            sgid: gid_of(src.ip()),
            dgid: gid_of(dst.ip()),
            pkey: 0xffff,
            mtu: dev.query_port().active_mtu,
            hop_limit: 64,
            traffic_class: st.tos,
            sl: 0,
        });
        st.state = IdState::RouteResolved;
        drop(st);
        self.deliver(CmEventKind::RouteResolved, 0);
        Ok(())
    }

    /// RDMA_OPTION_ID_TOS: the type of service of the id's route.
    pub fn set_tos(&self, tos: u8) {
        self.st().tos = tos;
    }

    /// RDMA_OPTION_ID_REUSEADDR: only before binding (EINVAL after).
    pub fn set_reuseaddr(&self, on: bool) -> Result<(), CmError> {
        let mut st = self.st();
        if st.state != IdState::Idle {
            return Err(CmError::Invalid);
        }
        st.reuse = on;
        Ok(())
    }

    /// RDMA_OPTION_ID_AFONLY: only before binding (EINVAL after).
    pub fn set_afonly(&self, on: bool) -> Result<(), CmError> {
        let mut st = self.st();
        if st.state != IdState::Idle {
            return Err(CmError::Invalid);
        }
        st.afonly = on;
        Ok(())
    }

    /// RDMA_OPTION_ID_ACK_TIMEOUT: the QP's local ACK timeout exponent.
    pub fn set_ack_timeout(&self, timeout: u8) {
        self.st().ack_timeout = Some(timeout);
    }

    /// `rdma_init_qp_attr` for INIT, for a `ud` QP or a connected one.
    /// EINVAL before the id is bound to a device.
    pub fn init_attrs(&self, ud: bool) -> Result<crate::InitAttrs, CmError> {
        if self.st().device.is_none() {
            return Err(CmError::Invalid);
        }
        Ok(crate::InitAttrs {
            pkey_index: 0,
            port: 1,
            qkey: ud.then_some(crate::RDMA_UDP_QKEY),
            access: (!ud).then_some(0),
        })
    }

    /// Records the QP the program created on the id (`rdma_create_qp`), or
    /// none (`rdma_destroy_qp`): the QP number the CM will put in REQ/REP.
    pub fn set_qp(&self, qpn: Option<u32>) {
        self.st().qpn = qpn;
    }

    /// The QP on the id.
    pub fn qpn(&self) -> Option<u32> {
        self.st().qpn
    }

    /// The options as set: (tos, reuseaddr, afonly, ack timeout).
    pub fn options(&self) -> (u8, bool, bool, Option<u8>) {
        let st = self.st();
        (st.tos, st.reuse, st.afonly, st.ack_timeout)
    }
}

impl CmId {
    fn owner(&self) -> Owner {
        Owner {
            sink: self
                .inner
                .sink
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            token: self.inner.token,
        }
    }

    fn service(&self, st: &State) -> Result<Arc<CmService>, CmError> {
        let dev = st
            .device
            .clone()
            .or_else(|| self.inner.devices.first().cloned())
            .ok_or(CmError::NoDevice)?;
        CmService::of(&dev).ok_or(CmError::NoDevice)
    }

    fn cm_ps(&self) -> doorbell_cm::PortSpace {
        doorbell_cm::PortSpace::from(self.inner.ps.code() as u16)
    }

    /// `rdma_listen`: takes connection requests for the bound port (the
    /// service ID of its port space and port). EINVAL unless bound.
    pub fn listen(&self, _backlog: i32) -> Result<(), CmError> {
        let mut st = self.st();
        if st.state != IdState::AddrBound {
            return Err(CmError::Invalid);
        }
        let port = st.src.map_or(0, |s| s.port());
        let svc = self.service(&st)?;
        let sid = doorbell_cm::service_id(self.cm_ps(), port);
        let owner = self.owner();
        let l = svc.with(|s, _| {
            let l = s.agent.listen(sid).map_err(|_| CmError::AddrInUse)?;
            s.own(l, owner);
            Ok(l)
        })??;
        st.listen = Some((svc, l));
        st.state = IdState::Listen;
        Ok(())
    }

    /// `rdma_connect`: sends the REQ, rdma_cm's IP header and `p`'s private
    /// data first in its private data, to the service of the destination's
    /// port. EINVAL before the route resolved, without a QP, or with more
    /// than 56 bytes of private data.
    pub fn connect(&self, p: &ConnectParams) -> Result<(), CmError> {
        if self.is_ud() {
            return self.connect_ud(p);
        }
        let mut st = self.st();
        if st.state != IdState::RouteResolved {
            return Err(CmError::Invalid);
        }
        let qpn = st.qpn.or(p.qp_num).ok_or(CmError::Invalid)?;
        let (Some(src), Some(dst), Some(path)) = (st.src, st.dst, st.path) else {
            return Err(CmError::Invalid);
        };
        if p.private_data.len() > doorbell_cm::ip_cm::REQ_USER_PRIVATE_DATA_LEN {
            return Err(CmError::Invalid);
        }
        let pd = ip_private_data(src, dst, &p.private_data);
        let svc = self.service(&st)?;
        let psn = random_psn(self.inner.owner);
        let params = doorbell_cmsm::ReqParams {
            local_qpn: doorbell_types::Qpn::new(qpn),
            starting_psn: doorbell_types::Psn::new(psn),
            qp_type: doorbell_cmsm::QpType::Rc,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count.min(7),
            rnr_retry_count: p.rnr_retry_count.min(7),
            path_mtu: mtu_code(path.mtu),
            pkey: path.pkey,
            flow_control: p.flow_control,
            srq: p.srq,
            primary_path: doorbell_cm::PathRepr {
                local_gid: doorbell_wire::Gid::new(path.sgid),
                remote_gid: doorbell_wire::Gid::new(path.dgid),
                traffic_class: path.traffic_class,
                hop_limit: path.hop_limit,
                sl: path.sl,
                local_ack_timeout: st.ack_timeout.unwrap_or(ACK_TIMEOUT),
                ..Default::default()
            },
            remote_cm_response_timeout: p.cm_response_timeout.min(31),
            local_cm_response_timeout: p.cm_response_timeout.min(31),
            max_cm_retries: p.max_cm_retries.min(15),
            auto_rtu: false,
        };
        let sid = doorbell_cm::service_id(self.cm_ps(), dst.port());
        let peer = Peer::new(doorbell_wire::Gid::new(path.dgid));
        let owner = self.owner();
        let c = svc.with(|s, now| {
            let c = s
                .agent
                .connect(now, peer, sid, &params, &pd)
                .map_err(|_| CmError::Invalid)?;
            s.own(c, owner);
            Ok(c)
        })??;
        st.conn = Some((svc, c));
        st.local_psn = psn;
        st.state = IdState::Connecting;
        Ok(())
    }

    /// What the peer's REP said, once the program takes its event: the
    /// peer's QP, PSN and resources, for [`CmId::conn_attrs`].
    pub fn on_reply(&self, rep: &doorbell_cmsm::RepReceived) {
        let mut st = self.st();
        let path = st.path;
        st.remote = Some(Remote {
            qpn: rep.remote_qpn.get(),
            psn: rep.starting_psn.get(),
            responder_resources: rep.responder_resources,
            initiator_depth: rep.initiator_depth,
            retry_count: 7,
            rnr_retry_count: rep.rnr_retry_count,
            path_mtu: path.map_or(5, |p| mtu_code(p.mtu)),
            dgid: path.map_or([0; 16], |p| p.dgid),
            ack_timeout: None,
        });
    }

    /// `rdma_establish`: the RTU to the peer's REP; the connection is up.
    pub fn establish(&self) -> Result<(), CmError> {
        let mut st = self.st();
        let (svc, c) = st.conn.clone().ok_or(CmError::Invalid)?;
        if st.remote.is_none() {
            return Err(CmError::Invalid);
        }
        svc.with(|s, _| s.agent.establish(c, &[]))?
            .map_err(|_| CmError::Invalid)?;
        st.state = IdState::Connected;
        Ok(())
    }

    /// Marks the connection's ESTABLISHED as reported (the C library turns
    /// CONNECT_RESPONSE into it); returns whether it already was, so the
    /// CM's own report of the RTU is not passed on twice.
    pub fn report_established(&self) -> bool {
        std::mem::replace(&mut self.st().established_reported, true)
    }

    /// The id of a connection request to `listener`, reporting to `sink`
    /// with `token`: bound to the listener's device and port, addressed to
    /// the peer that sent the REQ (rdma_cm's IP header says where from),
    /// its route computed.
    pub fn from_request(
        listener: &CmId,
        sink: Arc<dyn EventSink>,
        token: u64,
        r: &ConnRequest,
    ) -> Result<CmId, CmError> {
        let id = Self::passive(listener, sink, token, r.peer, &r.req.private_data, r.conn)?;
        id.st().remote = Some(Remote {
            qpn: r.req.remote_qpn.get(),
            psn: r.req.starting_psn.get(),
            responder_resources: r.req.responder_resources,
            initiator_depth: r.req.initiator_depth,
            retry_count: r.req.retry_count,
            rnr_retry_count: r.req.rnr_retry_count,
            path_mtu: r.req.path_mtu,
            dgid: r.peer.gid.octets(),
            ack_timeout: Some(r.req.primary_path.local_ack_timeout),
        });
        Ok(id)
    }

    /// The id of a request (REQ or SIDR_REQ, handle `conn`) from `peer`
    /// to `listener`, whose private data starts with rdma_cm's IP header:
    /// in REQUESTED, owning `conn`.
    fn passive(
        listener: &CmId,
        sink: Arc<dyn EventSink>,
        token: u64,
        peer: Peer,
        private_data: &[u8],
        conn: ConnId,
    ) -> Result<CmId, CmError> {
        let l = listener.st();
        let svc = l
            .listen
            .as_ref()
            .map(|(s, _)| s.clone())
            .ok_or(CmError::Invalid)?;
        let dev = l
            .device
            .clone()
            .or_else(|| listener.inner.devices.first().cloned())
            .ok_or(CmError::NoDevice)?;
        let lport = l.src.map_or(0, |s| s.port());
        let tos = l.tos;
        drop(l);
        let hdr = doorbell_cm::CmaHeader::new_checked(private_data)
            .ok()
            .and_then(|h| doorbell_cm::CmaHeaderRepr::parse(&h).ok());
        let (src, dst) = match hdr {
            Some(h) => match h.addrs {
                doorbell_cm::CmaAddrs::V4 { src, dst } => (
                    SocketAddr::new(IpAddr::V4(dst), lport),
                    SocketAddr::new(IpAddr::V4(src), h.src_port),
                ),
                doorbell_cm::CmaAddrs::V6 { src, dst } => (
                    SocketAddr::new(IpAddr::V6(dst), lport),
                    SocketAddr::new(IpAddr::V6(src), h.src_port),
                ),
            },
            None => (
                SocketAddr::new(ip_of(dev.gid()), lport),
                SocketAddr::new(peer.ip_addr(), 0),
            ),
        };
        let id = CmId::new(
            sink,
            token,
            listener.inner.ps,
            listener.inner.devices.clone(),
        );
        {
            let mut st = id.st();
            st.src = Some(src);
            st.dst = Some(dst);
            st.tos = tos;
            st.path = Some(Path {
                sgid: dev.gid(),
                dgid: peer.gid.octets(),
                pkey: 0xffff,
                mtu: dev.query_port().active_mtu,
                hop_limit: 64,
                traffic_class: tos,
                sl: 0,
            });
            st.device = Some(dev);
            st.conn = Some((svc.clone(), conn));
            st.state = IdState::Requested;
        }
        let owner = id.owner();
        svc.with(|s, _| s.own(conn, owner))?;
        Ok(id)
    }

    /// `rdma_accept`: the REP to the request this id stands for (its QP
    /// already moved to RTS with [`CmId::conn_attrs`]).
    pub fn accept(&self, p: &AcceptParams) -> Result<(), CmError> {
        if self.is_ud() {
            return self.accept_ud(p);
        }
        let mut st = self.st();
        if st.state != IdState::Requested {
            return Err(CmError::Invalid);
        }
        let qpn = st.qpn.or(p.qp_num).ok_or(CmError::Invalid)?;
        let (svc, c) = st.conn.clone().ok_or(CmError::Invalid)?;
        if st.local_psn == 0 {
            st.local_psn = random_psn(self.inner.owner);
        }
        let rep = doorbell_cmsm::RepParams {
            local_qpn: doorbell_types::Qpn::new(qpn),
            starting_psn: doorbell_types::Psn::new(st.local_psn),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: 0,
            failover_accepted: 0,
            rnr_retry_count: p.rnr_retry_count.min(7),
            flow_control: p.flow_control,
            srq: p.srq,
        };
        svc.with(|s, now| s.agent.accept(now, c, &rep, &p.private_data))?
            .map_err(|_| CmError::Invalid)?;
        st.state = IdState::Connected;
        Ok(())
    }

    /// `rdma_reject`: a REJ, consumer defined (28), with `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<(), CmError> {
        if self.is_ud() {
            return self.reject_ud(private_data);
        }
        let mut st = self.st();
        if st.state != IdState::Requested {
            return Err(CmError::Invalid);
        }
        let (svc, c) = st.conn.take().ok_or(CmError::Invalid)?;
        svc.with(|s, now| {
            let r = s.agent.reject(
                now,
                c,
                doorbell_cm::RejectReason::ConsumerDefined,
                private_data,
            );
            s.disown(c);
            r
        })?
        .map_err(|_| CmError::Invalid)?;
        st.state = IdState::Disconnected;
        Ok(())
    }

    /// `rdma_disconnect`: a DREQ (or the DREP to the peer's).
    pub fn disconnect(&self) -> Result<(), CmError> {
        let mut st = self.st();
        let (svc, c) = st.conn.clone().ok_or(CmError::Invalid)?;
        svc.with(|s, now| s.agent.disconnect(now, c, &[]))?
            .map_err(|_| CmError::Invalid)?;
        st.state = IdState::Disconnected;
        Ok(())
    }

    /// The attributes that move the id's connected QP to RTR and RTS, once
    /// the peer's REQ or REP is known (EINVAL before).
    pub fn conn_attrs(&self) -> Result<ConnAttrs, CmError> {
        let mut st = self.st();
        let r = st.remote.ok_or(CmError::Invalid)?;
        if st.local_psn == 0 {
            st.local_psn = random_psn(self.inner.owner);
        }
        let path = st.path.ok_or(CmError::Invalid)?;
        Ok(ConnAttrs {
            path_mtu: r.path_mtu.min(mtu_code(path.mtu)),
            dest_qpn: r.qpn,
            rq_psn: r.psn,
            sq_psn: st.local_psn,
            max_dest_rd_atomic: r.responder_resources.max(1),
            max_rd_atomic: r.initiator_depth.max(1),
            min_rnr_timer: 12,
            timeout: st.ack_timeout.or(r.ack_timeout).unwrap_or(ACK_TIMEOUT),
            retry_count: r.retry_count.min(7),
            rnr_retry_count: r.rnr_retry_count.min(7),
            dgid: r.dgid,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            // IBV_ACCESS_REMOTE_WRITE, and READ and ATOMIC when it takes
            // READs.
            access: 0x2
                | if r.responder_resources > 0 {
                    0x4 | 0x8
                } else {
                    0
                },
        })
    }
}

/// The QP's local ACK timeout exponent when the program sets none: about
/// 67 ms.
const ACK_TIMEOUT: u8 = 14;

/// rdma_cm's IP header for a request from `src` to `dst`, then `user`.
fn ip_private_data(src: SocketAddr, dst: SocketAddr, user: &[u8]) -> Vec<u8> {
    let mut pd = vec![0u8; doorbell_cm::ip_cm::HEADER_LEN];
    let addrs = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => doorbell_cm::CmaAddrs::V4 { src: s, dst: d },
        (s, d) => doorbell_cm::CmaAddrs::V6 {
            src: ipv6_of(s),
            dst: ipv6_of(d),
        },
    };
    doorbell_cm::CmaHeaderRepr {
        src_port: src.port(),
        addrs,
    }
    .emit(&mut doorbell_cm::CmaHeader::new_unchecked(&mut pd[..]));
    pd.extend_from_slice(user);
    pd
}

fn ipv6_of(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// A starting PSN: 24 bits, from the clock and the id (the kernel draws a
/// random one).
fn random_psn(salt: u64) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let x = u64::from(t) ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x ^ (x >> 29)) as u32 & 0x00ff_ffff).max(1)
}
