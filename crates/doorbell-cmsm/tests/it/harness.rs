//! Two CM agents and the wire between them, on a virtual clock.

use doorbell_cm::{CmAttribute, CmMad, MAD_LEN, PathRepr, SidrStatus};
use doorbell_cmsm::{
    AgentConfig, CmAgent, CmEvent, ConnId, Peer, QpType, RepParams, ReqParams, SidrReqParams,
};
use doorbell_types::{Duration, Instant, Psn, Qpn};
use doorbell_wire::Gid;

/// One-way delay of the wire.
pub(crate) const LATENCY: Duration = Duration::from_us(1);
/// The service both tests' servers listen on (rdma_cm TCP port 7471).
pub(crate) const SERVICE: u64 = 0x0000_0000_0106_1d2f;
/// CA GUIDs.
pub(crate) const GUID_A: u64 = 0x0002_c903_00aa_0001;
/// CA GUIDs.
pub(crate) const GUID_B: u64 = 0x0002_c903_00bb_0002;

/// Which agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    A,
    B,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// What happens to one MAD on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Lost.
    Drop,
    /// Delivered twice: on time, and again `Duration` later.
    DuplicateAfter(Duration),
}

/// Applies `fate` to MADs of `attr` sent by `from`: the `nth` one (0 is the
/// first), or every one if `nth` is `None`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule {
    pub(crate) from: Side,
    pub(crate) attr: CmAttribute,
    pub(crate) nth: Option<usize>,
    pub(crate) fate: Fate,
}

/// What a side's upper layer does, by itself, with its events.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// Answer a ConnectRequest: accept, reject with this private data, or
    /// leave it to the test.
    pub(crate) on_req: OnReq,
    /// Answer a DREQ with the DREP at once.
    pub(crate) answer_dreq: bool,
    /// Answer a SidrRequest with this status, QPN, Q_Key, private data.
    pub(crate) sidr: Option<(SidrStatus, Qpn, u32, Vec<u8>)>,
}

/// See [`Policy::on_req`].
#[derive(Debug, Clone)]
pub(crate) enum OnReq {
    Accept(RepParams, Vec<u8>),
    Reject(Vec<u8>),
    Ignore,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            on_req: OnReq::Accept(rep_params(), b"rep-private".to_vec()),
            answer_dreq: true,
            sidr: Some((
                SidrStatus::Success,
                Qpn::new(0x77),
                0x1234_5678,
                b"sidr-rep".to_vec(),
            )),
        }
    }
}

/// A MAD as it went on the wire.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub(crate) at: Instant,
    pub(crate) from: Side,
    pub(crate) bytes: [u8; MAD_LEN],
    pub(crate) mad: CmMad,
}

impl Sent {
    pub(crate) fn attr(&self) -> CmAttribute {
        self.mad.message.attribute()
    }
}

struct InFlight {
    at: Instant,
    seq: u64,
    to: Side,
    from: Peer,
    bytes: [u8; MAD_LEN],
}

/// The two agents, A (usually the client) and B (the server).
pub(crate) struct Net {
    pub(crate) now: Instant,
    pub(crate) a: CmAgent,
    pub(crate) b: CmAgent,
    pub(crate) pa: Peer,
    pub(crate) pb: Peer,
    pub(crate) policy_a: Policy,
    pub(crate) policy_b: Policy,
    pub(crate) events_a: Vec<(Instant, CmEvent)>,
    pub(crate) events_b: Vec<(Instant, CmEvent)>,
    pub(crate) log: Vec<Sent>,
    pub(crate) rules: Vec<Rule>,
    flight: Vec<InFlight>,
    seq: u64,
}

pub(crate) fn time_wait() -> Duration {
    AgentConfig::new(0, 0).time_wait
}

impl Net {
    pub(crate) fn new() -> Self {
        Self {
            now: Instant::ZERO,
            a: CmAgent::new(AgentConfig::new(GUID_A, 0x1111_2222_3333_4444)),
            b: CmAgent::new(AgentConfig::new(GUID_B, 0x5555_6666_7777_8888)),
            pa: Peer::new(Gid::from_ipv4([10, 0, 0, 1])),
            pb: Peer::new(Gid::from_ipv4([10, 0, 0, 2])),
            policy_a: Policy::default(),
            policy_b: Policy::default(),
            events_a: Vec::new(),
            events_b: Vec::new(),
            log: Vec::new(),
            rules: Vec::new(),
            flight: Vec::new(),
            seq: 0,
        }
    }

    pub(crate) fn agent(&mut self, s: Side) -> &mut CmAgent {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn addr(&self, s: Side) -> Peer {
        match s {
            Side::A => self.pa,
            Side::B => self.pb,
        }
    }

    /// How many MADs of `attr` `from` has sent so far (dropped ones too).
    pub(crate) fn count(&self, from: Side, attr: CmAttribute) -> usize {
        self.log
            .iter()
            .filter(|s| s.from == from && s.attr() == attr)
            .count()
    }

    /// The MADs of `attr` that `from` sent.
    pub(crate) fn sent(&self, from: Side, attr: CmAttribute) -> Vec<&Sent> {
        self.log
            .iter()
            .filter(|s| s.from == from && s.attr() == attr)
            .collect()
    }

    fn fate(&self, from: Side, attr: CmAttribute) -> Option<Fate> {
        let nth = self.count(from, attr);
        self.rules
            .iter()
            .find(|r| r.from == from && r.attr == attr && r.nth.is_none_or(|n| n == nth))
            .map(|r| r.fate)
    }

    fn put(&mut self, at: Instant, to: Side, bytes: [u8; MAD_LEN]) {
        self.seq += 1;
        let from = self.addr(to.other());
        self.flight.push(InFlight {
            at,
            seq: self.seq,
            to,
            from,
            bytes,
        });
    }

    /// Moves what both agents want to send onto the wire and hands their
    /// events to the policies, until neither has anything more.
    fn drain(&mut self) {
        loop {
            let mut moved = false;
            for side in [Side::A, Side::B] {
                while let Some((to, bytes)) = self.agent(side).poll_transmit() {
                    moved = true;
                    assert_eq!(
                        to.gid,
                        self.addr(side.other()).gid,
                        "MAD to an unknown peer"
                    );
                    let mad = CmMad::parse(&bytes).expect("the agent sent a MAD it cannot parse");
                    let fate = self.fate(side, mad.message.attribute());
                    let at = self.now.add(LATENCY);
                    match fate {
                        Some(Fate::Drop) => {}
                        Some(Fate::DuplicateAfter(d)) => {
                            self.put(at, side.other(), bytes);
                            self.put(at.add(d), side.other(), bytes);
                        }
                        None => self.put(at, side.other(), bytes),
                    }
                    self.log.push(Sent {
                        at: self.now,
                        from: side,
                        bytes,
                        mad,
                    });
                }
                while let Some(ev) = self.agent(side).poll_event() {
                    moved = true;
                    self.react(side, &ev);
                    match side {
                        Side::A => self.events_a.push((self.now, ev)),
                        Side::B => self.events_b.push((self.now, ev)),
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn react(&mut self, side: Side, ev: &CmEvent) {
        let now = self.now;
        let policy = match side {
            Side::A => self.policy_a.clone(),
            Side::B => self.policy_b.clone(),
        };
        let agent = self.agent(side);
        match ev {
            CmEvent::ConnectRequest { conn, .. } => match policy.on_req {
                OnReq::Accept(p, pd) => agent.accept(now, *conn, &p, &pd).unwrap(),
                OnReq::Reject(pd) => agent
                    .reject(now, *conn, doorbell_cm::RejectReason::ConsumerDefined, &pd)
                    .unwrap(),
                OnReq::Ignore => {}
            },
            CmEvent::Disconnected {
                conn,
                timed_out: false,
                ..
            } if policy.answer_dreq
                && agent.state(*conn) == Some(doorbell_cmsm::CmState::DreqRcvd) =>
            {
                agent.disconnect(now, *conn, b"drep-private").unwrap();
            }
            CmEvent::SidrRequest { conn, .. } => {
                if let Some((status, qpn, qkey, pd)) = policy.sidr {
                    agent.sidr_reply(*conn, status, qpn, qkey, &pd).unwrap();
                }
            }
            _ => {}
        }
    }

    /// Runs until nothing is in flight and no timer is due before `until`;
    /// the clock ends at the last thing that happened.
    pub(crate) fn run_until(&mut self, until: Instant) {
        for _ in 0..1_000_000 {
            self.drain();
            let next = [
                self.flight.iter().map(|f| f.at).min(),
                self.a.poll_timeout(),
                self.b.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next.filter(|t| *t <= until) else {
                return;
            };
            self.now = self.now.max(t);
            let now = self.now;
            let mut due: Vec<InFlight> = Vec::new();
            let mut i = 0;
            while i < self.flight.len() {
                if self.flight[i].at <= now {
                    due.push(self.flight.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            due.sort_by_key(|f| (f.at, f.seq));
            for f in due {
                self.agent(f.to).handle_mad(now, f.from, &f.bytes);
                self.drain();
            }
            for side in [Side::A, Side::B] {
                if self.agent(side).poll_timeout().is_some_and(|t| t <= now) {
                    self.agent(side).handle_timeout(now);
                }
            }
        }
        panic!("the run did not settle");
    }

    /// Runs until everything settles (an hour of virtual time at most).
    pub(crate) fn run(&mut self) {
        self.run_until(self.now.add(Duration::from_us(3_600_000_000)));
    }

    /// B listens on [`SERVICE`]; A connects with [`req_params`].
    pub(crate) fn connect(&mut self, pd: &[u8]) -> (ConnId, ConnId) {
        let listen = self.b.listen(SERVICE).unwrap();
        let conn = self
            .a
            .connect(
                self.now,
                self.pb,
                SERVICE,
                &req_params(self.pa, self.pb),
                pd,
            )
            .unwrap();
        (listen, conn)
    }

    /// The passive handle B reported for A's REQ.
    pub(crate) fn b_conn(&self) -> ConnId {
        self.events_b
            .iter()
            .find_map(|(_, e)| match e {
                CmEvent::ConnectRequest { conn, .. } => Some(*conn),
                _ => None,
            })
            .expect("B saw no REQ")
    }

    /// Connects and runs until both are established.
    pub(crate) fn establish(&mut self) -> (ConnId, ConnId) {
        let (_, a) = self.connect(b"req-private");
        self.run_until(self.now.add(Duration::from_us(100)));
        let b = self.b_conn();
        assert_eq!(self.a.state(a), Some(doorbell_cmsm::CmState::Established));
        assert_eq!(self.b.state(b), Some(doorbell_cmsm::CmState::Established));
        (a, b)
    }
}

pub(crate) fn events(evs: &[(Instant, CmEvent)]) -> Vec<&CmEvent> {
    evs.iter().map(|(_, e)| e).collect()
}

pub(crate) fn path(a: Peer, b: Peer) -> PathRepr {
    PathRepr {
        local_gid: a.gid,
        remote_gid: b.gid,
        flow_label: 0x1_2345,
        traffic_class: 0x20,
        hop_limit: 64,
        local_ack_timeout: 18,
        ..PathRepr::default()
    }
}

pub(crate) fn req_params(a: Peer, b: Peer) -> ReqParams {
    ReqParams {
        local_qpn: Qpn::new(0x00_0111),
        starting_psn: Psn::new(0x00_1000),
        qp_type: QpType::Rc,
        responder_resources: 4,
        initiator_depth: 2,
        retry_count: 7,
        rnr_retry_count: 6,
        path_mtu: 5,
        pkey: 0xffff,
        flow_control: true,
        srq: false,
        primary_path: path(a, b),
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 15,
        auto_rtu: true,
    }
}

pub(crate) fn rep_params() -> RepParams {
    RepParams {
        local_qpn: Qpn::new(0x00_0222),
        starting_psn: Psn::new(0x00_2000),
        responder_resources: 8,
        initiator_depth: 1,
        target_ack_delay: 15,
        failover_accepted: 1,
        rnr_retry_count: 5,
        flow_control: true,
        srq: true,
    }
}

pub(crate) fn sidr_params() -> SidrReqParams {
    SidrReqParams {
        pkey: 0xffff,
        response_timeout: 18,
        max_cm_retries: 3,
    }
}

/// Private data as it comes out of an event: `pd`, then zeros.
pub(crate) fn padded<const N: usize>(pd: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a[..pd.len()].copy_from_slice(pd);
    a
}
