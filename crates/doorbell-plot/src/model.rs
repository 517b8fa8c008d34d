//! The plain data a caller passes in.

/// How values are placed along an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scale {
    /// Evenly spaced values; ticks at 1, 2 or 5 times a power of ten.
    #[default]
    Linear,
    /// Powers of two evenly spaced, labelled 2, 64, 4K, 1M (binary
    /// prefixes, as for message sizes and thread counts). Values that are
    /// not positive are skipped.
    Log2,
    /// Powers of ten evenly spaced, labelled 0.1, 1, 10, 100, 1000. Values
    /// that are not positive are skipped.
    Log10,
}

/// One chart: `y` against `x`, one line per series, with optional published
/// points and horizontal reference lines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chart {
    /// Drawn above the chart.
    pub title: String,
    /// Below the x axis, e.g. `message size (bytes)`.
    pub x_label: String,
    /// Beside the y axis, e.g. `message rate (Mops)`.
    pub y_label: String,
    /// How x values are placed; ignored when `x_categories` is given.
    pub x_scale: Scale,
    /// How y values are placed.
    pub y_scale: Scale,
    /// When given, x is a category: the value `i` (0, 1, ..) is labelled
    /// `x_categories[i]` and the series are drawn as grouped bars. Points
    /// whose x is not one of these indices are skipped.
    pub x_categories: Option<Vec<String>>,
    /// The lines (or bar groups), each with a colour and a legend entry.
    pub series: Vec<Series>,
    /// Published hardware figures, drawn as black diamonds with their label.
    pub marks: Vec<Mark>,
    /// Horizontal reference lines, dashed and labelled.
    pub lines: Vec<RefLine>,
}

/// One line of a chart: a configuration or a profile.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Its legend entry.
    pub label: String,
    /// `(x, y)` pairs, drawn in the order given. Pairs with a value that is
    /// not finite, or not positive on a logarithmic axis, are skipped.
    pub points: Vec<(f64, f64)>,
}

/// A published hardware figure: a point drawn as a distinct marker with its
/// label, e.g. `K11 (Kalia16) 80 Mops`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mark {
    /// Written next to the marker.
    pub label: String,
    /// Where it is along x (a category index when the chart has categories).
    pub x: f64,
    /// Its value.
    pub y: f64,
}

/// A horizontal reference line, e.g. the port's line rate.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RefLine {
    /// Written above the line's right end.
    pub label: String,
    /// Its value.
    pub y: f64,
}

/// A swim lane of a critical-path figure: where a step happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The posting CPU.
    Host,
    /// The root complex and the PCIe link.
    Pcie,
    /// The local NIC.
    Nic,
    /// The wire between the ports.
    Wire,
    /// The remote NIC.
    RemoteNic,
    /// The remote host.
    RemoteHost,
}

impl Lane {
    /// Every lane, top to bottom as drawn.
    pub const ALL: [Lane; 6] = [
        Lane::Host,
        Lane::Pcie,
        Lane::Nic,
        Lane::Wire,
        Lane::RemoteNic,
        Lane::RemoteHost,
    ];

    /// The lane's name as written in the figures.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Host => "Host (CPU)",
            Lane::Pcie => "Root complex / PCIe",
            Lane::Nic => "NIC",
            Lane::Wire => "Wire",
            Lane::RemoteNic => "Remote NIC",
            Lane::RemoteHost => "Remote host",
        }
    }

    /// Whether the lane is on the remote side (drawn only when a step uses it).
    pub fn is_remote(self) -> bool {
        matches!(self, Lane::RemoteNic | Lane::RemoteHost)
    }
}

/// One step of a post's critical path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathStep {
    /// Its number, e.g. 0 for the WQE write, 5 for the CQE.
    pub number: u8,
    /// e.g. `doorbell / BlueFlame MMIO`.
    pub name: String,
    /// Where it happens.
    pub lane: Lane,
    /// When it begins, in ns from the start of the post (0 or more).
    pub start_ns: f64,
    /// When it ends, in ns; equal to `start_ns` for a step of no length.
    pub end_ns: f64,
}

impl PathStep {
    /// `end_ns - start_ns`.
    pub fn duration_ns(&self) -> f64 {
        self.end_ns - self.start_ns
    }

    /// Whether both times are finite, the start is not negative and the end
    /// is not before the start.
    pub fn is_valid(&self) -> bool {
        self.start_ns.is_finite()
            && self.end_ns.is_finite()
            && self.start_ns >= 0.0
            && self.end_ns >= self.start_ns
    }
}
