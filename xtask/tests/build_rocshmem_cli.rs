//! `cargo xtask build-rocshmem` as a shell user drives it, without ROCm on the machine (a
//! folder that does not exist stands for the missing install).

use std::process::Command;

const XTASK: &str = env!("CARGO_BIN_EXE_xtask");

fn sh(script: &str) -> std::process::Output {
    Command::new("/bin/sh")
        .args(["-c", script, "sh", XTASK])
        .env_remove("ROCM_PATH")
        .env_remove("HIPCC")
        .output()
        .expect("run sh")
}

/// The README's forms. `eval "$(cargo xtask build-rocshmem ...)"` returns 0 after a failed
/// build (eval of nothing succeeds), even under `set -e`. `exports=$(...) && eval "$exports"`
/// skips the eval and returns the failure; in a `set -e` script the assignment on a line of
/// its own stops the script (`set -e` ignores a failure on the left of `&&`).
#[test]
fn the_documented_exports_forms_fail_when_the_build_fails() {
    let build = r#""$1" build-rocshmem --arch gfx942 --rocm-path /nonexistent/rocm"#;
    let out = sh(&format!(
        r#"ROCSHMEM_HOME=unset; exports=$({build}) && eval "$exports"; echo "status=$? $ROCSHMEM_HOME""#
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("status=1 unset"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no ROCm at /nonexistent/rocm"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sh(&format!(
        "set -e\nexports=$({build})\neval \"$exports\"\necho reached"
    ));
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("reached"));
    // Why the README does not use the shorter form.
    let out = sh(&format!("set -e\neval \"$({build})\"\necho reached"));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("reached"),
        "eval of a failed build's empty output went on, as the README warns"
    );
}

#[test]
fn a_dry_run_without_rocm_shows_the_plan_with_the_unknowns_marked() {
    let out = sh(r#""$1" build-rocshmem --arch gfx942 --rocm-path /nonexistent/rocm --dry-run"#);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no ROCm at /nonexistent/rocm")
            && stderr.contains("the plan below shows <unknown> where it depends on ROCm"),
        "{stderr}"
    );
    for line in [
        "rocm    <unknown ROCm> (not found: see the warning above)",
        "hash    <unknown>",
        "  GPU_TARGETS=gfx942",
        "  USE_IPC=ON",
        "  EXPLICIT_ROCM_VERSION=<unknown>",
        "  CMAKE_CXX_COMPILER=<unknown hipcc>",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no line {line:?} in:\n{stdout}"
        );
    }
    assert!(stdout.contains("  fetch      "), "{stdout}");
    // Only the dry run goes on without ROCm.
    let out =
        sh(r#""$1" build-rocshmem --arch gfx942 --rocm-path /nonexistent/rocm --print-prefix"#);
    assert!(!out.status.success());
}
