//! The fuzz targets on stable: every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through the target's harness, and the seed
//! corpus as the generator makes it (one binary, STYLE R15).
#![allow(missing_docs, unreachable_pub)]

use std::path::{Path, PathBuf};

use doorbell_fuzzing::seeds::seeds;
use doorbell_fuzzing::{TARGETS, target};

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs every file of `fuzz/<kind>/<name>/` through the target; returns
/// how many there were. A panic names the file.
fn replay(kind: &str, name: &str) -> usize {
    let t = target(name).expect("a target of that name");
    let inputs = files(&fuzz_dir().join(kind).join(name));
    for path in &inputs {
        let bytes = std::fs::read(path).expect("readable input");
        let r = std::panic::catch_unwind(|| (t.run)(&bytes));
        assert!(r.is_ok(), "{name} panicked on {}", path.display());
    }
    inputs.len()
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let n = replay("corpus", stringify!($name));
            assert!(n >= 3, "fuzz/corpus/{} has {n} seeds", stringify!($name));
            replay("regressions", stringify!($name));
        }
    )*};
}

replay_tests!(
    roce_frame,
    ext_header,
    sq_wqe,
    rq_wqe,
    cqe_record,
    poll_cq,
    uar_mmio,
    command,
    command_result,
    peer_frames,
    ibverbs_calls,
);

#[test]
fn every_target_has_a_test_and_a_fuzz_target() {
    let listed = [
        "roce_frame",
        "ext_header",
        "sq_wqe",
        "rq_wqe",
        "cqe_record",
        "poll_cq",
        "uar_mmio",
        "command",
        "command_result",
        "peer_frames",
        "ibverbs_calls",
    ];
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, listed, "a target without a replay test above");
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in names {
        let src = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&src).expect("fuzz_targets/<name>.rs");
        assert!(
            text.contains(&format!("::{name}(data)")),
            "{} does not call its harness",
            src.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
    }
}

/// The committed seeds are what `write_seeds` makes now: a harness or
/// device change that moves a QPN or a key shows here, and the seeds are
/// made again with `cargo run -p doorbell-fuzzing --example write_seeds`.
#[test]
fn the_seed_corpus_is_up_to_date() {
    let mut total = 0;
    for t in TARGETS {
        let dir = fuzz_dir().join("corpus").join(t.name);
        for (file, bytes) in seeds(t.name) {
            let path = dir.join(file);
            let committed = std::fs::read(&path)
                .unwrap_or_else(|_| panic!("{} is missing: run write_seeds", path.display()));
            assert_eq!(
                committed,
                bytes,
                "{} is stale: run write_seeds",
                path.display()
            );
            total += bytes.len();
        }
    }
    assert!(total < 256 * 1024, "the seed corpus is {total} bytes");
}
