//! The control plane's model (issue 44, `scripts/model/control_plane.py`): its own checks pass,
//! and it reads the runs committed beside docs/benchmarks.md. Needs python3 (stdlib only).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("python3")
        .arg(root().join("scripts/model/control_plane.py"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("python3 runs (the model needs it; Debian package python3)");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

/// The tree's arithmetic against a walk of its links, and the fits giving back the constants
/// of synthetic runs made from them.
#[test]
fn the_model_passes_its_own_checks() {
    let (ok, out, err) = model(&["--self-test"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("self-test: ok"), "{out}");
}

/// The committed runs parse and fit, and the projection says where the barrier stands at the
/// largest node count (docs/benchmarks.md quotes it).
#[test]
fn the_model_reads_the_committed_runs() {
    let (ok, out, err) = model(&["docs/control-plane-runs.jsonl"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("### Projection"), "{out}");
    assert!(out.contains("A barrier under 1 ms at 8,192 nodes"), "{out}");
}

/// A line that is not a run is refused with its place in the file.
#[test]
fn a_run_without_its_shape_is_refused_naming_the_line() {
    let dir = std::env::temp_dir().join(format!("symmem-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runs = dir.join("runs.jsonl");
    std::fs::write(&runs, "{\"nodes\": 2, \"barrier_us\": {\"median\": 1}}\n").unwrap();
    let (ok, _, err) = model(&[runs.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ok);
    assert!(
        err.contains("runs.jsonl:1") && err.contains("\"shape\""),
        "{err}"
    );
}
