//! Pictures of what doorbell predicts: charts of message rate and
//! bandwidth, and one post's critical path, as SVG or PNG files.
//!
//! # Model
//! The crate knows nothing of the simulator. The caller passes plain data
//! and gets a file (or the bytes of one):
//! - a [`Chart`] is `y` against `x` with one line per [`Series`] (a
//!   configuration or a profile), published hardware figures as [`Mark`]s
//!   and horizontal [`RefLine`]s such as the port's line rate. Each axis is
//!   linear or logarithmic ([`Scale`]): a base-2 axis is labelled 2, 64, 4K,
//!   1M, 8M, as message sizes are. With `x_categories` the x values 0..n
//!   name configurations and the series are drawn as grouped bars.
//!   [`draw_charts`] stacks several charts in one picture, one above the
//!   other, each with its legend to its right, outside the data;
//! - a critical path is a list of [`PathStep`]s, each in a [`Lane`] (Host,
//!   Root complex / PCIe, NIC, Wire, and the remote side when a step is
//!   there), drawn as swim lanes with time running left to right in ns: a
//!   box per step from its start to its end, labelled with its number,
//!   name and duration, an arrow from each step to the next, a time axis
//!   and the total ([`draw_critical_path`]). [`critical_path_text`] gives
//!   the same figure as monospace text for a terminal.
//!
//! # Guarantees
//! - The format follows the file name: `.svg` or `.png`, in any letter
//!   case; any other name is [`PlotError::UnknownExtension`] before any
//!   drawing, and no file is written unless the whole picture rendered.
//! - Bad data is an error or is skipped, never a panic: no chart, a chart
//!   without series or a series without points is [`PlotError::Empty`];
//!   points that are not finite, or not positive on a logarithmic axis,
//!   are skipped (and a chart left with none is [`PlotError::Empty`]); a
//!   step whose times are not finite, start below 0 or end before they
//!   start is [`PlotError::InvalidStep`]. A step of zero length is drawn
//!   as a thin dark marker with its label.
//! - No system font is read: the text is measured, and in PNG drawn, with
//!   the DejaVu Sans shipped in `assets/` (Bitstream Vera licence,
//!   `assets/LICENSE-DejaVu.txt`), registered once per process. SVG keeps
//!   text as `<text>` elements in the `sans-serif` family.
//! - The same input gives the same bytes: no clock, no randomness.
//!
//! # Use
//! ```
//! use doorbell_plot::{Chart, Format, Scale, Series};
//!
//! let chart = Chart {
//!     title: "RC WRITE message rate".into(),
//!     x_label: "message size (bytes)".into(),
//!     y_label: "Mops".into(),
//!     x_scale: Scale::Log2,
//!     series: vec![Series {
//!         label: "1 QP".into(),
//!         points: vec![(2.0, 30.0), (64.0, 28.0), (4096.0, 2.9)],
//!     }],
//!     ..Chart::default()
//! };
//! let svg = doorbell_plot::render_charts(Format::Svg, &[chart]).unwrap();
//! assert!(String::from_utf8(svg).unwrap().contains("1 QP"));
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod axis;
mod chart;
mod error;
mod font;
mod format;
mod label;
mod model;
mod output;
mod palette;
mod path;
mod path_text;
mod raster;
mod ticks;

use std::path::Path;

pub use error::PlotError;
pub use format::Format;
pub use model::{Chart, Lane, Mark, PathStep, RefLine, Scale, Series};

/// Draws `charts` one above the other in one picture and writes it to
/// `path`, as SVG or PNG according to its extension.
///
/// # Errors
/// [`PlotError::UnknownExtension`], [`PlotError::Empty`],
/// [`PlotError::Draw`], [`PlotError::Png`] or [`PlotError::Io`].
pub fn draw_charts(path: &Path, charts: &[Chart]) -> Result<(), PlotError> {
    let format = Format::from_path(path)?;
    let bytes = render_charts(format, charts)?;
    write_file(path, &bytes)
}

/// Draws `charts` one above the other in memory: the SVG text (UTF-8) or
/// the PNG bytes (8-bit RGB). The picture is 1000 px wide and 440 px high
/// per chart; a critical path is 1100 px wide and 86 px high per lane,
/// plus 152 px of title and axis.
///
/// # Errors
/// As [`draw_charts`], without the file errors.
pub fn render_charts(format: Format, charts: &[Chart]) -> Result<Vec<u8>, PlotError> {
    output::render(format, &chart::ChartsFigure::new(charts)?)
}

/// Draws one post's critical path as swim lanes and writes it to `path`,
/// as SVG or PNG according to its extension.
///
/// # Errors
/// [`PlotError::UnknownExtension`], [`PlotError::Empty`] (no steps),
/// [`PlotError::InvalidStep`], [`PlotError::Draw`], [`PlotError::Png`] or
/// [`PlotError::Io`].
pub fn draw_critical_path(path: &Path, title: &str, steps: &[PathStep]) -> Result<(), PlotError> {
    let format = Format::from_path(path)?;
    let bytes = render_critical_path(format, title, steps)?;
    write_file(path, &bytes)
}

/// Draws one post's critical path in memory: the SVG text or the PNG bytes.
///
/// # Errors
/// As [`draw_critical_path`], without the file errors.
pub fn render_critical_path(
    format: Format,
    title: &str,
    steps: &[PathStep],
) -> Result<Vec<u8>, PlotError> {
    output::render(format, &path::PathFigure::new(title, steps)?)
}

/// One post's critical path as monospace text: the title, a header with
/// the time scale, one line per step in order of start (number, name,
/// lane, start, end and duration in ns, and a bar of `#` placed on a scale
/// `width` characters wide, `+` for a step of no length), then the total
/// from the first start to the last end. Steps with invalid times are
/// listed after the others as such and left out of the scale and total.
/// `width` is kept between 10 and 400.
pub fn critical_path_text(title: &str, steps: &[PathStep], width: usize) -> String {
    path_text::render(title, steps, width)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), PlotError> {
    std::fs::write(path, bytes).map_err(|source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    })
}
