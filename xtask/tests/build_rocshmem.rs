//! End to end, without ROCm: the real pipeline (git fetch of a pinned commit from a local
//! repository, CMake configure / build / install, verification, publication) over a small
//! project with rocSHMEM's build interface, compiled by a stand-in for hipcc.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{copy_dir, git, which};
use symmem_test_support::command::write_script;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    commit: String,
}

/// A git repository shaped like ROCm's monorepo, a fake ROCm with a hipcc stand-in, and a pins
/// file pointing at the repository's commit. `None` (with the reason printed) when the tools
/// are missing outside CI; in CI a missing tool fails the test.
fn fixture() -> Option<Fixture> {
    let missing: Vec<&str> = ["git", "cmake", "c++"]
        .into_iter()
        .filter(|t| !which(t))
        .collect();
    if !missing.is_empty() {
        let why = format!(
            "build-rocshmem end-to-end test needs {} (apt-get install git cmake ninja-build g++)",
            missing.join(", ")
        );
        assert!(
            std::env::var_os("CI").is_none(),
            "{why}: CI must install them"
        );
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let repo = root.join("rocm-systems");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-rocshmem"),
        &repo.join("projects/rocshmem"),
    );
    // Something outside the sparse checkout, which must not be fetched into the work tree.
    std::fs::create_dir_all(repo.join("projects/other")).unwrap();
    std::fs::write(repo.join("projects/other/README"), "not rocSHMEM\n").unwrap();
    git(&repo, &["init", "--quiet"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "fixture"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);

    let rocm = root.join("rocm");
    std::fs::create_dir_all(rocm.join("bin")).unwrap();
    std::fs::create_dir_all(rocm.join("include/rocm-core")).unwrap();
    // No .info/version: the command must derive EXPLICIT_ROCM_VERSION from this header.
    std::fs::write(
        rocm.join("include/rocm-core/rocm_version.h"),
        "#define ROCM_VERSION_MAJOR 7\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 4\n",
    )
    .unwrap();
    // ROCm's LLVM tools, which build-rocshmem requires for rocSHMEM's device bitcode (the
    // fake rocSHMEM does not run them).
    std::fs::create_dir_all(rocm.join("llvm/bin")).unwrap();
    for tool in ["clang++", "llvm-link", "opt"] {
        let path = rocm.join("llvm/bin").join(tool);
        write_script(
            &path,
            &format!(
                "#!/bin/sh\nif [ -n \"$FAKE_LLVM_FAIL\" ]; then echo 'fake {tool}: failing on \
                 purpose' >&2; exit 1; fi\nexit 0\n"
            ),
        );
    }
    let hipcc = rocm.join("bin/hipcc");
    write_script(
        &hipcc,
        "#!/bin/sh\n# Stand-in for hipcc: the host C++ compiler, or a failure on request.\n\
         if [ -n \"$FAKE_HIPCC_LOG\" ]; then echo \"$*\" >> \"$FAKE_HIPCC_LOG\"; fi\n\
         if [ -n \"$FAKE_HIPCC_HANG\" ]; then case \"$*\" in */src/*) echo $$ >> \"$FAKE_HIPCC_HANG\"; \
         exec sleep 120 ;; esac; fi\n\
         if [ -n \"$FAKE_HIPCC_FAIL\" ]; then echo 'fake hipcc: failing on purpose' >&2; exit 1; fi\n\
         exec c++ \"$@\"\n",
    );
    write_pins(&root, &format!("file://{}", repo.display()), &commit);
    Some(Fixture {
        _dir: dir,
        root,
        repo,
        commit,
    })
}

fn write_pins(root: &Path, repository: &str, commit: &str) {
    std::fs::write(
        root.join("pins.toml"),
        format!(
            "[rocshmem]\nrepository = {repository:?}\nsubdirectory = \"projects/rocshmem\"\n\
             commit = {commit:?}\nversion = \"3.4.0\"\n[rust]\ntoolchain = \"1.95.0\"\n"
        ),
    )
    .unwrap();
}

fn xtask(f: &Fixture, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("build-rocshmem")
        .args(args)
        .arg("--pins")
        .arg(f.root.join("pins.toml"))
        .arg("--out-dir")
        .arg(f.root.join("out"))
        .arg("--rocm-path")
        .arg(f.root.join("rocm"))
        .env_remove("HIPCC")
        .env_remove("ROCM_PATH")
        .envs(env.iter().copied())
        .output()
        .expect("xtask runs");
    (out, started.elapsed())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn prefix_of(out: &Output) -> PathBuf {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export ROCSHMEM_HOME="))
        .unwrap_or_else(|| panic!("no export line in {}", text(out)));
    PathBuf::from(line)
}

fn prefixes(f: &Fixture) -> Vec<String> {
    let dir = f.root.join("out/prefix");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn pinned_build_is_verified_incremental_and_content_addressed() {
    let Some(f) = fixture() else { return };

    // --dry-run prints the plan and touches nothing.
    let (out, _) = xtask(&f, &["--arch", "gfx942", "--dry-run"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let plan = text(&out);
    assert!(
        plan.contains("-DUSE_IPC=ON") && plan.contains("-DEXPLICIT_ROCM_VERSION=7.2.4"),
        "{plan}"
    );
    assert!(!f.root.join("out").exists(), "dry run created files");

    // First build: real fetch, configure, build, install, verify.
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let prefix = prefix_of(&out);
    for file in [
        "lib/cmake/rocshmem/rocshmem-config.cmake",
        "lib/librocshmem.a",
        "lib/librocshmem_device_gfx942.bc",
        "symmem-rocshmem-stamp.toml",
    ] {
        assert!(
            prefix.join(file).is_file(),
            "{file} missing in {}",
            prefix.display()
        );
    }
    let header =
        std::fs::read_to_string(prefix.join("include/rocshmem/rocshmem_config.h")).unwrap();
    assert!(
        header.contains("#define USE_IPC") && header.contains(&prefix.display().to_string()),
        "{header}"
    );
    let stamp = std::fs::read_to_string(prefix.join("symmem-rocshmem-stamp.toml")).unwrap();
    assert!(
        stamp.contains(&f.commit) && stamp.contains("gfx942"),
        "{stamp}"
    );
    let checkout = f.root.join("out/src").join(&f.commit);
    assert_eq!(git(&checkout, &["rev-parse", "HEAD"]), f.commit);
    assert!(checkout.join("projects/rocshmem/CMakeLists.txt").is_file());
    assert!(
        !checkout.join("projects/other").exists(),
        "sparse checkout fetched too much"
    );

    // Second identical run: nothing to do, fast.
    let (out, took) = xtask(&f, &["--arch", "gfx942"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("up to date"), "{}", text(&out));
    assert_eq!(prefix_of(&out), prefix);
    assert!(took < Duration::from_secs(1), "no-op run took {took:?}");

    // --print-prefix names it without building.
    let (out, _) = xtask(&f, &["--arch", "gfx942", "--print-prefix"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        prefix.display().to_string()
    );

    // A changed input gives a new prefix next to the old one.
    let (out, _) = xtask(&f, &["--arch", "gfx942,gfx950:xnack-"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let second = prefix_of(&out);
    assert_ne!(second, prefix);
    assert!(second.join("lib/librocshmem_device_gfx950.bc").is_file());
    assert_eq!(prefixes(&f).len(), 2, "{:?}", prefixes(&f));

    // A broken build fails and leaves nothing that looks like an install.
    let (out, _) = xtask(&f, &["--arch", "gfx90a"], &[("FAKE_HIPCC_FAIL", "1")]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(
        t.contains("fake hipcc: failing on purpose") && t.contains("symmem-build.log"),
        "{t}"
    );
    assert_eq!(
        prefixes(&f).len(),
        2,
        "a failed build left {:?}",
        prefixes(&f)
    );
    let (out, _) = xtask(&f, &["--arch", "gfx90a", "--print-prefix"], &[]);
    let broken = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(!broken.exists());

    // A commit that the repository does not have is refused.
    write_pins(
        &f.root,
        &format!("file://{}", f.repo.display()),
        &"1".repeat(40),
    );
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    assert!(!out.status.success());
    assert!(text(&out).contains("--source"), "{}", text(&out));
    write_pins(&f.root, &format!("file://{}", f.repo.display()), &f.commit);

    // A local checkout at another commit, or with local changes, is refused unless allowed.
    std::fs::write(
        f.repo.join("projects/rocshmem/src/extra.txt"),
        "local change\n",
    )
    .unwrap();
    let source = f.repo.display().to_string();
    let (out, _) = xtask(&f, &["--arch", "gfx942", "--source", &source], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("local changes") && text(&out).contains("--allow-source-mismatch"),
        "{}",
        text(&out)
    );
    git(&f.repo, &["add", "."]);
    git(&f.repo, &["commit", "--quiet", "-m", "moved on"]);
    let (out, _) = xtask(&f, &["--arch", "gfx942", "--source", &source], &[]);
    assert!(!out.status.success());
    assert!(text(&out).contains("but the pin is"), "{}", text(&out));
    let (out, _) = xtask(
        &f,
        &[
            "--arch",
            "gfx942",
            "--source",
            &source,
            "--allow-source-mismatch",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_ne!(
        prefix_of(&out),
        prefix,
        "a modified tree must not share the pin's prefix"
    );
}

/// A rocSHMEM 2.x tree (or a pin that names 2.x) is refused from its declared version before
/// anything is configured, with what was found, what is needed and the fix.
#[test]
fn a_rocshmem_2_tree_is_refused_before_configuring() {
    let Some(f) = fixture() else { return };
    let old = f.root.join("rocshmem-2");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rocshmem-2x"),
        &old.join("projects/rocshmem"),
    );
    git(&old, &["init", "--quiet"]);
    git(&old, &["add", "."]);
    git(&old, &["commit", "--quiet", "-m", "2.x"]);
    let commit = git(&old, &["rev-parse", "HEAD"]);
    write_pins(&f.root, &format!("file://{}", old.display()), &commit);
    let source = old.display().to_string();
    let cmakelists = old.join("projects/rocshmem/CMakeLists.txt");
    for args in [
        &["--arch", "gfx942", "--source", &source][..],
        &[
            "--arch",
            "gfx942",
            "--source",
            &source,
            "--allow-source-mismatch",
        ][..],
        // Fetched: refused after the fetch, before CMake sees it.
        &["--arch", "gfx942"][..],
    ] {
        let (out, _) = xtask(&f, args, &[]);
        let t = text(&out);
        assert!(!out.status.success(), "{args:?}: {t}");
        let fetched = f.root.join("out/src").join(&commit);
        let declared = if args.len() == 2 {
            fetched.join("projects/rocshmem/CMakeLists.txt")
        } else {
            cmakelists.clone()
        };
        for part in [
            format!("rocSHMEM 2.0.0 (declared in {})", declared.display()),
            "needs rocSHMEM 3.x or newer".into(),
            "--allow-source-mismatch cannot change that".into(),
            "Fix: build the pinned rocSHMEM".into(),
        ] {
            assert!(t.contains(&part), "{args:?}: `{part}` not in {t}");
        }
        assert!(
            !t.contains("rocprim") && !t.contains("[2/5] configure"),
            "CMake ran: {t}"
        );
        let caches = std::fs::read_dir(f.root.join("out/build"))
            .map(|d| {
                d.filter(|e| e.as_ref().unwrap().path().join("CMakeCache.txt").exists())
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(caches, 0, "{args:?} configured: {t}");
    }
    // A 2.x checkout that is not the pin either: the version, which no flag can change, is
    // what is said, not --allow-source-mismatch.
    write_pins(&f.root, &format!("file://{}", f.repo.display()), &f.commit);
    let (out, _) = xtask(&f, &["--arch", "gfx942", "--source", &source], &[]);
    let t = text(&out);
    assert!(
        !out.status.success()
            && t.contains("rocSHMEM 2.0.0 (declared in")
            && !t.contains("is not the pinned rocSHMEM"),
        "{t}"
    );
    write_pins(&f.root, &format!("file://{}", old.display()), &commit);
    // A pin that names a 2.x version is refused before anything is fetched.
    std::fs::write(
        f.root.join("pins.toml"),
        std::fs::read_to_string(f.root.join("pins.toml"))
            .unwrap()
            .replace("version = \"3.4.0\"", "version = \"2.0.0\""),
    )
    .unwrap();
    std::fs::remove_dir_all(f.root.join("out")).unwrap();
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    let t = text(&out);
    assert!(
        !out.status.success()
            && t.contains("pins rocSHMEM 2.0.0")
            && t.contains("pin a rocSHMEM 3.x"),
        "{t}"
    );
    assert!(!f.root.join("out").exists(), "{t}");
}

/// Older rocSHMEM trees declare their version in other forms (ROCm/rocSHMEM 2.0.0 and 1.6.0:
/// `rocm_setup_version(VERSION ...)`, or a VERSION file read by a multi-line `project(`):
/// each is refused before CMake runs, naming what it found and that 3.x is needed.
#[test]
fn older_trees_are_known_by_what_they_hold() {
    let Some(f) = fixture() else { return };
    let forms: [(&str, &[(&str, &str)]); 2] = [
        (
            "2.0.0",
            &[(
                "CMakeLists.txt",
                "cmake_minimum_required(VERSION 3.16)\ninclude(ROCMSetupVersion)\n\
                 rocm_setup_version(VERSION 2.0.0)\nproject(rocshmem CXX)\n\
                 find_package(rocprim REQUIRED CONFIG)\n",
            )],
        ),
        (
            "1.6.0",
            &[
                (
                    "CMakeLists.txt",
                    "cmake_minimum_required(VERSION 3.16)\nfile(STRINGS VERSION V)\nproject(\n  \
                     rocshmem\n  VERSION ${V}\n  LANGUAGES CXX\n)\n\
                     find_package(rocprim REQUIRED CONFIG)\n",
                ),
                ("VERSION", "1.6.0\n"),
            ],
        ),
    ];
    for (version, files) in forms {
        let tree = f.root.join(format!("rocshmem-{version}"));
        let dir = tree.join("projects/rocshmem");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        git(&tree, &["init", "--quiet"]);
        git(&tree, &["add", "."]);
        git(&tree, &["commit", "--quiet", "-m", version]);
        let source = tree.display().to_string();
        let args = [
            "--arch",
            "gfx942",
            "--source",
            &source,
            "--allow-source-mismatch",
        ];
        let (out, _) = xtask(&f, &args, &[]);
        let t = text(&out);
        assert!(!out.status.success(), "{version}: {t}");
        assert!(
            t.contains(&format!("rocSHMEM {version} (declared in"))
                && t.contains("needs rocSHMEM 3.x or newer"),
            "{version}: {t}"
        );
        assert!(
            !t.contains("rocprim") && !t.contains("[2/5] configure"),
            "CMake ran: {t}"
        );
    }
}

/// A kept build tree (a failed build's) whose CMake cache names what the machine no longer has
/// (an MPI found where it was configured, e.g. another root sharing this out folder) is
/// configured anew, and the output says why; the build then succeeds.
#[test]
fn a_kept_tree_whose_cache_no_longer_fits_is_configured_anew() {
    let Some(f) = fixture() else { return };
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[("FAKE_HIPCC_FAIL", "1")]);
    assert!(!out.status.success(), "{}", text(&out));
    let builds: Vec<PathBuf> = std::fs::read_dir(f.root.join("out/build"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(builds.len(), 1, "{builds:?}");
    let cache = builds[0].join("CMakeCache.txt");
    let mut text_of_cache = std::fs::read_to_string(&cache).unwrap();
    text_of_cache.push_str("MPI_CXX_HEADER_DIR:PATH=/nonexistent/openmpi/include\n");
    std::fs::write(&cache, text_of_cache).unwrap();
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains(&format!(
            "the kept build folder {} does not fit this machine",
            builds[0].display()
        )) && t.contains("MPI_CXX_HEADER_DIR = /nonexistent/openmpi/include"),
        "{t}"
    );
}

/// A failed (or interrupted) build resumes where it stopped: the kept tree is configured
/// again without CMake's compiler checks, and no source that compiled is compiled again.
#[test]
fn a_failed_build_resumes_where_it_stopped() {
    let Some(f) = fixture() else { return };
    let log = f.root.join("hipcc.log");
    let log_text = log.display().to_string();
    let compiles = |text: &str| {
        text.lines()
            .filter(|l| l.contains(" -c ") && l.contains("/src/"))
            .count()
    };
    // Fails after every source compiled: at the device bitcode, which comes after the library.
    let (out, _) = xtask(
        &f,
        &["--arch", "gfx942"],
        &[("FAKE_LLVM_FAIL", "1"), ("FAKE_HIPCC_LOG", &log_text)],
    );
    let t = text(&out);
    assert!(
        !out.status.success() && t.contains("fake clang++: failing on purpose"),
        "{t}"
    );
    let first = std::fs::read_to_string(&log).unwrap();
    assert!(
        first.contains("CMakeCXXCompiler"),
        "no compiler checks: {first}"
    );
    assert_eq!(compiles(&first), 4, "{first}");
    std::fs::remove_file(&log).unwrap();

    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[("FAKE_HIPCC_LOG", &log_text)]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(!t.contains("configuring it anew"), "{t}");
    let second = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !second.contains("CMakeCXXCompiler"),
        "configure started over: {second}"
    );
    assert_eq!(compiles(&second), 0, "compiled again: {second}");
    assert!(
        prefix_of(&out)
            .join("lib/librocshmem_device_gfx942.bc")
            .is_file()
    );
}

/// Whether process `pid` has ended (gone, or a zombie no one has reaped yet).
fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// `kill -TERM` of the xtask alone, in its build step, stops the compilers too: nothing of
/// the build runs on after the xtask has said "interrupted".
#[test]
fn a_term_to_the_xtask_stops_its_compilers() {
    let Some(f) = fixture() else { return };
    let pids = f.root.join("hipcc.pids");
    let mut xtask = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["build-rocshmem", "--arch", "gfx942", "--pins"])
        .arg(f.root.join("pins.toml"))
        .arg("--out-dir")
        .arg(f.root.join("out"))
        .arg("--rocm-path")
        .arg(f.root.join("rocm"))
        .env_remove("HIPCC")
        .env_remove("ROCM_PATH")
        .env("FAKE_HIPCC_HANG", &pids)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let read_pids = || std::fs::read_to_string(&pids).unwrap_or_default();
    for _ in 0..1200 {
        if !read_pids().is_empty() || xtask.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &xtask.id().to_string()])
        .status();
    let out = xtask.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let compilers: Vec<String> = read_pids().lines().map(str::to_string).collect();
    let mut left: Vec<String> = compilers.clone();
    for _ in 0..400 {
        left.retain(|pid| !ended(pid));
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    for pid in &left {
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
    assert!(!compilers.is_empty(), "no compiler started: {stderr}");
    assert!(
        !out.status.success() && stderr.contains("interrupted"),
        "{stderr}"
    );
    assert!(
        left.is_empty(),
        "compilers {left:?} outlived the xtask: {stderr}"
    );
}

/// A run into an out folder whose lock another run holds is refused before anything is written
/// there (no fetch, no CMake, no ninja), naming the holder (pid, command, how long) and the
/// fix; `--print-prefix`, `--dry-run` and an install already there need no lock. Once the lock
/// is released, its file (still naming the holder) blocks no one.
#[test]
fn a_second_build_into_one_out_folder_is_refused_naming_the_first() {
    let Some(f) = fixture() else { return };
    let out_dir = f.root.join("out");
    let lock = LockHolder::start(&out_dir);
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    let errors: Vec<&str> = t.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{t}");
    for part in [
        format!(
            "another build-rocshmem is building in {}",
            out_dir.display()
        ),
        format!("pid {}, `", lock.pid()),
        "`, for ".into(),
        "wait for it to finish, or pass another --out-dir".into(),
    ] {
        assert!(errors[0].contains(&part), "`{part}` not in {t}");
    }
    let written: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written, ["symmem-build-rocshmem.lock"], "{t}");
    let (out, _) = xtask(&f, &["--arch", "gfx942", "--clean-stale"], &[]);
    assert!(
        !out.status.success() && text(&out).contains("another build-rocshmem is building in"),
        "{}",
        text(&out)
    );
    for read_only in ["--print-prefix", "--dry-run"] {
        let (out, _) = xtask(&f, &["--arch", "gfx942", read_only], &[]);
        assert!(out.status.success(), "{read_only}: {}", text(&out));
    }

    lock.release();
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let _lock = symmem_build::lock::OutLock::take(&out_dir, "build-rocshmem").unwrap();
    let (out, _) = xtask(&f, &["--arch", "gfx942"], &[]);
    assert!(
        out.status.success() && text(&out).contains("is up to date"),
        "{}",
        text(&out)
    );
}

/// The environment variable that tells [`hold_out_lock`] which out folder to lock.
const HOLD_OUT_DIR: &str = "BUILD_ROCSHMEM_TEST_HOLD_OUT_DIR";

/// An out folder's lock held by a process of its own ([`hold_out_lock`]), not by this test
/// process: a lock (flock) held here would also be held, until they exec, by the children
/// other test threads fork meanwhile, so releasing it here would not free it at once.
struct LockHolder {
    child: std::process::Child,
    /// Its output, open until it ends (it writes the test harness's lines there).
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl LockHolder {
    fn start(out_dir: &Path) -> Self {
        use std::io::{BufRead, Read};
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "hold_out_lock", "--nocapture"])
            .env(HOLD_OUT_DIR, out_dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the lock holder");
        let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
        let held = output
            .by_ref()
            .lines()
            .map_while(Result::ok)
            .any(|line| line == "held");
        assert!(held, "the lock holder did not take the lock");
        Self { child, output }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the holder (it waits for its stdin to close): its lock goes with it.
    fn release(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.output, &mut rest).unwrap();
        assert!(
            self.child.wait().unwrap().success(),
            "the lock holder failed: {rest}"
        );
    }
}

#[test]
#[ignore = "the lock holder of the test above, which runs it"]
fn hold_out_lock() {
    let out = std::env::var_os(HOLD_OUT_DIR).expect("run by LockHolder");
    let _lock = symmem_build::lock::OutLock::take(Path::new(&out), "build-rocshmem").unwrap();
    println!("held");
    // Until the test closes our stdin.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest).unwrap();
}
