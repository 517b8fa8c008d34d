//! `doorbell sim`: what a verbs workload costs on modelled hardware.
//!
//! The same NIC, driver and provider code as the live runtime runs under the
//! discrete-event simulator of `doorbell-sim`, on a hardware profile. Options
//! follow perftest's vocabulary.
//!
//! # JSON
//! One object per run ([`doorbell_sim::Report`]): `msg_rate_mops`,
//! `bandwidth_gbps`, `latency_ns` (`p50`, `p99`), `per_post` (the main job's
//! keys plus `host_to_device_bytes` and `device_to_host_bytes` on the link,
//! TLP overheads included), `utilisation` (`pcie_to_device`,
//! `pcie_to_host`, `nic_processing_units`, `cores`: one per posting core),
//! `steps` (one post's critical path in ns: `wqe_write`, `doorbell`,
//! `wqe_dma_read`, `payload_dma_read`, `wire_and_ack`, `cqe_dma_write`,
//! `total`), and `profile`, `workload`, `simulated_ns`, `events`.
//! `--sweep` prints an array of `{ "profile", "config", ...report }` rows.

use crate::progress::Bar;
use anyhow::{Context as _, Result, bail};
use doorbell_hif::QpType;
use doorbell_sim::{Op, Profile, Report, Workload};
use serde::Serialize;

use crate::pcie::ConventionArg;

mod picture;

/// Transport, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QpTypeArg {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
}

/// Operation, as perftest names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpArg {
    /// SEND.
    Send,
    /// SEND with immediate.
    #[value(name = "send_imm", alias = "send-imm")]
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    #[value(name = "write_imm", alias = "write-imm")]
    WriteImm,
    /// RDMA READ.
    Read,
    /// Atomic compare and swap.
    Cas,
    /// Atomic fetch and add.
    Faa,
}

/// perftest's test type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestArg {
    /// Bandwidth (ib_*_bw): the send queue kept full.
    Bw,
    /// Latency (ib_*_lat): one message outstanding; SEND and WRITE as a
    /// ping-pong, READ and atomics one at a time.
    Lat,
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// Which sweep to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sweep {
    /// Each of postlist, inline, unsignalled completions and BlueFlame on
    /// its own and all together, on every built-in profile.
    Features,
    /// 1, 4, 16 and 64 threads posting through one context, each count
    /// without and with thread domains ("16 threads" and "16 threads, TD"):
    /// what the bfreg locks cost and what a TD saves.
    Threads,
    /// Message sizes from 2 B to 8 MiB in powers of two, as perftest's -a
    /// runs them, on every built-in profile (UD: up to the MTU). Runs of
    /// large messages are shortened so that each size moves at most
    /// 256 MiB.
    Sizes,
}

/// `doorbell sim` options.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Hardware profile: a built-in name (connectib-haswell,
    /// connectx4-thunderx2) or the path of a TOML file.
    #[arg(long, default_value = "connectib-haswell")]
    pub profile: String,
    /// Print the profile as TOML (to copy and edit) and exit.
    #[arg(long)]
    pub print_profile: bool,
    /// perftest's test type: bw (the queue kept full) or lat (one message
    /// outstanding, reported as perftest's latency table).
    #[arg(long, value_enum, default_value_t = TestArg::Bw)]
    pub test: TestArg,
    /// Transport.
    #[arg(long, value_enum, default_value_t = QpTypeArg::Rc)]
    pub qp_type: QpTypeArg,
    /// Operation.
    #[arg(long, value_enum, default_value_t = OpArg::Write)]
    pub op: OpArg,
    /// Message size in bytes.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=8_388_608))]
    pub size: u32,
    /// Queue pairs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub qps: u32,
    /// Posting threads (QPs are dealt round-robin).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,
    /// Thread domains: each thread's QPs are made in a parent domain with a
    /// TD of that thread and ring a dynamic register of their own, lockless.
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    pub td: OnOff,
    /// WRs per post_send (perftest -l).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub postlist: u32,
    /// Inline threshold in bytes (perftest -I): messages up to this size go inline.
    #[arg(long = "inline", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=512))]
    pub inline_threshold: u32,
    /// Signal one WR in N (perftest -Q).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub signal_every: u32,
    /// BlueFlame.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub bf: OnOff,
    /// Wait for completions with events (perftest -e): arm the CQ and block
    /// until the NIC's EQE and interrupt wake the thread, instead of polling.
    #[arg(short = 'e', long)]
    pub events: bool,
    /// WRs per QP.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub iters: u64,
    /// Send queue depth per QP (perftest -t).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub tx_depth: u32,
    /// Path MTU.
    #[arg(long, default_value_t = 1024)]
    pub mtu: u32,
    /// Per-TLP constants, overriding the profile's.
    #[arg(long, value_enum)]
    pub pcie_convention: Option<ConventionArg>,
    /// Seed of the run's random choices (PSNs, thread start offsets).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run a sweep instead of one workload.
    #[arg(long, value_enum)]
    pub sweep: Option<Sweep>,
    /// Write every frame both NICs send and receive to FILE, as pcapng, at
    /// virtual time (the run starts at the Unix epoch); one run only.
    #[arg(long, value_name = "FILE", conflicts_with = "sweep")]
    pub pcap: Option<std::path::PathBuf>,
    /// Write the run's timeline to FILE as Chrome trace-event JSON, for
    /// Perfetto UI (ui.perfetto.dev) or chrome://tracing: each core, PCIe
    /// direction, NIC processing unit, DMA engine and wire direction, and
    /// each work request's steps 0 to 5. One run only; keep --iters small
    /// (every TLP is an event).
    #[arg(long, value_name = "FILE", conflicts_with = "sweep")]
    pub trace: Option<std::path::PathBuf>,
    /// Draw one unloaded post's critical path (steps 0 to 5 across host,
    /// root complex, NIC and wire): printed as text, and drawn into FILE
    /// when one is given, as SVG or PNG by its extension.
    #[arg(long, value_name = "FILE", num_args = 0..=1, conflicts_with = "sweep")]
    pub explain: Option<Option<std::path::PathBuf>>,
    /// Draw the sweep into FILE (SVG or PNG by its extension): message rate
    /// and bandwidth against what it varies, one series per configuration,
    /// the profile's published figures where the sweep runs their
    /// workload, and the port's and the PCIe link's bandwidth.
    #[arg(long, value_name = "FILE", requires = "sweep")]
    pub plot: Option<std::path::PathBuf>,
}

impl SimArgs {
    /// The workload the options describe.
    pub fn workload(&self) -> Workload {
        Workload {
            qp_type: match self.qp_type {
                QpTypeArg::Rc => QpType::Rc,
                QpTypeArg::Ud => QpType::Ud,
            },
            op: match self.op {
                OpArg::Send => Op::Send,
                OpArg::SendImm => Op::SendImm,
                OpArg::Write => Op::Write,
                OpArg::WriteImm => Op::WriteImm,
                OpArg::Read => Op::Read,
                OpArg::Cas => Op::Cas,
                OpArg::Faa => Op::Faa,
            },
            size: self.size,
            qps: self.qps.max(self.threads),
            threads: self.threads,
            thread_domains: self.td == OnOff::On,
            postlist: self.postlist,
            inline_threshold: self.inline_threshold,
            signal_every: self.signal_every,
            blueflame: self.bf == OnOff::On,
            events: self.events,
            iters: self.iters,
            tx_depth: self.tx_depth.max(self.postlist).max(self.signal_every),
            mtu: self.mtu,
            seed: self.seed,
            test: match self.test {
                TestArg::Bw => doorbell_sim::workload::Test::Bw,
                TestArg::Lat => doorbell_sim::workload::Test::Lat,
            },
        }
    }

    /// The profile, with the command line's overrides.
    pub fn profile(&self, name: &str) -> Result<Profile> {
        let mut p = Profile::load(name)?;
        if let Some(c) = self.pcie_convention {
            p.pcie.convention = match c {
                ConventionArg::PcieModel => "pcie-model".into(),
                ConventionArg::Kalia => "kalia".into(),
            };
            p.link_model()
                .context("the convention does not fit the profile's link")?;
        }
        Ok(p)
    }
}

/// One row of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// Profile.
    pub profile: String,
    /// What was turned on.
    pub config: String,
    /// The run.
    #[serde(flatten)]
    pub report: Report,
}

/// Runs `doorbell sim` and prints its output.
pub fn main(args: &SimArgs, json: bool) -> Result<()> {
    if args.print_profile {
        print!("{}", args.profile(&args.profile)?.to_toml());
        return Ok(());
    }
    match args.sweep {
        None => {
            let p = args.profile(&args.profile)?;
            let capture = match &args.pcap {
                Some(path) => Some(
                    doorbell_pcap::Capture::create_for(path, &["nic-a", "nic-b"])
                        .with_context(|| format!("--pcap {}", path.display()))?,
                ),
                None => None,
            };
            let w = args.workload();
            let bar = std::sync::Arc::new(Bar::new(w.iters * u64::from(w.qps), "simulating", json));
            let b = bar.clone();
            let opts = doorbell_sim::RunOptions {
                capture,
                progress: Some(std::sync::Arc::new(move |done, _| b.set(done))),
                trace: args.trace.is_some(),
            };
            let out = w.run_with(&p, opts);
            bar.finish();
            let out = out?;
            if let (Some(path), Some(t)) = (&args.trace, &out.trace) {
                std::fs::write(path, t.to_json())
                    .with_context(|| format!("--trace {}", path.display()))?;
            }
            let r = out.report;
            let explained = match &args.explain {
                Some(file) => Some(picture::explain(&r, file.as_deref())?),
                None => None,
            };
            if json {
                crate::print_out(&serde_json::to_string_pretty(&r)?);
            } else {
                crate::print_out(&render(&r));
                if let Some(text) = explained {
                    crate::print_out(&text);
                }
            }
        }
        Some(s) => {
            let rows = sweep(args, s, json)?;
            if let Some(path) = &args.plot {
                let mut names: Vec<&str> = rows.iter().map(|r| r.profile.as_str()).collect();
                names.dedup();
                let profiles = names
                    .iter()
                    .map(|n| args.profile(n))
                    .collect::<Result<Vec<_>>>()?;
                picture::plot(&rows, s, &profiles, path)?;
            }
            if json {
                crate::print_out(&serde_json::to_string_pretty(&rows)?);
            } else {
                crate::print_out(&render_sweep(&rows, s));
            }
        }
    }
    Ok(())
}

/// The rows of a sweep.
pub fn sweep(args: &SimArgs, s: Sweep, quiet: bool) -> Result<Vec<SweepRow>> {
    let base = args.workload();
    let mut rows = Vec::new();
    match s {
        Sweep::Features => {
            let plain = Workload {
                postlist: 1,
                inline_threshold: 0,
                signal_every: 1,
                blueflame: false,
                ..base.clone()
            };
            let n = 16;
            let configs: [(&str, Workload); 6] = [
                ("baseline", plain.clone()),
                (
                    "postlist",
                    Workload {
                        postlist: n,
                        tx_depth: plain.tx_depth.max(n),
                        ..plain.clone()
                    },
                ),
                (
                    "inline",
                    Workload {
                        inline_threshold: plain.size,
                        ..plain.clone()
                    },
                ),
                (
                    "unsignaled",
                    Workload {
                        signal_every: n,
                        tx_depth: plain.tx_depth.max(n),
                        ..plain.clone()
                    },
                ),
                (
                    "blueflame",
                    Workload {
                        blueflame: true,
                        ..plain.clone()
                    },
                ),
                (
                    "all",
                    Workload {
                        postlist: n,
                        inline_threshold: plain.size,
                        signal_every: n,
                        blueflame: true,
                        tx_depth: plain.tx_depth.max(n),
                        ..plain.clone()
                    },
                ),
            ];
            let profiles = sweep_profiles(args);
            let bar = Bar::new((profiles.len() * configs.len()) as u64, "sweeping", quiet);
            for name in profiles {
                let p = args.profile(&name)?;
                for (config, w) in &configs {
                    let report = w.run(&p).with_context(|| format!("{name}, {config}"))?;
                    bar.set(rows.len() as u64 + 1);
                    rows.push(SweepRow {
                        profile: name.clone(),
                        config: config.to_string(),
                        report,
                    });
                }
            }
            bar.finish();
        }
        Sweep::Threads => {
            let p = args.profile(&args.profile)?;
            let bar = Bar::new(8, "sweeping", quiet);
            for t in [1u32, 4, 16, 64] {
                for td in [false, true] {
                    let w = Workload {
                        threads: t,
                        qps: t,
                        thread_domains: td,
                        iters: base.iters.div_ceil(u64::from(t)).max(100),
                        ..base.clone()
                    };
                    let config = format!("{t} threads{}", if td { ", TD" } else { "" });
                    let report = w.run(&p).with_context(|| config.clone())?;
                    bar.set(rows.len() as u64 + 1);
                    rows.push(SweepRow {
                        profile: p.name.clone(),
                        config,
                        report,
                    });
                }
            }
            bar.finish();
        }
        Sweep::Sizes => {
            if matches!(base.op, Op::Cas | Op::Faa) {
                bail!("atomics are 8 bytes: a sizes sweep needs --op send, write or read");
            }
            let max = if base.qp_type == QpType::Ud {
                base.mtu
            } else {
                MAX_SWEEP_SIZE
            };
            let sizes: Vec<u32> = (1..=23).map(|k| 1u32 << k).filter(|&s| s <= max).collect();
            let profiles = sweep_profiles(args);
            let bar = Bar::new((profiles.len() * sizes.len()) as u64, "sweeping", quiet);
            for name in profiles {
                let p = args.profile(&name)?;
                for &size in &sizes {
                    let w = Workload {
                        size,
                        iters: base.iters.min((SWEEP_BYTES / u64::from(size)).max(16)),
                        ..base.clone()
                    };
                    let config = format!("{size} B");
                    let report = w.run(&p).with_context(|| format!("{name}, {config}"))?;
                    bar.set(rows.len() as u64 + 1);
                    rows.push(SweepRow {
                        profile: name.clone(),
                        config,
                        report,
                    });
                }
            }
            bar.finish();
        }
    }
    if rows.is_empty() {
        bail!("the sweep ran nothing");
    }
    Ok(rows)
}

/// perftest -a's largest message.
const MAX_SWEEP_SIZE: u32 = 8 << 20;

/// Bytes each size of a sizes sweep moves at most.
const SWEEP_BYTES: u64 = 256 << 20;

/// The profiles a features or sizes sweep runs: every built-in one unless
/// another profile was named.
fn sweep_profiles(args: &SimArgs) -> Vec<String> {
    if args.profile == "connectib-haswell" {
        doorbell_sim::profile::BUILTIN
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        vec![args.profile.clone()]
    }
}

/// The human-readable report of one run.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let w = &r.workload;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} on {}: {:?} {:?}, {} B, {} QPs, {} threads{}, postlist {}, inline <= {} B, 1 in {} signalled, BlueFlame {}",
        w.iters * u64::from(w.qps),
        r.profile,
        w.qp_type,
        w.op,
        w.size,
        w.qps,
        w.threads,
        if w.thread_domains {
            " (thread domains)"
        } else {
            ""
        },
        w.postlist,
        w.inline_threshold,
        w.signal_every,
        if w.blueflame { "on" } else { "off" }
    );
    if w.events {
        let _ = writeln!(
            s,
            "  completions by events (-e): arm, EQE, interrupt, wake-up"
        );
    }
    if let Some(l) = &r.latency {
        let _ = writeln!(
            s,
            "\n  {:<8} {:<12} {:>12} {:>12} {:>16} {:>12} {:>14} {:>22} {:>24}",
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]"
        );
        let _ = writeln!(
            s,
            "  {:<8} {:<12} {:>12.3} {:>12.3} {:>16.3} {:>12.3} {:>14.3} {:>22.3} {:>24.3}",
            w.size,
            l.iterations,
            l.t_min_us,
            l.t_max_us,
            l.t_typical_us,
            l.t_avg_us,
            l.t_stdev_us,
            l.p99_us,
            l.p99_9_us
        );
    }
    let _ = writeln!(s, "\n  message rate   {:>10.2} Mops", r.msg_rate_mops);
    let _ = writeln!(s, "  bandwidth      {:>10.2} Gb/s", r.bandwidth_gbps);
    let _ = writeln!(
        s,
        "  latency        {:>10.0} ns median, {:.0} ns p99",
        r.latency_ns.p50, r.latency_ns.p99
    );
    let pp = &r.per_post;
    let _ = writeln!(
        s,
        "\n  per post       {:.3} MMIO ({:.1} B), {:.3} WQE reads, {:.3} payload reads, {:.3} CQE writes",
        pp.mmio_writes, pp.mmio_bytes, pp.wqe_dma_reads, pp.payload_dma_reads, pp.cqe_dma_writes
    );
    if pp.eqe_dma_writes > 0.0 || pp.interrupts > 0.0 {
        let _ = writeln!(
            s,
            "                 {:.3} EQE writes, {:.3} interrupts (completion events)",
            pp.eqe_dma_writes, pp.interrupts
        );
    }
    let _ = writeln!(
        s,
        "                 {:.3} MWr, {:.3} MRd, {:.3} CplD TLPs; {:.1} B to the device, {:.1} B to the host on the link",
        pp.mwr_tlps,
        pp.mrd_tlps,
        pp.cpld_tlps,
        pp.host_to_device_bytes.unwrap_or_default(),
        pp.device_to_host_bytes.unwrap_or_default()
    );
    let u = &r.utilisation;
    let cores: Vec<String> = u
        .cores
        .iter()
        .map(|c| format!("{:.0}%", c * 100.0))
        .collect();
    let _ = writeln!(
        s,
        "  utilisation    PCIe to device {:.0}%, to host {:.0}%, NIC processing {:.0}%, cores {}",
        u.pcie_to_device * 100.0,
        u.pcie_to_host * 100.0,
        u.nic_processing_units * 100.0,
        cores.join(" ")
    );
    let _ = writeln!(
        s,
        "  bfreg locks    {} posts took one, {:.0} ns waited",
        r.locked_posts, r.lock_wait_ns
    );
    let st = &r.steps;
    let _ = writeln!(s, "\n  one post, unloaded (ns):");
    for (i, (name, v)) in [
        ("WQE write (CPU)", st.wqe_write),
        ("doorbell / BlueFlame MMIO", st.doorbell),
        ("WQE DMA read", st.wqe_dma_read),
        ("payload DMA read", st.payload_dma_read),
        ("wire and ACK", st.wire_and_ack),
        ("CQE DMA write and poll", st.cqe_dma_write),
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(s, "    {i}  {name:<28} {v:>8.1}");
    }
    let _ = writeln!(s, "       {:<28} {:>8.1}", "total", st.total);
    let _ = writeln!(
        s,
        "\n  {:.0} ns simulated in {} events",
        r.simulated_ns, r.events
    );
    s
}

/// The table of a sweep.
pub fn render_sweep(rows: &[SweepRow], s: Sweep) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let first = &rows[0].report.workload;
    if s == Sweep::Sizes {
        let _ = writeln!(
            out,
            "{:?} {:?}, sizes 2 B to {} B (perftest -a); up to {} WRs per QP\n",
            first.qp_type,
            first.op,
            rows.iter()
                .map(|r| r.report.workload.size)
                .max()
                .unwrap_or(0),
            first.iters
        );
    } else {
        let _ = writeln!(
            out,
            "{:?} {:?} of {} B; {} WRs per QP\n",
            first.qp_type, first.op, first.size, first.iters
        );
    }
    let _ = writeln!(
        out,
        "{:<20} {:<15} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8}",
        "profile",
        "config",
        "Mops",
        "Gb/s",
        "p50 ns",
        "p99 ns",
        "PCIe->",
        "PCIe<-",
        "NIC",
        "locked"
    );
    for r in rows {
        let u = &r.report.utilisation;
        let _ = writeln!(
            out,
            "{:<20} {:<15} {:>10.2} {:>10.2} {:>10.0} {:>10.0} {:>7.0}% {:>7.0}% {:>7.0}% {:>8}",
            r.profile,
            r.config,
            r.report.msg_rate_mops,
            r.report.bandwidth_gbps,
            r.report.latency_ns.p50,
            r.report.latency_ns.p99,
            u.pcie_to_device * 100.0,
            u.pcie_to_host * 100.0,
            u.nic_processing_units * 100.0,
            r.report.locked_posts
        );
    }
    if s == Sweep::Threads {
        let _ = writeln!(
            out,
            "\nThreads beyond the 4 low-latency bfregs share the 11 medium ones and take their locks\n\
             (\"locked\": posts that took one); with TD each thread's QPs ring a dynamic register\n\
             of its thread domain, lockless. Threads beyond the profile's cores share cores."
        );
    }
    out
}
