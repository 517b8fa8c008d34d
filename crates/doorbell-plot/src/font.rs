//! The font shipped with the crate, registered once with plotters.

use std::sync::OnceLock;

use plotters::style::FontStyle;

use crate::error::PlotError;

/// DejaVu Sans 2.37 (Bitstream Vera licence, `assets/LICENSE-DejaVu.txt`).
static DEJAVU_SANS: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// The family every text style of the crate asks for.
pub(crate) const FAMILY: &str = "sans-serif";

/// Registers the built-in font as [`FAMILY`], the first time only; later
/// calls return the first outcome. Safe to call from several threads.
pub(crate) fn register() -> Result<(), PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, DEJAVU_SANS).is_ok()
    });
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

/// The built-in font, for drawing glyphs directly.
pub(crate) fn face() -> Result<ab_glyph::FontRef<'static>, PlotError> {
    ab_glyph::FontRef::try_from_slice(DEJAVU_SANS).map_err(|_| PlotError::Font)
}
