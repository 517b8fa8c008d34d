//! What a built library exports, read back with binutils (`objdump -T`,
//! `readelf -d`, `readelf -V`), for the libraries' tests: each export with
//! its version and kind, nothing else, the SONAME, the version nodes and
//! their parents. The tools come with the C toolchain (`scripts/setup.sh`
//! installs binutils); a missing one is a panic that says so.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::export_list::{Export, Kind, Node, nodes};

/// A defined dynamic symbol as `objdump -T` prints it.
#[derive(Debug)]
pub struct Defined {
    /// The version column as printed: `IBVERBS_1.1`, `(IBVERBS_1.0)` for a
    /// hidden (non-default) version, `Base` when unversioned.
    pub version: String,
    /// The section column (`.text`, `*ABS*`, ...).
    pub section: String,
    /// A function (`F` flag).
    pub func: bool,
    /// A data object (`O` flag).
    pub object: bool,
}

fn stdout_of(cmd: &mut Command) -> String {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run `{prog}` ({e}); scripts/setup.sh installs binutils")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `objdump -T`'s defined symbols of `lib`, by name.
pub fn dynamic_symbols(lib: &Path) -> BTreeMap<String, Defined> {
    let text = stdout_of(Command::new("objdump").arg("-T").arg(lib));
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // ADDR FLAGS.. SECTION SIZE VERSION NAME
        if words.len() < 6 || !words[0].chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let n = words.len();
        let section = words[n - 4];
        if section == "*UND*" {
            continue;
        }
        let flags = &words[1..n - 4];
        let prev = out.insert(
            words[n - 1].to_owned(),
            Defined {
                version: words[n - 2].to_owned(),
                section: section.to_owned(),
                func: flags.iter().any(|f| f.contains('F')),
                object: flags.iter().any(|f| f.contains('O')),
            },
        );
        assert!(prev.is_none(), "{} defined twice:\n{text}", words[n - 1]);
    }
    out
}

/// What is wrong with `lib`'s exports against `exports`: an export missing,
/// of another version or kind, or a symbol exported that the list does not
/// name. Empty when the two agree.
pub fn export_problems(lib: &Path, exports: &[Export]) -> Vec<String> {
    let defined = dynamic_symbols(lib);
    let mut bad = Vec::new();
    for e in exports {
        match defined.get(&e.symbol) {
            None => bad.push(format!("{} not exported", e.symbol)),
            Some(d) => {
                if d.version != e.version {
                    bad.push(format!(
                        "{}: version {}, want {}",
                        e.symbol, d.version, e.version
                    ));
                }
                let kind_ok = match e.kind {
                    Kind::Func => d.func && !d.object,
                    Kind::Object => d.object && !d.func,
                };
                if !kind_ok {
                    bad.push(format!("{}: want {:?}, got {d:?}", e.symbol, e.kind));
                }
            }
        }
    }
    let nodes = nodes(exports);
    for (name, d) in &defined {
        let is_export = exports.iter().any(|e| &e.symbol == name);
        // Each version node is also an ABS symbol named after itself.
        let is_node =
            d.section == "*ABS*" && &d.version == name && nodes.iter().any(|n| &n.name == name);
        if !is_export && !is_node {
            bad.push(format!(
                "{name} ({} in {}) exported but not listed",
                d.version, d.section
            ));
        }
    }
    bad
}

/// The SONAMEs `readelf -d` finds in `lib` (one, normally).
pub fn sonames(lib: &Path) -> Vec<String> {
    let text = stdout_of(Command::new("readelf").arg("-d").arg(lib));
    text.lines()
        .filter(|l| l.contains("(SONAME)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_owned()))
        .collect()
}

/// The libraries `readelf -d` says `lib` needs (DT_NEEDED).
pub fn needed(lib: &Path) -> Vec<String> {
    let text = stdout_of(Command::new("readelf").arg("-d").arg(lib));
    text.lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_owned()))
        .collect()
}

/// `readelf -V`'s version definitions of `lib`: (name, parent) in order,
/// the BASE one (named after the SONAME) first.
pub fn version_definitions(lib: &Path) -> Vec<Node> {
    let text = stdout_of(Command::new("readelf").arg("-V").arg(lib));
    let mut section = false;
    let mut out: Vec<Node> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Version definition section") {
            section = true;
        } else if line.starts_with("Version") {
            section = false;
        } else if section {
            if let Some((_, name)) = line.split_once("Name: ") {
                out.push(Node {
                    name: name.trim().to_owned(),
                    parent: None,
                });
            } else if let Some((_, parent)) = line.split_once("Parent 1: ")
                && let Some(last) = out.last_mut()
            {
                last.parent = Some(parent.trim().to_owned());
            }
        }
    }
    out
}
