//! `doorbell run` and `doorbell env`: an unmodified program on doorbell.
//!
//! Nothing is built at run time. `doorbell run` finds the drop-in
//! `libibverbs.so` that cargo built ([`find_library`]), makes a directory
//! where it is called `libibverbs.so.1`, with the `librdmacm.so` built
//! beside it as `librdmacm.so.1` ([`libdir::link_dir`]), puts that
//! directory first on `LD_LIBRARY_PATH`, sets the `DOORBELL_*` variables
//! the library reads when the program opens a device, and execs the
//! program in its own place. `doorbell env` prints the same settings as
//! `export` lines for a shell (`eval "$(doorbell env)"`).
//!
//! The library is, in order: `$DOORBELL_LIBIBVERBS`; `libibverbs.so` beside
//! the `doorbell` executable (`cargo build -p doorbell-ibverbs`); the same
//! in its `deps/` directory, where building the `doorbell` package puts it
//! (this package depends on doorbell-ibverbs and doorbell-rdmacm for that
//! alone).

use std::ffi::{OsStr, OsString};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use doorbell_rt::ProcessNicConfig;

use crate::libdir;

/// The variable for `--stats`.
pub const STATS_VAR: &str = "DOORBELL_STATS";
/// The variable for `--provider`.
pub const PROVIDER_VAR: &str = "DOORBELL_PROVIDER";
/// The variable for `--pcap`.
pub const PCAP_VAR: &str = "DOORBELL_PCAP";
/// The variable for `--trace`.
pub const TRACE_VAR: &str = "DOORBELL_TRACE";
/// The variable for `--faults`.
pub const FAULTS_VAR: &str = "DOORBELL_FAULTS";
/// The variable for `--adaptive-retransmit`.
pub const ADAPTIVE_VAR: &str = "DOORBELL_ADAPTIVE_RETRANSMIT";
/// The variable for `--hif-log`.
pub const HIF_LOG_VAR: &str = "DOORBELL_HIF_LOG";

/// The settings of `doorbell env` and `doorbell run`. Each one not given is
/// left as the environment has it (unset: the library's default).
#[derive(Args, Debug, Clone, Default)]
pub struct EnvArgs {
    /// IPv4 address of the NIC's port (sets DOORBELL_ADDR); between hosts,
    /// the host's own. Without it each process takes the first free
    /// loopback address from 127.0.0.2 up.
    #[arg(long, value_name = "IP", value_parser = parse_addr)]
    pub addr: Option<Ipv4Addr>,
    /// Device name (sets DOORBELL_NAME; the library's default: doorbell0).
    #[arg(long, value_parser = parse_name)]
    pub name: Option<String>,
    /// Where the library writes its counters at exit, `-` for a table on
    /// stderr (sets DOORBELL_STATS).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<OsString>,
    /// Take the port's link down AT_MS after the NIC starts, for FOR_MS
    /// (sets DOORBELL_LINK_DOWN): the program's contexts get
    /// IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE.
    #[arg(long, value_name = "AT_MS:FOR_MS", value_parser = parse_link_down)]
    pub link_down: Option<String>,
    /// The user-space provider that drives the device (sets
    /// DOORBELL_PROVIDER): `doorbell` (the default) or `mlx5`, rdma-core's
    /// own libmlx5 from Debian's ibverbs-providers, hosted on doorbell.
    #[arg(long, value_name = "NAME", value_parser = ["doorbell", "mlx5"])]
    pub provider: Option<String>,
    /// Where the library writes a capture of the host interface at exit,
    /// as JSON lines: every register store, and the WQEs, doorbell records
    /// and CQEs the device moved, with their bytes (sets DOORBELL_HIF_LOG).
    #[arg(long, value_name = "FILE")]
    pub hif_log: Option<OsString>,
    /// Where the library writes every frame the NIC sends and receives, as
    /// pcapng (sets DOORBELL_PCAP).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<OsString>,
    /// Where the library writes the NIC's timeline at exit, as Chrome
    /// trace-event JSON for Perfetto UI (ui.perfetto.dev): the device's
    /// work, register stores, DMAs and frames, stamped with the wall clock
    /// (sets DOORBELL_TRACE).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<OsString>,
    /// Random faults on every frame the NIC sends, to try a program under
    /// loss (sets DOORBELL_FAULTS): comma-separated loss=P, dup=P,
    /// reorder=P, corrupt=P (probabilities per frame), delay_us=N and
    /// seed=N, e.g. loss=0.02,reorder=0.01,seed=7.
    #[arg(long, value_name = "SPEC", value_parser = parse_faults)]
    pub faults: Option<String>,
    /// Adaptive retransmission (sets DOORBELL_ADAPTIVE_RETRANSMIT): `on`
    /// (the library's default: an RC QP resends early when an ACK is late
    /// by more than its measured round trip's variation allows, and by at
    /// least 10 ms), `off` (only when the QP's timeout expires), or that
    /// least lateness in microseconds.
    #[arg(long, value_name = "on|off|US", value_parser = parse_adaptive)]
    pub adaptive_retransmit: Option<String>,
}

fn parse_adaptive(s: &str) -> Result<String, String> {
    doorbell_rt::process::parse_adaptive(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_faults(s: &str) -> Result<String, String> {
    doorbell_rt::process::parse_faults(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// `doorbell run`: the settings, then the program and its arguments.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The settings.
    #[command(flatten)]
    pub env: EnvArgs,
    /// The program to run, found on PATH as a shell would, and its
    /// arguments (after `--`, or after the first word that is not an
    /// option of `doorbell run`).
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub program: Vec<OsString>,
}

/// The same rules as the library's for DOORBELL_ADDR.
fn parse_addr(s: &str) -> Result<Ipv4Addr, String> {
    check(ProcessNicConfig::ADDR_VAR, s).and_then(|c| {
        c.addr
            .map(Ipv4Addr::from)
            .ok_or_else(|| "an empty address: leave --addr out to pick one".to_owned())
    })
}

/// The same rules as the library's for DOORBELL_NAME.
fn parse_name(s: &str) -> Result<String, String> {
    check(ProcessNicConfig::NAME_VAR, s).map(|c| c.name)
}

/// The same rules as the library's for DOORBELL_LINK_DOWN.
fn parse_link_down(s: &str) -> Result<String, String> {
    check(ProcessNicConfig::LINK_DOWN_VAR, s).map(|_| s.to_owned())
}

fn check(var: &str, value: &str) -> Result<ProcessNicConfig, String> {
    ProcessNicConfig::from_lookup(|k| (k == var).then(|| value.into())).map_err(|e| match e {
        doorbell_rt::ProcessNicError::BadAddr { .. } => {
            "not a unicast IPv4 address (a.b.c.d, e.g. 127.0.0.2)".to_owned()
        }
        doorbell_rt::ProcessNicError::BadName { .. } => format!(
            "a device name is 1 to {} bytes, without '/'",
            ProcessNicConfig::MAX_NAME_LEN
        ),
        other => other.to_string(),
    })
}

/// The built `libibverbs.so` (see the module docs), as an absolute path
/// (symlinks not resolved), and whether `$DOORBELL_LIBIBVERBS` named it.
pub fn find_library() -> Result<(PathBuf, bool)> {
    if let Some(v) = std::env::var_os(libdir::LIB_VAR) {
        let p = PathBuf::from(&v);
        if !p.is_file() {
            bail!("{}={} is not a file", libdir::LIB_VAR, p.display());
        }
        let abs = std::path::absolute(&p).with_context(|| p.display().to_string())?;
        return Ok((abs, true));
    }
    let dir = exe_dir()?;
    let tried = libdir::candidates(&dir);
    // Both may exist, one stale (`cargo build -p doorbell-ibverbs` writes
    // the first, building doorbell updates only the second): the newest is
    // the one built last.
    let newest = tried
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t);
    if let Some((_, p)) = newest {
        return Ok((p.clone(), false));
    }
    bail!(
        "the doorbell libibverbs is not built (looked for {} and {}): run \
         `cargo build --release -p doorbell-ibverbs` (without --release for a \
         debug doorbell), or set {} to a built libibverbs.so",
        tried[0].display(),
        tried[1].display(),
        libdir::LIB_VAR
    )
}

fn exe_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the doorbell executable")?;
    Ok(exe
        .parent()
        .context("the doorbell executable has no directory")?
        .to_path_buf())
}

/// The directory to put first on `LD_LIBRARY_PATH`, where the library is
/// called `libibverbs.so.1`: `$DOORBELL_LIBIBVERBS`'s own if it has that
/// name, else `doorbell-ibverbs/` beside it, or beside the executable for
/// a library found by the search, made or refreshed.
pub fn library_dir() -> Result<PathBuf> {
    let (lib, named) = find_library()?;
    let parent = lib.parent().unwrap_or(Path::new("/")).to_path_buf();
    if named && lib.file_name() == Some(OsStr::new(libdir::SONAME)) {
        return Ok(parent);
    }
    let target = std::fs::canonicalize(&lib).with_context(|| lib.display().to_string())?;
    let under = if named { parent } else { exe_dir()? };
    libdir::link_dir(&target, &under).with_context(|| {
        format!(
            "cannot make the directory of {}; set {} to a libibverbs.so.1",
            libdir::SONAME,
            libdir::LIB_VAR
        )
    })
}

/// The variables `doorbell run` sets and `doorbell env` prints, in order.
pub fn settings(args: &EnvArgs) -> Result<Vec<(&'static str, OsString)>> {
    let dir = library_dir()?;
    let mut path = dir.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        for p in std::env::split_paths(&old).filter(|p| !p.as_os_str().is_empty() && *p != dir) {
            path.push(":");
            path.push(p);
        }
    }
    let mut vars = vec![("LD_LIBRARY_PATH", path)];
    if let Some(a) = args.addr {
        vars.push((ProcessNicConfig::ADDR_VAR, a.to_string().into()));
    }
    if let Some(n) = &args.name {
        vars.push((ProcessNicConfig::NAME_VAR, n.into()));
    }
    if let Some(l) = &args.link_down {
        vars.push((ProcessNicConfig::LINK_DOWN_VAR, l.into()));
    }
    if let Some(s) = &args.stats {
        vars.push((STATS_VAR, s.clone()));
    }
    if let Some(p) = &args.provider {
        vars.push((PROVIDER_VAR, p.into()));
    }
    if let Some(f) = &args.hif_log {
        vars.push((HIF_LOG_VAR, f.clone()));
    }
    if let Some(f) = &args.trace {
        vars.push((TRACE_VAR, f.clone()));
    }
    if let Some(f) = &args.faults {
        vars.push((FAULTS_VAR, f.into()));
    }
    if let Some(a) = &args.adaptive_retransmit {
        vars.push((ADAPTIVE_VAR, a.into()));
    }
    if let Some(f) = &args.pcap {
        vars.push((PCAP_VAR, f.clone()));
    }
    Ok(vars)
}

/// `doorbell env`: the settings as `export` lines, shell-quoted.
pub fn env_lines(args: &EnvArgs) -> Result<String> {
    Ok(settings(args)?
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", shell_quote(v)))
        .collect())
}

/// `v` as one word for a POSIX shell: as is if every byte is plainly
/// safe, else in single quotes (a `'` written `'\''`).
pub fn shell_quote(v: &OsStr) -> String {
    let s = v.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:,+=@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `doorbell run`: execs the program with the settings. Returns only if
/// that failed: the exit status a shell would give (127: no such program,
/// 126: not executable), after saying why on stderr.
pub fn exec(args: &RunArgs) -> Result<u8> {
    let vars = settings(&args.env)?;
    let (prog, rest) = args
        .program
        .split_first()
        .context("no program to run: doorbell run -- PROGRAM [ARGS...]")?;
    let mut cmd = Command::new(prog);
    cmd.args(rest);
    for (k, v) in &vars {
        cmd.env(k, v);
    }
    let err = cmd.exec();
    let name = prog.to_string_lossy();
    Ok(if err.kind() == std::io::ErrorKind::NotFound {
        eprintln!("doorbell run: {name}: command not found");
        127
    } else {
        eprintln!("doorbell run: {name}: {err}");
        126
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_a_shell_would_split_them() {
        let q = |s: &str| shell_quote(OsStr::new(s));
        assert_eq!(
            q("/a/b-c/doorbell-ibverbs:/x"),
            "/a/b-c/doorbell-ibverbs:/x"
        );
        assert_eq!(q("127.0.0.2"), "127.0.0.2");
        assert_eq!(q(""), "''");
        assert_eq!(q("a b"), "'a b'");
        assert_eq!(q("it's $HOME"), r"'it'\''s $HOME'");
    }

    #[test]
    fn settings_follow_the_librarys_rules() {
        assert_eq!(parse_addr("10.0.0.1"), Ok(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(parse_addr("10.0.0").unwrap_err().contains("IPv4"));
        assert!(parse_addr("").is_err());
        assert_eq!(parse_name("mlx5_0"), Ok("mlx5_0".to_owned()));
        assert!(parse_name(&"x".repeat(64)).unwrap_err().contains("63"));
    }
}
