//! Communication identifiers: binding, address and route resolution, and
//! the options of `rdma_set_option`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use doorbell_verbs::Context;

use crate::{
    CmError, CmEvent, CmEventKind, EventSink, Path, PortSpace, gid_of, ip_of, ports, with_port,
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
        if let Some(src) = st.src {
            ports::release(self.ps, src.port(), self.owner);
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
