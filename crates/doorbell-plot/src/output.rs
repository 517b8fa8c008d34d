//! From a figure to bytes: the two backends, and the PNG encoder.

use plotters::coord::Shift;
use plotters::prelude::{
    BitMapBackend, DrawingArea, DrawingAreaErrorKind, DrawingBackend, IntoDrawingArea, SVGBackend,
};

use crate::error::PlotError;
use crate::font;
use crate::format::Format;
use crate::raster::Raster;

/// A picture that can be drawn on any plotters backend.
pub(crate) trait Figure {
    /// Its size in pixels, width then height.
    fn size(&self) -> (u32, u32);

    /// Draws it on `root`, which is `size()` large and blank.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>;
}

/// Keeps the message of a plotters error (they borrow their backend).
pub(crate) fn draw_err<E: std::error::Error + Send + Sync>(
    e: DrawingAreaErrorKind<E>,
) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Renders `figure` in memory: SVG text or PNG bytes.
pub(crate) fn render(format: Format, figure: &impl Figure) -> Result<Vec<u8>, PlotError> {
    font::register()?;
    let (width, height) = figure.size();
    match format {
        Format::Svg => {
            let mut text = String::new();
            {
                let root = SVGBackend::with_string(&mut text, (width, height)).into_drawing_area();
                figure.draw(&root)?;
                root.present().map_err(draw_err)?;
            }
            Ok(text.into_bytes())
        }
        Format::Png => {
            let mut rgb = vec![0u8; width as usize * height as usize * 3];
            {
                let bitmap = BitMapBackend::with_buffer(&mut rgb, (width, height));
                let root = Raster::new(bitmap, font::face()?).into_drawing_area();
                figure.draw(&root)?;
                root.present().map_err(draw_err)?;
            }
            let mut bytes = Vec::new();
            {
                let mut encoder = png::Encoder::new(&mut bytes, width, height);
                encoder.set_color(png::ColorType::Rgb);
                encoder.set_depth(png::BitDepth::Eight);
                let mut writer = encoder.write_header()?;
                writer.write_image_data(&rgb)?;
                writer.finish()?;
            }
            Ok(bytes)
        }
    }
}
