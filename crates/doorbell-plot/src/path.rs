//! One post's critical path as swim lanes: a box per step on a time axis.

use plotters::coord::Shift;
use plotters::prelude::{
    DrawingArea, DrawingBackend, IntoFont, PathElement, Polygon, Rectangle, Text,
};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{Color, RGBColor, TextStyle, WHITE};

use crate::error::PlotError;
use crate::font::FAMILY;
use crate::model::{Lane, PathStep};
use crate::output::{Figure, draw_err};
use crate::palette;
use crate::ticks;

const WIDTH: i32 = 1100;
/// Left of the time axis: the lane names.
const PLOT_X0: i32 = 200;
const PLOT_X1: i32 = WIDTH - 50;
const TOP: i32 = 56;
const LANE_HEIGHT: i32 = 86;
const BOX_HEIGHT: i32 = 26;
/// Below the lanes: the time axis, its title and the total.
const BOTTOM: i32 = 96;

/// Steps checked and sorted by start, with the lanes they use.
pub(crate) struct PathFigure<'a> {
    title: &'a str,
    steps: Vec<&'a PathStep>,
    lanes: Vec<Lane>,
    t0: f64,
    t1: f64,
}

impl<'a> PathFigure<'a> {
    /// Checks `steps` and sorts them by start time (then number).
    ///
    /// # Errors
    /// [`PlotError::Empty`] for no steps, [`PlotError::InvalidStep`] for a
    /// step with a time that is not finite, a negative start or an end
    /// before its start.
    pub(crate) fn new(title: &'a str, steps: &'a [PathStep]) -> Result<PathFigure<'a>, PlotError> {
        if steps.is_empty() {
            return Err(PlotError::Empty {
                what: format!("critical path '{title}' has no steps"),
            });
        }
        if let Some(s) = steps.iter().find(|s| !s.is_valid()) {
            return Err(PlotError::InvalidStep {
                number: s.number,
                name: s.name.clone(),
                start_ns: s.start_ns,
                end_ns: s.end_ns,
            });
        }
        let steps = sorted(steps);
        let lanes = Lane::ALL
            .into_iter()
            .filter(|l| !l.is_remote() || steps.iter().any(|s| s.lane == *l))
            .collect();
        let (t0, t1) = span(&steps);
        Ok(PathFigure {
            title,
            steps,
            lanes,
            t0,
            t1,
        })
    }

    fn x(&self, t: f64) -> i32 {
        let frac = (t - self.t0) / (self.t1 - self.t0);
        (PLOT_X0 as f64 + frac * (PLOT_X1 - PLOT_X0) as f64).round() as i32
    }

    fn lane_mid(&self, lane: Lane) -> i32 {
        let row = self.lanes.iter().position(|l| *l == lane).unwrap_or(0) as i32;
        TOP + row * LANE_HEIGHT + LANE_HEIGHT / 2
    }
}

/// The steps ordered by start, then number, then end.
pub(crate) fn sorted(steps: &[PathStep]) -> Vec<&PathStep> {
    let mut out: Vec<&PathStep> = steps.iter().collect();
    out.sort_by(|a, b| {
        a.start_ns
            .total_cmp(&b.start_ns)
            .then(a.number.cmp(&b.number))
            .then(a.end_ns.total_cmp(&b.end_ns))
    });
    out
}

/// The earliest start and latest end of `steps`, never an empty span.
pub(crate) fn span(steps: &[&PathStep]) -> (f64, f64) {
    let t0 = steps
        .iter()
        .map(|s| s.start_ns)
        .fold(f64::INFINITY, f64::min);
    let t1 = steps
        .iter()
        .map(|s| s.end_ns)
        .fold(f64::NEG_INFINITY, f64::max);
    if !(t0.is_finite() && t1.is_finite()) {
        return (0.0, 1.0);
    }
    if t1 > t0 { (t0, t1) } else { (t0, t0 + 1.0) }
}

fn lane_colour(lane: Lane) -> RGBColor {
    match lane {
        Lane::Host => palette::SERIES[0],
        Lane::Pcie => palette::SERIES[1],
        Lane::Nic => palette::SERIES[2],
        Lane::Wire => palette::SERIES[4],
        Lane::RemoteNic => palette::SERIES[7],
        Lane::RemoteHost => palette::SERIES[5],
    }
}

fn text<'a>(size: u32) -> TextStyle<'a> {
    (FAMILY, size).into_font().color(&palette::INK)
}

impl Figure for PathFigure<'_> {
    fn size(&self) -> (u32, u32) {
        (
            WIDTH as u32,
            (TOP + self.lanes.len() as i32 * LANE_HEIGHT + BOTTOM) as u32,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError> {
        root.fill(&WHITE).map_err(draw_err)?;
        root.draw(&Text::new(self.title.to_string(), (20, 16), text(20)))
            .map_err(draw_err)?;
        let lanes_bottom = TOP + self.lanes.len() as i32 * LANE_HEIGHT;

        // Bands, full width, with the lane names on the left.
        let name_style = text(15).pos(Pos::new(HPos::Left, VPos::Center));
        for (row, lane) in self.lanes.iter().enumerate() {
            let y0 = TOP + row as i32 * LANE_HEIGHT;
            let shade = if row % 2 == 0 {
                RGBColor(244, 246, 249)
            } else {
                WHITE
            };
            root.draw(&Rectangle::new(
                [(0, y0), (WIDTH, y0 + LANE_HEIGHT)],
                shade.filled(),
            ))
            .map_err(draw_err)?;
            root.draw(&Text::new(
                lane.name(),
                (16, y0 + LANE_HEIGHT / 2),
                name_style.clone(),
            ))
            .map_err(draw_err)?;
        }
        root.draw(&PathElement::new(
            [(PLOT_X0 - 14, TOP), (PLOT_X0 - 14, lanes_bottom)],
            RGBColor(190, 190, 190),
        ))
        .map_err(draw_err)?;

        // Time axis and grid.
        let step = ticks::nice_step(self.t1 - self.t0, 11);
        let axis_y = lanes_bottom + 8;
        root.draw(&PathElement::new(
            [(PLOT_X0, axis_y), (PLOT_X1, axis_y)],
            palette::INK,
        ))
        .map_err(draw_err)?;
        let tick_style = text(13).pos(Pos::new(HPos::Center, VPos::Top));
        for t in ticks::linear_ticks(self.t0, self.t1, step) {
            let x = self.x(t);
            root.draw(&PathElement::new(
                [(x, TOP), (x, lanes_bottom)],
                RGBColor(222, 222, 222),
            ))
            .map_err(draw_err)?;
            root.draw(&PathElement::new(
                [(x, axis_y), (x, axis_y + 5)],
                palette::INK,
            ))
            .map_err(draw_err)?;
            root.draw(&Text::new(
                ticks::linear_label(t, step),
                (x, axis_y + 8),
                tick_style.clone(),
            ))
            .map_err(draw_err)?;
        }
        root.draw(&Text::new(
            "time since the post began (ns)",
            ((PLOT_X0 + PLOT_X1) / 2, axis_y + 30),
            text(15).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(draw_err)?;
        let total = format!("total {} ns", ticks::number_label(self.t1 - self.t0));
        root.draw(&Text::new(
            total,
            (PLOT_X1, axis_y + 58),
            text(16).pos(Pos::new(HPos::Right, VPos::Top)),
        ))
        .map_err(draw_err)?;

        // Arrows from each step's end to the next one's start, under the boxes.
        for pair in self.steps.windows(2) {
            self.draw_arrow(root, pair[0], pair[1])?;
        }

        // Boxes, left to right, then their labels.
        let mut rows: Vec<(Lane, bool, i32, i32)> = Vec::new();
        let label_style = text(13);
        for s in &self.steps {
            let mid = self.lane_mid(s.lane);
            let (x0, x1) = (self.x(s.start_ns), self.x(s.end_ns));
            let colour = lane_colour(s.lane);
            let (bx0, bx1, fill) = if x1 - x0 < 3 {
                (x0 - 1, x0 + 2, RGBColor(40, 40, 40))
            } else {
                (x0, x1, colour)
            };
            root.draw(&Rectangle::new(
                [(bx0, mid - BOX_HEIGHT / 2), (bx1, mid + BOX_HEIGHT / 2)],
                fill.filled(),
            ))
            .map_err(draw_err)?;
            let number = s.number.to_string();
            let (nw, _) = root
                .estimate_text_size(&number, &text(13))
                .map_err(draw_err)?;
            if bx1 - bx0 >= nw as i32 + 8 {
                root.draw(&Text::new(
                    number,
                    ((bx0 + bx1) / 2, mid),
                    text(13)
                        .color(&WHITE)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }

            let label = format!(
                "{} {} ({} ns)",
                s.number,
                s.name,
                ticks::number_label(s.duration_ns())
            );
            let (w, h) = root
                .estimate_text_size(&label, &label_style)
                .map_err(draw_err)?;
            let (w, h) = (w as i32, h as i32);
            // Clear of the arrow that comes in at the box's left edge.
            let lx = if bx0 + 6 + w <= WIDTH - 8 {
                bx0 + 6
            } else {
                (bx1 - w).max(PLOT_X0 - 10)
            };
            let free = |above: bool, rows: &[(Lane, bool, i32, i32)]| {
                !rows
                    .iter()
                    .any(|&(l, a, r0, r1)| l == s.lane && a == above && lx < r1 + 8 && r0 < lx + w)
            };
            let above = free(true, &rows) || !free(false, &rows);
            rows.push((s.lane, above, lx, lx + w));
            let ly = if above {
                mid - BOX_HEIGHT / 2 - 5 - h
            } else {
                mid + BOX_HEIGHT / 2 + 5
            };
            root.draw(&Text::new(label, (lx, ly), label_style.clone()))
                .map_err(draw_err)?;
        }
        Ok(())
    }
}

impl PathFigure<'_> {
    fn draw_arrow<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        from: &PathStep,
        to: &PathStep,
    ) -> Result<(), PlotError> {
        let colour = RGBColor(90, 90, 90);
        let (ya, yb) = (self.lane_mid(from.lane), self.lane_mid(to.lane));
        let xa = self.x(from.end_ns);
        let xb = self.x(to.start_ns);
        let (start, end) = if ya == yb {
            if xb - xa < 12 {
                return Ok(());
            }
            ((xa + 2, ya), (xb - 2, yb))
        } else if yb > ya {
            ((xa, ya + BOX_HEIGHT / 2), (xb, yb - BOX_HEIGHT / 2))
        } else {
            ((xa, ya - BOX_HEIGHT / 2), (xb, yb + BOX_HEIGHT / 2))
        };
        root.draw(&PathElement::new([start, end], colour.stroke_width(2)))
            .map_err(draw_err)?;
        let (dx, dy) = ((end.0 - start.0) as f64, (end.1 - start.1) as f64);
        let len = (dx * dx + dy * dy).sqrt();
        if len < 1.0 {
            return Ok(());
        }
        let (ux, uy) = (dx / len, dy / len);
        let head = |along: f64, across: f64| {
            (
                (end.0 as f64 - ux * along - uy * across).round() as i32,
                (end.1 as f64 - uy * along + ux * across).round() as i32,
            )
        };
        root.draw(&Polygon::new(
            vec![end, head(9.0, 4.5), head(9.0, -4.5)],
            colour.filled(),
        ))
        .map_err(draw_err)
    }
}
