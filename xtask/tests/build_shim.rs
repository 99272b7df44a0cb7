//! `cargo xtask build-shim` failures are one clean error that names the fix: no panic text, no
//! `cargo:` lines, nothing on stdout (which carries only the library's path on success).
//! Needs CMake and a C++ compiler, not a GPU toolchain: the CUDA compiler it is given is a
//! script that fails, so CMake's configure step fails the way a wrong -D makes it fail.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::which;
use symmem_test_support::command::write_script;

/// build-shim with `args`, into a fresh out folder unless they name one: never the checkout's
/// target/shim/, whose library a run removes before it checks its inputs.
fn xtask(args: &[&str]) -> Output {
    let fresh = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.arg("build-shim").args(args);
    if !args.contains(&"--out-dir") {
        command.arg("--out-dir").arg(fresh.path());
    }
    command
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
    write_script(
        &nvcc,
        "#!/bin/sh\necho 'not a CUDA compiler: a test stand-in that fails' >&2\nexit 1\n",
    );
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
    // An empty ROCSHMEM_HOME (a failed `$(...)`) is named, with the README's form.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["build-shim", "--backend", "rocshmem", "--out-dir"])
        .arg(dir.path().join("out"))
        .env("ROCSHMEM_HOME", "")
        .output()
        .unwrap();
    assert_clean_failure(
        &out,
        "ROCSHMEM_HOME is empty): build it first with `exports=$(cargo xtask build-rocshmem \
         --arch gfx942) && eval \"$exports\"`",
    );
}

/// A stand-in for CMake that keeps a package folder it found in its cache, as CMake does: a
/// configure finds rocSHMEM through `-Drocshmem_DIR`, else reuses the cached folder, else
/// looks on CMAKE_PREFIX_PATH; the "library" it installs names the rocSHMEM it found.
const CACHING_CMAKE: &str = r#"#!/bin/sh
case "$1" in
  --version) echo "cmake version 3.28.0"; exit 0 ;;
  --build)
    # Held until the file $FAKE_CMAKE_HOLD exists (bounded: 60 s), then fails on request.
    if [ -n "$FAKE_CMAKE_HOLD" ]; then
      : > "$FAKE_CMAKE_HOLD.started"
      i=0
      while [ ! -e "$FAKE_CMAKE_HOLD" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    fi
    if [ -n "$FAKE_CMAKE_FAIL" ]; then echo 'fake cmake: build failing on purpose' >&2; exit 1; fi
    exit 0 ;;
  --install) mkdir -p "$4/lib" && cp "$2/found" "$4/lib/libsymmem_shim_rocshmem.so"; exit $? ;;
esac
build="" given="" prefix_path=""
while [ $# -gt 0 ]; do
  case "$1" in
    -B) build=$2; shift ;;
    -Drocshmem_DIR=*) given=${1#-Drocshmem_DIR=} ;;
    -DCMAKE_PREFIX_PATH=*) prefix_path=${1#-DCMAKE_PREFIX_PATH=} ;;
  esac
  shift
done
mkdir -p "$build"
cached=$(sed -n 's/^rocshmem_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)
if [ -n "$given" ]; then dir=$given
elif [ -n "$cached" ]; then dir=$cached
else dir="${prefix_path%%;*}/lib/cmake/rocshmem"; fi
echo "rocshmem_DIR:PATH=$dir" > "$build/CMakeCache.txt"
echo "$dir" > "$build/found"
"#;

/// A rocSHMEM install as build-rocshmem leaves it: package config, archive and stamp.
fn standin_install(dir: &Path, version: &str, commit: &str, targets: &str) {
    std::fs::create_dir_all(dir.join("lib/cmake/rocshmem")).unwrap();
    std::fs::create_dir_all(dir.join("include/rocshmem")).unwrap();
    std::fs::write(
        dir.join("include/rocshmem/rocshmem.hpp"),
        "namespace rocshmem { int rocshmem_get_uniqueid(rocshmem_uniqueid_t *uid); }\n",
    )
    .unwrap();
    std::fs::write(dir.join("lib/cmake/rocshmem/rocshmem-config.cmake"), "").unwrap();
    std::fs::write(dir.join("lib/librocshmem.a"), commit).unwrap();
    std::fs::write(
        dir.join("symmem-rocshmem-stamp.toml"),
        format!(
            "hash = \"{}\"\n[inputs]\nversion = \"{version}\"\ncommit = \"{commit}\"\n\
             targets = \"{targets}\"\n",
            commit.repeat(2)
        ),
    )
    .unwrap();
}

/// Two rocSHMEM installs, used in turn: each build links the one it was given (not the one a
/// kept CMake cache remembers), and says which (version, commit, targets, prefix).
#[test]
fn each_build_uses_the_rocshmem_it_was_given() {
    if !which("make") && !which("ninja") {
        assert!(std::env::var_os("CI").is_none(), "CI must install ninja");
        eprintln!("SKIPPED: needs make or ninja on PATH (the generator check)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cmake = bin.join("cmake");
    write_script(&cmake, CACHING_CMAKE);
    let rocm = dir.path().join("rocm");
    std::fs::create_dir_all(&rocm).unwrap();
    let (a, b) = (dir.path().join("rocshmem-a"), dir.path().join("rocshmem-b"));
    let commit_a = "a".repeat(40);
    let commit_b = "b".repeat(40);
    standin_install(&a, "3.4.0", &commit_a, "gfx942");
    standin_install(&b, "3.5.0", &commit_b, "gfx942,gfx90a");
    let out = dir.path().join("out");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let build = |home: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["build-shim", "--backend", "rocshmem", "--rocshmem-home"])
            .arg(home)
            .arg("--rocm-path")
            .arg(&rocm)
            .arg("--out-dir")
            .arg(&out)
            .env_remove("ROCM_PATH")
            .env("PATH", &path)
            .output()
            .expect("xtask runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let library = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let linked = std::fs::read_to_string(&library).unwrap();
        let stamp = std::fs::read_to_string(dir.path().join("out/symmem-shim-stamp.toml")).unwrap();
        (linked.trim().to_string(), stderr, stamp)
    };
    for (home, version, commit, targets) in [
        (&a, "3.4.0", &commit_a, "gfx942"),
        (&b, "3.5.0", &commit_b, "gfx942,gfx90a"),
        (&a, "3.4.0", &commit_a, "gfx942"),
    ] {
        let (linked, stderr, stamp) = build(home);
        assert_eq!(
            linked,
            home.join("lib/cmake/rocshmem").display().to_string(),
            "{stderr}"
        );
        let said = format!(
            "against rocSHMEM {version} at {} for {targets} (prefix {}",
            &commit[..12],
            home.display()
        );
        assert!(stderr.contains(&said), "`{said}` not in:\n{stderr}");
        assert!(
            stamp.contains(&said[8..]) && stamp.contains(&home.display().to_string()),
            "{stamp}"
        );
    }
}

/// An install of rocSHMEM 2.x is refused before any tool runs, by its stamp or, without one,
/// by the version its CMake package declares.
#[test]
fn a_rocshmem_2_install_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let stamped = dir.path().join("stamped");
    standin_install(&stamped, "2.0.0", &"c".repeat(40), "gfx942");
    let out = xtask(&[
        "--backend",
        "rocshmem",
        "--rocshmem-home",
        &stamped.display().to_string(),
    ]);
    assert_clean_failure(&out, "is version 2.0.0 (from");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("3.x") && stderr.contains("cargo xtask build-rocshmem --arch"),
        "{stderr}"
    );
    let unstamped = dir.path().join("unstamped");
    standin_install(&unstamped, "2.0.0", &"c".repeat(40), "gfx942");
    std::fs::remove_file(unstamped.join("symmem-rocshmem-stamp.toml")).unwrap();
    std::fs::write(
        unstamped.join("lib/cmake/rocshmem/rocshmem-config-version.cmake"),
        "set(PACKAGE_VERSION \"2.0.0\")\n",
    )
    .unwrap();
    let out = xtask(&[
        "--backend",
        "rocshmem",
        "--rocshmem-home",
        &unstamped.display().to_string(),
    ]);
    assert_clean_failure(
        &out,
        "rocshmem-config-version.cmake): the shim needs rocSHMEM 3.x",
    );
}

/// An install with 2.x headers (they include mpi.h and lack the unique-id API) is refused
/// before any tool runs, whatever its version files say: none, garbled, or a 3.x stamp.
#[test]
fn an_install_with_2x_headers_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Option<&str>, &str); 4] = [
        ("no-version", None, "cannot be told: no"),
        (
            "truncated",
            Some("# This is a basic version file\nset(PACKAGE_VERSI"),
            "sets no PACKAGE_VERSION",
        ),
        (
            "v-prefixed",
            Some("set(PACKAGE_VERSION \"v2.0.0\")\n"),
            "says `v2.0.0`, which is not a version",
        ),
        ("stamped-3x", None, "3.4.0 from"),
    ];
    for (name, version_file, said) in cases {
        let home = dir.path().join(name);
        standin_install(&home, "3.4.0", &"e".repeat(40), "gfx942");
        if name != "stamped-3x" {
            std::fs::remove_file(home.join("symmem-rocshmem-stamp.toml")).unwrap();
        }
        if let Some(text) = version_file {
            std::fs::write(
                home.join("lib/cmake/rocshmem/rocshmem-config-version.cmake"),
                text,
            )
            .unwrap();
        }
        std::fs::write(
            home.join("include/rocshmem/rocshmem.hpp"),
            "#include <mpi.h>\nnamespace rocshmem { void rocshmem_init(); }\n",
        )
        .unwrap();
        let out = xtask(&[
            "--backend",
            "rocshmem",
            "--rocshmem-home",
            &home.display().to_string(),
        ]);
        assert_clean_failure(&out, "is not a 3.x install");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for part in [
            "declares rocshmem_get_uniqueid",
            "includes mpi.h, as 2.x does",
            said,
            "needs rocSHMEM 3.x",
        ] {
            assert!(stderr.contains(part), "{name}: `{part}` not in {stderr}");
        }
        assert!(
            !stderr.contains("[build-shim]"),
            "{name}: a tool ran: {stderr}"
        );
    }
}

/// `--arch` is one typed list for both backends: a rocSHMEM shim for a target the install was
/// not built for (its stamp lists them), or for CUDA compute capabilities, is refused before
/// CMake; so is an unknown target.
#[test]
fn targets_the_install_lacks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("rocshmem");
    standin_install(&home, "3.4.0", &"d".repeat(40), "gfx90a");
    let home = home.display().to_string();
    let out = xtask(&[
        "--backend",
        "rocshmem",
        "--rocshmem-home",
        &home,
        "--arch",
        "gfx942,gfx90a",
    ]);
    assert_clean_failure(&out, "was built for gfx90a only, not for gfx942");
    // The default target (gfx942) is checked too.
    let out = xtask(&["--backend", "rocshmem", "--rocshmem-home", &home]);
    assert_clean_failure(&out, "not for gfx942: pass --arch with targets it has");
    let out = xtask(&[
        "--backend",
        "rocshmem",
        "--rocshmem-home",
        &home,
        "--arch",
        "90",
    ]);
    assert_clean_failure(&out, "takes HIP targets");
    let out = xtask(&["--backend", "rocshmem", "--arch", "gfx9999"]);
    assert_eq!(out.status.code(), Some(2), "a clap usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown GPU target `gfx9999`"));
}

/// Stand-in CMake and rocSHMEM installs for build-shim runs into one out folder.
struct Stand {
    dir: tempfile::TempDir,
    path: String,
}

impl Stand {
    /// `None` (with the reason printed) without make or ninja (the generator check).
    fn new() -> Option<Self> {
        if !which("make") && !which("ninja") {
            assert!(std::env::var_os("CI").is_none(), "CI must install ninja");
            eprintln!("SKIPPED: needs make or ninja on PATH (the generator check)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        write_script(&bin.join("cmake"), CACHING_CMAKE);
        std::fs::create_dir_all(dir.path().join("rocm")).unwrap();
        for name in ["a", "b"] {
            let home = dir.path().join(format!("rocshmem-{name}"));
            standin_install(&home, "3.4.0", &name.repeat(40), "gfx942");
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Some(Self { dir, path })
    }

    fn at(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// build-shim against install `name` into the one out folder, with `env`.
    fn command(&self, name: &str, env: &[(&str, &Path)]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
        command
            .args(["build-shim", "--backend", "rocshmem", "--rocshmem-home"])
            .arg(self.at(&format!("rocshmem-{name}")))
            .arg("--rocm-path")
            .arg(self.at("rocm"))
            .arg("--out-dir")
            .arg(self.at("out"))
            .env_remove("ROCM_PATH")
            .env("PATH", &self.path)
            .envs(env.iter().copied());
        command
    }

    fn library(&self) -> std::path::PathBuf {
        self.at("out/lib/libsymmem_shim_rocshmem.so")
    }
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A failed build removes the library and stamp it was to replace: `cargo xtask test` loads
/// whatever library is in the out folder, and must not load the previous build's as this one's.
#[test]
fn a_failed_build_leaves_no_previous_library() {
    let Some(stand) = Stand::new() else { return };
    let out = stand.command("a", &[]).output().unwrap();
    assert!(out.status.success(), "{}", both(&out));
    assert!(stand.library().is_file() && stand.at("out/symmem-shim-stamp.toml").is_file());
    let fail = Path::new("1");
    let out = stand
        .command("b", &[("FAKE_CMAKE_FAIL", fail)])
        .output()
        .unwrap();
    let t = both(&out);
    assert!(
        !out.status.success() && t.contains("failing on purpose"),
        "{t}"
    );
    assert!(
        !stand.library().exists(),
        "the failed build left the previous library: {t}"
    );
    assert!(!stand.at("out/symmem-shim-stamp.toml").exists(), "{t}");
}

/// A second build into an out folder that a build is using is refused, naming the one that
/// holds it; the first then finishes with its own library.
#[test]
fn a_second_build_into_one_out_folder_names_the_first() {
    let Some(stand) = Stand::new() else { return };
    let hold = stand.at("release");
    let mut first = stand
        .command("a", &[("FAKE_CMAKE_HOLD", &hold)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first_pid = first.id();
    let started = stand.at("release.started");
    for _ in 0..600 {
        if started.exists() || first.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let second = stand.command("b", &[]).output().unwrap();
    std::fs::write(&hold, "").unwrap();
    let first_out = first.wait_with_output().unwrap();
    assert!(
        started.exists(),
        "the first build never reached its build step: {}",
        both(&first_out)
    );
    let t = both(&second);
    assert!(!second.status.success(), "{t}");
    for part in [
        "another build-shim is building in".to_string(),
        format!("pid {first_pid}"),
        "build-shim --backend rocshmem".into(),
        "pass another --out-dir".into(),
    ] {
        assert!(t.contains(&part), "`{part}` not in {t}");
    }
    assert!(first_out.status.success(), "{}", both(&first_out));
    let linked = std::fs::read_to_string(stand.library()).unwrap();
    assert!(linked.contains("rocshmem-a"), "{linked}");
}

/// A run refused by its input checks (here an install whose header lacks the unique-id API)
/// removes the previous library and stamp too, and says so: the next `cargo xtask test` must
/// not load the previous inputs' library as if this run had built it.
#[test]
fn a_refused_build_leaves_no_previous_library() {
    let Some(stand) = Stand::new() else { return };
    let out = stand.command("a", &[]).output().unwrap();
    assert!(out.status.success(), "{}", both(&out));
    assert!(stand.library().is_file() && stand.at("out/symmem-shim-stamp.toml").is_file());
    let without = stand.at("rocshmem-n");
    common::copy_dir(&stand.at("rocshmem-a"), &without);
    std::fs::write(
        without.join("include/rocshmem/rocshmem.hpp"),
        "namespace rocshmem { void rocshmem_init(); }\n",
    )
    .unwrap();
    let out = stand.command("n", &[]).output().unwrap();
    let t = both(&out);
    assert_clean_failure(&out, "is not a 3.x install");
    assert!(
        !stand.library().exists(),
        "the refused build left the previous library: {t}"
    );
    assert!(!stand.at("out/symmem-shim-stamp.toml").exists(), "{t}");
    let note = format!(
        "note: the previous {} and its stamp were removed",
        stand.library().display()
    );
    assert!(t.contains(&note), "`{note}` not in {t}");
}
