//! The one error type of the crate.

use std::path::PathBuf;

/// Why a picture was not drawn. None of these is fatal to anything but the
/// picture asked for: no partial file is left behind, since the picture is
/// rendered in memory first and written only when complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// The output file's name does not end in `.svg` or `.png`.
    #[error("cannot tell the picture format of {}: name the file *.svg or *.png", path.display())]
    UnknownExtension {
        /// The path given.
        path: PathBuf,
    },
    /// There is nothing to draw: no chart, a chart with no series, a series
    /// with no points, no step, or only points that cannot be placed on the
    /// axes (not finite, or not positive on a logarithmic axis).
    #[error("nothing to draw: {what}")]
    Empty {
        /// What was empty, naming the chart or series.
        what: String,
    },
    /// A step of a critical path has a time that is not finite, a negative
    /// start, or an end before its start.
    #[error("step {number} ({name}) has invalid times: start {start_ns} ns, end {end_ns} ns")]
    InvalidStep {
        /// The step's number.
        number: u8,
        /// The step's name.
        name: String,
        /// Its start, in ns.
        start_ns: f64,
        /// Its end, in ns.
        end_ns: f64,
    },
    /// The drawing library failed. Its errors are generic over the drawing
    /// backend and borrow it, so only their message is kept.
    #[error("drawing failed: {0}")]
    Draw(String),
    /// The shipped font could not be loaded (a build defect, not an input
    /// error).
    #[error("the built-in font could not be registered")]
    Font,
    /// The PNG encoder failed.
    #[error("PNG encoding failed")]
    Png(#[from] png::EncodingError),
    /// Writing the picture to its file failed.
    #[error("cannot write {}", path.display())]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}
