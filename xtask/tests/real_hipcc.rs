//! End to end with a real hipcc (Debian's or AMD's ROCm; no GPU needed): `cargo xtask
//! build-rocshmem` builds a stand-in rocSHMEM (tests/fixtures/standin-rocshmem: a real static
//! -fgpu-rdc library with device code and device bitcode, and a package config shaped like
//! rocSHMEM's) from a local git repository, then `cargo xtask build-shim --backend rocshmem`
//! compiles the shim for gfx942 and gfx90a and device-links it against that install. The shim
//! must export exactly the functions of symmem_shim.h, and its gfx942 code object must carry
//! both the shim's kernels and the library's device code.
//!
//! Runs only where a real hipcc is found (else it prints "SKIPPED: ..."); with CI and
//! SYMMEM_REAL_HIPCC=1 set, a missing hipcc or tool fails it. `.ci/real-hipcc` runs it inside a
//! Debian sid root that has ROCm.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;
use symmem::settings::{Audience, Setting};

/// Makes a skipped real-hipcc test a failure (`.ci/real-hipcc` sets it).
const REAL_HIPCC: Setting<bool> = Setting {
    name: "SYMMEM_REAL_HIPCC",
    doc: "`1` (with `CI` set): xtask's real-hipcc test must run, a missing hipcc fails it (`.ci/real-hipcc` sets it)",
    default: "the test skips without hipcc",
    expected: "1 or 0",
    audience: Audience::Development,
    parse: symmem::settings::parse_switch,
};

mod common;
use common::{copy_dir, git, on_path};

const ARCHS: &str = "gfx942,gfx90a";
const SHIM_KERNELS: &[&str] = &[
    "symmem_fill_u64_kernel",
    "symmem_store_u64_kernel",
    "symmem_load_u64_kernel",
    "symmem_copy_kernel",
    "symmem_atomic_add_u64_kernel",
];
/// Device symbols of the stand-in library (src/rocshmem.cpp).
const LIBRARY_DEVICE_SYMBOLS: &[&str] =
    &["rocshmem_standin_init_kernel", "rocshmem_standin_device_pe"];

fn required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        && REAL_HIPCC
            .read()
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or(false)
}

/// `None` after printing why, or a failure when CI asked for this test.
fn skip<T>(why: &str) -> Option<T> {
    assert!(
        !required(),
        "{why}. CI and {}=1 are set, so this test must run: run it through .ci/real-hipcc (a \
         Debian sid root with the packages `cargo xtask images base --packages` lists)",
        REAL_HIPCC.name
    );
    eprintln!("SKIPPED: {why}");
    None
}

fn output(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// The real toolchain: hipcc, and the LLVM tools that read a HIP fat binary.
struct Tools {
    hipcc_version: String,
    objcopy: PathBuf,
    bundler: PathBuf,
    readelf: PathBuf,
    llvm_nm: PathBuf,
}

fn tools() -> Option<Tools> {
    let Some(hipcc) = on_path("hipcc") else {
        return skip("no hipcc on PATH (needs a real ROCm: Debian's hipcc or AMD's)");
    };
    let version = output(&hipcc, &["--version"]);
    let hipcc_version = text(&version);
    if !version.status.success() || !hipcc_version.contains("HIP version") {
        return skip(&format!(
            "{} is not a real hipcc (`hipcc --version` says {:?})",
            hipcc.display(),
            hipcc_version.trim()
        ));
    }
    // nm and perl for .ci/check-shim-exports.
    let missing: Vec<&str> = ["git", "cmake", "nm", "perl"]
        .into_iter()
        .filter(|t| on_path(t).is_none())
        .collect();
    if !missing.is_empty() {
        return skip(&format!(
            "the real-hipcc test needs {} (apt-get install git cmake binutils perl)",
            missing.join(", ")
        ));
    }
    // HIP's clang folder holds the offload tools: hipconfig says where (Debian:
    // /usr/lib/llvm-<N>/bin), else AMD's layout next to hipcc.
    let hipconfig = hipcc.with_file_name("hipconfig");
    let llvm = Some(output(&hipconfig, &["--hipclangpath"]))
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(stdout(&o).trim()))
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| hipcc.parent().unwrap().join("../llvm/bin"));
    let tool = |name: &str| Some(llvm.join(name)).filter(|p| p.is_file());
    let (Some(objcopy), Some(bundler), Some(readelf), Some(llvm_nm)) = (
        tool("llvm-objcopy"),
        tool("clang-offload-bundler"),
        tool("llvm-readelf"),
        tool("llvm-nm"),
    ) else {
        return skip(&format!(
            "{} lacks llvm-objcopy, clang-offload-bundler, llvm-readelf or llvm-nm (Debian: \
             llvm-<N> and clang-<N>, which hipcc pulls in)",
            llvm.display()
        ));
    };
    Some(Tools {
        hipcc_version,
        objcopy,
        bundler,
        readelf,
        llvm_nm,
    })
}

/// Runs `cargo xtask <args>` with ROCm left to discovery: no ROCM_PATH or HIPCC from outside.
fn xtask(args: &[&str]) -> (Output, f64) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .env_remove("ROCM_PATH")
        .env_remove("HIPCC")
        .env_remove("ROCSHMEM_HOME")
        .output()
        .expect("xtask runs");
    (out, started.elapsed().as_secs_f64())
}

/// Extracts the code object of `processor` from the library's HIP fat binary; returns its
/// bundle entry name, the file, and every bundle entry.
fn code_object(
    tools: &Tools,
    library: &Path,
    work: &Path,
    processor: &str,
) -> (String, PathBuf, Vec<String>) {
    let fatbin = work.join("shim.hip_fatbin");
    let dump = format!("--dump-section=.hip_fatbin={}", fatbin.display());
    let copy = work.join("shim-copy.so");
    let out = output(
        &tools.objcopy,
        &[&dump, library.to_str().unwrap(), copy.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "no .hip_fatbin section in the shim: {}",
        text(&out)
    );
    let input = format!("--input={}", fatbin.display());
    let out = output(&tools.bundler, &["--list", "--type=o", &input]);
    assert!(
        out.status.success(),
        "clang-offload-bundler --list: {}",
        text(&out)
    );
    let entries: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    let entry = entries
        .iter()
        .find(|e| e.starts_with("hip") && e.ends_with(&format!("--{processor}")))
        .unwrap_or_else(|| panic!("no {processor} code object in the fat binary: {entries:?}"))
        .clone();
    let object = work.join(format!("{processor}.co"));
    let out = output(
        &tools.bundler,
        &[
            "--unbundle",
            "--type=o",
            &input,
            &format!("--targets={entry}"),
            &format!("--output={}", object.display()),
        ],
    );
    assert!(out.status.success(), "unbundling {entry}: {}", text(&out));
    (entry, object, entries)
}

/// A copy of the rocSHMEM install whose package needs one more dependency, the way real
/// installs can: `config_prefix` goes before the config's own lines and `link` joins
/// roc::rocshmem's link interface.
fn install_needing(prefix: &Path, to: &Path, config_prefix: &str, link: &str) {
    copy_dir(prefix, to);
    let dir = to.join("lib/cmake/rocshmem");
    let config = dir.join("rocshmem-config.cmake");
    let old = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{config_prefix}{old}")).unwrap();
    let targets = dir.join("rocshmem-targets.cmake");
    let old = std::fs::read_to_string(&targets).unwrap();
    let needle = "INTERFACE_LINK_LIBRARIES \"";
    assert!(old.contains(needle), "{old}");
    std::fs::write(
        &targets,
        old.replacen(needle, &format!("{needle}{link};"), 1),
    )
    .unwrap();
}

#[test]
fn standin_rocshmem_and_shim_build_with_the_real_hipcc() {
    let Some(tools) = tools() else { return };
    eprintln!(
        "[real-hipcc] hipcc --version:\n{}",
        tools.hipcc_version.trim_end()
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();

    // A repository shaped like ROCm's monorepo, holding the stand-in, and pins naming it.
    let repo = root.join("rocm-systems");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/standin-rocshmem"),
        &repo.join("projects/rocshmem"),
    );
    git(&repo, &["init", "--quiet"]);
    git(&repo, &["add", "."]);
    git(
        &repo,
        &["commit", "--quiet", "-m", "rocSHMEM test stand-in"],
    );
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let pins = root.join("pins.toml");
    std::fs::write(
        &pins,
        format!(
            "[rocshmem]\nrepository = \"file://{}\"\nsubdirectory = \"projects/rocshmem\"\n\
             commit = {commit:?}\nversion = \"3.4.0\"\n[rust]\ntoolchain = \"1.95.0\"\n",
            repo.display()
        ),
    )
    .unwrap();

    // (a) build-rocshmem: its own discovery, CMake path and verification, with the real hipcc.
    let (out, took) = xtask(&[
        "build-rocshmem",
        "--arch",
        ARCHS,
        "--source",
        repo.to_str().unwrap(),
        "--pins",
        pins.to_str().unwrap(),
        "--out-dir",
        root.join("rocshmem").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "build-rocshmem failed:\n{}",
        text(&out)
    );
    eprintln!(
        "[real-hipcc] build-rocshmem ({took:.1} s):\n{}",
        text(&out).trim_end()
    );
    let prefix = PathBuf::from(
        stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix("export ROCSHMEM_HOME="))
            .unwrap_or_else(|| panic!("no ROCSHMEM_HOME line:\n{}", text(&out))),
    );
    for file in [
        "lib/librocshmem.a",
        "lib/librocshmem_device_gfx942.bc",
        "lib/librocshmem_device_gfx90a.bc",
        "lib/cmake/rocshmem/rocshmem-config.cmake",
    ] {
        assert!(
            prefix.join(file).is_file(),
            "{file} missing in {}",
            prefix.display()
        );
    }

    // (b) build-shim against that install, for both architectures.
    let shim_out = root.join("shim");
    let (out, took) = xtask(&[
        "build-shim",
        "--backend",
        "rocshmem",
        "--arch",
        ARCHS,
        "--rocshmem-home",
        prefix.to_str().unwrap(),
        "--out-dir",
        shim_out.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "build-shim failed:\n{}", text(&out));
    eprintln!("[real-hipcc] build-shim ({took:.1} s):");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let rocm = lines.iter().filter(|l| l.starts_with("ROCm "));
    for line in rocm.chain(&lines[lines.len().saturating_sub(6)..]) {
        eprintln!("    {line}");
    }
    let stdout_lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(
        stdout_lines.len(),
        1,
        "stdout must be the library path only: {stdout_lines:?}"
    );
    let library = PathBuf::from(&stdout_lines[0]);
    assert_eq!(library, shim_out.join("lib/libsymmem_shim_rocshmem.so"));

    // (c) Exactly symmem_shim.h's functions are exported: the one check of that, the script
    // CI also runs on the NVSHMEM shim and the stand-in shim.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/check-shim-exports");
    let exports = output(
        Path::new("bash"),
        &[script.to_str().unwrap(), library.to_str().unwrap()],
    );
    eprintln!("[real-hipcc] {}", text(&exports).trim());
    assert!(exports.status.success(), "{}", text(&exports));

    // ... and the gfx942 code object carries the shim's kernels and the library's device code.
    let (entry, object, entries) = code_object(&tools, &library, root, "gfx942");
    eprintln!("[real-hipcc] fat binary bundle entries: {entries:?}");
    assert!(
        entries.iter().any(|e| e.ends_with("--gfx90a")),
        "no gfx90a code object: {entries:?}"
    );
    let header = output(&tools.readelf, &["-h", object.to_str().unwrap()]);
    let flags = stdout(&header)
        .lines()
        .find(|l| l.trim_start().starts_with("Flags:"))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(flags.contains("gfx942"), "{}", text(&header));
    let symbols = stdout(&output(&tools.llvm_nm, &[object.to_str().unwrap()]));
    let defined: Vec<&str> = symbols
        .lines()
        .filter(|l| matches!(l.split_whitespace().nth(1), Some("T" | "D" | "B")))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    eprintln!(
        "[real-hipcc] code object {entry} ({flags}), kernels and device globals:\n    {}",
        defined.join("\n    ")
    );
    for name in SHIM_KERNELS.iter().chain(LIBRARY_DEVICE_SYMBOLS) {
        assert!(
            defined.iter().any(|d| d.contains(name)),
            "{name} is not in the gfx942 code object: {defined:?}"
        );
    }

    // The shim's CMake finds what rocSHMEM's package may need beyond HIP, or names the fix.
    let numa = root.join("rocshmem-numa");
    install_needing(
        &prefix,
        &numa,
        "include(CMakeFindDependencyMacro)\nfind_dependency(NUMA)\n",
        "numa::numa",
    );
    let mpi = root.join("rocshmem-mpi");
    install_needing(&prefix, &mpi, "", "MPI::MPI_CXX");
    for (install, fix) in [(&numa, "libnuma-dev"), (&mpi, "libopenmpi-dev")] {
        let name = install.file_name().unwrap().to_str().unwrap();
        let (out, took) = xtask(&[
            "build-shim",
            "--backend",
            "rocshmem",
            "--arch",
            "gfx942",
            "--rocshmem-home",
            install.to_str().unwrap(),
            "--out-dir",
            root.join(format!("shim-{name}")).to_str().unwrap(),
        ]);
        let t = text(&out);
        if out.status.success() {
            eprintln!("[real-hipcc] {name}: this machine has it; the shim built ({took:.1} s)");
        } else {
            assert!(
                t.contains(fix)
                    && !t.contains("panicked")
                    && !t.contains("but the target was not found"),
                "{name}: the failure does not name {fix}:\n{t}"
            );
            eprintln!("[real-hipcc] {name}: refused ({took:.1} s):");
            for line in t
                .lines()
                .filter(|l| l.contains(fix) || l.starts_with("error:"))
            {
                eprintln!("    {}", line.trim());
            }
        }
    }
    // (d) Two installs used in turn from one out folder: each shim links the install it was
    // given (by `nm`, the stand-in's build symbol; by its stamp, the prefix and commit).
    alternate_installs(root, &repo, &pins, &prefix);
    // (e) An install whose library lacks the 3.x API fails the shim's link, naming it.
    without_the_3x_api(root, &repo, &pins);
}

/// Builds the stand-in without its unique-id API (STANDIN_WITHOUT_UNIQUEID: 3.x's header, a
/// library without those functions); the shim, linked with --no-undefined, must then fail at
/// build time, naming a missing symbol and the 3.x requirement.
fn without_the_3x_api(root: &Path, repo: &Path, pins: &Path) {
    let (out, _) = xtask(&[
        "build-rocshmem",
        "--arch",
        "gfx942",
        "--source",
        repo.to_str().unwrap(),
        "--pins",
        pins.to_str().unwrap(),
        "--out-dir",
        root.join("rocshmem").to_str().unwrap(),
        "--cmake-arg",
        "-DSTANDIN_WITHOUT_UNIQUEID=ON",
    ]);
    assert!(
        out.status.success(),
        "build-rocshmem failed:\n{}",
        text(&out)
    );
    let install = PathBuf::from(
        stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix("export ROCSHMEM_HOME="))
            .unwrap_or_else(|| panic!("no ROCSHMEM_HOME line:\n{}", text(&out))),
    );
    let (out, took) = xtask(&[
        "build-shim",
        "--backend",
        "rocshmem",
        "--arch",
        "gfx942",
        "--rocshmem-home",
        install.to_str().unwrap(),
        "--out-dir",
        root.join("shim-without-3x").to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(
        !out.status.success(),
        "the shim linked without the 3.x API:\n{t}"
    );
    let error = t
        .lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .unwrap_or(&t);
    for part in ["rocshmem_get_uniqueid", "does not define", "3.x or newer"] {
        assert!(error.contains(part), "`{part}` not in the error:\n{t}");
    }
    eprintln!(
        "[real-hipcc] install without the 3.x API: refused at link ({took:.1} s):\n    {error}"
    );
}

/// Builds install B (the stand-in with STANDIN_BUILD=b) beside A (`prefix`, built as "a"), then
/// the shim against A, B and A again in one out folder.
fn alternate_installs(root: &Path, repo: &Path, pins: &Path, a: &Path) {
    let (out, took) = xtask(&[
        "build-rocshmem",
        "--arch",
        ARCHS,
        "--source",
        repo.to_str().unwrap(),
        "--pins",
        pins.to_str().unwrap(),
        "--out-dir",
        root.join("rocshmem").to_str().unwrap(),
        "--cmake-arg",
        "-DSTANDIN_BUILD=b",
    ]);
    assert!(
        out.status.success(),
        "build-rocshmem b failed:\n{}",
        text(&out)
    );
    eprintln!("[real-hipcc] build-rocshmem of install b: {took:.1} s");
    let b = PathBuf::from(
        stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix("export ROCSHMEM_HOME="))
            .unwrap_or_else(|| panic!("no ROCSHMEM_HOME line:\n{}", text(&out))),
    );
    assert_ne!(a, b);
    let shim_out = root.join("shim-alternating");
    for (install, name, other) in [(a, "a", "b"), (&b, "b", "a"), (a, "a", "b")] {
        let (out, took) = xtask(&[
            "build-shim",
            "--backend",
            "rocshmem",
            "--arch",
            "gfx942",
            "--rocshmem-home",
            install.to_str().unwrap(),
            "--out-dir",
            shim_out.to_str().unwrap(),
        ]);
        let t = text(&out);
        assert!(
            out.status.success(),
            "build-shim against {name} failed:\n{t}"
        );
        let said = format!("(prefix {}", install.display());
        assert!(t.contains(&said), "`{said}` not in:\n{t}");
        let library = shim_out.join("lib/libsymmem_shim_rocshmem.so");
        let symbols = stdout(&output(
            std::path::Path::new("nm"),
            &[library.to_str().unwrap()],
        ));
        let has = |n: &str| {
            symbols
                .lines()
                .any(|l| l.ends_with(&format!("rocshmem_standin_build_{n}")))
        };
        assert!(
            has(name) && !has(other),
            "the shim built against {name} does not carry only {name}'s build symbol"
        );
        let stamp = std::fs::read_to_string(shim_out.join("symmem-shim-stamp.toml")).unwrap();
        assert!(stamp.contains(&said), "{stamp}");
        eprintln!("[real-hipcc] build-shim against install {name}: {took:.1} s, nm agrees");
    }
}
