//! Charts of y against x, stacked one above the other.

use plotters::coord::Shift;
use plotters::prelude::{
    Cartesian2d, ChartBuilder, ChartContext, Circle, DashedLineSeries, DrawingArea, DrawingBackend,
    EmptyElement, IntoFont, LineSeries, PathElement, Polygon, Rectangle, Text, TriangleMarker,
};
use plotters::style::{Color, RGBColor, ShapeStyle, TextStyle, WHITE};

use crate::axis::{Axis, AxisKind};
use crate::error::PlotError;
use crate::font::FAMILY;
use crate::label::{Placer, Rect};
use crate::model::Chart;
use crate::output::{Figure, draw_err};
use crate::palette::{self, Shape};

/// Width of the picture, in pixels.
const WIDTH: u32 = 1000;
/// Height of each chart, in pixels.
const CHART_HEIGHT: u32 = 440;
/// Labelled ticks along x and y.
const X_TICKS: usize = 12;
const Y_TICKS: usize = 8;
/// Height of a legend row.
const LEGEND_ROW: i32 = 24;

type Chart2d<'a, 'b, DB> = ChartContext<'a, DB, Cartesian2d<Axis, Axis>>;

/// Charts checked and fitted to their axes, ready to draw.
pub(crate) struct ChartsFigure<'a> {
    charts: Vec<Prepared<'a>>,
}

/// One chart with the points it can draw and its axes.
struct Prepared<'a> {
    chart: &'a Chart,
    x: Axis,
    y: Axis,
    /// Per series, the points kept.
    series: Vec<Vec<(f64, f64)>>,
    marks: Vec<(&'a str, f64, f64)>,
    lines: Vec<(&'a str, f64)>,
}

impl<'a> ChartsFigure<'a> {
    /// Checks `charts` and fits their axes.
    ///
    /// # Errors
    /// [`PlotError::Empty`] when there is no chart, a chart has no series,
    /// a series has no points, or a chart keeps no point at all.
    pub(crate) fn new(charts: &'a [Chart]) -> Result<ChartsFigure<'a>, PlotError> {
        if charts.is_empty() {
            return Err(PlotError::Empty {
                what: String::from("no chart given"),
            });
        }
        let charts = charts.iter().map(Prepared::new).collect::<Result<_, _>>()?;
        Ok(ChartsFigure { charts })
    }
}

impl<'a> Prepared<'a> {
    fn new(chart: &'a Chart) -> Result<Prepared<'a>, PlotError> {
        let name = &chart.title;
        if chart.series.is_empty() {
            return Err(PlotError::Empty {
                what: format!("chart '{name}' has no series"),
            });
        }
        if let Some(s) = chart.series.iter().find(|s| s.points.is_empty()) {
            return Err(PlotError::Empty {
                what: format!("series '{}' of chart '{name}' has no points", s.label),
            });
        }
        let x_kind = match &chart.x_categories {
            Some(names) if names.is_empty() => {
                return Err(PlotError::Empty {
                    what: format!("chart '{name}' has an empty list of x categories"),
                });
            }
            Some(names) => AxisKind::Category(names.clone()),
            None => AxisKind::from_scale(chart.x_scale),
        };
        let y_kind = AxisKind::from_scale(chart.y_scale);
        let keep = |x: f64, y: f64| x_kind.accepts(x) && y_kind.accepts(y);
        let series: Vec<Vec<(f64, f64)>> = chart
            .series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| keep(x, y))
                    .collect()
            })
            .collect();
        if series.iter().all(Vec::is_empty) {
            return Err(PlotError::Empty {
                what: format!(
                    "chart '{name}' has no point that can be drawn (values must be finite, \
                     and positive on a logarithmic axis)"
                ),
            });
        }
        let marks: Vec<(&str, f64, f64)> = chart
            .marks
            .iter()
            .filter(|m| keep(m.x, m.y))
            .map(|m| (m.label.as_str(), m.x, m.y))
            .collect();
        let lines: Vec<(&str, f64)> = chart
            .lines
            .iter()
            .filter(|l| y_kind.accepts(l.y))
            .map(|l| (l.label.as_str(), l.y))
            .collect();
        let xs: Vec<f64> = series
            .iter()
            .flatten()
            .map(|p| p.0)
            .chain(marks.iter().map(|m| m.1))
            .collect();
        let ys: Vec<f64> = series
            .iter()
            .flatten()
            .map(|p| p.1)
            .chain(marks.iter().map(|m| m.2))
            .chain(lines.iter().map(|l| l.1))
            .collect();
        let x = Axis::fit(x_kind, &xs, false, X_TICKS);
        let y = Axis::fit(y_kind, &ys, true, Y_TICKS);
        Ok(Prepared {
            chart,
            x,
            y,
            series,
            marks,
            lines,
        })
    }
}

impl Figure for ChartsFigure<'_> {
    fn size(&self) -> (u32, u32) {
        (WIDTH, CHART_HEIGHT * self.charts.len() as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError> {
        root.fill(&WHITE).map_err(draw_err)?;
        let areas = root.split_evenly((self.charts.len(), 1));
        for (area, chart) in areas.iter().zip(&self.charts) {
            draw_chart(area, chart)?;
        }
        Ok(())
    }
}

fn text<'a>(size: u32) -> TextStyle<'a> {
    (FAMILY, size).into_font().color(&palette::INK)
}

/// One legend entry: what its sample looks like, and its text.
enum Sample {
    Series(usize),
    Reference,
    Mark,
}

fn draw_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Prepared<'_>,
) -> Result<(), PlotError> {
    let legend_style = text(14);
    let mut entries: Vec<(Sample, String)> = p
        .chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (Sample::Series(i), s.label.clone()))
        .collect();
    entries.extend(p.lines.iter().map(|l| (Sample::Reference, l.0.to_string())));
    if !p.marks.is_empty() {
        entries.push((Sample::Mark, String::from("published figure")));
    }
    let (width, _) = area.dim_in_pixel();
    let widest_allowed = (width as f64 * 0.34) as u32;
    let mut widest = 0;
    for (_, label) in &mut entries {
        *label = fit_text(
            area,
            label,
            &legend_style,
            widest_allowed.saturating_sub(56),
        )?;
        widest = widest.max(
            area.estimate_text_size(label, &legend_style)
                .map_err(draw_err)?
                .0,
        );
    }
    let legend_width = (widest + 60).clamp(130, widest_allowed.max(130));
    let (plot_area, legend_area) = area.split_horizontally(width.saturating_sub(legend_width));

    let mut chart = ChartBuilder::on(&plot_area)
        .caption(&p.chart.title, text(20))
        .margin(10)
        .margin_right(18)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(p.x.clone(), p.y.clone())
        .map_err(draw_err)?;
    let category = matches!(p.x.kind(), AxisKind::Category(_));
    {
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(p.chart.x_label.as_str())
            .y_desc(p.chart.y_label.as_str())
            .x_labels(X_TICKS.max(p.x.major_ticks().len()))
            .y_labels(Y_TICKS)
            .max_light_lines(10)
            .label_style(text(13))
            .axis_desc_style(text(15))
            .bold_line_style(RGBColor(210, 210, 210))
            .light_line_style(RGBColor(238, 238, 238))
            .axis_style(palette::INK);
        if category {
            mesh.disable_x_mesh();
        }
        mesh.draw().map_err(draw_err)?;
    }

    let count = p.series.len();
    for (i, points) in p.series.iter().enumerate() {
        let colour = palette::series(i);
        if category {
            let slot = 0.8 / count as f64;
            let base = p.y.base();
            chart
                .draw_series(points.iter().map(|&(x, y)| {
                    let x0 = x - 0.4 + slot * i as f64;
                    Rectangle::new([(x0, base), (x0 + slot * 0.9, y)], colour.filled())
                }))
                .map_err(draw_err)?;
        } else {
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .map_err(draw_err)?;
            draw_markers(&mut chart, points, palette::shape(i), colour)?;
        }
    }

    let (x_px, y_px) = chart.plotting_area().get_pixel_range();
    let bounds = Rect {
        x0: x_px.start,
        y0: y_px.start,
        x1: x_px.end,
        y1: y_px.end,
    };
    let mut placer = Placer::new(bounds);
    let label_style = text(13);
    for &(label, y) in &p.lines {
        chart
            .draw_series(DashedLineSeries::new(
                [(p.x.lo(), y), (p.x.hi(), y)],
                10,
                6,
                ShapeStyle::from(&palette::REFERENCE).stroke_width(2),
            ))
            .map_err(draw_err)?;
        let (w, h) = area
            .estimate_text_size(label, &label_style)
            .map_err(draw_err)?;
        let (w, h) = (w as i32, h as i32);
        let (_, ay) = chart.backend_coord(&(p.x.lo(), y));
        let right = bounds.x1 - 8 - w;
        let candidates = [
            Rect::at(right, ay - h - 6, w, h),
            Rect::at(right, ay + 6, w, h),
            Rect::at(bounds.x0 + 8, ay - h - 6, w, h),
            Rect::at(bounds.x0 + 8, ay + 6, w, h),
        ];
        if let Some(r) = placer.place(&candidates) {
            draw_label(
                &chart,
                (p.x.lo(), y),
                (bounds.x0, ay),
                r,
                label,
                &label_style,
            )?;
        }
    }
    for &(x, y) in p.series.iter().flatten() {
        let (ax, ay) = chart.backend_coord(&(x, y));
        placer.reserve(Rect::at(ax - 5, ay - 5, 10, 10));
    }
    for &(_, x, y) in &p.marks {
        let (ax, ay) = chart.backend_coord(&(x, y));
        placer.reserve(Rect::at(ax - 8, ay - 8, 16, 16));
    }
    for &(label, x, y) in &p.marks {
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((x, y))
                    + Polygon::new(diamond(9), WHITE.filled())
                    + Polygon::new(diamond(7), palette::MARK.filled()),
            ))
            .map_err(draw_err)?;
        let (w, h) = area
            .estimate_text_size(label, &label_style)
            .map_err(draw_err)?;
        let (w, h) = (w as i32, h as i32);
        let (ax, ay) = chart.backend_coord(&(x, y));
        let mut candidates = Vec::new();
        for k in 0..4 {
            let dy = k * (h + 6);
            candidates.push(Rect::at(ax + 12, ay - h / 2 - dy, w, h));
            candidates.push(Rect::at(ax - 12 - w, ay - h / 2 - dy, w, h));
            candidates.push(Rect::at(ax + 12, ay - h / 2 + dy, w, h));
            candidates.push(Rect::at(ax - 12 - w, ay - h / 2 + dy, w, h));
        }
        if let Some(r) = placer.place(&candidates) {
            draw_label(&chart, (x, y), (ax, ay), r, label, &label_style)?;
        }
    }

    draw_legend(&legend_area, &entries, &legend_style)?;
    Ok(())
}

/// Writes `label` in the box `r` (backend pixels) on a pale background,
/// through an element anchored at `at`, whose pixel position is `at_px`.
fn draw_label<DB: DrawingBackend>(
    chart: &Chart2d<'_, '_, DB>,
    at: (f64, f64),
    at_px: (i32, i32),
    r: Rect,
    label: &str,
    style: &TextStyle<'_>,
) -> Result<(), PlotError> {
    let (dx, dy) = (r.x0 - at_px.0, r.y0 - at_px.1);
    let (w, h) = (r.x1 - r.x0, r.y1 - r.y0);
    let element = EmptyElement::at(at)
        + Rectangle::new(
            [(dx - 3, dy - 2), (dx + w + 3, dy + h + 4)],
            WHITE.mix(0.7).filled(),
        )
        + Text::new(label.to_string(), (dx, dy), style.clone());
    chart.plotting_area().draw(&element).map_err(draw_err)
}

fn diamond(r: i32) -> Vec<(i32, i32)> {
    vec![(0, -r), (r, 0), (0, r), (-r, 0)]
}

fn draw_markers<DB: DrawingBackend>(
    chart: &mut Chart2d<'_, '_, DB>,
    points: &[(f64, f64)],
    shape: Shape,
    colour: RGBColor,
) -> Result<(), PlotError> {
    let style = colour.filled();
    match shape {
        Shape::Circle => chart
            .draw_series(points.iter().map(|&c| Circle::new(c, 4, style)))
            .map(drop),
        Shape::Square => chart
            .draw_series(
                points
                    .iter()
                    .map(|&c| EmptyElement::at(c) + Rectangle::new([(-4, -4), (4, 4)], style)),
            )
            .map(drop),
        Shape::Triangle => chart
            .draw_series(points.iter().map(|&c| TriangleMarker::new(c, 5, style)))
            .map(drop),
    }
    .map_err(draw_err)
}

/// `label`, cut short with an ellipsis so it is at most `max` pixels wide.
fn fit_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    label: &str,
    style: &TextStyle<'_>,
    max: u32,
) -> Result<String, PlotError> {
    if area.estimate_text_size(label, style).map_err(draw_err)?.0 <= max {
        return Ok(label.to_string());
    }
    let chars: Vec<char> = label.chars().collect();
    for keep in (1..chars.len()).rev() {
        let cut: String = chars[..keep].iter().collect::<String>() + "…";
        if area.estimate_text_size(&cut, style).map_err(draw_err)?.0 <= max {
            return Ok(cut);
        }
    }
    Ok(String::from("…"))
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(Sample, String)],
    style: &TextStyle<'_>,
) -> Result<(), PlotError> {
    let top = 56;
    let (x0, x1, tx) = (6, 38, 46);
    for (row, (sample, label)) in entries.iter().enumerate() {
        let y = top + row as i32 * LEGEND_ROW;
        let mid = (x0 + x1) / 2;
        match *sample {
            Sample::Series(i) => {
                let colour = palette::series(i);
                area.draw(&PathElement::new(
                    [(x0, y), (x1, y)],
                    colour.stroke_width(2),
                ))
                .map_err(draw_err)?;
                let style = colour.filled();
                match palette::shape(i) {
                    Shape::Circle => area.draw(&Circle::new((mid, y), 4, style)),
                    Shape::Square => {
                        area.draw(&Rectangle::new([(mid - 4, y - 4), (mid + 4, y + 4)], style))
                    }
                    Shape::Triangle => area.draw(&TriangleMarker::new((mid, y), 5, style)),
                }
                .map_err(draw_err)?;
            }
            Sample::Reference => {
                for s in [x0, x0 + 12, x0 + 24] {
                    area.draw(&PathElement::new(
                        [(s, y), ((s + 8).min(x1), y)],
                        ShapeStyle::from(&palette::REFERENCE).stroke_width(2),
                    ))
                    .map_err(draw_err)?;
                }
            }
            Sample::Mark => {
                let d = |r: i32| {
                    diamond(r)
                        .into_iter()
                        .map(|(dx, dy)| (mid + dx, y + dy))
                        .collect::<Vec<_>>()
                };
                area.draw(&Polygon::new(d(7), palette::MARK.filled()))
                    .map_err(draw_err)?;
            }
        }
        let (_, h) = area.estimate_text_size(label, style).map_err(draw_err)?;
        area.draw(&Text::new(
            label.clone(),
            (tx, y - h as i32 / 2 - 1),
            style.clone(),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}
