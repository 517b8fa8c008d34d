//! The hosted device's PCI identity, where programs look for it.
//!
//! A real mlx5 device's `ibdev_path` is `/sys/class/infiniband/mlx5_0`, a
//! link to `/sys/devices/…/0000:03:00.0/infiniband/mlx5_0`; the PCI
//! function's directory, two levels up, holds `vendor` and `device`. UCX
//! (`uct_ib_device_get_sysfs_path` and `uct_ib_device_set_pci_id` in
//! `src/uct/ib/base/ib_device.c`) resolves `ibdev_path`, strips two
//! components, requires a `device` entry there and reads both IDs; only a
//! known Mellanox part gets `rc_mlx5`, `ud_mlx5` and `dc_mlx5`. `/sys`
//! cannot be written, so the hosted device's `ibdev_path` points into a
//! small directory this library writes, per user, under the temporary
//! directory:
//!
//! ```text
//! $TMPDIR/doorbell-sysfs-<uid>/<name>/vendor               0x15b3
//! $TMPDIR/doorbell-sysfs-<uid>/<name>/device               0x1013 (ConnectX-4)
//! $TMPDIR/doorbell-sysfs-<uid>/<name>/infiniband/<name>/   ibdev_path
//! ```
//!
//! The device ID is the part `ibv_query_device` reports (`vendor_part_id`
//! 4115); the vendor is Mellanox's PCI vendor ID, where `ibv_query_device`
//! has its IEEE OUI (`vendor_id` 0x02c9). The function's directory is named after the device,
//! not a PCI address, so UCX places it on no system device. If the
//! directory cannot be made, `ibdev_path` stays the `/sys/class` path it
//! would have been, and UCX offers only its verbs transports.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Mellanox's PCI vendor ID.
const VENDOR: &str = "0x15b3\n";
/// ConnectX-4's PCI device ID (4115), the part `ibv_query_device` names.
const DEVICE: &str = "0x1013\n";

/// The `ibdev_path` of the hosted device named `name`.
pub(super) fn ibdev_path(name: &str) -> String {
    match make(&std::env::temp_dir(), name) {
        Ok(p) => p.to_string_lossy().into_owned(),
        Err(e) => {
            eprintln!(
                "libibverbs.so.1 (doorbell): cannot write the device's PCI IDs for UCX \
                 ({e}); its mlx5 transports will not be offered"
            );
            format!("/sys/class/infiniband/{name}")
        }
    }
}

/// Writes the directory under `tmp`; returns the `ibdev_path` in it.
fn make(tmp: &Path, name: &str) -> std::io::Result<PathBuf> {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let root = tmp.join(format!("doorbell-sysfs-{uid}"));
    let function = root.join(name);
    let ibdev = function.join("infiniband").join(name);
    std::fs::create_dir_all(&ibdev)?;
    // Another user's directory of that name is not trusted.
    let meta = std::fs::symlink_metadata(&root)?;
    if std::os::unix::fs::MetadataExt::uid(&meta) != uid || !meta.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} belongs to another user",
            root.display()
        )));
    }
    write_file(&function, "vendor", VENDOR)?;
    write_file(&function, "device", DEVICE)?;
    Ok(ibdev)
}

/// Writes `dir/file` unless it holds `text`, by a rename, so that processes
/// starting together never read half a file.
fn write_file(dir: &Path, file: &str, text: &str) -> std::io::Result<()> {
    let path = dir.join(file);
    if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    let tmp = dir.join(format!(".{file}.{}", std::process::id()));
    std::fs::File::create(&tmp)?.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_function_directory_is_two_levels_above_ibdev_path() {
        let tmp = std::env::temp_dir().join(format!("doorbell-sysfs-test-{}", std::process::id()));
        let ibdev = make(&tmp, "doorbell0").expect("make the directory");
        // Twice, as a second process would.
        assert_eq!(make(&tmp, "doorbell0").expect("again"), ibdev);
        let function = ibdev.parent().and_then(Path::parent).expect("two levels");
        let read = |f: &str| std::fs::read_to_string(function.join(f)).expect("read");
        assert_eq!(read("vendor"), "0x15b3\n");
        assert_eq!(read("device"), "0x1013\n");
        assert!(ibdev.ends_with("doorbell0/infiniband/doorbell0"));
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
