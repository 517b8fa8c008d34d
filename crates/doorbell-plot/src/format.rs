//! The picture formats, chosen by file extension.

use std::path::Path;

use crate::error::PlotError;

/// How a picture is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Scalable Vector Graphics: text stays text (searchable, diffable);
    /// the viewer's own sans-serif font draws it.
    Svg,
    /// Portable Network Graphics, 8-bit RGB, text rasterised with the
    /// crate's built-in DejaVu Sans.
    Png,
}

impl Format {
    /// The format named by `path`'s extension, `.svg` or `.png` (in any
    /// letter case).
    ///
    /// # Errors
    /// [`PlotError::UnknownExtension`] for any other extension or none.
    pub fn from_path(path: &Path) -> Result<Format, PlotError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(PlotError::UnknownExtension {
                path: path.to_path_buf(),
            }),
        }
    }

    /// The usual file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            Format::Png => "png",
        }
    }
}
