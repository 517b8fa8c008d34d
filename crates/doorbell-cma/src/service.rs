//! The communication manager of one device, running: doorbell-cmsm's
//! [`CmAgent`] on the device's GSI QP, as the kernel's CM runs on QP1.
//!
//! A thread of the service receives the MADs that arrive on the GSI QP
//! (a UD QP the device numbers 1, with the GSI Q_Key), hands them to the
//! agent, sends what the agent sends (UD, to the peer's QP 1), fires its
//! timers, and routes its events to the ids that own the connections.
//! Requests from ids (listen, connect, accept, ...) run under the same
//! lock and wake the thread, so their MADs leave at once. The thread polls
//! its CQ (every [`POLL`] while MADs flow, backing off to [`POLL_IDLE`]
//! when nothing happens), because the device's completion events are one
//! stream for the whole process and belong to the program's channels.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use doorbell_cm::{GSI_QKEY, MAD_LEN};
use doorbell_cmsm::{AgentConfig, CmAgent, CmEvent as AgentEvent, ConnId, Peer};
use doorbell_types::{Instant, Qpn};
use doorbell_verbs::{
    Access, AddressVector, Ah, Context, Cq, Mr, Pd, Qp, QpAttrs, QpCaps, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendWr, UdTarget, WrOpcode,
};

use crate::{CmError, CmEvent, CmEventKind, Detail, EventSink};

/// How often the thread looks at its CQ while MADs come and go.
pub const POLL: std::time::Duration = std::time::Duration::from_micros(200);
/// The longest it waits between looks once nothing has happened for a
/// while (the wait doubles from [`POLL`] on each empty look): an idle
/// device's CM costs next to nothing, and a peer's first MAD waits at most
/// this long before it is read (its sender retries after seconds).
pub const POLL_IDLE: std::time::Duration = std::time::Duration::from_millis(20);
/// The service timeout of rdma_cm's delayed MRAs (`CMA_CM_MRA_SETTING`:
/// 2^24 · 4.096 µs, about 69 s).
const CMA_CM_MRA_SETTING: u8 = 24;
/// Receive buffers kept posted: as many as the kernel's MAD layer keeps,
/// so that a burst of REQs (cmtime's hundred) is not dropped.
const RECVS: u32 = 512;
/// Send buffers, used in turn.
const SENDS: u32 = 64;
/// A slot: the GRH area then the MAD.
const SLOT: u64 = 512;
const GRH: usize = doorbell_verbs::GRH_LEN;

/// Who an agent connection's events go to.
#[derive(Clone)]
pub(crate) struct Owner {
    pub(crate) sink: Arc<dyn EventSink>,
    pub(crate) token: u64,
}

pub(crate) struct State {
    pub(crate) agent: CmAgent,
    owners: BTreeMap<ConnId, Owner>,
    next_send: u32,
    /// MADs posted whose send completion has not come back yet.
    in_flight: u32,
}

struct Shared {
    ctx: Context,
    epoch: std::time::Instant,
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
    qp: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
}

/// The CM of one device. See the module docs.
pub struct CmService {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process that started it: a forked child has its state, not
    /// its thread.
    pid: u32,
}

/// Every started service. A leaf lock: nothing is taken, waited for or
/// dropped but a `Weak` while it is held.
static SERVICES: Mutex<Vec<Weak<CmService>>> = Mutex::new(Vec::new());

/// The lock of the started services, held (for [`crate::hold_for_fork`]).
pub(crate) fn hold_services() -> MutexGuard<'static, Vec<Weak<CmService>>> {
    lock(&SERVICES)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CmService {
    /// Starts the CM of `ctx`'s device: its GSI QP, buffers and thread.
    /// Ids bound to the device find it ([`CmService::of`]) while it runs.
    pub fn start(ctx: &Context) -> Result<Arc<Self>, CmError> {
        let pd = ctx.alloc_pd().map_err(|_| CmError::NoDevice)?;
        let cq = ctx
            .create_cq(RECVS + SENDS)
            .map_err(|_| CmError::NoDevice)?;
        let cap = QpCaps {
            max_send_wr: SENDS,
            max_recv_wr: RECVS,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd
            .create_gsi_qp(&QpInitAttr {
                qp_type: QpType::Ud,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                cap,
                sq_sig_all: true,
                srq: None,
            })
            .map_err(|_| CmError::AddrInUse)?;
        let up = qp
            .modify(
                QpState::Init,
                &QpAttrs {
                    pkey_index: Some(0),
                    port: Some(1),
                    qkey: Some(GSI_QKEY),
                    ..Default::default()
                },
            )
            .and_then(|()| qp.modify(QpState::Rtr, &QpAttrs::default()))
            .and_then(|()| {
                qp.modify(
                    QpState::Rts,
                    &QpAttrs {
                        sq_psn: Some(doorbell_types::Psn::new(0)),
                        ..Default::default()
                    },
                )
            });
        up.map_err(|_| CmError::NoDevice)?;
        let mr = pd
            .reg_mr(
                ((RECVS + SENDS) as u64 * SLOT) as usize,
                Access(Access::LOCAL_WRITE),
            )
            .map_err(|_| CmError::NoDevice)?;
        let gid = ctx.gid();
        let seed = u64::from_be_bytes([
            gid[8], gid[9], gid[10], gid[11], gid[12], gid[13], gid[14], gid[15],
        ]) ^ u64::from(std::process::id()) << 32
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        // The CA GUID: the EUI-64 doorbell's devices report, from the GID.
        let ca_guid = u64::from_be_bytes([0x02, 0, gid[12], 0xff, 0xfe, gid[13], gid[14], gid[15]]);
        let shared = Arc::new(Shared {
            ctx: ctx.clone(),
            epoch: std::time::Instant::now(),
            state: Mutex::new(State {
                agent: CmAgent::new(AgentConfig::new(ca_guid, seed)),
                owners: BTreeMap::new(),
                next_send: 0,
                in_flight: 0,
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            qp,
            cq,
            mr,
            _pd: pd,
        });
        for i in 0..RECVS {
            shared.post_recv(i).map_err(|_| CmError::NoDevice)?;
        }
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("doorbell-cm".into())
            .spawn(move || s.run())
            .map_err(|_| CmError::NoDevice)?;
        let svc = Arc::new(Self {
            shared,
            thread: Some(thread),
            pid: std::process::id(),
        });
        let mut all = lock(&SERVICES);
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&svc));
        Ok(svc)
    }

    /// The running CM of `ctx`'s device, if this process started one.
    pub fn of(ctx: &Context) -> Option<Arc<Self>> {
        // Upgraded under the lock, dropped after it: the last drop of
        // another device's service joins its thread, which must not happen
        // with the lock held (a fork waits for it: [`crate::hold_for_fork`]).
        let all: Vec<Arc<Self>> = lock(&SERVICES).iter().filter_map(Weak::upgrade).collect();
        all.into_iter()
            .find(|s| s.shared.ctx.same_as(ctx) && s.is_ours())
    }

    /// Whether this process started it: in a forked child, the parent's
    /// service has no thread, and its state's lock may have been held by
    /// that thread at the fork.
    fn is_ours(&self) -> bool {
        self.pid == std::process::id()
    }

    /// Runs `f` on the agent (and the owners of its connections), then
    /// wakes the thread to send what `f` queued. In a forked child, on the
    /// parent's service, runs nothing: [`CmError::NoDevice`].
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> Result<R, CmError> {
        if !self.is_ours() {
            return Err(CmError::NoDevice);
        }
        let now = self.shared.now();
        let r = f(&mut lock(&self.shared.state), now);
        self.shared.wake.notify_one();
        Ok(r)
    }

    /// Ends every connection and listen of the device as the kernel does
    /// when a process's rdma_cm file closes at its exit: each is destroyed
    /// (a DREQ for an established connection, a REJ for one being set up,
    /// a SIDR_REP Reject for an unanswered datagram request); then waits up
    /// to `wait` for those MADs to leave the port. Events of the ids are
    /// not delivered any more. For a process's exit: the ids stay, their
    /// connections gone.
    pub fn close_all(&self, wait: std::time::Duration) {
        if !self.is_ours() {
            return;
        }
        let _ = self.with(|s, now| {
            let conns: Vec<ConnId> = s.owners.keys().copied().collect();
            for c in conns {
                let _ = s.agent.destroy(now, c);
                let _ = s.agent.unlisten(c);
            }
            s.owners.clear();
        });
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            let st = lock(&self.shared.state);
            if st.in_flight == 0 && !st.agent.has_transmit() {
                break;
            }
            drop(st);
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// What the agent counted (nothing, in a forked child, of the
    /// parent's service).
    pub fn stats(&self) -> doorbell_cmsm::CmStats {
        if !self.is_ours() {
            return doorbell_cmsm::CmStats::default();
        }
        lock(&self.shared.state).agent.stats()
    }
}

impl State {
    /// Sends `conn`'s events to `owner`.
    pub(crate) fn own(&mut self, conn: ConnId, owner: Owner) {
        self.owners.insert(conn, owner);
    }

    /// Forgets `conn`'s owner.
    pub(crate) fn disown(&mut self, conn: ConnId) {
        self.owners.remove(&conn);
    }
}

impl Drop for CmService {
    fn drop(&mut self) {
        // A forked child's copy has no thread to stop or join.
        if !self.is_ours() {
            if let Some(t) = self.thread.take() {
                std::mem::forget(t);
            }
            return;
        }
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_ps(
            self.epoch
                .elapsed()
                .as_nanos()
                .saturating_mul(1000)
                .min(u128::from(u64::MAX)) as u64,
        )
    }

    fn post_recv(&self, slot: u32) -> Result<(), doorbell_verbs::VerbsError> {
        let sge = self
            .mr
            .sge(u64::from(slot) * SLOT, (GRH + MAD_LEN) as u32)?;
        self.qp.post_recv(&[RecvWr {
            wr_id: u64::from(slot),
            sg_list: &[sge],
        }])
    }

    fn run(&self) {
        let mut wc = [doorbell_verbs::Wc::default(); 16];
        let mut pause = POLL;
        while !self.stop.load(Ordering::Acquire) {
            let n = self.cq.poll(&mut wc).unwrap_or(0);
            for w in &wc[..n] {
                let slot = w.wr_id as u32;
                if slot >= RECVS {
                    let mut st = lock(&self.state);
                    st.in_flight = st.in_flight.saturating_sub(1);
                    continue;
                }
                if w.is_ok() && w.byte_len as usize >= GRH + MAD_LEN {
                    let mut buf = [0u8; GRH + MAD_LEN];
                    if self.mr.read(u64::from(slot) * SLOT, &mut buf).is_ok() {
                        self.receive(&buf, w.src_qp);
                    }
                }
                let _ = self.post_recv(slot);
            }
            let mut st = lock(&self.state);
            let now = self.now();
            if st.agent.poll_timeout().is_some_and(|t| t <= now) {
                st.agent.handle_timeout(now);
            }
            self.flush(&mut st);
            if n > 0 || st.in_flight > 0 {
                pause = POLL;
            }
            if n == 0 {
                // Woken by a request, by the agent's next timer, or after
                // `pause` to look at the CQ; each look that finds nothing
                // waits longer, up to POLL_IDLE.
                let timer = st.agent.poll_timeout().map(|t| {
                    std::time::Duration::from_nanos(t.as_ps().saturating_sub(now.as_ps()) / 1000)
                });
                let wait = timer.map_or(pause, |t| t.min(pause)).max(POLL);
                let (g, timed_out) = self.wake.wait_timeout(st, wait).map_or_else(
                    |e| {
                        let (g, r) = e.into_inner();
                        (g, r.timed_out())
                    },
                    |(g, r)| (g, r.timed_out()),
                );
                drop(g);
                pause = if timed_out {
                    (pause * 2).min(POLL_IDLE)
                } else {
                    POLL
                };
            }
        }
    }

    fn receive(&self, buf: &[u8; GRH + MAD_LEN], src_qp: u32) {
        let mut grh = [0u8; GRH];
        grh.copy_from_slice(&buf[..GRH]);
        let Ok(path) = self.ctx.return_path(&grh) else {
            return;
        };
        let peer = Peer {
            gid: doorbell_wire::Gid::new(path.av.dgid),
            qpn: Qpn::new(src_qp),
        };
        let mut st = lock(&self.state);
        let now = self.now();
        st.agent.handle_mad(now, peer, &buf[GRH..]);
        self.flush(&mut st);
    }

    /// Sends what the agent queued and routes its events.
    fn flush(&self, st: &mut State) {
        // No more MADs posted than the send queue and its slots hold: the
        // rest wait in the agent's queue until completions free a slot
        // (the kernel's MAD layer keeps an overflow list the same way),
        // rather than being lost to a full queue or overwriting a slot the
        // device has not read yet.
        while st.in_flight < SENDS {
            let Some((peer, mad)) = st.agent.poll_transmit() else {
                break;
            };
            let slot = RECVS + st.next_send % SENDS;
            st.next_send = st.next_send.wrapping_add(1);
            let at = u64::from(slot) * SLOT;
            if self.mr.write(at, &mad).is_err() {
                continue;
            }
            let Ok(sge) = self.mr.sge(at, MAD_LEN as u32) else {
                continue;
            };
            let target = UdTarget {
                ah: Ah {
                    av: AddressVector {
                        dgid: peer.gid.octets(),
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: 0,
                        sl: 0,
                    },
                },
                remote_qpn: peer.qpn,
                remote_qkey: GSI_QKEY,
            };
            let posted = self.qp.post_send(&[SendWr {
                wr_id: u64::from(slot),
                sg_list: &[sge],
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                ud: Some(target),
            }]);
            if posted.is_ok() {
                st.in_flight += 1;
            }
        }
        while let Some(ev) = st.agent.poll_event() {
            route(st, ev);
        }
    }
}

/// Gives an agent event to the id that owns its connection (a request to
/// its listener's).
fn route(st: &mut State, ev: AgentEvent) {
    let (conn, kind, status, detail) = match ev {
        AgentEvent::ConnectRequest {
            conn,
            listen,
            peer,
            req,
        } => {
            let Some(o) = st.owners.get(&listen).cloned() else {
                return;
            };
            // As rdma_cm: a delayed MRA, sent if the peer asks again
            // before the program answers.
            let _ = st.agent.arm_mra(conn, CMA_CM_MRA_SETTING);
            deliver(
                &o,
                CmEventKind::ConnectRequest,
                0,
                Detail::ConnectRequest(Box::new(crate::ConnRequest { conn, peer, req })),
            );
            return;
        }
        AgentEvent::ConnectResponse { conn, rep } => {
            let _ = st.agent.arm_mra(conn, CMA_CM_MRA_SETTING);
            (
                conn,
                CmEventKind::ConnectResponse,
                0,
                Detail::ConnectResponse(Box::new(rep)),
            )
        }
        AgentEvent::Established { conn, .. } => (conn, CmEventKind::Established, 0, Detail::None),
        AgentEvent::Rejected {
            conn,
            reason,
            private_data,
            ..
        } => (
            conn,
            CmEventKind::Rejected,
            i32::from(u16::from(reason)),
            Detail::Rejected(Box::new(private_data.to_vec())),
        ),
        AgentEvent::Unreachable { conn, .. } => {
            (conn, CmEventKind::Unreachable, -110, Detail::None)
        }
        AgentEvent::Disconnected { conn, .. } => (conn, CmEventKind::Disconnected, 0, Detail::None),
        AgentEvent::TimewaitExit { conn } => {
            let o = st.owners.remove(&conn);
            if let Some(o) = o {
                deliver(&o, CmEventKind::TimewaitExit, 0, Detail::None);
            }
            return;
        }
        AgentEvent::SidrRequest {
            conn,
            listen,
            peer,
            private_data,
            ..
        } => {
            let Some(o) = st.owners.get(&listen).cloned() else {
                return;
            };
            let r = crate::UdRequest {
                conn,
                peer,
                private_data,
            };
            deliver(
                &o,
                CmEventKind::ConnectRequest,
                0,
                Detail::UdRequest(Box::new(r)),
            );
            return;
        }
        AgentEvent::SidrReply {
            conn,
            status,
            qpn,
            qkey,
            private_data,
        } => {
            // The agent freed the handle.
            let Some(o) = st.owners.remove(&conn) else {
                return;
            };
            let status = u8::from(status);
            let kind = if status == 0 {
                CmEventKind::Established
            } else {
                CmEventKind::Unreachable
            };
            let r = crate::UdReply {
                status,
                qpn: qpn.get(),
                qkey,
                private_data,
            };
            deliver(&o, kind, i32::from(status), Detail::UdReply(Box::new(r)));
            return;
        }
    };
    if let Some(o) = st.owners.get(&conn).cloned() {
        if matches!(kind, CmEventKind::Rejected | CmEventKind::Unreachable) {
            st.owners.remove(&conn);
        }
        deliver(&o, kind, status, detail);
    }
}

fn deliver(o: &Owner, kind: CmEventKind, status: i32, detail: Detail) {
    o.sink.deliver(CmEvent {
        id: o.token,
        kind,
        status,
        detail,
    });
}
