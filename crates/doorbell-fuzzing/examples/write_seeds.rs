//! Writes the seed corpus of every target (or of the named ones) to
//! `fuzz/corpus/<target>/`, replacing the files of the same names.
//!
//!     cargo run -p doorbell-fuzzing --example write_seeds [TARGET...]

use std::path::PathBuf;

use doorbell_fuzzing::TARGETS;
use doorbell_fuzzing::seeds::seeds;

fn main() -> std::io::Result<()> {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for t in TARGETS {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == t.name) {
            continue;
        }
        let dir = root.join(t.name);
        std::fs::create_dir_all(&dir)?;
        for (name, bytes) in seeds(t.name) {
            std::fs::write(dir.join(name), &bytes)?;
        }
        println!("{}: {} seeds", t.name, seeds(t.name).len());
    }
    Ok(())
}
