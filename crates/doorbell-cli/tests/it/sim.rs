//! `doorbell sim` as a user runs it.

use std::process::Command;

fn doorbell(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_doorbell"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn json_has_the_keys_the_issue_names() {
    let out = doorbell(&[
        "sim", "--iters", "200", "--op", "read", "--size", "64", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["msg_rate_mops", "bandwidth_gbps"] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k}");
    }
    assert!(v["latency_ns"]["p50"].as_f64().unwrap() <= v["latency_ns"]["p99"].as_f64().unwrap());
    for k in [
        "mmio_writes",
        "mmio_bytes",
        "wqe_dma_reads",
        "payload_dma_reads",
        "dma_read_bytes",
        "cqe_dma_writes",
        "dma_write_bytes",
        "mwr_tlps",
        "mrd_tlps",
        "cpld_tlps",
        "host_to_device_bytes",
        "device_to_host_bytes",
    ] {
        assert!(v["per_post"][k].is_number(), "per_post.{k}");
    }
    for k in ["pcie_to_device", "pcie_to_host", "nic_processing_units"] {
        let u = v["utilisation"][k].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&u), "{k} = {u}");
    }
    assert_eq!(v["utilisation"]["cores"].as_array().unwrap().len(), 1);
    // Each step's value is checked against the profile in doorbell-sim's
    // tests (steps.rs); here, that the JSON carries all of them.
    let steps = &v["steps"];
    for k in [
        "wqe_write",
        "doorbell",
        "wqe_dma_read",
        "payload_dma_read",
        "wire_and_ack",
        "cqe_dma_write",
        "total",
    ] {
        assert!(steps[k].as_f64().unwrap() >= 0.0, "steps.{k}: {steps}");
    }
    assert!(steps["total"].as_f64().unwrap() > 0.0);
}

#[test]
fn sweeps_print_one_row_per_configuration() {
    let out = doorbell(&["sim", "--sweep", "features", "--iters", "100", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 12, "6 configurations on 2 profiles");
    let configs: Vec<&str> = rows[..6]
        .iter()
        .map(|r| r["config"].as_str().unwrap())
        .collect();
    assert_eq!(
        configs,
        [
            "baseline",
            "postlist",
            "inline",
            "unsignaled",
            "blueflame",
            "all"
        ]
    );
    let out = doorbell(&["sim", "--sweep", "threads", "--iters", "400"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    for t in ["1 threads", "4 threads", "16 threads", "64 threads"] {
        assert!(s.contains(&format!("{t} ")), "{t}:\n{s}");
        assert!(s.contains(&format!("{t}, TD")), "{t}, TD:\n{s}");
    }
    assert!(
        s.contains("thread domain"),
        "the note says what TD is:\n{s}"
    );
    // Each pair: the TD run takes no lock; 16 threads without TD do.
    let out = doorbell(&["sim", "--sweep", "threads", "--iters", "400", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let locked = |config: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["config"] == config)
            .unwrap_or_else(|| panic!("{config} missing"))["locked_posts"]
            .as_u64()
            .unwrap()
    };
    assert!(locked("16 threads") > 0);
    for t in [1, 4, 16, 64] {
        assert_eq!(locked(&format!("{t} threads, TD")), 0, "{t} threads, TD");
    }
}

#[test]
fn a_profile_can_be_printed_edited_and_loaded() {
    let out = doorbell(&["sim", "--print-profile", "--profile", "connectx4-thunderx2"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout)
        .unwrap()
        .replace("port_gbps = 100.0", "port_gbps = 25.0");
    let path = std::env::temp_dir().join(format!("doorbell-profile-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = doorbell(&[
        "sim",
        "--profile",
        path.to_str().unwrap(),
        "--iters",
        "100",
        "--size",
        "4096",
        "--json",
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["bandwidth_gbps"].as_f64().unwrap() <= 25.0);
}

#[test]
fn bad_options_are_clear_errors() {
    for (args, needle) in [
        (vec!["sim", "--profile", "nosuch"], "connectib-haswell"),
        (vec!["sim", "--qp-type", "ud", "--op", "read"], "UD"),
        (vec!["sim", "--op", "cas", "--size", "4"], "8 bytes"),
        (vec!["sim", "--mtu", "1500"], "mtu"),
        (vec!["sim", "--op", "jump"], "invalid value"),
    ] {
        let out = doorbell(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn operations_take_the_names_the_json_and_readme_use() {
    for (arg, name) in [
        ("send_imm", "send_imm"),
        ("write_imm", "write_imm"),
        ("send-imm", "send_imm"),
    ] {
        let out = doorbell(&["sim", "--iters", "20", "--op", arg, "--json"]);
        assert!(
            out.status.success(),
            "--op {arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["workload"]["op"], name, "--op {arg}");
    }
}

#[test]
fn td_on_puts_each_threads_qps_in_a_thread_domain() {
    let run = |td: &str| {
        let out = doorbell(&[
            "sim",
            "--threads",
            "16",
            "--qps",
            "16",
            "--iters",
            "200",
            "--td",
            td,
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (off, on) = (run("off"), run("on"));
    assert_eq!(off["workload"]["thread_domains"], false);
    assert_eq!(on["workload"]["thread_domains"], true);
    assert_eq!(off["locked_posts"], 12 * 200, "12 QPs on medium bfregs");
    assert_eq!(on["locked_posts"], 0);
}

#[test]
fn pcap_writes_both_nics_frames_at_virtual_time() {
    let f = std::env::temp_dir().join(format!("sim-{}.pcapng", std::process::id()));
    let path = f.to_str().unwrap();
    let o = doorbell(&[
        "sim", "--op", "write", "--size", "4096", "--iters", "3", "--mtu", "1024", "--pcap", path,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = Command::new("tshark")
        .args([
            "-r",
            path,
            "-T",
            "fields",
            "-e",
            "frame.protocols",
            "-e",
            "frame.interface_id",
        ])
        .args(["-e", "frame.time_epoch", "-e", "infiniband.bth.opcode"])
        .output()
        .expect("tshark (scripts/setup.sh installs it)");
    let _ = std::fs::remove_file(&f);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    // Three 4 KiB WRITEs of four 1 KiB packets, each seen leaving the
    // client's NIC (interface 0) and arriving at the server's (1), and
    // their ACKs the other way.
    let writes = |iface: &str| {
        rows.iter()
            .filter(|r| r[1] == iface && r[3] != "17")
            .count()
    };
    assert_eq!((writes("0"), writes("1")), (12, 12), "{text}");
    for r in &rows {
        assert!(
            r[0].starts_with("eth:ethertype:ip:udp:infiniband"),
            "{text}"
        );
        // Virtual time: the run starts at the epoch and lasts microseconds.
        let t: f64 = r[2].parse().unwrap();
        assert!(t < 0.001, "{text}");
    }
    // One run only: a sweep's many runs would need many files.
    let o = doorbell(&["sim", "--sweep", "threads", "--pcap", path]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--pcap") && err.contains("--sweep"), "{err}");
}

#[test]
fn pcap_marks_what_the_wire_lost_and_what_the_nic_dropped() {
    let dir = std::env::temp_dir();
    let (prof, cap) = (
        dir.join(format!("faulty-{}.toml", std::process::id())),
        dir.join(format!("faulty-{}.pcapng", std::process::id())),
    );
    let base = doorbell(&["sim", "--print-profile"]);
    assert!(base.status.success());
    let toml = String::from_utf8_lossy(&base.stdout).into_owned()
        + "\n[network.faults]\nseed = 7\nloss = 0.1\ncorrupt = 0.1\n";
    std::fs::write(&prof, toml).unwrap();
    let o = doorbell(&[
        "sim",
        "--profile",
        prof.to_str().unwrap(),
        "--op",
        "write",
        "--size",
        "1024",
        "--iters",
        "200",
        "--pcap",
        cap.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&prof);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = Command::new("tshark")
        .args([
            "-r",
            cap.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.comment",
        ])
        .output()
        .expect("tshark (scripts/setup.sh installs it)");
    let _ = std::fs::remove_file(&cap);
    let text = String::from_utf8_lossy(&out.stdout);
    let lost = text
        .lines()
        .filter(|l| l.contains("dropped: lost on the link"))
        .count();
    let bad = text
        .lines()
        .filter(|l| l.contains("dropped: bad ICRC"))
        .count();
    assert!(lost > 0 && bad > 0, "lost {lost}, bad ICRC {bad}:\n{text}");
}

/// Runs `args` of the doorbell binary on a pseudo-terminal (util-linux
/// `script`), returning what the terminal showed.
fn on_a_terminal(args: &str) -> String {
    let cmd = format!("{} {args}", env!("CARGO_BIN_EXE_doorbell"));
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("script (util-linux)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A simulation longer than a second shows a progress bar on a terminal,
/// and prints nothing extra into a pipe or with --json.
#[test]
fn long_runs_show_progress_on_a_terminal_only() {
    // Long enough to show the bar, whose threshold is a second of wall
    // time: 100 000 iterations take about 3.5 s unoptimised here, and
    // 2 000 000 about 3.7 s optimised (the suite also runs as a release
    // build). (30 000 took 1.1-1.25 s unoptimised, and a quiet moment once
    // made it less than a second and left the bar undrawn.)
    let iters = if cfg!(debug_assertions) {
        100_000
    } else {
        2_000_000
    };
    let args = format!("sim --op write --size 8 --iters {iters}");
    let args = args.as_str();
    let tty = on_a_terminal(args);
    assert!(tty.contains("simulating ["), "{tty}");
    let piped = doorbell(&args.split(' ').collect::<Vec<_>>());
    assert!(piped.status.success());
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !err.contains("simulating") && !err.contains('\u{1b}'),
        "{err}"
    );
    let json = on_a_terminal(&format!("--json {args}"));
    assert!(!json.contains("simulating ["), "{json}");
    assert!(json.trim_start().starts_with('{'), "{json}");
}

#[test]
fn trace_writes_a_timeline_perfetto_opens() {
    let f = std::env::temp_dir().join(format!("sim-{}.trace.json", std::process::id()));
    let path = f.to_str().unwrap();
    let o = doorbell(&["sim", "--iters", "8", "--postlist", "2", "--trace", path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
    let _ = std::fs::remove_file(&f);
    let ev = v["traceEvents"].as_array().unwrap();
    // The format's phases only, each with the fields it needs.
    for e in ev {
        let ph = e["ph"].as_str().unwrap();
        assert!(["M", "X", "b", "e", "i"].contains(&ph), "{e}");
        assert!(e["pid"].is_u64() && e["name"].is_string(), "{e}");
        if ph != "M" {
            assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}");
        }
        if ph == "X" {
            assert!(
                e["dur"].as_f64().unwrap() >= 0.0 && e["tid"].is_u64(),
                "{e}"
            );
        }
        if ph == "b" || ph == "e" {
            assert!(e["id"].is_string(), "{e}");
        }
    }
    // Eight WRs, each with its six steps.
    let begins = |prefix: &str| {
        ev.iter()
            .filter(|e| e["ph"] == "b" && e["name"].as_str().unwrap().starts_with(prefix))
            .count()
    };
    assert_eq!(begins("WR "), 8);
    for step in ["0 ", "1 ", "2 ", "3 ", "4 ", "5 "] {
        assert_eq!(begins(step), 8, "step {step}");
    }
    // One run only.
    let o = doorbell(&["sim", "--sweep", "threads", "--trace", path]);
    assert!(!o.status.success());
}

#[test]
fn test_lat_prints_perftests_latency_table() {
    let o = doorbell(&["sim", "--test", "lat", "--op", "read", "--iters", "100"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for col in [
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]",
    ] {
        assert!(text.contains(col), "{col}: {text}");
    }
    let o = doorbell(&[
        "sim", "--test", "lat", "--op", "write", "--iters", "100", "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["workload"]["test"], "lat");
    assert!(v["latency"]["t_typical_us"].as_f64().unwrap() > 0.0);
    // A latency test is one QP: perftest's rule, said plainly.
    let o = doorbell(&["sim", "--test", "lat", "--qps", "4"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("one QP"));
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sim-{}-{name}", std::process::id()))
}

#[test]
fn explain_prints_the_critical_path_and_draws_it_by_extension() {
    let svg = tmp("explain.svg");
    let o = doorbell(&[
        "sim",
        "--iters",
        "1",
        "--bf",
        "off",
        "--explain",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let steps = [
        "WQE write (CPU)",
        "doorbell MMIO",
        "WQE DMA read",
        "payload DMA read",
        "wire and ACK",
        "CQE DMA write and poll",
    ];
    for s in steps {
        assert!(text.contains(s), "{s}: {text}");
    }
    let body = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    let doc = roxmltree::Document::parse(&body).expect("the file parses as XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: String = doc.descendants().filter_map(|n| n.text()).collect();
    for s in steps.iter().chain(&["Host", "NIC", "Wire"]) {
        assert!(texts.contains(s), "{s} is not in the picture");
    }
    let png = tmp("explain.png");
    let o = doorbell(&["sim", "--iters", "1", "--explain", png.to_str().unwrap()]);
    assert!(o.status.success());
    let bytes = std::fs::read(&png).unwrap();
    let _ = std::fs::remove_file(&png);
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    // Text only, without a file; and an unknown extension is refused.
    let o = doorbell(&["sim", "--iters", "1", "--explain"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("total"));
    let o = doorbell(&["sim", "--iters", "1", "--explain", "/tmp/x.gif"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(".svg"));
}

#[test]
fn sizes_sweep_runs_perftests_sizes_and_plots_them() {
    let out = doorbell(&[
        "sim",
        "--sweep",
        "sizes",
        "--profile",
        "connectib-haswell",
        "--iters",
        "20",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .filter(|r| r["profile"] == "connectib-haswell")
        .map(|r| r["workload"]["size"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = (1..=23).map(|k| 1u64 << k).collect();
    assert_eq!(sizes, want, "2 B to 8 MiB in powers of two");
    // Bandwidth grows with the size until the link binds.
    let bw = |size: u64| {
        rows.iter().find(|r| r["workload"]["size"] == size).unwrap()["bandwidth_gbps"]
            .as_f64()
            .unwrap()
    };
    assert!(bw(4096) > 10.0 * bw(64), "{} against {}", bw(4096), bw(64));
    // Drawn, with a series per profile and the port's line rate.
    let svg = tmp("sizes.svg");
    let out = doorbell(&[
        "sim",
        "--sweep",
        "sizes",
        "--iters",
        "20",
        "--op",
        "read",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    let doc = roxmltree::Document::parse(&body).unwrap();
    let texts: String = doc.descendants().filter_map(|n| n.text()).collect();
    for s in [
        "connectib-haswell",
        "connectx4-thunderx2",
        "port",
        "8M",
        "message rate",
        "bandwidth",
    ] {
        assert!(texts.contains(s), "{s} is not in the plot");
    }
    // --plot belongs to a sweep.
    let o = doorbell(&["sim", "--plot", "/tmp/x.svg"]);
    assert!(!o.status.success());
}

#[test]
fn threads_plot_marks_the_published_figure_it_reproduces() {
    // Kalia16's K11: UD SENDs of 16 B, inline, 1 in 64 signalled, from 14
    // threads; the threads sweep of that workload runs 14 threads too.
    let png = tmp("threads.png");
    let svg = tmp("threads.svg");
    for f in [&png, &svg] {
        let out = doorbell(&[
            "sim",
            "--sweep",
            "threads",
            "--qp-type",
            "ud",
            "--op",
            "send",
            "--size",
            "16",
            "--inline",
            "64",
            "--signal-every",
            "64",
            "--tx-depth",
            "256",
            "--iters",
            "200",
            "--plot",
            f.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let body = std::fs::read_to_string(&svg).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    let _ = (std::fs::remove_file(&svg), std::fs::remove_file(&png));
    assert!(
        body.contains("K11 (Kalia16) 80 Mops"),
        "the mark is missing"
    );
    assert!(!body.contains("K19"), "a READ figure on a SEND sweep");
    assert_eq!(&bytes[1..4], b"PNG");
}

/// The README's pictures are what the commands it names draw today: the
/// critical path and the trace are re-made and compared byte for byte (the
/// model and the drawing are deterministic), so a change to either is
/// seen here and the pictures are made again with the README's commands.
#[test]
fn the_readmes_pictures_are_what_its_commands_make() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/pictures");
    let cases: [(&[&str], &str); 2] = [
        (
            &["sim", "--iters", "1", "--bf", "off", "--explain"],
            "critical-path.png",
        ),
        (
            &[
                "sim",
                "--iters",
                "2",
                "--postlist",
                "2",
                "--signal-every",
                "2",
                "--trace",
            ],
            "trace-write-8B.json",
        ),
    ];
    for (args, name) in cases {
        let f = tmp(name);
        let mut all: Vec<&str> = args.to_vec();
        all.push(f.to_str().unwrap());
        let o = doorbell(&all);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let made = std::fs::read(&f).unwrap();
        let _ = std::fs::remove_file(&f);
        let committed = std::fs::read(docs.join(name)).unwrap();
        assert!(
            made == committed,
            "docs/pictures/{name} is not what `doorbell {}` makes now: run the README's command again",
            args.join(" ")
        );
    }
}
