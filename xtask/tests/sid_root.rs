//! `.ci/sid-root` mounts Cargo's target folder when CARGO_TARGET_DIR puts it outside the
//! checkout: the host-built binaries a command runs inside the root live there. A relative or
//! missing CARGO_TARGET_DIR is the caller's (made, and passed absolute), and the caller's
//! ROCM_PATH stays outside.
//!
//! Runs only where a sid root was already made (`target/ci/sid-*`, e.g. by `.ci/real-hipcc`)
//! and as root (mounts and chroot); otherwise it says why it skipped. Making a root takes
//! minutes, which this test does not spend.

use std::path::Path;
use std::process::Command;

#[test]
fn an_outside_target_folder_is_visible_inside_the_root() {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let made = std::fs::read_dir(checkout.join("target/ci"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let root = name
                .strip_suffix(".packages")?
                .strip_prefix("sid-")?
                .to_string();
            let packages = std::fs::read_to_string(e.path()).ok()?;
            Some((root, packages.trim().to_string()))
        })
        .find(|(root, _)| {
            checkout
                .join(format!("target/ci/sid-{root}/bin/sh"))
                .exists()
        });
    let Some((name, packages)) = made else {
        eprintln!("SKIPPED: no sid root under target/ci (run .ci/real-hipcc first to make one)");
        return;
    };
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        eprintln!("SKIPPED: .ci/sid-root mounts and chroots: needs root");
        return;
    }
    relative_target_and_no_host_rocm(checkout, &name, &packages);
    let target = tempfile::tempdir().unwrap();
    let marker = target.path().join("built-on-the-host");
    std::fs::write(&marker, "xtask\n").unwrap();
    let out = Command::new(checkout.join(".ci/sid-root"))
        .args([&name, &packages, "--", "cat"])
        .arg(&marker)
        .env("CARGO_TARGET_DIR", target.path())
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout) == "xtask\n",
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A relative CARGO_TARGET_DIR (the caller's, from another folder than the checkout) that does
/// not exist yet is made and reaches the command absolute; the caller's ROCM_PATH does not.
fn relative_target_and_no_host_rocm(checkout: &Path, name: &str, packages: &str) {
    let caller = tempfile::tempdir().unwrap();
    let expected = caller.path().join("not-yet/target");
    let out = Command::new(checkout.join(".ci/sid-root"))
        .args([name, packages, "--", "sh", "-c"])
        .arg("echo \"$CARGO_TARGET_DIR|${ROCM_PATH-unset}\"; test -d \"$CARGO_TARGET_DIR\"")
        .current_dir(caller.path())
        .env("CARGO_TARGET_DIR", "not-yet/target")
        .env("ROCM_PATH", "/leak")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout == format!("{}|unset\n", expected.display()),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(expected.is_dir());
}
