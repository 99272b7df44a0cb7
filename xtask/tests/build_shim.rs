//! `cargo xtask build-shim` failures are one clean error that names the fix: no panic text, no
//! `cargo:` lines, nothing on stdout (which carries only the library's path on success).
//! Needs CMake and a C++ compiler, not a GPU toolchain: the CUDA compiler it is given is a
//! script that fails, so CMake's configure step fails the way a wrong -D makes it fail.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::which;

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("build-shim")
        .args(args)
        .env_remove("ROCM_PATH")
        .env_remove("ROCSHMEM_HOME")
        .output()
        .expect("xtask runs")
}

/// Asserts a failure with one `error:` line naming `fix`, and none of the `cmake` crate's
/// panic or `cargo:` output.
fn assert_clean_failure(out: &Output, fix: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it succeeded:\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stdout.is_empty(),
        "stdout is for the library path only: {stdout}"
    );
    for leak in [
        "panicked",
        "RUST_BACKTRACE",
        "cargo:",
        "command did not execute",
    ] {
        assert!(!stderr.contains(leak), "`{leak}` in the output:\n{stderr}");
    }
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains(fix), "`{fix}` not in {:?}", errors[0]);
}

#[test]
fn a_failed_configure_is_a_clean_error() {
    let missing: Vec<&str> = ["cmake", "c++"].into_iter().filter(|t| !which(t)).collect();
    if !missing.is_empty() {
        let why = format!(
            "the build-shim failure test needs {} (apt-get install cmake g++)",
            missing.join(", ")
        );
        assert!(
            std::env::var_os("CI").is_none(),
            "{why}: CI must install them"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let nvcc = dir.path().join("cuda/bin/nvcc");
    std::fs::create_dir_all(nvcc.parent().unwrap()).unwrap();
    std::fs::write(
        &nvcc,
        "#!/bin/sh\necho 'not a CUDA compiler: a test stand-in that fails' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("nvshmem");
    std::fs::create_dir_all(home.join("include")).unwrap();
    std::fs::write(home.join("include/nvshmem.h"), "").unwrap();
    let out_dir = dir.path().join("out");
    let path = |p: &Path| p.display().to_string();
    let out = xtask(&[
        "--backend",
        "nvshmem",
        "--nvcc",
        &path(&nvcc),
        "--nvshmem-home",
        &path(&home),
        "--out-dir",
        &path(&out_dir),
    ]);
    assert_clean_failure(&out, "configuring the nvshmem shim failed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CMake's messages above") && stderr.contains(&path(&out_dir.join("build"))),
        "{stderr}"
    );
    assert!(
        !out_dir.join("lib").exists(),
        "a failed build installed something"
    );
}

#[test]
fn missing_inputs_are_clean_errors_before_cmake() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().display().to_string();
    let out = xtask(&["--backend", "rocshmem", "--rocshmem-home", &empty]);
    assert_clean_failure(&out, "cargo xtask build-rocshmem");
    let out = xtask(&["--backend", "rocshmem"]);
    assert_clean_failure(&out, "--rocshmem-home");
}
