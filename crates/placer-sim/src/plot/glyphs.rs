//! A bitmap backend wrapper that draws text itself. plotters 0.3.7's ab_glyph path places
//! each glyph's bounding box at the pen position, dropping the glyph's left bearing, so
//! narrow glyphs ('.', '(') sit too far left and leave a gap: ticks read "9. 0". Here each
//! glyph is drawn at pen + its bounds' offset (the bearing), the pen advancing by the
//! glyph's advance and kerning, as the font says. Everything else goes to the inner
//! backend unchanged.

use ab_glyph::{Font, FontRef, ScaleFont};
use plotters_backend::{
    text_anchor::{HPos, VPos},
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

pub struct FixedText<B> {
    pub inner: B,
    pub font: FontRef<'static>,
}

impl<B: DrawingBackend> DrawingBackend for FixedText<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size() as f32;
        let font = self.font.as_scaled(size);
        // Layout width from advances and kerning; height as plotters' layout box has it.
        let mut width = 0f32;
        let mut prev = None;
        for c in text.chars() {
            let g = font.glyph_id(c);
            if let Some(p) = prev {
                width += font.kern(p, g);
            }
            width += font.h_advance(g);
            prev = Some(g);
        }
        let height = (size / 1.24) as i32;
        let width = width as i32;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        let mut pen = 0f32;
        let mut prev = None;
        let mut pixels = Vec::new();
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                pen += font.kern(p, id);
            }
            prev = Some(id);
            let glyph = font.scaled_glyph(c);
            if let Some(q) = font.outline_glyph(glyph) {
                let r = q.px_bounds();
                // The bearing plotters drops: r.min.x is the box's offset from the pen.
                let x0 = (pen + r.min.x) as i32;
                let y0 = (size / 2.0 + r.min.y) as i32;
                q.draw(|x, y, cov| pixels.push((x0 + x as i32, y0 + y as i32, cov)));
            }
            pen += font.h_advance(id);
        }
        for (x, y, cov) in pixels {
            let (x, y) = trans.transform(x + dx, y + dy);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if x >= 0 && x < w as i32 && y >= 0 && y < h as i32 {
                let c = BackendColor {
                    alpha: color.alpha * f64::from(cov),
                    rgb: color.rgb,
                };
                self.inner.draw_pixel((x, y), c)?;
            }
        }
        Ok(())
    }
}
