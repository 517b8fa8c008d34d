//! `doorbell pcie`: the PCIe link model alone (see
//! [`doorbell_pcie::model`]): raw and usable TLP bandwidth of a link, and
//! the steady-state effective bandwidth and transaction rate of streams of
//! equal transactions of one size over it.
//!
//! # JSON
//! One object ([`PcieReport`]):
//! - the link: `generation` (1..5), `lanes`, `mps_bytes`, `mrrs_bytes`,
//!   `rcb_bytes`, `completion_bytes` (largest completion the host sends),
//!   `address_bits` (32 or 64), `convention` (`"pcie-model"` or
//!   `"kalia"`), `size_bytes` (the transaction size of the streams);
//! - the link's capacity: `raw_gbps` (after encoding), `ack_limit_bytes`
//!   and `fc_guide_bytes` (bytes between ACK and between UpdateFC DLLPs),
//!   `link_overhead_fraction` (ACK + FC + SKIP, 0 with the Kalia
//!   convention), `usable_gbps` (left for TLPs, each direction);
//! - four streams, each an object ([`StreamReport`]): `mwr` (DMA writes of
//!   `size_bytes` into host memory), `mrd` (DMA reads of `size_bytes`),
//!   `doorbell` (8-byte MMIO writes, whatever the size) and `wc_mmio`
//!   (write-combined MMIO copies of `size_bytes` in 64-byte TLPs). Each has
//!   `tlps_to_host` and `tlps_to_device` (TLPs per transaction),
//!   `wire_bytes_to_host` and `wire_bytes_to_device` (bytes per
//!   transaction, TLP overheads included), `limited_by` (`"to_host"` or
//!   `"to_device"`: the direction that runs out first),
//!   `effective_gbps` (useful bytes only) and `rate_mtps` (millions of
//!   transactions per second).

use anyhow::{Context as _, Result};
use doorbell_pcie::LinkConfig;
use doorbell_pcie::model::{
    CompletionSplit, Convention, Generation, Lanes, LinkParams, ModelError, Stream,
};
use serde::Serialize;

/// The per-TLP constants, as the command line names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ConventionArg {
    /// Neugebauer18's pcie-model: DLLP and SKIP overheads, 20/24 B headers.
    #[default]
    PcieModel,
    /// Kalia16: Pr = 26 B, Pc = 22 B, 128 B completions, 64 B cache lines,
    /// no data-link overhead.
    Kalia,
}

impl From<ConventionArg> for Convention {
    fn from(c: ConventionArg) -> Self {
        match c {
            ConventionArg::PcieModel => Convention::PcieModel,
            ConventionArg::Kalia => Convention::Kalia,
        }
    }
}

fn power_of_two(s: &str, min: u32, max: u32) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_power_of_two() && (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a power of two in {min}..={max}"))
    }
}

fn parse_lanes(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    Lanes::from_count(v)
        .map(Lanes::count)
        .map_err(|e| e.to_string())
}

fn parse_payload(s: &str) -> Result<u32, String> {
    power_of_two(s, 128, 4096)
}

fn parse_rcb(s: &str) -> Result<u32, String> {
    power_of_two(s, 64, 128)
}

fn parse_addr_bits(s: &str) -> Result<u32, String> {
    match s {
        "32" => Ok(32),
        "64" => Ok(64),
        _ => Err(format!("`{s}`: addresses have 32 or 64 bits")),
    }
}

/// The arguments of `doorbell pcie` (defaults: pcie-model's `pcie_bw.py`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PcieArgs {
    /// PCIe generation, 1..=5 (2.5, 5, 8, 16, 32 GT/s per lane).
    #[arg(long = "gen", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub generation: u32,
    /// Link width: 1, 2, 4, 8, 16 or 32 lanes.
    #[arg(long, default_value_t = 8, value_parser = parse_lanes)]
    pub lanes: u32,
    /// Max payload size, bytes (power of two, 128..=4096).
    #[arg(long, default_value_t = 256, value_parser = parse_payload)]
    pub mps: u32,
    /// Max read request size, bytes (power of two, 128..=4096).
    #[arg(long, default_value_t = 512, value_parser = parse_payload)]
    pub mrrs: u32,
    /// Read completion boundary, bytes (64 or 128).
    #[arg(long, default_value_t = 64, value_parser = parse_rcb)]
    pub rcb: u32,
    /// Transaction size of the streams, bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub size: u64,
    /// Per-TLP constants.
    #[arg(long, value_enum, default_value_t = ConventionArg::PcieModel)]
    pub convention: ConventionArg,
    /// Address width of requests (32 or 64 bits).
    #[arg(long, default_value_t = 64, value_parser = parse_addr_bits)]
    pub addr_bits: u32,
    /// The host answers reads in RCB-sized completions (older chipsets)
    /// instead of MPS-sized ones (or 128 B ones with --convention kalia).
    #[arg(long)]
    pub rcb_chunks: bool,
}

impl Default for PcieArgs {
    fn default() -> Self {
        PcieArgs {
            generation: 3,
            lanes: 8,
            mps: 256,
            mrrs: 512,
            rcb: 64,
            size: 64,
            convention: ConventionArg::PcieModel,
            addr_bits: 64,
            rcb_chunks: false,
        }
    }
}

impl PcieArgs {
    /// The link these arguments describe.
    pub fn link(&self) -> Result<LinkParams, ModelError> {
        let mut p = LinkParams::new(
            Generation::from_number(self.generation)?,
            Lanes::from_count(self.lanes)?,
            LinkConfig {
                mps_bytes: self.mps,
                mrrs_bytes: self.mrrs,
                rcb_bytes: self.rcb,
            },
            self.convention.into(),
        )?;
        p.addr64 = self.addr_bits == 64;
        if self.rcb_chunks {
            p.completion = CompletionSplit::Rcb;
        }
        Ok(p)
    }
}

/// One stream's figures (a JSON object of `doorbell pcie`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    /// TLPs towards the host per transaction.
    pub tlps_to_host: u64,
    /// TLPs towards the device per transaction.
    pub tlps_to_device: u64,
    /// Wire bytes towards the host per transaction.
    pub wire_bytes_to_host: u64,
    /// Wire bytes towards the device per transaction.
    pub wire_bytes_to_device: u64,
    /// `"to_host"` or `"to_device"`.
    pub limited_by: &'static str,
    /// Useful bandwidth, Gb/s.
    pub effective_gbps: f64,
    /// Millions of transactions per second.
    pub rate_mtps: f64,
}

impl From<Stream> for StreamReport {
    fn from(s: Stream) -> Self {
        StreamReport {
            tlps_to_host: s.tlps_to_host,
            tlps_to_device: s.tlps_to_device,
            wire_bytes_to_host: s.wire_bytes_to_host,
            wire_bytes_to_device: s.wire_bytes_to_device,
            limited_by: s.limited_by.name(),
            effective_gbps: s.effective_gbps,
            rate_mtps: s.transactions_per_s / 1e6,
        }
    }
}

/// The result of `doorbell pcie` (its JSON object; keys in the module doc).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcieReport {
    /// PCIe generation, 1..=5.
    pub generation: u32,
    /// Lanes.
    pub lanes: u32,
    /// MPS, bytes.
    pub mps_bytes: u32,
    /// MRRS, bytes.
    pub mrrs_bytes: u32,
    /// RCB, bytes.
    pub rcb_bytes: u32,
    /// Largest completion the host sends, bytes.
    pub completion_bytes: u32,
    /// 32 or 64.
    pub address_bits: u32,
    /// `"pcie-model"` or `"kalia"`.
    pub convention: &'static str,
    /// Transaction size of the streams, bytes.
    pub size_bytes: u64,
    /// Raw bandwidth after encoding, Gb/s.
    pub raw_gbps: f64,
    /// Bytes between ACK DLLPs.
    pub ack_limit_bytes: u32,
    /// Bytes between UpdateFC DLLPs.
    pub fc_guide_bytes: u32,
    /// Share of the raw bandwidth taken by ACK, FC update and SKIP.
    pub link_overhead_fraction: f64,
    /// Bandwidth left for TLPs in each direction, Gb/s.
    pub usable_gbps: f64,
    /// DMA writes of `size_bytes`.
    pub mwr: StreamReport,
    /// DMA reads of `size_bytes`.
    pub mrd: StreamReport,
    /// 8-byte MMIO doorbells.
    pub doorbell: StreamReport,
    /// Write-combined MMIO copies of `size_bytes`.
    pub wc_mmio: StreamReport,
}

/// Works out the link model for `args`.
pub fn run(args: &PcieArgs) -> Result<PcieReport> {
    let p = args.link().context("bad PCIe link parameters")?;
    Ok(PcieReport {
        generation: p.generation.number(),
        lanes: p.lanes.count(),
        mps_bytes: p.split.mps_bytes,
        mrrs_bytes: p.split.mrrs_bytes,
        rcb_bytes: p.split.rcb_bytes,
        completion_bytes: p.completion_bytes(),
        address_bits: if p.addr64 { 64 } else { 32 },
        convention: p.convention.name(),
        size_bytes: args.size,
        raw_gbps: p.raw_gbps(),
        ack_limit_bytes: p.ack_limit_bytes(),
        fc_guide_bytes: p.fc_guide_bytes(),
        link_overhead_fraction: p.link_layer_overhead(),
        usable_gbps: p.usable_gbps(),
        mwr: p.write_stream(args.size).into(),
        mrd: p.read_stream(args.size).into(),
        doorbell: p.doorbell_stream().into(),
        wc_mmio: p.wc_mmio_stream(args.size).into(),
    })
}

/// Writes `r` to standard output as JSON or as the table. A closed pipe
/// (`doorbell pcie | head`) ends the output quietly instead of failing.
pub fn print(r: &PcieReport, json: bool) -> Result<()> {
    use std::io::Write as _;
    let text = if json {
        serde_json::to_string_pretty(r)? + "\n"
    } else {
        render(r)
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The human-readable report.
pub fn render(r: &PcieReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "PCIe Gen{} x{}: MPS {} B, MRRS {} B, RCB {} B, completions of up to {} B, {}-bit addresses, {} convention\n",
        r.generation,
        r.lanes,
        r.mps_bytes,
        r.mrrs_bytes,
        r.rcb_bytes,
        r.completion_bytes,
        r.address_bits,
        r.convention
    );
    let _ = writeln!(s, "raw bandwidth          {:8.2} Gb/s", r.raw_gbps);
    if r.link_overhead_fraction > 0.0 {
        let _ = writeln!(
            s,
            "usable TLP bandwidth   {:8.2} Gb/s per direction (ACK every {} B, FC update every {} B, SKIP 4 B every 1538 B: {:.2} % overhead)\n",
            r.usable_gbps,
            r.ack_limit_bytes,
            r.fc_guide_bytes,
            r.link_overhead_fraction * 100.0
        );
    } else {
        let _ = writeln!(
            s,
            "usable TLP bandwidth   {:8.2} Gb/s per direction (data-link overhead ignored)\n",
            r.usable_gbps
        );
    }
    let _ = writeln!(
        s,
        "{:<30} {:>13} {:>15} {:>12} {:>10} {:>10}",
        "stream", "TLPs (up/dn)", "wire B (up/dn)", "eff. Gb/s", "M ops/s", "limit"
    );
    let rows = [
        (format!("MWr, DMA write of {} B", r.size_bytes), &r.mwr),
        (format!("MRd, DMA read of {} B", r.size_bytes), &r.mrd),
        ("MWr, 8 B doorbell (MMIO)".to_string(), &r.doorbell),
        (
            format!("WC MMIO of {} B (64 B TLPs)", r.size_bytes),
            &r.wc_mmio,
        ),
    ];
    for (name, st) in rows {
        let _ = writeln!(
            s,
            "{:<30} {:>13} {:>15} {:>12.2} {:>10.1} {:>10}",
            name,
            format!("{}/{}", st.tlps_to_host, st.tlps_to_device),
            format!("{}/{}", st.wire_bytes_to_host, st.wire_bytes_to_device),
            st.effective_gbps,
            st.rate_mtps,
            st.limited_by
        );
    }
    let _ = writeln!(
        s,
        "\nup = device to host (DMA writes, read requests), dn = host to device (MMIO, read completions)"
    );
    s
}
