//! The link's static parameters and the steady-state figures of streams of
//! equal transactions over it: generations, widths, per-TLP constants, the
//! Ack/UpdateFC latency limit, and the errors of every model parameter.

use crate::{ConfigError, LinkConfig};

/// An ACK or UpdateFC DLLP on the wire: 2 B of framing, 4 B of DLLP and a
/// 2 B CRC (pcie-model `Ack_Size`, `FC_Size`).
pub const DLLP_BYTES: u32 = 8;
/// Bytes of one SKIP ordered set (clock compensation, on every lane).
pub const SKIP_BYTES: u32 = 4;
/// Bytes between two SKIP ordered sets.
pub const SKIP_INTERVAL_BYTES: u32 = 1538;
/// One flow-control data credit covers 4 DW (PCIe Base Spec §2.6.1).
pub const FC_UNIT_BYTES: u64 = 16;
/// Host memory is touched in cache lines of this size (Kalia16).
pub const CACHE_LINE_BYTES: u64 = 64;
/// A write-combining buffer is flushed as one MWr TLP of this many bytes.
pub const WC_CHUNK_BYTES: u64 = 64;
/// Kalia16's request overhead `Pr` (MWr and MRd), bytes per TLP.
pub const KALIA_REQUEST_OVERHEAD_BYTES: u32 = 26;
/// Kalia16's completion overhead `Pc`, bytes per CplD.
pub const KALIA_COMPLETION_OVERHEAD_BYTES: u32 = 22;
/// Kalia16's completion size `Crc`: Intel root complexes answer DMA reads in
/// 128-byte completions.
pub const KALIA_COMPLETION_BYTES: u32 = 128;

// pcie-model's per-TLP overheads: link wrapper (sequence number, LCRC,
// framing), common header, request or completion specific words, digest.
const LINK_WRAPPER_BYTES: u32 = 8;
const COMMON_HEADER_BYTES: u32 = 4;
const ADDR32_WORDS_BYTES: u32 = 8;
const ADDR64_WORDS_BYTES: u32 = 12;
const COMPLETION_WORDS_BYTES: u32 = 8;
const ECRC_BYTES: u32 = 4;

/// PCIe generation: the per-lane transfer rate and the line encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Generation {
    /// 2.5 GT/s, 8b/10b.
    Gen1,
    /// 5 GT/s, 8b/10b.
    Gen2,
    /// 8 GT/s, 128b/130b.
    Gen3,
    /// 16 GT/s, 128b/130b.
    Gen4,
    /// 32 GT/s, 128b/130b.
    Gen5,
}

impl Generation {
    /// Every generation, oldest first.
    pub const ALL: [Generation; 5] = [
        Generation::Gen1,
        Generation::Gen2,
        Generation::Gen3,
        Generation::Gen4,
        Generation::Gen5,
    ];

    /// The generation numbered `n` (1..=5).
    pub fn from_number(n: u32) -> Result<Self, ModelError> {
        match n {
            1 => Ok(Generation::Gen1),
            2 => Ok(Generation::Gen2),
            3 => Ok(Generation::Gen3),
            4 => Ok(Generation::Gen4),
            5 => Ok(Generation::Gen5),
            _ => Err(ModelError::Generation { generation: n }),
        }
    }

    /// Its number, 1..=5.
    pub const fn number(self) -> u32 {
        self as u32 + 1
    }

    /// Transfers per second on one lane, in MT/s.
    pub const fn lane_mtps(self) -> u64 {
        match self {
            Generation::Gen1 => 2_500,
            Generation::Gen2 => 5_000,
            Generation::Gen3 => 8_000,
            Generation::Gen4 => 16_000,
            Generation::Gen5 => 32_000,
        }
    }

    /// Line encoding as (data bits, line bits): 8b/10b or 128b/130b.
    pub const fn encoding(self) -> (u64, u64) {
        match self {
            Generation::Gen1 | Generation::Gen2 => (8, 10),
            _ => (128, 130),
        }
    }

    /// Data bandwidth of one lane after encoding, Gb/s.
    pub fn lane_gbps(self) -> f64 {
        let (data, line) = self.encoding();
        self.lane_mtps() as f64 / 1000.0 * data as f64 / line as f64
    }

    /// The spec's internal delay term of the Ack and UpdateFC latency
    /// formulas, in symbol times.
    const fn internal_delay_symbols(self) -> u32 {
        match self {
            Generation::Gen1 => 19,
            Generation::Gen2 => 70,
            _ => 115,
        }
    }
}

/// Link width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lanes {
    /// One lane.
    X1,
    /// Two lanes.
    X2,
    /// Four lanes.
    X4,
    /// Eight lanes.
    X8,
    /// Sixteen lanes.
    X16,
    /// Thirty-two lanes.
    X32,
}

impl Lanes {
    /// Every width, narrowest first.
    pub const ALL: [Lanes; 6] = [
        Lanes::X1,
        Lanes::X2,
        Lanes::X4,
        Lanes::X8,
        Lanes::X16,
        Lanes::X32,
    ];

    /// The width of `n` lanes (1, 2, 4, 8, 16 or 32).
    pub fn from_count(n: u32) -> Result<Self, ModelError> {
        Lanes::ALL
            .into_iter()
            .find(|l| l.count() == n)
            .ok_or(ModelError::Lanes { lanes: n })
    }

    /// Number of lanes.
    pub const fn count(self) -> u32 {
        1 << (self as u32)
    }
}

/// Which published set of per-TLP constants to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Convention {
    /// Neugebauer18's pcie-model: data-link overheads (ACK, FC update,
    /// SKIP) deducted from the raw bandwidth; MWr/MRd cost 20 B (32-bit
    /// address) or 24 B (64-bit), CplD 20 B, ECRC 4 B more.
    #[default]
    PcieModel,
    /// Kalia16: requests cost `Pr` = 26 B, completions `Pc` = 22 B, reads
    /// come back in `Crc` = 128 B completions, DMA touches whole 64 B
    /// cache lines, data-link overhead ignored.
    Kalia,
}

impl Convention {
    /// The name the command line uses.
    pub const fn name(self) -> &'static str {
        match self {
            Convention::PcieModel => "pcie-model",
            Convention::Kalia => "kalia",
        }
    }
}

/// Transaction-layer packet kinds the model knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlpKind {
    /// Memory write (posted).
    MWr,
    /// Memory read request (non-posted).
    MRd,
    /// Completion with data.
    CplD,
}

/// A direction of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host → device (downstream): MMIO writes, read completions.
    ToDevice,
    /// Device → host (upstream): DMA writes, read requests.
    ToHost,
}

impl Direction {
    /// Both directions.
    pub const ALL: [Direction; 2] = [Direction::ToDevice, Direction::ToHost];

    pub(super) const fn index(self) -> usize {
        self as usize
    }

    /// `"to_device"` or `"to_host"`.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::ToDevice => "to_device",
            Direction::ToHost => "to_host",
        }
    }
}

/// How the host splits the data of one read request into completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompletionSplit {
    /// Completions of up to MPS bytes ending on RCB boundaries (pcie-model's
    /// default).
    Mps,
    /// Completions of RCB bytes, as several older chipsets do (pcie-model's
    /// `rcb_chunks`).
    Rcb,
    /// Completions of at most this many bytes (a power of two, 64..=4096;
    /// capped at MPS), e.g. Intel root complexes' 128 B (Kalia16's `Crc`).
    Combine(u32),
}

/// The PCIe Base Specification's Ack latency limit for `generation`,
/// `lanes` and an MPS of `mps_bytes`, in symbol times; the UpdateFC latency
/// guideline has the same values. pcie-model reads one ACK per this many
/// bytes (`AckLimit`) and one FC update per this many bytes (`FcGuide`).
///
/// Computed from the spec's formula rather than a transcribed table:
/// `(MPS + 28) × AckFactor / width + InternalDelay`, rounded down, where
/// the TLP overhead is 28 symbols, `AckFactor` is 1.4 (x1–x4), 2.5 (x8) or
/// 3.0 (x16, x32) for MPS 128 and 256 and 1.0 (x1–x8) or 2.0 (x16, x32)
/// above, and `InternalDelay` is 19 / 70 / 115 symbol times at 2.5 / 5 /
/// 8 GT/s and above (PCIe Base Spec rev 5.0 Tables 2-46..2-48, 3-7..3-9, as
/// cited and tabulated in pcie-bench/pcie-model `model/pcie.py`, which
/// copies the 8 GT/s values to Gen4 and Gen5; so do we). For Gen3 x8 this
/// gives 163 / 203 / 182 / 246 / 374 / 630 for MPS 128..4096. The formula
/// reproduces every entry of pcie-model's two tables except two, where its
/// ACK and FC tables disagree with each other and with the Gen1 → Gen2
/// (+51) and Gen1 → Gen3 (+96) pattern of every other entry: FcGuide Gen1
/// x32 MPS 2048 (248; AckLimit and the formula say 148) and AckLimit Gen2
/// x32 MPS 4096 (237; FcGuide and the formula say 327). We take them for
/// typos. Neither touches a calibration figure.
///
/// `mps_bytes` is a power of two in 128..=4096; other values are rounded
/// up to one.
pub fn latency_limit(generation: Generation, lanes: Lanes, mps_bytes: u32) -> u32 {
    let mps = mps_bytes.clamp(128, 4096).next_power_of_two();
    let width = lanes.count();
    // AckFactor in tenths.
    let factor_tenths = match (mps <= 256, width) {
        (true, 1..=4) => 14,
        (true, 8) => 25,
        (true, _) => 30,
        (false, 1..=8) => 10,
        (false, _) => 20,
    };
    (mps + 28) * factor_tenths / (10 * width) + generation.internal_delay_symbols()
}

/// The static description of a link: what the stream figures need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkParams {
    /// PCIe generation.
    pub generation: Generation,
    /// Link width.
    pub lanes: Lanes,
    /// MPS, MRRS and RCB (the same type [`crate::Bus`] splits with).
    pub split: LinkConfig,
    /// Which per-TLP constants to use.
    pub convention: Convention,
    /// Requests carry 64-bit addresses (4 B more per MWr/MRd with the
    /// pcie-model convention).
    pub addr64: bool,
    /// Every TLP carries a 4 B ECRC digest.
    pub ecrc: bool,
    /// How read data comes back.
    pub completion: CompletionSplit,
}

/// Steady-state figures of a stream of equal transactions over an otherwise
/// idle link. All counts and bytes are per transaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stream {
    /// Useful bytes per transaction.
    pub size_bytes: u64,
    /// TLPs towards the host (MWr of DMA writes, MRd of reads).
    pub tlps_to_host: u64,
    /// TLPs towards the device (MMIO MWr, CplD of reads).
    pub tlps_to_device: u64,
    /// Bytes on the wire towards the host, TLP overheads included.
    pub wire_bytes_to_host: u64,
    /// Bytes on the wire towards the device, TLP overheads included.
    pub wire_bytes_to_device: u64,
    /// The direction that runs out first.
    pub limited_by: Direction,
    /// Transactions per second.
    pub transactions_per_s: f64,
    /// Useful bytes per second, as Gb/s.
    pub effective_gbps: f64,
}

impl Stream {
    fn new(size: u64, to_host: (u64, u64), to_device: (u64, u64), usable_gbps: f64) -> Self {
        let (limited_by, wire) = if to_host.1 >= to_device.1 {
            (Direction::ToHost, to_host.1)
        } else {
            (Direction::ToDevice, to_device.1)
        };
        let (transactions_per_s, effective_gbps) = if size == 0 || wire == 0 {
            (0.0, 0.0)
        } else {
            let tps = usable_gbps * 1e9 / 8.0 / wire as f64;
            (tps, tps * size as f64 * 8.0 / 1e9)
        };
        Stream {
            size_bytes: size,
            tlps_to_host: to_host.0,
            tlps_to_device: to_device.0,
            wire_bytes_to_host: to_host.1,
            wire_bytes_to_device: to_device.1,
            limited_by,
            transactions_per_s,
            effective_gbps,
        }
    }
}

impl LinkParams {
    /// A link with the usual settings of `convention`: 64-bit addresses, no
    /// ECRC, completions of MPS (pcie-model) or of 128 B (Kalia16).
    pub fn new(
        generation: Generation,
        lanes: Lanes,
        split: LinkConfig,
        convention: Convention,
    ) -> Result<Self, ModelError> {
        let p = LinkParams {
            generation,
            lanes,
            split,
            convention,
            addr64: true,
            ecrc: false,
            completion: match convention {
                Convention::PcieModel => CompletionSplit::Mps,
                Convention::Kalia => CompletionSplit::Combine(KALIA_COMPLETION_BYTES),
            },
        };
        p.validate()?;
        Ok(p)
    }

    /// Neugebauer18's link: Gen3 x8, MPS 256, MRRS 512, RCB 64, 64-bit
    /// addresses, pcie-model convention (the P11–P15 configuration and
    /// pcie-model's `pcie_bw.py` defaults).
    pub fn neugebauer18() -> Self {
        LinkParams {
            generation: Generation::Gen3,
            lanes: Lanes::X8,
            split: LinkConfig {
                mps_bytes: 256,
                mrrs_bytes: 512,
                rcb_bytes: 64,
            },
            convention: Convention::PcieModel,
            addr64: true,
            ecrc: false,
            completion: CompletionSplit::Mps,
        }
    }

    /// Kalia16's CIB link: Gen3 x16, MPS 256 (an assumption: Kalia16 does
    /// not say), MRRS 512, RCB 64, Kalia convention.
    pub fn kalia16() -> Self {
        LinkParams {
            generation: Generation::Gen3,
            lanes: Lanes::X16,
            convention: Convention::Kalia,
            completion: CompletionSplit::Combine(KALIA_COMPLETION_BYTES),
            ..LinkParams::neugebauer18()
        }
    }

    /// Checks MPS, MRRS, RCB and the completion size.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.split.validate()?;
        if let CompletionSplit::Combine(n) = self.completion
            && !(n.is_power_of_two() && (64..=4096).contains(&n))
        {
            return Err(ModelError::CompletionSize { bytes: n });
        }
        Ok(())
    }

    /// Raw bandwidth after encoding, Gb/s (Gen3 x8: 63.02).
    pub fn raw_gbps(&self) -> f64 {
        self.generation.lane_gbps() * f64::from(self.lanes.count())
    }

    /// Bytes between two ACK DLLPs ([`latency_limit`]).
    pub fn ack_limit_bytes(&self) -> u32 {
        latency_limit(self.generation, self.lanes, self.split.mps_bytes)
    }

    /// Bytes between two UpdateFC DLLPs ([`latency_limit`]).
    pub fn fc_guide_bytes(&self) -> u32 {
        latency_limit(self.generation, self.lanes, self.split.mps_bytes)
    }

    /// Fraction of the raw bandwidth taken by ACKs, FC updates and SKIP
    /// ordered sets; zero with the Kalia convention, which ignores them.
    pub fn link_layer_overhead(&self) -> f64 {
        match self.convention {
            Convention::Kalia => 0.0,
            Convention::PcieModel => {
                f64::from(DLLP_BYTES) / f64::from(self.ack_limit_bytes())
                    + f64::from(DLLP_BYTES) / f64::from(self.fc_guide_bytes())
                    + f64::from(SKIP_BYTES) / f64::from(SKIP_INTERVAL_BYTES)
            }
        }
    }

    /// Bandwidth left for TLPs in each direction, Gb/s (Gen3 x8 MPS 256,
    /// pcie-model: 57.88).
    pub fn usable_gbps(&self) -> f64 {
        self.raw_gbps() * (1.0 - self.link_layer_overhead())
    }

    /// Bytes a TLP of `kind` costs on the wire beyond its payload.
    pub fn tlp_overhead_bytes(&self, kind: TlpKind) -> u32 {
        let base = match (self.convention, kind) {
            (Convention::Kalia, TlpKind::MWr | TlpKind::MRd) => KALIA_REQUEST_OVERHEAD_BYTES,
            (Convention::Kalia, TlpKind::CplD) => KALIA_COMPLETION_OVERHEAD_BYTES,
            (Convention::PcieModel, TlpKind::MWr | TlpKind::MRd) => {
                LINK_WRAPPER_BYTES
                    + COMMON_HEADER_BYTES
                    + if self.addr64 {
                        ADDR64_WORDS_BYTES
                    } else {
                        ADDR32_WORDS_BYTES
                    }
            }
            (Convention::PcieModel, TlpKind::CplD) => {
                LINK_WRAPPER_BYTES + COMMON_HEADER_BYTES + COMPLETION_WORDS_BYTES
            }
        };
        base + if self.ecrc { ECRC_BYTES } else { 0 }
    }

    /// Largest completion the host sends for a read.
    pub fn completion_bytes(&self) -> u32 {
        match self.completion {
            CompletionSplit::Mps => self.split.mps_bytes,
            CompletionSplit::Rcb => self.split.rcb_bytes,
            CompletionSplit::Combine(n) => n.min(self.split.mps_bytes),
        }
    }

    /// Bytes of host memory a DMA of `size` bytes moves: whole cache lines
    /// with the Kalia convention.
    fn dma_bytes(&self, size: u64) -> u64 {
        match self.convention {
            Convention::PcieModel => size,
            Convention::Kalia => size.div_ceil(CACHE_LINE_BYTES) * CACHE_LINE_BYTES,
        }
    }

    /// A stream of DMA writes of `size` bytes into host memory (MWr towards
    /// the host, split at MPS). Sizes are taken as aligned. Zero size gives
    /// zero rates.
    pub fn write_stream(&self, size: u64) -> Stream {
        let len = self.dma_bytes(size);
        let tlps = len.div_ceil(u64::from(self.split.mps_bytes));
        let wire = len + tlps * u64::from(self.tlp_overhead_bytes(TlpKind::MWr));
        Stream::new(size, (tlps, wire), (0, 0), self.usable_gbps())
    }

    /// A stream of DMA reads of `size` bytes from host memory: MRd requests
    /// of at most MRRS towards the host, CplD completions of at most
    /// [`completion_bytes`](Self::completion_bytes) back, counted per
    /// request (a completion never answers two requests). It runs at the
    /// rate of whichever direction runs out first; the effective bandwidth
    /// counts the data only. Sizes are taken as aligned.
    ///
    /// pcie-model counts `ceil(size / MPS)` completions over the whole read;
    /// that is the same number whenever the completion size is at most MRRS
    /// (both are powers of two) and too few when it is larger.
    pub fn read_stream(&self, size: u64) -> Stream {
        let len = self.dma_bytes(size);
        let mrrs = u64::from(self.split.mrrs_bytes);
        let cpl = u64::from(self.completion_bytes());
        let requests = len.div_ceil(mrrs);
        let completions = (len / mrrs) * mrrs.div_ceil(cpl) + (len % mrrs).div_ceil(cpl);
        let up = requests * u64::from(self.tlp_overhead_bytes(TlpKind::MRd));
        let down = len + completions * u64::from(self.tlp_overhead_bytes(TlpKind::CplD));
        Stream::new(
            size,
            (requests, up),
            (completions, down),
            self.usable_gbps(),
        )
    }

    /// A stream of plain doorbells: 8-byte MMIO MWr towards the device.
    pub fn doorbell_stream(&self) -> Stream {
        self.mmio_stream(8)
    }

    /// A stream of `size`-byte MMIO writes of one TLP each (at most MPS),
    /// towards the device; MMIO is not rounded to cache lines.
    pub fn mmio_stream(&self, size: u64) -> Stream {
        let tlps = size.div_ceil(u64::from(self.split.mps_bytes));
        let wire = size + tlps * u64::from(self.tlp_overhead_bytes(TlpKind::MWr));
        Stream::new(size, (0, 0), (tlps, wire), self.usable_gbps())
    }

    /// A stream of write-combined MMIO copies of `size` bytes (BlueFlame):
    /// one MWr TLP per 64-byte chunk. With the Kalia convention each TLP
    /// carries a full 64 B (`N × ceil(D/64)` TLPs of `64 + Pr`); with
    /// pcie-model's the last chunk carries what is left.
    pub fn wc_mmio_stream(&self, size: u64) -> Stream {
        let tlps = size.div_ceil(WC_CHUNK_BYTES);
        let payload = match self.convention {
            Convention::Kalia => tlps * WC_CHUNK_BYTES,
            Convention::PcieModel => size,
        };
        let wire = payload + tlps * u64::from(self.tlp_overhead_bytes(TlpKind::MWr));
        Stream::new(size, (0, 0), (tlps, wire), self.usable_gbps())
    }
}

/// A link model parameter outside what PCIe or the model allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// MPS, MRRS or RCB out of range.
    #[error(transparent)]
    Link(#[from] ConfigError),
    /// No such PCIe generation.
    #[error("PCIe generation {generation} is not one of 1..=5")]
    Generation {
        /// The value given.
        generation: u32,
    },
    /// No such link width.
    #[error("{lanes} lanes: a link has 1, 2, 4, 8, 16 or 32")]
    Lanes {
        /// The value given.
        lanes: u32,
    },
    /// A completion-combining size that is not a power of two in 64..=4096.
    #[error("completion size {bytes} B is not a power of two in 64..=4096")]
    CompletionSize {
        /// The value given.
        bytes: u32,
    },
    /// A latency curve with no points or more than eight.
    #[error("a read latency curve has 1..=8 points, not {n}")]
    CurvePoints {
        /// Points given.
        n: usize,
    },
    /// A latency curve whose sizes do not increase.
    #[error("read latency curve point {index} does not have a larger size than the one before")]
    CurveOrder {
        /// Index of the offending point.
        index: usize,
    },
    /// Read tags outside 1..=768.
    #[error("{tags} read tags: the device needs 1..=768")]
    ReadTags {
        /// The value given.
        tags: u16,
    },
    /// Credits beyond what can be advertised, or data credits below one
    /// maximum-size TLP.
    #[error(
        "{pool} credits {header}/{data}: headers ≤ 2032, data ≤ 32752 and, unless infinite (0), ≥ {min_data} (one MPS)"
    )]
    Credits {
        /// Which pool.
        pool: &'static str,
        /// Header credits given.
        header: u16,
        /// Data credits given.
        data: u16,
        /// Fewest data credits that hold one MPS payload.
        min_data: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pcie-model's `Ack_Limits` table (model/pcie.py), per generation class
    /// (2.5, 5, 8+ GT/s), width x1..x32, MPS 128..4096, with the one entry
    /// where it disagrees with its own `FC_Guide` table corrected (Gen2 x32
    /// MPS 4096: 237 there, 327 in `FC_Guide`).
    const PCIE_MODEL_TABLE: [[[u32; 6]; 6]; 3] = [
        [
            [237, 416, 559, 1071, 2095, 4143],
            [128, 217, 289, 545, 1057, 2081],
            [73, 118, 154, 282, 538, 1050],
            [67, 107, 86, 150, 278, 534],
            [48, 72, 86, 150, 278, 534],
            [33, 45, 52, 84, 148, 276],
        ],
        [
            [288, 467, 610, 1122, 2146, 4194],
            [179, 268, 340, 596, 1108, 2132],
            [124, 169, 205, 333, 589, 1101],
            [118, 158, 137, 201, 329, 585],
            [99, 123, 137, 201, 329, 585],
            [84, 96, 103, 135, 199, 327],
        ],
        [
            [333, 512, 655, 1167, 2191, 4239],
            [224, 313, 385, 641, 1153, 2177],
            [169, 214, 250, 378, 634, 1146],
            [163, 203, 182, 246, 374, 630],
            [144, 168, 182, 246, 374, 630],
            [129, 141, 148, 180, 244, 372],
        ],
    ];

    #[test]
    fn latency_limit_formula_matches_pcie_model_tables() {
        for g in Generation::ALL {
            let class = (g.number() as usize - 1).min(2);
            for (w, lanes) in Lanes::ALL.into_iter().enumerate() {
                for (m, mps) in [128, 256, 512, 1024, 2048, 4096].into_iter().enumerate() {
                    assert_eq!(
                        latency_limit(g, lanes, mps),
                        PCIE_MODEL_TABLE[class][w][m],
                        "{g:?} {lanes:?} MPS {mps}"
                    );
                }
            }
        }
    }

    #[test]
    fn generations_and_lanes_round_trip_and_reject_others() {
        for g in Generation::ALL {
            assert_eq!(Generation::from_number(g.number()), Ok(g));
        }
        for l in Lanes::ALL {
            assert_eq!(Lanes::from_count(l.count()), Ok(l));
        }
        assert!(Generation::from_number(6).is_err());
        assert!(Lanes::from_count(12).is_err());
        assert_eq!(
            format!("{:.2}", LinkParams::neugebauer18().raw_gbps()),
            "63.02"
        );
    }

    #[test]
    fn overheads_follow_each_convention() {
        let mut p = LinkParams::neugebauer18();
        assert_eq!(p.tlp_overhead_bytes(TlpKind::MWr), 24);
        assert_eq!(p.tlp_overhead_bytes(TlpKind::CplD), 20);
        p.addr64 = false;
        assert_eq!(p.tlp_overhead_bytes(TlpKind::MRd), 20);
        p.ecrc = true;
        assert_eq!(p.tlp_overhead_bytes(TlpKind::MRd), 24);
        let k = LinkParams::kalia16();
        assert_eq!(k.tlp_overhead_bytes(TlpKind::MRd), 26);
        assert_eq!(k.tlp_overhead_bytes(TlpKind::CplD), 22);
        assert_eq!(k.usable_gbps(), k.raw_gbps());
        assert_eq!(k.completion_bytes(), 128);
    }

    #[test]
    fn read_stream_counts_completions_per_request() {
        let mut p = LinkParams::neugebauer18();
        // MRRS 128 below MPS 256: a 256 B read is two requests, two
        // completions (pcie-model would count one completion).
        p.split.mrrs_bytes = 128;
        let s = p.read_stream(256);
        assert_eq!((s.tlps_to_host, s.tlps_to_device), (2, 2));
        assert_eq!(s.wire_bytes_to_device, 256 + 2 * 20);
        p.completion = CompletionSplit::Rcb;
        p.split.mrrs_bytes = 512;
        assert_eq!(p.read_stream(1000).tlps_to_device, 16);
        // Kalia: cache lines.
        let k = LinkParams::kalia16();
        let s = k.read_stream(8);
        assert_eq!(s.wire_bytes_to_device, 64 + 22);
        assert_eq!(p.read_stream(0).transactions_per_s, 0.0);
    }
}
