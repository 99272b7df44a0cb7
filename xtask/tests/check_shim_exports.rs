//! `.ci/check-shim-exports` over shims built here with the C compiler (no GPU, no SHMEM
//! library): the stand-in shim of crates/symmem-gpu/tests/stub passes; the same shim with one
//! call to an entry point that nothing defines (as a shim linked against a rocSHMEM without the
//! 3.x API had, before `--no-undefined`) fails, naming that symbol, although its exports are
//! right.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::which;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Skips (with the reason) where a tool is missing; CI installs them, so there it fails.
fn tools_present() -> bool {
    let missing: Vec<&str> = ["cc", "nm", "perl"]
        .into_iter()
        .filter(|t| !which(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "check-shim-exports test needs {} (apt-get install gcc binutils perl)",
        missing.join(", ")
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must install them"
    );
    eprintln!("SKIPPED: {why}");
    false
}

/// Links the stand-in shim (and `extra`, a C file, when given) into `out` with the C compiler
/// and its default (lazy, undefined-allowing) link, as a shim was linked before.
fn stub_shim(dir: &Path, name: &str, extra: Option<&str>) -> PathBuf {
    let out = dir.join(name);
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-Wall", "-I"])
        .arg(repo().join("crates/symmem-shim-sys/shim"))
        .arg("-o")
        .arg(&out)
        .arg(repo().join("crates/symmem-gpu/tests/stub/stub_shim.c"));
    if let Some(code) = extra {
        let file = dir.join(format!("{name}.extra.c"));
        std::fs::write(&file, code).unwrap();
        cc.arg(file);
    }
    let built = cc.output().expect("cc runs");
    assert!(built.status.success(), "{}", text(&built));
    out
}

fn check(library: &Path) -> Output {
    Command::new("bash")
        .arg(repo().join(".ci/check-shim-exports"))
        .arg(library)
        .output()
        .expect("bash runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_shim_with_an_undefined_entry_point_fails_the_check_naming_it() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = check(&stub_shim(dir.path(), "libgood.so", None));
    assert!(good.status.success(), "{}", text(&good));
    assert!(text(&good).contains("loads with every symbol bound"));

    // Hidden, so the exports stay exactly the header's: only the load can tell.
    let missing = "int rocshmem_standin_missing_entry(void);\n\
                   __attribute__((visibility(\"hidden\"))) int symmem_probe(void) {\n\
                   \x20 return rocshmem_standin_missing_entry();\n}\n";
    let bad = check(&stub_shim(dir.path(), "libbad.so", Some(missing)));
    let t = text(&bad);
    assert!(!bad.status.success(), "{t}");
    assert!(
        !t.contains("does not export exactly"),
        "the exports were right: {t}"
    );
    for part in [
        "does not load with every symbol bound (RTLD_NOW)",
        "undefined symbol: rocshmem_standin_missing_entry",
        "rocSHMEM 3.x",
    ] {
        assert!(t.contains(part), "`{part}` not in {t}");
    }
}
