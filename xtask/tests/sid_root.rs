//! `.ci/sid-root` mounts Cargo's target folder when CARGO_TARGET_DIR puts it outside the
//! checkout: the host-built binaries a command runs inside the root live there. A relative or
//! missing CARGO_TARGET_DIR is the caller's (made, and passed absolute), one that cannot be made
//! is refused, and the caller's ROCM_PATH stays outside.
//!
//! The test that enters a root runs only where a sid root was already made (`target/ci/sid-*`,
//! e.g. by `.ci/real-hipcc`) and as root (mounts and chroot); otherwise it says why it skipped,
//! and with CI and SYMMEM_SID_ROOT_TEST=1 set (`.ci/real-hipcc` sets them, after making its
//! root) a skip fails. Making a root takes minutes, which this test does not spend.

use std::path::Path;
use std::process::Command;
use symmem::settings::{Audience, Setting};

/// Makes a skipped sid-root test a failure (`.ci/real-hipcc` sets it once its root exists).
const SID_ROOT_TEST: Setting<bool> = Setting {
    name: "SYMMEM_SID_ROOT_TEST",
    doc: "`1` (with `CI` set): xtask's sid_root test must run, a missing sid root or a user other than root fails it (`.ci/real-hipcc` sets it)",
    default: "the test skips without a sid root under target/ci",
    expected: "1 or 0",
    audience: Audience::Development,
    parse: symmem::settings::parse_switch,
};

/// Says why the test did not run; a failure where CI asked for it.
fn skip(why: &str) {
    let required = std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        && SID_ROOT_TEST
            .read()
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or(false);
    assert!(
        !required,
        "{why}. CI and {}=1 are set, so this test must run: run it as root after \
         .ci/real-hipcc has made its root",
        SID_ROOT_TEST.name
    );
    eprintln!("SKIPPED: {why}");
}

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
        return skip("no sid root under target/ci (run .ci/real-hipcc first to make one)");
    };
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return skip(".ci/sid-root mounts and chroots: needs root");
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

/// A CARGO_TARGET_DIR that is missing and cannot be made (its parent is a file) is refused,
/// naming it and the fix, before anything is mounted or run. Needs no sid root and no root
/// user: a stand-in root that already has the packages asked for is never entered.
#[test]
fn a_target_folder_that_cannot_be_made_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(root.join("bin/sh"), "").unwrap();
    std::fs::set_permissions(root.join("bin/sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(tmp.path().join("root.packages"), "stand-in\n").unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let wanted = file.join("target");
    let out = Command::new(checkout.join(".ci/sid-root"))
        .arg(&root)
        .args(["stand-in", "--", "echo", "entered"])
        .env("CARGO_TARGET_DIR", &wanted)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "sid-root: CARGO_TARGET_DIR={} is missing and cannot be made: point it at a \
             folder you can write, or unset it",
            wanted.display()
        )) && !stderr.contains("making"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        1,
        "the root was entered"
    );
}
