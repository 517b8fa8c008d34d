use doorbell_plot::{Format, Lane, PathStep};

use crate::{png_size, sample_steps, svg_texts};

fn attr(node: &roxmltree::Node<'_, '_>, name: &str) -> f64 {
    node.attribute(name).unwrap().parse().unwrap()
}

#[test]
fn critical_path_svg_names_steps_and_lanes_and_orders_boxes() {
    let mut steps = sample_steps();
    // Given out of order: the figure sorts by start.
    steps.reverse();
    steps.swap(0, 3);
    let svg = doorbell_plot::render_critical_path(Format::Svg, "RC WRITE 64 B", &steps).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let texts = svg_texts(&doc);
    for s in &steps {
        assert!(
            texts.iter().any(|t| t.contains(&s.name)),
            "no step {:?}",
            s.name
        );
    }
    for lane in [Lane::Host, Lane::Pcie, Lane::Nic, Lane::Wire] {
        assert!(
            texts.iter().any(|t| t == lane.name()),
            "no lane {:?}",
            lane.name()
        );
    }
    assert!(
        !texts.iter().any(|t| t == Lane::RemoteNic.name()),
        "remote lanes only when used"
    );
    assert!(texts.iter().any(|t| t == "total 1460 ns"), "{texts:?}");

    // The step boxes are the rects narrower than the picture (the
    // background and the lane bands span all of it), drawn left to right.
    let width = attr(&root, "width");
    let boxes: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && attr(n, "width") < width)
        .map(|n| (attr(&n, "x"), attr(&n, "width")))
        .collect();
    assert_eq!(boxes.len(), steps.len(), "{boxes:?}");
    let mut by_start = steps.clone();
    by_start.sort_by(|a, b| {
        a.start_ns
            .total_cmp(&b.start_ns)
            .then(a.number.cmp(&b.number))
    });
    for (pair, steps) in boxes.windows(2).zip(by_start.windows(2)) {
        if steps[1].start_ns > steps[0].start_ns {
            assert!(pair[1].0 > pair[0].0, "{boxes:?}");
        } else {
            assert!(pair[1].0 >= pair[0].0 - 1.0, "{boxes:?}");
        }
    }
    // Longer steps, wider boxes; the zero-length one is still there, thin.
    let wire = by_start.iter().position(|s| s.lane == Lane::Wire).unwrap();
    let zero = by_start
        .iter()
        .position(|s| s.start_ns == s.end_ns)
        .unwrap();
    assert!(boxes[wire].1 > 200.0);
    assert!(boxes[zero].1 > 0.0 && boxes[zero].1 < 5.0);
}

#[test]
fn remote_lanes_appear_when_used_and_png_decodes() {
    let mut steps = sample_steps();
    steps.push(PathStep {
        number: 6,
        name: "remote write".into(),
        lane: Lane::RemoteNic,
        start_ns: 700.0,
        end_ns: 760.0,
    });
    let svg = doorbell_plot::render_critical_path(Format::Svg, "t", &steps).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let texts = svg_texts(&roxmltree::Document::parse(&svg).unwrap());
    assert!(texts.iter().any(|t| t == "Remote NIC"));
    assert!(!texts.iter().any(|t| t == "Remote host"));
    let png = doorbell_plot::render_critical_path(Format::Png, "t", &steps).unwrap();
    let (w, h) = png_size(&png);
    assert_eq!(w, 1100);
    assert!(h > 400);
}

#[test]
fn text_form_lists_steps_in_order_and_durations_add_up() {
    let mut steps = sample_steps();
    steps.rotate_left(2);
    let text = doorbell_plot::critical_path_text("RC WRITE", &steps, 40);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "RC WRITE");
    let rows = &lines[2..lines.len() - 1];
    assert_eq!(rows.len(), steps.len(), "{text}");
    let mut sum = 0.0;
    let mut last_start = f64::NEG_INFINITY;
    for (row, number) in rows.iter().zip(0..) {
        assert!(row.trim_start().starts_with(&format!("{number} ")), "{row}");
        let numbers: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .filter(|v: &f64| v.fract() != 0.0 || row.contains(&format!("{v:.1}")))
            .collect();
        let [start, end, dur] = numbers[numbers.len() - 3..] else {
            unreachable!()
        };
        assert!(start >= last_start, "{text}");
        assert_eq!(end - start, dur);
        last_start = start;
        sum += dur;
        // The bar stays within the scale.
        let bar = row.rsplit("  ").next().unwrap();
        assert!(bar.len() <= 40, "{row}");
        assert!(bar.contains('#') || bar.contains('+'), "{row}");
    }
    let total = lines.last().unwrap();
    assert_eq!(*total, format!("total {sum:.1} ns"));
    assert_eq!(sum, 1460.0);
}
