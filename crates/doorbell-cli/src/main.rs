//! `doorbell`: a software RDMA NIC with the mlx5 host interface.

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use doorbell_cli::{layout, seed};
use doorbell_pcie::LinkConfig;
use doorbell_verbs::ProviderConfig;

/// A software RDMA NIC with the mlx5 host interface. Without a subcommand,
/// runs the seed's comparison: the PCIe crossings one RDMA WRITE costs under
/// each configuration of doorbell, inline, BlueFlame, postlist and
/// unsignalled completions, measured on the live runtime.
#[derive(Parser, Debug)]
#[command(name = "doorbell", version, about)]
struct Cli {
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Message size in bytes.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=1024))]
    size: u32,
    /// Posts per configuration.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    posts: u32,
    /// WRs per post_send in the postlist row.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    postlist: u32,
    /// Signalling period of the unsignaled row.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    signal_every: u32,
    /// PCIe max payload size, bytes.
    #[arg(long, default_value_t = 256)]
    mps: u32,
    /// PCIe max read request size, bytes.
    #[arg(long, default_value_t = 512)]
    mrrs: u32,
    /// PCIe read completion boundary, bytes.
    #[arg(long, default_value_t = 64)]
    rcb: u32,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Open one context, create N RC QPs, and show which bfreg, UAR page and
    /// register offset each rings, honouring the MLX5_* environment variables
    /// (MLX5_TOTAL_UUARS, MLX5_NUM_LOW_LAT_UUARS, MLX5_SHUT_UP_BF,
    /// MLX5_SINGLE_THREADED).
    Layout {
        /// Number of QPs.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
        qps: u32,
        /// Create each QP in a parent domain with a thread domain of its
        /// own (`ibv_alloc_td`): it then rings a dynamic register, lockless.
        #[arg(long)]
        thread_domains: bool,
    },
    /// The PCIe link model alone: raw and usable TLP bandwidth, and the
    /// effective bandwidth and transaction rate of MWr (DMA write), MRd
    /// (DMA read), doorbell and write-combined MMIO streams of one size.
    Pcie {
        #[command(flatten)]
        args: doorbell_cli::pcie::PcieArgs,
    },
    /// Simulate a workload on modelled hardware (perftest's options): the
    /// same NIC, driver and provider code under a virtual clock. Reports
    /// message rate, bandwidth, latency, per-post PCIe crossings,
    /// utilisation, and one post's critical path by the seed's steps 0-5.
    Sim {
        #[command(flatten)]
        args: doorbell_cli::sim::SimArgs,
    },
    /// ibv_rc_pingpong between two processes or hosts: starts a NIC whose
    /// port is a UDP socket on --addr, exchanges LID:QPN:PSN:GID over TCP
    /// (without a peer name it waits as the server), bounces SENDs and
    /// prints the same summary lines.
    Pingpong {
        #[command(flatten)]
        args: doorbell_cli::pingpong::PingpongArgs,
    },
    /// Run an unmodified program on doorbell: puts the drop-in
    /// libibverbs.so.1 first on LD_LIBRARY_PATH, sets DOORBELL_* from the
    /// options, and execs PROGRAM (which then sees device doorbell0).
    /// Builds nothing: `cargo build --release` builds the library too.
    #[command(after_help = "Example, in two terminals:\n  \
        doorbell run --addr 127.0.0.2 -- ibv_rc_pingpong -d doorbell0 -g 0\n  \
        doorbell run --addr 127.0.0.3 -- ibv_rc_pingpong -d doorbell0 -g 0 127.0.0.1")]
    Run {
        #[command(flatten)]
        args: doorbell_cli::run::RunArgs,
    },
    /// Print the settings of `doorbell run` as export lines for a shell:
    /// eval "$(doorbell env --addr 127.0.0.2)".
    Env {
        #[command(flatten)]
        args: doorbell_cli::run::EnvArgs,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        None => {
            let link = LinkConfig {
                mps_bytes: cli.mps,
                mrrs_bytes: cli.mrrs,
                rcb_bytes: cli.rcb,
            };
            link.validate().context("bad PCIe parameters (--mps, --mrrs take 128..4096, --rcb 64 or 128, powers of two)")?;
            let o = seed::SeedOptions {
                size: cli.size,
                posts: cli.posts,
                postlist: cli.postlist,
                signal_every: cli.signal_every,
                link,
            };
            let rows = seed::measure_all(&o)?;
            if cli.json {
                doorbell_cli::print_out(&serde_json::to_string_pretty(&rows)?);
            } else {
                doorbell_cli::print_out(&seed::render(&rows, &o));
            }
        }
        Some(Cmd::Layout {
            qps,
            thread_domains,
        }) => {
            let cfg = ProviderConfig::from_env()
                .context("fix the MLX5_* variable named above: MLX5_TOTAL_UUARS takes 1..=512, MLX5_NUM_LOW_LAT_UUARS 0..total-1")?;
            let (rows, counts) = layout::run_with(qps, cfg, thread_domains)?;
            if cli.json {
                doorbell_cli::print_out(&serde_json::to_string_pretty(&rows)?);
            } else {
                doorbell_cli::print_out(&layout::render(&rows, counts));
            }
        }
        Some(Cmd::Pcie { args }) => {
            doorbell_cli::pcie::print(&doorbell_cli::pcie::run(&args)?, cli.json)?;
        }
        Some(Cmd::Sim { args }) => doorbell_cli::sim::main(&args, cli.json)?,
        Some(Cmd::Pingpong { args }) => doorbell_cli::pingpong::main(&args, cli.json)?,
        Some(Cmd::Env { args }) => {
            let lines = doorbell_cli::run::env_lines(&args)?;
            doorbell_cli::print_out(lines.trim_end());
        }
        // Returns only if the program could not be started.
        Some(Cmd::Run { args }) => std::process::exit(i32::from(doorbell_cli::run::exec(&args)?)),
    }
    Ok(())
}
