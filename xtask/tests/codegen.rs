//! Every generated file is what its sources generate today: `cargo xtask codegen --check`, the
//! command CI and developers run, over this checkout.

use std::process::Command;

/// The one test of the generated files (bindings, container files). Where libclang cannot be
/// loaded, the command skips the bindings with clang-sys's reason, and fails under CI.
#[test]
fn generated_files_are_current() {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["codegen", "--check"])
        .output()
        .expect("xtask runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{}{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains("generated files are current"), "{stderr}");
}
