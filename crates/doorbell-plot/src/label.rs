//! Placing text boxes so they neither overlap nor leave their area.

/// A box in backend pixels: left, top, right, bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rect {
    /// Left edge.
    pub(crate) x0: i32,
    /// Top edge.
    pub(crate) y0: i32,
    /// Right edge.
    pub(crate) x1: i32,
    /// Bottom edge.
    pub(crate) y1: i32,
}

impl Rect {
    /// The box of size `(w, h)` whose top-left corner is `(x, y)`.
    pub(crate) fn at(x: i32, y: i32, w: i32, h: i32) -> Rect {
        Rect {
            x0: x,
            y0: y,
            x1: x + w,
            y1: y + h,
        }
    }

    fn overlaps(&self, other: &Rect) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }

    fn inside(&self, bounds: &Rect) -> bool {
        self.x0 >= bounds.x0 && self.y0 >= bounds.y0 && self.x1 <= bounds.x1 && self.y1 <= bounds.y1
    }

    fn clamped(self, bounds: &Rect) -> Rect {
        let (w, h) = (self.x1 - self.x0, self.y1 - self.y0);
        let x = self.x0.min(bounds.x1 - w).max(bounds.x0);
        let y = self.y0.min(bounds.y1 - h).max(bounds.y0);
        Rect::at(x, y, w, h)
    }
}

/// Remembers the boxes already placed inside one area.
#[derive(Debug, Clone)]
pub(crate) struct Placer {
    bounds: Rect,
    taken: Vec<Rect>,
}

impl Placer {
    /// Nothing placed yet inside `bounds`.
    pub(crate) fn new(bounds: Rect) -> Placer {
        Placer {
            bounds,
            taken: Vec::new(),
        }
    }

    /// Marks `rect` as used (a marker, say) without placing a label there.
    pub(crate) fn reserve(&mut self, rect: Rect) {
        self.taken.push(rect);
    }

    /// The first of `candidates` that stays inside the area and clear of
    /// everything placed so far; when none does, the first one moved
    /// inside the area. The box returned is then taken.
    pub(crate) fn place(&mut self, candidates: &[Rect]) -> Option<Rect> {
        let chosen = candidates
            .iter()
            .find(|c| c.inside(&self.bounds) && !self.taken.iter().any(|t| t.overlaps(c)))
            .copied()
            .or_else(|| candidates.first().map(|c| c.clamped(&self.bounds)))?;
        self.taken.push(chosen);
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_label_moves_to_a_free_candidate() {
        let mut p = Placer::new(Rect::at(0, 0, 100, 100));
        let a = Rect::at(10, 10, 30, 10);
        let b = Rect::at(10, 25, 30, 10);
        assert_eq!(p.place(&[a, b]), Some(a));
        assert_eq!(p.place(&[a, b]), Some(b));
        // Nothing free: the first, kept inside.
        assert_eq!(
            p.place(&[Rect::at(90, 10, 30, 10)]),
            Some(Rect::at(70, 10, 30, 10))
        );
    }
}
