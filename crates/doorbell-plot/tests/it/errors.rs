use std::path::Path;

use doorbell_plot::{Chart, Format, Lane, Mark, PathStep, PlotError, RefLine, Scale, Series};

use crate::{sample_charts, sample_steps};

#[test]
fn format_follows_the_extension() {
    assert_eq!(
        Format::from_path(Path::new("a/rate.svg")).unwrap(),
        Format::Svg
    );
    assert_eq!(
        Format::from_path(Path::new("RATE.PNG")).unwrap(),
        Format::Png
    );
    for bad in ["rate.jpg", "rate", "svg", "rate.svg.gz"] {
        let err = Format::from_path(Path::new(bad)).unwrap_err();
        assert!(
            matches!(err, PlotError::UnknownExtension { .. }),
            "{bad}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(".svg") && msg.contains(".png") && msg.contains(bad),
            "{msg}"
        );
    }
}

#[test]
fn unknown_extension_is_refused_before_drawing() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join("doorbell-plot-rate.jpg");
    let err = doorbell_plot::draw_charts(&out, &sample_charts()).unwrap_err();
    assert!(matches!(err, PlotError::UnknownExtension { .. }));
    let err = doorbell_plot::draw_critical_path(&out, "t", &sample_steps()).unwrap_err();
    assert!(matches!(err, PlotError::UnknownExtension { .. }));
    assert!(!out.exists());
}

#[test]
fn nothing_to_draw_is_a_typed_error() {
    let empty_series = Chart {
        title: "rate".into(),
        series: vec![
            Series {
                label: "a".into(),
                points: vec![(1.0, 1.0)],
            },
            Series {
                label: "b".into(),
                points: vec![],
            },
        ],
        ..Chart::default()
    };
    let no_series = Chart {
        title: "rate".into(),
        ..Chart::default()
    };
    let no_categories = Chart {
        x_categories: Some(vec![]),
        series: vec![Series {
            label: "a".into(),
            points: vec![(0.0, 1.0)],
        }],
        ..Chart::default()
    };
    for format in [Format::Svg, Format::Png] {
        for charts in [
            vec![],
            vec![empty_series.clone()],
            vec![no_series.clone()],
            vec![no_categories.clone()],
        ] {
            let err = doorbell_plot::render_charts(format, &charts).unwrap_err();
            assert!(matches!(err, PlotError::Empty { .. }), "{err:?}");
        }
        let err = doorbell_plot::render_critical_path(format, "t", &[]).unwrap_err();
        assert!(matches!(err, PlotError::Empty { .. }), "{err:?}");
    }
    let err = doorbell_plot::render_charts(Format::Svg, &[empty_series]).unwrap_err();
    assert!(err.to_string().contains("'b'"), "{err}");
    assert_eq!(
        doorbell_plot::critical_path_text("t", &[], 40),
        "t\n(no steps)\n"
    );
}

#[test]
fn bad_values_are_skipped_or_refused_never_a_panic() {
    let bad = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        0.0,
        -0.0,
        f64::MAX,
        f64::MIN_POSITIVE,
    ];
    for x_scale in [Scale::Linear, Scale::Log2, Scale::Log10] {
        for y_scale in [Scale::Linear, Scale::Log2, Scale::Log10] {
            let mut points = vec![(2.0, 3.0), (64.0, 10.0)];
            for &v in &bad {
                points.push((v, 5.0));
                points.push((8.0, v));
            }
            let chart = Chart {
                x_scale,
                y_scale,
                series: vec![Series {
                    label: "s".into(),
                    points,
                }],
                marks: bad
                    .iter()
                    .map(|&v| Mark {
                        label: "m".into(),
                        x: v,
                        y: v,
                    })
                    .collect(),
                lines: bad
                    .iter()
                    .map(|&y| RefLine {
                        label: "l".into(),
                        y,
                    })
                    .collect(),
                ..Chart::default()
            };
            for format in [Format::Svg, Format::Png] {
                // f64::MAX is finite: it may be drawn or refused, but no panic.
                let _ = doorbell_plot::render_charts(format, std::slice::from_ref(&chart));
            }
            let mut sane = chart.clone();
            sane.series[0]
                .points
                .retain(|&(x, y)| x.abs() < 1e300 && y.abs() < 1e300);
            sane.marks.clear();
            sane.lines.retain(|l| l.y.abs() < 1e300);
            doorbell_plot::render_charts(Format::Svg, &[sane]).unwrap();
            let only_bad = Chart {
                x_scale,
                y_scale,
                series: vec![Series {
                    label: "s".into(),
                    points: vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)],
                }],
                ..Chart::default()
            };
            let err = doorbell_plot::render_charts(Format::Svg, &[only_bad]).unwrap_err();
            assert!(matches!(err, PlotError::Empty { .. }), "{err:?}");
        }
    }
    let log_negative = Chart {
        y_scale: Scale::Log10,
        series: vec![Series {
            label: "s".into(),
            points: vec![(1.0, -3.0), (2.0, 0.0)],
        }],
        ..Chart::default()
    };
    let err = doorbell_plot::render_charts(Format::Png, &[log_negative]).unwrap_err();
    assert!(matches!(err, PlotError::Empty { .. }), "{err:?}");
    // One point, or all values equal: a degenerate range still draws.
    let single = Chart {
        series: vec![Series {
            label: "s".into(),
            points: vec![(4.0, 7.0)],
        }],
        ..Chart::default()
    };
    doorbell_plot::render_charts(Format::Png, std::slice::from_ref(&single)).unwrap();
    let mut single_log = single;
    single_log.x_scale = Scale::Log2;
    single_log.y_scale = Scale::Log10;
    doorbell_plot::render_charts(Format::Svg, &[single_log]).unwrap();
}

#[test]
fn invalid_step_times_are_a_typed_error() {
    let step = |start_ns, end_ns| PathStep {
        number: 3,
        name: "payload DMA read".into(),
        lane: Lane::Nic,
        start_ns,
        end_ns,
    };
    for (start, end) in [
        (f64::NAN, 1.0),
        (0.0, f64::INFINITY),
        (-5.0, 1.0),
        (10.0, 5.0),
        (f64::NEG_INFINITY, 0.0),
    ] {
        let mut steps = sample_steps();
        steps.push(step(start, end));
        for format in [Format::Svg, Format::Png] {
            let err = doorbell_plot::render_critical_path(format, "t", &steps).unwrap_err();
            assert!(
                matches!(err, PlotError::InvalidStep { number: 3, .. }),
                "{err:?}"
            );
        }
        let text = doorbell_plot::critical_path_text("t", &steps, 30);
        assert!(text.contains("invalid times"), "{text}");
        assert!(text.contains("total 1460.0 ns"), "{text}");
    }
    // Only zero-length steps, all at one instant.
    let text = doorbell_plot::critical_path_text("t", &[step(5.0, 5.0)], 0);
    assert!(text.contains("total 0.0 ns"), "{text}");
    doorbell_plot::render_critical_path(Format::Png, "t", &[step(5.0, 5.0)]).unwrap();
}
