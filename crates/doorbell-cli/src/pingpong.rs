//! `doorbell pingpong`: rdma-core's `ibv_rc_pingpong`, between two
//! processes or two hosts, on a doorbell NIC whose port is a UDP socket.
//!
//! # Model
//! Each side starts its own NIC ([`LiveNic::start_udp`]) on the address
//! `--addr` names: RoCEv2 goes between the two NICs' UDP ports 4791. Then
//! it does what `libibverbs/examples/rc_pingpong.c` (rdma-core v44) does,
//! step for step:
//! 1. one buffer of `size` bytes (filled with 0x7b), registered with local
//!    write access; one CQ of `rx_depth + 1` entries shared by both queues;
//!    one RC QP with one send WR and `rx_depth` receive WRs, moved to INIT;
//!    SENDs are inline when the QP's `max_inline_data` allows `size`;
//! 2. `rx_depth` receives posted; with `-e` the CQ is armed;
//! 3. the out-of-band exchange over TCP port `-p`: without a peer name the
//!    command waits as the server, with one it connects. Each side sends
//!    its LID, QPN, first PSN (random) and GID as the 52 bytes
//!    `"%04x:%06x:%06x:%s\0"` (the GID as 32 hex digits); the server reads
//!    the client's, connects its QP, answers with its own and waits for the
//!    client's `"done\0"`. So a `doorbell pingpong` talks to an
//!    `ibv_rc_pingpong` too, out of band;
//! 4. the QP goes to RTR (path MTU `-m`, the peer's QPN and PSN, one READ
//!    or atomic in, minimum RNR timer 12, service level `-l`, a GRH to the
//!    peer's GID from GID index `-g` with hop limit 1) and RTS (timeout 14,
//!    retry count 7, RNR retry 7);
//! 5. the loop ([`Endpoint::run`]): the client sends first; each side keeps
//!    one SEND and one receive in flight and sends the next message once
//!    both of its last ones completed, reposting receives whenever all but
//!    one are used, until it has sent and received `iters` messages. With
//!    `-e` it sleeps on a completion event before each poll;
//! 6. the summary lines: `N bytes in X seconds = Y Mbit/sec` and
//!    `N iters in X seconds = Z usec/iter`, where N bytes = 2 × size ×
//!    iters and an iteration is one round trip.
//!
//! # Where it differs from ibv_rc_pingpong
//! - GID 0 (the port's one GID, the IPv4-mapped form of `--addr`) is used
//!   without `-g`: RoCE needs a GID, and ibv_rc_pingpong fails on RoCE
//!   without one. A peer that sends an all-zero GID is refused with that
//!   advice.
//! - `-c` fills the client's buffer with a pattern that changes with every
//!   byte (rdma-core writes zero at each page start: `i / page_size %
//!   sizeof(char)`), and both sides check every byte of their buffer at the
//!   end: it must hold the client's pattern, which the server echoed. Pages
//!   that do not are printed as `invalid data in page N`, and the command
//!   then fails instead of exiting 0.
//! - The client retries a refused connection until `--timeout`, so that
//!   both sides may be started at once; a wait for a completion (or a
//!   completion event) longer than `--timeout` is an error, not a hang.
//!
//! # JSON
//! With `--json` the only output is one object: `role`, `device`, `addr`,
//! `local` and `remote` (`lid`, `qpn`, `psn`, `gid`), `size`, `iters`,
//! `mtu`, `rx_depth`, `inline`, `events`, `cq_events`, `bytes`, `seconds`,
//! `mbit_per_sec`, `usec_per_iter`, `validated` (null without `-c`),
//! `invalid_pages`, and what the events cost the bus: `eqe_writes` (EQEs
//! the NIC wrote into the kernel's event queues) and `interrupts` (MSI-X
//! writes), both zero without `-e`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use doorbell_hif::DeviceLink;
use doorbell_pcie::DmaPurpose;
use doorbell_rt::{LiveNic, RtError};
use doorbell_types::{Psn, Qpn};
use doorbell_verbs::{
    Access, AddressVector, Context, Cq, Mr, Pd, Qp, QpAttrs, QpCaps, QpInitAttr, QpState, QpType,
    SendFlags, SendWr, Wc, WcStatus, WrOpcode,
};
use serde::Serialize;

/// ibv_rc_pingpong's default TCP port for the exchange.
pub const DEFAULT_PORT: u16 = 18515;
/// wr_id of every receive.
const RECV_WRID: u64 = 1;
/// wr_id of every send.
const SEND_WRID: u64 = 2;
/// What ibv_rc_pingpong fills its buffer with.
const FILL: u8 = 0x7b;
/// Page size of the `-c` check's report.
const PAGE: usize = 4096;
/// Longest device name (`ibv_device.name` is 64 bytes with its NUL).
const MAX_NAME: usize = 63;

/// `doorbell pingpong` options: ibv_rc_pingpong's, plus `--addr`.
#[derive(Debug, Clone, clap::Args)]
pub struct PingpongArgs {
    /// The server to connect to (host name or address). Without it, wait
    /// for a client as the server.
    pub servername: Option<String>,
    /// The NIC's own IPv4 address: its UDP port 4791 binds there and its
    /// GID 0 is the IPv4-mapped form (e.g. 127.0.0.2, and 127.0.0.3 for
    /// the other side on the same host).
    #[arg(long, value_name = "IP")]
    pub addr: String,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Name of the device (the NIC this command starts).
    #[arg(short = 'd', long = "ib-dev", default_value = "doorbell0")]
    pub ib_dev: String,
    /// Port of the device (a doorbell NIC has one: 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u32,
    /// Size of a message, bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(0..=1 << 30))]
    pub size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Receives kept posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub rx_depth: u32,
    /// Messages each way.
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Service level (0-15).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u32,
    /// Local GID index (the port has one GID, index 0, used by default).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
    /// Sleep on CQ events (req_notify_cq / get_cq_event) instead of
    /// polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Validate the buffer's contents at the end (both sides must pass it).
    #[arg(short = 'c', long = "chk")]
    pub validate: bool,
    /// Seconds to wait for the peer: to connect (retried while refused),
    /// for its part of the exchange, and for each completion.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub timeout: f64,
    /// At the end, print on stderr what the run cost on the bus, per QP,
    /// and each counter that is not zero with what it means.
    #[arg(long)]
    pub stats: bool,
    /// Write every frame the NIC sends and receives to FILE, as pcapng
    /// (tshark and Wireshark decode them as RoCEv2).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Write the NIC's timeline to FILE at the end, as Chrome trace-event
    /// JSON for Perfetto UI: the device's work, register stores, DMAs and
    /// frames, stamped with the wall clock.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
}

/// What one side of the loop is run with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Bytes per message.
    pub size: u32,
    /// Path MTU, bytes.
    pub mtu: u32,
    /// Receives kept posted.
    pub rx_depth: u32,
    /// Messages each way.
    pub iters: u32,
    /// Service level.
    pub sl: u8,
    /// Wait on completion events instead of polling.
    pub events: bool,
    /// Fill (client) and check (both) the buffer.
    pub validate: bool,
    /// Longest wait for one completion.
    pub timeout: Duration,
}

impl Default for Settings {
    /// ibv_rc_pingpong's defaults.
    fn default() -> Self {
        Self {
            size: 4096,
            mtu: 1024,
            rx_depth: 500,
            iters: 1000,
            sl: 0,
            events: false,
            validate: false,
            timeout: Duration::from_secs(10),
        }
    }
}

impl PingpongArgs {
    /// The loop's settings, with every option checked.
    pub fn settings(&self) -> Result<Settings> {
        if !matches!(self.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            bail!(
                "invalid MTU {} (-m): use 256, 512, 1024, 2048 or 4096",
                self.mtu
            );
        }
        if self.sl > 15 {
            bail!("invalid service level {} (-l): use 0 to 15", self.sl);
        }
        if self.ib_port != 1 {
            bail!(
                "port {} (-i) does not exist: a doorbell NIC has one port, 1",
                self.ib_port
            );
        }
        if let Some(g) = self.gid_idx.filter(|&g| g != 0) {
            bail!("GID index {g} (-g) does not exist: the port has one GID, index 0");
        }
        if self.ib_dev.is_empty() || self.ib_dev.len() > MAX_NAME {
            bail!("device name (-d) must have 1 to {MAX_NAME} bytes");
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 86_400.0) {
            bail!(
                "invalid --timeout {}: give seconds, more than 0",
                self.timeout
            );
        }
        Ok(Settings {
            size: self.size,
            mtu: self.mtu,
            rx_depth: self.rx_depth,
            iters: self.iters,
            sl: self.sl as u8,
            events: self.events,
            validate: self.validate,
            timeout: Duration::from_secs_f64(self.timeout),
        })
    }

    /// `--addr` as an IPv4 address.
    pub fn ipv4(&self) -> Result<Ipv4Addr> {
        match self.addr.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => Ok(a),
            Ok(std::net::IpAddr::V6(_)) => bail!(
                "--addr {}: doorbell's UDP ports speak RoCEv2 over IPv4; give an IPv4 address",
                self.addr
            ),
            Err(_) => bail!(
                "--addr {:?} is not an IP address (e.g. 127.0.0.2)",
                self.addr
            ),
        }
    }
}

/// What each side tells the other out of band (ibv_rc_pingpong's
/// `struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID: 0 on Ethernet.
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN the side sends (24 bits).
    pub psn: u32,
    /// GID.
    pub gid: [u8; 16],
}

/// The message of the exchange could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMessage(pub String);

impl std::fmt::Display for BadMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bad address message from the peer: {:?} (expected LID:QPN:PSN:GID in hex)",
            self.0
        )
    }
}

impl std::error::Error for BadMessage {}

impl Dest {
    /// Bytes of the message on the wire, with its NUL.
    pub const WIRE_LEN: usize = 52;

    /// The message: `"%04x:%06x:%06x:%s"` and a NUL, the GID as 32 hex
    /// digits in wire order (rdma-core's `gid_to_wire_gid`).
    pub fn to_wire(&self) -> [u8; Self::WIRE_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0x00ff_ffff,
            self.psn & 0x00ff_ffff
        );
        let mut out = [0u8; Self::WIRE_LEN];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// Reads a message as rdma-core's `sscanf("%x:%x:%x:%s")` and
    /// `wire_gid_to_gid` would, but strictly: four hex fields, the GID of
    /// 32 digits, nothing else before the NUL.
    pub fn from_wire(msg: &[u8]) -> Result<Self, BadMessage> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = String::from_utf8_lossy(&msg[..end]).into_owned();
        let bad = || BadMessage(text.clone());
        let mut parts = text.split(':');
        let mut field = |max_digits: usize| {
            parts
                .next()
                .filter(|f| !f.is_empty() && f.len() <= max_digits)
                .and_then(|f| u32::from_str_radix(f, 16).ok())
                .ok_or_else(bad)
        };
        let lid = field(4)? as u16;
        let qpn = field(6)?;
        let psn = field(6)?;
        let g = parts.next().ok_or_else(bad)?;
        if parts.next().is_some() || g.len() != 32 || !g.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self { lid, qpn, psn, gid })
    }

    /// The GID as `inet_ntop` prints it (`::ffff:127.0.0.2`).
    pub fn gid_text(&self) -> String {
        Ipv6Addr::from(self.gid).to_string()
    }
}

impl std::fmt::Display for Dest {
    /// ibv_rc_pingpong's `LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            self.gid_text()
        )
    }
}

impl Serialize for Dest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Dest", 4)?;
        st.serialize_field("lid", &self.lid)?;
        st.serialize_field("qpn", &self.qpn)?;
        st.serialize_field("psn", &self.psn)?;
        st.serialize_field("gid", &self.gid_text())?;
        st.end()
    }
}

/// `ibv_wc_status_str`.
pub fn wc_status_str(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "success",
        WcStatus::LocLenErr => "local length error",
        WcStatus::LocQpOpErr => "local QP operation error",
        WcStatus::LocProtErr => "local protection error",
        WcStatus::WrFlushErr => "Work Request Flushed Error",
        WcStatus::MwBindErr => "memory management operation error",
        WcStatus::BadRespErr => "bad response error",
        WcStatus::LocAccessErr => "local access error",
        WcStatus::RemInvReqErr => "remote invalid request error",
        WcStatus::RemAccessErr => "remote access error",
        WcStatus::RemOpErr => "remote operation error",
        WcStatus::RetryExcErr => "transport retry counter exceeded",
        WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
        WcStatus::RemAbortErr => "operation aborted",
        WcStatus::GeneralErr => "general error",
    }
}

/// The byte `-c` expects at offset `i` of the buffer: it changes with
/// every byte and every page.
pub fn pattern_byte(i: usize) -> u8 {
    (i as u8)
        .wrapping_mul(7)
        .wrapping_add((i / PAGE) as u8)
        .wrapping_add(1)
}

/// What one side's loop measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Wall time of the loop, from the first message on.
    pub secs: f64,
    /// Completion events waited for (`-e`).
    pub cq_events: u64,
    /// With `-c`: the pages of the buffer that do not hold the pattern.
    pub invalid_pages: Option<Vec<usize>>,
}

/// The two summary lines, as ibv_rc_pingpong prints them: `2 × size ×
/// iters` bytes, and one iteration per round trip.
pub fn summary(size: u32, iters: u32, secs: f64) -> String {
    let usec = secs * 1e6;
    let bytes = 2 * u64::from(size) * u64::from(iters);
    format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec\n\
         {iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        bytes as f64 * 8.0 / usec,
        usec / 1e6,
        usec / f64::from(iters)
    )
}

/// One side of the ping-pong: ibv_rc_pingpong's `pingpong_context`.
pub struct Endpoint {
    ctx: Context,
    _pd: Pd,
    mr: Mr,
    cq: Cq,
    qp: Qp,
    s: Settings,
    inline: bool,
    routs: u32,
    local: Dest,
}

impl Endpoint {
    /// Opens a context on `link` and does steps 1 and 2 of the module docs:
    /// buffer, CQ, QP in INIT, `rx_depth` receives, the CQ armed with
    /// `events`. The side will first send PSN `psn`.
    pub fn new(link: Arc<dyn DeviceLink>, s: Settings, psn: Psn) -> Result<Self> {
        let ctx = Context::open(link).context("Couldn't get context")?;
        let pd = ctx.alloc_pd().context("Couldn't allocate PD")?;
        let mr = pd
            .reg_mr(s.size.max(1) as usize, Access(Access::LOCAL_WRITE))
            .context("Couldn't register MR")?;
        mr.write(0, &vec![FILL; s.size as usize])
            .context("Couldn't fill the buffer")?;
        let cq = ctx
            .create_cq(s.rx_depth + 1)
            .context("Couldn't create CQ")?;
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                cap: QpCaps {
                    max_send_wr: 1,
                    max_recv_wr: s.rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
                srq: None,
            })
            .context("Couldn't create QP")?;
        let inline = qp.caps().max_inline_data >= s.size;
        qp.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                access: Some(Access(0)),
                ..Default::default()
            },
        )
        .context("Failed to modify QP to INIT")?;
        let local = Dest {
            lid: 0,
            qpn: qp.qpn().get(),
            psn: psn.get(),
            gid: ctx.gid(),
        };
        let mut ep = Self {
            ctx,
            _pd: pd,
            mr,
            cq,
            qp,
            s,
            inline,
            routs: 0,
            local,
        };
        ep.routs = ep.post_recvs(s.rx_depth)?;
        if s.events {
            ep.cq
                .req_notify(false)
                .context("Couldn't request CQ notification")?;
        }
        Ok(ep)
    }

    /// What this side tells its peer.
    pub fn local(&self) -> Dest {
        self.local
    }

    /// Whether SENDs go inline.
    pub fn inline(&self) -> bool {
        self.inline
    }

    /// Step 4: RTR towards `remote`, then RTS.
    pub fn connect(&self, remote: &Dest) -> Result<()> {
        if remote.gid == [0; 16] {
            bail!(
                "the peer sent no GID (LID {:#06x} only): RoCE needs one; run the peer with -g 0",
                remote.lid
            );
        }
        if Ipv6Addr::from(remote.gid)
            .to_ipv4_mapped()
            .is_none_or(|a| a.is_unspecified())
        {
            bail!(
                "the peer's GID {} is not an IPv4-mapped address: doorbell's UDP ports speak \
                 RoCEv2 over IPv4",
                remote.gid_text()
            );
        }
        self.qp
            .modify(
                QpState::Rtr,
                &QpAttrs {
                    av: Some(AddressVector {
                        dgid: remote.gid,
                        sgid_index: 0,
                        hop_limit: 1,
                        traffic_class: 0,
                        sl: self.s.sl,
                    }),
                    path_mtu: Some(self.s.mtu),
                    dest_qpn: Some(Qpn::new(remote.qpn)),
                    rq_psn: Some(Psn::new(remote.psn)),
                    max_dest_rd_atomic: Some(1),
                    min_rnr_timer: Some(12),
                    ..Default::default()
                },
            )
            .context("Failed to modify QP to RTR")?;
        self.qp
            .modify(
                QpState::Rts,
                &QpAttrs {
                    sq_psn: Some(Psn::new(self.local.psn)),
                    timeout: Some(14),
                    retry_cnt: Some(7),
                    rnr_retry: Some(7),
                    max_rd_atomic: Some(1),
                    ..Default::default()
                },
            )
            .context("Failed to modify QP to RTS")?;
        Ok(())
    }

    /// Posts `n` receives of the whole buffer; returns how many it posted.
    /// They go as one list: one call, one lock of the RQ and one doorbell
    /// record for all (ibv_rc_pingpong makes a call for each, and the
    /// round trip this program reports is the mean, reposts included).
    fn post_recvs(&self, n: u32) -> Result<u32> {
        let sge = self.mr.sge(0, self.s.size)?;
        let wrs = (0..n).map(|_| (RECV_WRID, std::iter::once(sge)));
        match self.qp.post_recv_iter(wrs) {
            Ok(()) => Ok(n),
            Err(e) if e.index == 0 => Err(e.error).context("Couldn't post receive"),
            Err(e) => Ok(e.index as u32),
        }
    }

    fn post_send(&self) -> Result<()> {
        let flags = if self.inline {
            SendFlags::SIGNALED | SendFlags::INLINE
        } else {
            SendFlags::SIGNALED
        };
        self.qp
            .post_send(&[SendWr {
                wr_id: SEND_WRID,
                sg_list: &[self.mr.sge(0, self.s.size)?],
                opcode: WrOpcode::Send,
                flags,
                ud: None,
            }])
            .context("Couldn't post send")
    }

    /// Step 5, the loop; the client (`client`) sends first. Returns the
    /// time it took and, with `validate`, the pages that failed the check.
    /// `bar` is told the round trips done.
    pub fn run(&mut self, client: bool, bar: &crate::progress::Bar) -> Result<Outcome> {
        let (size, iters) = (self.s.size as usize, self.s.iters);
        let mut pending = RECV_WRID;
        if client {
            if self.s.validate {
                let p: Vec<u8> = (0..size).map(pattern_byte).collect();
                self.mr.write(0, &p)?;
            }
            self.post_send()?;
            pending |= SEND_WRID;
        }
        let start = Instant::now();
        let (mut rcnt, mut scnt, mut cq_events) = (0u32, 0u32, 0u64);
        let mut wc = [Wc::default(); 2];
        let mut last = Instant::now();
        let mut idle = 0u32;
        while rcnt < iters || scnt < iters {
            if self.s.events {
                let cqn = self.ctx.get_cq_event(self.s.timeout).ok_or_else(|| {
                    anyhow!(
                        "no completion event for {:.1} s: the peer stopped answering \
                         ({rcnt} received, {scnt} sent of {iters})",
                        self.s.timeout.as_secs_f64()
                    )
                })?;
                cq_events += 1;
                if cqn != self.cq.cqn() {
                    bail!("CQ event for unknown CQ {cqn:?}");
                }
                self.cq.ack_event();
                self.cq
                    .req_notify(false)
                    .context("Couldn't request CQ notification")?;
            }
            let n = self.cq.poll(&mut wc).context("poll CQ failed")?;
            if n == 0 {
                if !self.s.events {
                    idle += 1;
                    if idle.is_multiple_of(1024) && last.elapsed() > self.s.timeout {
                        bail!(
                            "no completion for {:.1} s: the peer stopped answering \
                             ({rcnt} received, {scnt} sent of {iters})",
                            self.s.timeout.as_secs_f64()
                        );
                    }
                }
                continue;
            }
            last = Instant::now();
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    bail!(
                        "Failed status {} ({}) for wr_id {}",
                        wc_status_str(w.status),
                        w.status as u32,
                        w.wr_id
                    );
                }
                match w.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        self.routs -= 1;
                        if self.routs <= 1 {
                            self.routs += self.post_recvs(self.s.rx_depth - self.routs)?;
                            if self.routs < self.s.rx_depth {
                                bail!("Couldn't post receive ({})", self.routs);
                            }
                        }
                        rcnt += 1;
                        if rcnt % 1024 == 0 {
                            bar.set(u64::from(rcnt));
                        }
                    }
                    other => bail!("Completion for unknown wr_id {other}"),
                }
                pending &= !w.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send()?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let invalid_pages = if self.s.validate {
            let mut buf = vec![0u8; size];
            self.mr.read(0, &mut buf)?;
            let mut bad: Vec<usize> = buf
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b != pattern_byte(i))
                .map(|(i, _)| i / PAGE)
                .collect();
            bad.dedup();
            Some(bad)
        } else {
            None
        };
        Ok(Outcome {
            secs,
            cq_events,
            invalid_pages,
        })
    }
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// "server" or "client".
    pub role: &'static str,
    /// Device name.
    pub device: String,
    /// The NIC's address.
    pub addr: String,
    /// This side.
    pub local: Dest,
    /// The peer.
    pub remote: Dest,
    /// Bytes per message.
    pub size: u32,
    /// Messages each way.
    pub iters: u32,
    /// Path MTU.
    pub mtu: u32,
    /// Receives kept posted.
    pub rx_depth: u32,
    /// SENDs went inline.
    pub inline: bool,
    /// Completion events were used.
    pub events: bool,
    /// Completion events waited for.
    pub cq_events: u64,
    /// 2 × size × iters.
    pub bytes: u64,
    /// Wall time of the loop.
    pub seconds: f64,
    /// Bandwidth as ibv_rc_pingpong reports it.
    pub mbit_per_sec: f64,
    /// Microseconds per round trip.
    pub usec_per_iter: f64,
    /// With `-c`: whether every byte held the pattern; null without.
    pub validated: Option<bool>,
    /// Pages that failed the check.
    pub invalid_pages: Vec<usize>,
    /// EQEs the NIC wrote (one per completion event).
    pub eqe_writes: u64,
    /// MSI-X interrupts the NIC raised for them.
    pub interrupts: u64,
}

/// A PSN from the OS's randomness (ibv_rc_pingpong: `lrand48() & 0xffffff`).
pub fn random_psn() -> Psn {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    Psn::new(h.finish() as u32 & 0x00ff_ffff)
}

/// The server's half of the exchange on an accepted `conn`: read the
/// client's [`Dest`], `connect` to it, answer with `local`, wait for
/// "done".
pub fn server_exchange(
    conn: &mut TcpStream,
    local: &Dest,
    timeout: Duration,
    connect: impl FnOnce(&Dest) -> Result<()>,
) -> Result<Dest> {
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    let mut msg = [0u8; Dest::WIRE_LEN];
    conn.read_exact(&mut msg)
        .context("Couldn't read remote address")?;
    let remote = Dest::from_wire(&msg)?;
    connect(&remote).context("Couldn't connect to remote QP")?;
    conn.write_all(&local.to_wire())
        .context("Couldn't send local address")?;
    let mut done = [0u8; 5];
    conn.read_exact(&mut done)
        .context("Couldn't receive \"done\" from the client")?;
    Ok(remote)
}

/// The client's half: connect to `host:port` (retrying while refused until
/// `timeout`), send `local`, read the server's [`Dest`], say "done".
pub fn client_exchange(host: &str, port: u16, local: &Dest, timeout: Duration) -> Result<Dest> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .collect();
    if addrs.is_empty() {
        bail!("cannot resolve {host}: no address");
    }
    let deadline = Instant::now() + timeout;
    let mut conn = 'retry: loop {
        let mut last = None;
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(a, left.max(Duration::from_millis(10))) {
                Ok(c) => break 'retry c,
                Err(e) => last = Some(e),
            }
        }
        let e = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
        let refused = e.contains("refused");
        if !refused || Instant::now() >= deadline {
            bail!(
                "Couldn't connect to {host}:{port}: {e} (is `doorbell pingpong` waiting there \
                 as the server, with the same -p?)"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    conn.write_all(&local.to_wire())
        .context("Couldn't send local address")?;
    let mut msg = [0u8; Dest::WIRE_LEN];
    conn.read_exact(&mut msg)
        .context("Couldn't read remote address")?;
    conn.write_all(b"done\0")
        .context("Couldn't send \"done\" to the server")?;
    Ok(Dest::from_wire(&msg)?)
}

/// Why a NIC could not start, in the user's terms.
fn nic_error(e: RtError, addr: Ipv4Addr) -> anyhow::Error {
    match e {
        RtError::AddressInUse(_) => anyhow!(
            "UDP port 4791 on {addr} is in use (another doorbell NIC there?): give each NIC \
             its own --addr"
        ),
        RtError::Socket {
            kind: std::io::ErrorKind::AddrNotAvailable,
            ..
        } => anyhow!("--addr {addr} is not an address of this host"),
        e => anyhow::Error::new(e).context(format!("cannot start the NIC on {addr}")),
    }
}

/// `doorbell pingpong`: starts the NIC, exchanges addresses, runs the
/// loop and prints the summary (or, with `json`, the [`Report`]).
pub fn main(args: &PingpongArgs, json: bool) -> Result<()> {
    let s = args.settings()?;
    let addr = args.ipv4()?;
    // The server listens before anything else, so that a port in use is
    // the first thing it reports.
    let listener = match args.servername {
        Some(_) => None,
        None => Some(
            TcpListener::bind((Ipv4Addr::UNSPECIFIED, args.port)).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    anyhow!(
                        "TCP port {} (-p) is in use (another pingpong server?): choose another",
                        args.port
                    )
                } else {
                    anyhow::Error::new(e).context(format!("Couldn't listen to port {}", args.port))
                }
            })?,
        ),
    };
    // The same switches as the C library's (DOORBELL_SHM, DOORBELL_UDP_GSO,
    // DOORBELL_ADAPTIVE_RETRANSMIT, DOORBELL_SPIN_US, DOORBELL_LINGER_US);
    // the name and address are the options'.
    use doorbell_rt::ProcessNicConfig as Cfg;
    let env = Cfg::from_lookup(|v| {
        [
            Cfg::SHM_VAR,
            Cfg::UDP_GSO_VAR,
            Cfg::ADAPTIVE_VAR,
            Cfg::SPIN_VAR,
            Cfg::LINGER_VAR,
        ]
        .contains(&v)
        .then(|| std::env::var_os(v))
        .flatten()
    })
    .map_err(|e| anyhow!("{e}"))?;
    let opts = doorbell_rt::NicOptions {
        shm: env.shm,
        udp_gso: env.udp_gso,
        shm_spin: env.shm_spin,
        shm_linger: env.shm_linger,
        adaptive_retransmit_floor: env.adaptive_retransmit_floor,
        pcap: args.pcap.clone(),
        trace: args.trace.is_some(),
        ..doorbell_rt::NicOptions::default()
    };
    let nic = LiveNic::start_with(&args.ib_dev, addr.octets(), doorbell_rt::Port::Udp, opts)
        .map_err(|e| nic_error(e, addr))?;
    let nic = Arc::new(nic);
    let mut ep = Endpoint::new(nic.clone(), s, random_psn())?;
    let local = ep.local();
    if !json {
        crate::print_out(&format!("  local address:  {local}"));
    }
    let remote = match (&args.servername, listener) {
        (Some(host), _) => {
            let r = client_exchange(host, args.port, &local, s.timeout)?;
            ep.connect(&r).context("Couldn't connect to remote QP")?;
            r
        }
        (None, Some(l)) => {
            let (mut conn, _) = l.accept().context("accept() failed")?;
            drop(l);
            server_exchange(&mut conn, &local, s.timeout, |r| ep.connect(r))?
        }
        (None, None) => unreachable!("the server has a listener"),
    };
    if !json {
        crate::print_out(&format!("  remote address: {remote}"));
    }
    let client = args.servername.is_some();
    let bar = crate::progress::Bar::new(u64::from(s.iters), "round trips", json);
    let out = ep.run(client, &bar);
    bar.finish();
    let out = out?;
    let bad = out.invalid_pages.clone().unwrap_or_default();
    if json {
        let usec = out.secs * 1e6;
        let bytes = 2 * u64::from(s.size) * u64::from(s.iters);
        let bus = nic.counters(None).0;
        let r = Report {
            role: if client { "client" } else { "server" },
            device: args.ib_dev.clone(),
            addr: addr.to_string(),
            local,
            remote,
            size: s.size,
            iters: s.iters,
            mtu: s.mtu,
            rx_depth: s.rx_depth,
            inline: ep.inline(),
            events: s.events,
            cq_events: out.cq_events,
            bytes,
            seconds: out.secs,
            mbit_per_sec: bytes as f64 * 8.0 / usec,
            usec_per_iter: usec / f64::from(s.iters),
            validated: out.invalid_pages.as_ref().map(|p| p.is_empty()),
            invalid_pages: bad.clone(),
            eqe_writes: bus.writes(DmaPurpose::Eqe),
            interrupts: bus.writes(DmaPurpose::Msix),
        };
        crate::print_out(&serde_json::to_string_pretty(&r)?);
    } else {
        crate::print_out(&summary(s.size, s.iters, out.secs));
        for p in &bad {
            crate::print_out(&format!("invalid data in page {p}"));
        }
    }
    if args.stats {
        eprint!("{}", nic.snapshot().to_table());
    }
    if let (Some(path), Some(t)) = (&args.trace, nic.take_trace()) {
        std::fs::write(path, t.to_json()).with_context(|| format!("--trace {}", path.display()))?;
    }
    if !bad.is_empty() {
        bail!(
            "-c: {} of {} pages of the buffer do not hold the client's pattern",
            bad.len(),
            (s.size as usize).div_ceil(PAGE)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
