use std::io::Cursor;

use doorbell_plot::{Chart, Format, Scale, Series};

use crate::{png_size, sample_charts, svg_texts};

#[test]
fn svg_chart_parses_and_carries_every_label() {
    let charts = sample_charts();
    let svg = doorbell_plot::render_charts(Format::Svg, &charts).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = svg_texts(&doc);
    for chart in &charts {
        let wanted = chart
            .series
            .iter()
            .map(|s| &s.label)
            .chain(chart.marks.iter().map(|m| &m.label))
            .chain(chart.lines.iter().map(|l| &l.label))
            .chain([&chart.title, &chart.x_label, &chart.y_label]);
        for label in wanted {
            assert!(
                texts.iter().any(|t| t == label),
                "no text {label:?} in {texts:?}"
            );
        }
    }
    // Binary-prefix ticks on the log2 axis.
    for tick in ["2", "8", "2K", "8M"] {
        assert!(texts.iter().any(|t| t == tick), "no tick {tick}");
    }
}

#[test]
fn png_chart_decodes_to_the_documented_size_and_has_ink() {
    let charts = sample_charts();
    let bytes = doorbell_plot::render_charts(Format::Png, &charts).unwrap();
    assert_eq!(png_size(&bytes), (1000, 880));
    let mut reader = png::Decoder::new(Cursor::new(&bytes)).read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut rgb).unwrap();
    assert_eq!((info.width, info.height), (1000, 880));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let dark = rgb.chunks(3).filter(|p| p.iter().all(|&c| c < 80)).count();
    let white = rgb
        .chunks(3)
        .filter(|p| p.iter().all(|&c| c == 255))
        .count();
    // Text (drawn with the shipped font) and axes, on a mostly white page.
    assert!(dark > 2000, "only {dark} dark pixels");
    assert!(white > rgb.len() / 3 / 2, "only {white} white pixels");
}

#[test]
fn files_are_written_in_the_format_of_their_extension() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let charts = sample_charts();
    let svg = dir.join("doorbell-plot-chart.SVG");
    let png = dir.join("doorbell-plot-chart.png");
    doorbell_plot::draw_charts(&svg, &charts).unwrap();
    doorbell_plot::draw_charts(&png, &charts).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    assert_eq!(png_size(&std::fs::read(&png).unwrap()), (1000, 880));
}

#[test]
fn category_charts_label_each_configuration() {
    let names: Vec<String> = ["baseline", "inline", "BlueFlame", "postlist 16"]
        .map(String::from)
        .to_vec();
    let chart = Chart {
        title: "features".into(),
        x_label: "configuration".into(),
        y_label: "Mops".into(),
        x_categories: Some(names.clone()),
        series: vec![
            Series {
                label: "1 thread".into(),
                points: vec![(0.0, 10.0), (1.0, 14.0), (2.0, 18.0), (3.0, 40.0)],
            },
            // 7 is no category and 0.5 is none either: skipped.
            Series {
                label: "4 threads".into(),
                points: vec![(0.0, 30.0), (0.5, 1.0), (3.0, 90.0), (7.0, 5.0)],
            },
        ],
        ..Chart::default()
    };
    let svg = doorbell_plot::render_charts(Format::Svg, std::slice::from_ref(&chart)).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts = svg_texts(&doc);
    for label in names.iter().chain(chart.series.iter().map(|s| &s.label)) {
        assert!(texts.contains(label), "no text {label:?}");
    }
    let png = doorbell_plot::render_charts(Format::Png, &[chart]).unwrap();
    assert_eq!(png_size(&png), (1000, 440));
}

#[test]
fn thread_counts_on_a_log2_axis() {
    let chart = Chart {
        title: "threads".into(),
        x_scale: Scale::Log2,
        series: vec![Series {
            label: "RC".into(),
            points: vec![(1.0, 9.0), (4.0, 30.0), (16.0, 70.0), (64.0, 75.0)],
        }],
        ..Chart::default()
    };
    let svg =
        String::from_utf8(doorbell_plot::render_charts(Format::Svg, &[chart]).unwrap()).unwrap();
    let texts = svg_texts(&roxmltree::Document::parse(&svg).unwrap());
    for tick in ["1", "4", "16", "64"] {
        assert!(
            texts.iter().any(|t| t == tick),
            "no tick {tick} in {texts:?}"
        );
    }
}
