//! Colours and marker shapes that stay apart from each other.

use plotters::style::RGBColor;

/// Eight colours a reader tells apart (after Tableau 10, without the grey
/// kept for reference lines and the olive that fades on white).
pub(crate) const SERIES: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Reference lines.
pub(crate) const REFERENCE: RGBColor = RGBColor(110, 110, 110);

/// Published figures.
pub(crate) const MARK: RGBColor = RGBColor(0, 0, 0);

/// Text.
pub(crate) const INK: RGBColor = RGBColor(30, 30, 30);

/// The colour of series `i`.
pub(crate) fn series(i: usize) -> RGBColor {
    SERIES[i % SERIES.len()]
}

/// A point marker; the shape changes every series too, so a reader who
/// does not see colours can still tell the lines apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A filled circle.
    Circle,
    /// A filled square.
    Square,
    /// A filled triangle, point up.
    Triangle,
}

/// The marker of series `i`.
pub(crate) fn shape(i: usize) -> Shape {
    match i % 3 {
        0 => Shape::Circle,
        1 => Shape::Square,
        _ => Shape::Triangle,
    }
}
