//! The PNG backend: plotters' bitmap backend, with text drawn here.
//!
//! plotters' `ab_glyph` text drawing places each glyph at its advance but
//! drops the glyph's left side bearing, so narrow glyphs such as `1` sit
//! too far left (`1 28K`). This backend forwards everything to
//! [`BitMapBackend`] except `draw_text`, which places glyphs with their
//! bearings and kerning, at sub-pixel positions. Sizes and anchors are
//! plotters' own (its layout box, baseline half the font size below the
//! top), so text measured through plotters lands where it was measured.

use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::prelude::BitMapBackend;
use plotters::style::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// [`BitMapBackend`] with correct glyph placement.
pub(crate) struct Raster<'a> {
    inner: BitMapBackend<'a>,
    face: FontRef<'static>,
}

impl<'a> Raster<'a> {
    /// Draws into `inner` with `face` for every text.
    pub(crate) fn new(inner: BitMapBackend<'a>, face: FontRef<'static>) -> Raster<'a> {
        Raster { inner, face }
    }
}

type Result<T, E> = std::result::Result<T, DrawingErrorKind<E>>;

impl DrawingBackend for Raster<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), Self::ErrorType> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), Self::ErrorType> {
        self.inner.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Self::ErrorType> {
        self.inner.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), Self::ErrorType> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), Self::ErrorType> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let transform = style.transform();
        let (w, h) = self.get_size();
        let size = style.size() as f32;
        let font = self.face.as_scaled(size);
        let mut caret = 0f32;
        let mut prev = None;
        let mut coverage = Vec::new();
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                caret += font.kern(p, id);
            }
            prev = Some(id);
            let glyph =
                id.with_scale_and_position(font.scale(), ab_glyph::point(caret, size / 2.0));
            caret += font.h_advance(id);
            let Some(outline) = font.outline_glyph(glyph) else {
                continue;
            };
            let bounds = outline.px_bounds();
            coverage.clear();
            outline.draw(|x, y, c| coverage.push((x, y, c)));
            for &(x, y, c) in &coverage {
                if c <= 0.0 {
                    continue;
                }
                let gx = bounds.min.x as i32 + x as i32;
                let gy = bounds.min.y as i32 + y as i32;
                let (tx, ty) = transform.transform(gx + dx - min_x, gy + dy - min_y);
                let (px, py) = (pos.0 + tx, pos.1 + ty);
                if px >= 0 && py >= 0 && px < w as i32 && py < h as i32 {
                    let alpha = color.alpha * f64::from(c.min(1.0));
                    self.inner.draw_pixel(
                        (px, py),
                        BackendColor {
                            alpha,
                            rgb: color.rgb,
                        },
                    )?;
                }
            }
        }
        Ok(())
    }
}
