//! Hardware profiles: the PCIe link, the NIC, the host CPU and the network
//! of one machine, as data (TOML), each number with its source.
//!
//! A profile is a TOML file with the sections `[pcie]`, `[nic]`, `[cpu]` and
//! `[network]`, and a `[sources]` table that says, for every number, where it
//! comes from: a published figure (and which), a fit to one, or an
//! assumption. An optional `[network.faults]` table ([`WireFaults`]) adds
//! seeded loss, duplication, reordering and corruption to the wire; it is
//! an experiment's setting, not a measured number, so it needs no source.
//! Two profiles ship in the binary ([`Profile::builtin`]); copy
//! one (`doorbell sim --profile connectib-haswell --print-profile`), change
//! it, and pass its path to `--profile`.

use std::collections::BTreeMap;

use doorbell_device::NicTiming;
use doorbell_pcie::LinkConfig;
use doorbell_pcie::model::{
    CompletionSplit, Convention, FlowControl, Generation, Lanes, LinkModelConfig, LinkParams,
    ReadLatencyCurve,
};
use doorbell_types::Duration;
use serde::{Deserialize, Serialize};

/// Names of the profiles built into the binary.
pub const BUILTIN: [&str; 2] = ["connectib-haswell", "connectx4-thunderx2"];

/// Why a profile could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// Neither a built-in name nor a readable file.
    #[error(
        "no profile named {name:?} (built in: {builtin}) and no readable file at that path: {source}"
    )]
    NotFound {
        /// What was asked for.
        name: String,
        /// The built-in names.
        builtin: String,
        /// The error reading it as a path.
        source: std::io::Error,
    },
    /// The TOML does not parse or has unknown or missing keys.
    #[error("profile {name}: {source}")]
    Parse {
        /// The profile.
        name: String,
        /// What is wrong.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("profile {name}: {what}")]
    Invalid {
        /// The profile.
        name: String,
        /// What is wrong.
        what: String,
    },
}

/// The PCIe link between host and NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieProfile {
    /// Generation, 1..=5.
    pub generation: u32,
    /// Lanes: 1, 2, 4, 8, 16 or 32.
    pub lanes: u32,
    /// Max payload size, bytes.
    pub mps_bytes: u32,
    /// Max read request size, bytes.
    pub mrrs_bytes: u32,
    /// Read completion boundary, bytes.
    pub rcb_bytes: u32,
    /// Size the root complex combines completions into (0: split at MPS).
    pub completion_bytes: u32,
    /// Per-TLP constants: "pcie-model" or "kalia".
    pub convention: String,
    /// The host's DMA read round trip: `[size_bytes, latency_ns]` points.
    pub read_latency_ns: Vec<(u64, f64)>,
    /// Extra one-way latency of a TLP (PHY, flight), ns.
    pub one_way_latency_ns: f64,
    /// Outstanding read requests (tags).
    pub read_tags: u16,
    /// Flow-control credit update latency, ns.
    pub fc_update_latency_ns: f64,
}

/// The NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicProfile {
    /// Processing units working in parallel.
    pub processing_units: u32,
    /// Per doorbell or BlueFlame burst, ns.
    pub doorbell_ns: f64,
    /// Per send WQE executed, ns.
    pub wqe_ns: f64,
    /// Per packet sent, ns.
    pub tx_packet_ns: f64,
    /// Per packet received, ns.
    pub rx_packet_ns: f64,
    /// Per CQE written, ns.
    pub cqe_ns: f64,
    /// Time an atomic holds its address bucket, ns.
    pub atomic_ns: f64,
    /// Bytes of address per atomic bucket.
    pub atomic_bucket_bytes: u64,
    /// DMA engine ceiling, million transactions per second.
    pub dma_mtps: f64,
}

/// The host CPU, per core.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuProfile {
    /// Cores available to posting threads.
    pub cores: u32,
    /// Starting a post_send call and building a control segment, ns.
    pub wqe_ctrl_ns: f64,
    /// Each further 16-byte segment (remote address, data, datagram), ns.
    pub wqe_segment_ns: f64,
    /// Copying inline data, per 64 bytes, ns.
    pub inline_per_64b_ns: f64,
    /// Doorbell-record update and the barriers around the doorbell, ns.
    pub barrier_ns: f64,
    /// One 8-byte MMIO store (doorbell), ns.
    pub mmio_8b_ns: f64,
    /// One 64-byte write-combined chunk (BlueFlame), ns.
    pub wc_chunk_ns: f64,
    /// Taking and releasing a shared bfreg's lock, uncontended, ns.
    pub lock_ns: f64,
    /// A poll_cq that finds nothing, ns.
    pub poll_empty_ns: f64,
    /// A poll_cq per CQE it returns (the CQE's cache miss included), ns.
    pub poll_cqe_ns: f64,
    /// Posting receive WQEs, per WQE, ns.
    pub recv_post_ns: f64,
    /// The kernel's MSI-X handler for one interrupt: entry, reading the
    /// EQEs, the EQ doorbell's store, waking the completion channel, exit
    /// (the store itself is charged as an MMIO store), ns.
    pub interrupt_ns: f64,
    /// From the channel's wake-up to the blocked thread running again out
    /// of `ibv_get_cq_event` (scheduler and context switch), ns.
    pub wakeup_ns: f64,
}

/// The network between the two NICs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkProfile {
    /// Port rate, Gb/s.
    pub port_gbps: f64,
    /// Bytes a frame costs on the wire beyond its IP packet: Ethernet
    /// header, FCS, preamble and gap for RoCE (38); for InfiniBand the
    /// LRH and VCRC less the IP and UDP headers it does not carry (−18).
    pub frame_overhead_bytes: i32,
    /// One-way latency through cables and switches, ns.
    pub one_way_ns: f64,
    /// Faults on the wire (`[network.faults]`); none if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<WireFaults>,
}

/// Random faults on each direction of the wire: `doorbell_fault`'s
/// [`Faults`](doorbell_fault::Faults), with delays in virtual time. The
/// frames each NIC sends meet a stage of their own, seeded from `seed` and
/// the direction, so a run with the same profile, workload and seed makes
/// the same faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireFaults {
    /// Seed of the decisions (direction `d` draws from `seed + d`).
    pub seed: u64,
    /// Probability a frame is lost.
    #[serde(default)]
    pub loss: f64,
    /// Probability a frame arrives twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Probability a frame is held back, so that later frames pass it.
    #[serde(default)]
    pub reorder: f64,
    /// Probability a frame has a bit flipped (the receiver's ICRC check
    /// drops it).
    #[serde(default)]
    pub corrupt: f64,
    /// Longest hold of a reordered frame, ns.
    #[serde(default = "WireFaults::default_max_delay_ns")]
    pub max_delay_ns: f64,
}

impl WireFaults {
    fn default_max_delay_ns() -> f64 {
        200_000.0
    }

    /// No faults yet, with `seed`; set the probabilities on the result.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            max_delay_ns: Self::default_max_delay_ns(),
        }
    }

    /// The fault configuration of the frames NIC `direction` sends.
    pub fn faults(&self, direction: usize) -> doorbell_fault::Faults {
        let mut f = doorbell_fault::Faults::new(self.seed.wrapping_add(direction as u64));
        f.loss = self.loss;
        f.duplicate = self.duplicate;
        f.reorder = self.reorder;
        f.corrupt = self.corrupt;
        f.max_delay = ns(self.max_delay_ns);
        f
    }

    /// What is wrong with the probabilities, if anything.
    fn check(&self) -> Option<&'static str> {
        let p = [self.loss, self.duplicate, self.reorder, self.corrupt];
        if p.iter().any(|x| !(0.0..=1.0).contains(x)) || p.iter().sum::<f64>() > 1.0 {
            return Some("network.faults: each probability in [0, 1], their sum at most 1");
        }
        if !self.max_delay_ns.is_finite() || self.max_delay_ns < 0.0 {
            return Some("network.faults.max_delay_ns must be a finite number, not negative");
        }
        None
    }
}

/// A whole machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name.
    pub name: String,
    /// What hardware it describes.
    pub description: String,
    /// The PCIe link.
    pub pcie: PcieProfile,
    /// The NIC.
    pub nic: NicProfile,
    /// The host CPU.
    pub cpu: CpuProfile,
    /// The network.
    pub network: NetworkProfile,
    /// `"section.key"` → where the number comes from.
    pub sources: BTreeMap<String, String>,
}

fn ns(v: f64) -> Duration {
    Duration::from_ps((v.max(0.0) * 1000.0).round() as u64)
}

impl Profile {
    /// The TOML text of a built-in profile.
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        match name {
            "connectib-haswell" => Some(include_str!("../profiles/connectib-haswell.toml")),
            "connectx4-thunderx2" => Some(include_str!("../profiles/connectx4-thunderx2.toml")),
            _ => None,
        }
    }

    /// A built-in profile.
    pub fn builtin(name: &str) -> Option<Result<Self, ProfileError>> {
        Self::builtin_text(name).map(|t| Self::parse(name, t))
    }

    /// A built-in profile by name, or a profile file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ProfileError> {
        if let Some(p) = Self::builtin(name_or_path) {
            return p;
        }
        let text =
            std::fs::read_to_string(name_or_path).map_err(|source| ProfileError::NotFound {
                name: name_or_path.to_string(),
                builtin: BUILTIN.join(", "),
                source,
            })?;
        Self::parse(name_or_path, &text)
    }

    /// Parses and checks a profile.
    pub fn parse(name: &str, text: &str) -> Result<Self, ProfileError> {
        let p: Profile = toml::from_str(text).map_err(|source| ProfileError::Parse {
            name: name.to_string(),
            source,
        })?;
        p.link_model()?;
        let invalid = |what: String| {
            Err(ProfileError::Invalid {
                name: name.to_string(),
                what,
            })
        };
        if p.nic.processing_units == 0 || p.cpu.cores == 0 {
            return invalid("nic.processing_units and cpu.cores must be at least 1".into());
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(p.network.port_gbps) || !positive(p.nic.dma_mtps) {
            return invalid("network.port_gbps and nic.dma_mtps must be positive".into());
        }
        if let Some(key) = p.negative_or_nan() {
            return invalid(format!("{key} must be a finite number, not negative"));
        }
        if let Some(what) = p.network.faults.as_ref().and_then(WireFaults::check) {
            return invalid(what.into());
        }
        if !p.nic.atomic_bucket_bytes.is_power_of_two() {
            return invalid("nic.atomic_bucket_bytes must be a power of two".into());
        }
        for key in p.numeric_keys() {
            if !p.sources.contains_key(&key) {
                return invalid(format!("no entry in [sources] for {key}"));
            }
        }
        Ok(p)
    }

    /// Every `"section.key"` that holds a number.
    pub fn numeric_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        let value = toml::Value::try_from(self).unwrap_or(toml::Value::Table(Default::default()));
        if let toml::Value::Table(t) = value {
            for section in ["pcie", "nic", "cpu", "network"] {
                if let Some(toml::Value::Table(s)) = t.get(section) {
                    for (k, v) in s {
                        if matches!(
                            v,
                            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Array(_)
                        ) {
                            keys.push(format!("{section}.{k}"));
                        }
                    }
                }
            }
        }
        keys
    }

    /// The first `"section.key"` holding a negative or non-finite float.
    fn negative_or_nan(&self) -> Option<String> {
        let value = toml::Value::try_from(self).ok()?;
        let toml::Value::Table(t) = value else {
            return None;
        };
        for section in ["pcie", "nic", "cpu", "network"] {
            let Some(toml::Value::Table(s)) = t.get(section) else {
                continue;
            };
            for (k, v) in s {
                let bad = |x: f64| !x.is_finite() || x < 0.0;
                let is_bad = match v {
                    toml::Value::Float(x) => bad(*x),
                    toml::Value::Array(a) => a
                        .iter()
                        .flat_map(|p| p.as_array().cloned().unwrap_or_default())
                        .any(|x| x.as_float().is_some_and(bad)),
                    _ => false,
                };
                if is_bad {
                    return Some(format!("{section}.{k}"));
                }
            }
        }
        None
    }

    /// The profile as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// The link model's configuration.
    pub fn link_model(&self) -> Result<LinkModelConfig, ProfileError> {
        let bad = |what: String| ProfileError::Invalid {
            name: self.name.clone(),
            what,
        };
        let p = &self.pcie;
        let convention = match p.convention.as_str() {
            "pcie-model" => Convention::PcieModel,
            "kalia" => Convention::Kalia,
            other => {
                return Err(bad(format!(
                    "pcie.convention {other:?} is neither \"pcie-model\" nor \"kalia\""
                )));
            }
        };
        let generation = Generation::from_number(p.generation).map_err(|e| bad(e.to_string()))?;
        let lanes = Lanes::from_count(p.lanes).map_err(|e| bad(e.to_string()))?;
        let split = LinkConfig {
            mps_bytes: p.mps_bytes,
            mrrs_bytes: p.mrrs_bytes,
            rcb_bytes: p.rcb_bytes,
        };
        let mut link = LinkParams::new(generation, lanes, split, convention)
            .map_err(|e| bad(e.to_string()))?;
        link.completion = if p.completion_bytes == 0 {
            CompletionSplit::Mps
        } else {
            CompletionSplit::Combine(p.completion_bytes)
        };
        let points: Vec<(u64, Duration)> =
            p.read_latency_ns.iter().map(|&(s, l)| (s, ns(l))).collect();
        let read_latency = ReadLatencyCurve::new(&points).map_err(|e| bad(e.to_string()))?;
        let cfg = LinkModelConfig {
            link,
            read_latency,
            one_way_latency: ns(p.one_way_latency_ns),
            flow_control: FlowControl {
                update_latency: ns(p.fc_update_latency_ns),
                ..FlowControl::default()
            },
            read_tags: p.read_tags,
        };
        cfg.validate().map_err(|e| bad(e.to_string()))?;
        Ok(cfg)
    }

    /// The NIC's processing costs.
    pub fn nic_timing(&self) -> NicTiming {
        let n = &self.nic;
        NicTiming {
            processing_units: n.processing_units,
            doorbell: ns(n.doorbell_ns),
            wqe: ns(n.wqe_ns),
            tx_packet: ns(n.tx_packet_ns),
            rx_packet: ns(n.rx_packet_ns),
            cqe: ns(n.cqe_ns),
            atomic: ns(n.atomic_ns),
            atomic_bucket_bytes: n.atomic_bucket_bytes,
        }
    }

    /// Time the DMA engine spends per transaction.
    pub fn dma_period(&self) -> Duration {
        ns(1000.0 / self.nic.dma_mtps)
    }
}

pub(crate) fn dur_ns(v: f64) -> Duration {
    ns(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_cite_every_number() {
        for name in BUILTIN {
            let p = Profile::builtin(name).unwrap().unwrap();
            assert_eq!(p.name, name);
            assert!(p.numeric_keys().len() > 30, "{name}");
        }
    }

    #[test]
    fn a_number_without_a_source_is_refused() {
        let text = Profile::builtin_text("connectib-haswell").unwrap();
        let broken = text.replace("\"nic.wqe_ns\"", "\"nic.wqe_ns_typo\"");
        let err = Profile::parse("broken", &broken).unwrap_err().to_string();
        assert!(err.contains("nic.wqe_ns"), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let text = Profile::builtin_text("connectib-haswell").unwrap();
        assert!(Profile::parse("x", &text.replace("lanes = 16", "lanes = 16\nlanez = 3")).is_err());
        assert!(Profile::parse("x", &text.replace("lanes = 16", "lanes = 12")).is_err());
        assert!(
            Profile::parse(
                "x",
                &text.replace("convention = \"pcie-model\"", "convention = \"guess\"")
            )
            .is_err()
        );
    }

    #[test]
    fn a_profile_round_trips_through_toml() {
        let p = Profile::builtin("connectx4-thunderx2").unwrap().unwrap();
        let q = Profile::parse("copy", &p.to_toml()).unwrap();
        assert_eq!(p, q);
    }

    #[test]
    fn missing_files_say_what_is_built_in() {
        let err = Profile::load("/nonexistent/profile.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("connectib-haswell"), "{err}");
    }
}
