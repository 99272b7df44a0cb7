//! The shim build's tests: its stamp read back, its key, its failures' messages, and how it
//! finds ROCm.

use super::key::{Key, SHIM_STAMP};
use super::nvshmem::nvshmem_library;
use super::rocshmem::{check_rocshmem_home, rocshmem_defines, rocshmem_library};
use super::setup::Setup;
use super::steps::{shim_project, step_failed, undefined_symbols};
use super::{ProviderKind, installed};
use crate::runner::StepError;
use crate::{cmake, rocm};
use std::path::{Path, PathBuf};
use xshell::Shell;

/// What a build's stamp says is read back as it was built: backend, targets (the default
/// when none were given), NVSHMEM's version; a folder without a stamp or library names
/// the build to run.
#[test]
fn an_installed_shim_is_read_back_from_its_stamp() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("nvshmem");
    std::fs::create_dir_all(home.join("include/non_abi")).unwrap();
    std::fs::write(
        home.join("include/non_abi/nvshmem_version.h"),
        "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 4\n\
         #define NVSHMEM_VENDOR_PATCH_VERSION 5\n",
    )
    .unwrap();
    let library = nvshmem_library(&home);
    let out = dir.path().join("out");
    let e = installed(&out).unwrap_err().to_string();
    assert!(e.contains("cargo xtask build-shim --backend"), "{e}");
    let stamp = |defines: &[(String, String)]| {
        let cmake = Path::new("/usr/bin/cmake");
        let generator = crate::tools::Generator::Ninja;
        Key::new(cmake, generator, defines, &library, "d".into(), vec![]).stamp(&library)
    };
    let backend = (
        cmake::SHIM_BACKEND_DEFINE.to_string(),
        "nvshmem".to_string(),
    );
    std::fs::create_dir_all(out.join("lib")).unwrap();
    std::fs::write(out.join(SHIM_STAMP), stamp(std::slice::from_ref(&backend))).unwrap();
    let e = installed(&out).unwrap_err().to_string();
    assert!(e.contains("libsymmem_shim_nvshmem.so is missing"), "{e}");
    std::fs::write(out.join("lib/libsymmem_shim_nvshmem.so"), "").unwrap();
    let found = installed(&out).unwrap();
    assert_eq!(found.backend, ProviderKind::Nvshmem);
    assert_eq!(found.targets.to_string(), "90");
    assert_eq!(found.shmem_version.as_deref(), Some("3.4.5"));
    assert_eq!(found.shmem_commit, None);
    let archs = (cmake::SHIM_ARCHS_DEFINE.to_string(), "90;100a".to_string());
    std::fs::write(out.join(SHIM_STAMP), stamp(&[backend, archs])).unwrap();
    assert_eq!(installed(&out).unwrap().targets.to_string(), "100a,90");
}

/// HIPFLAGS (and the rest CMake reads at first configure) is part of the build folder's
/// key: a kept folder configured with other flags is not reused.
#[test]
fn configure_environment_is_part_of_the_key() {
    let library = rocshmem_library(Path::new("/prefix/a"), None);
    let key = |environment: Vec<(String, String)>| {
        let generator = crate::tools::Generator::Ninja;
        let cmake = Path::new("/usr/bin/cmake");
        Key::new(cmake, generator, &[], &library, "d".into(), environment)
    };
    let plain = key(vec![]);
    let flagged = key(vec![("env.HIPFLAGS".into(), "-g".into())]);
    assert_ne!(
        plain.build_dir(Path::new("/o")),
        flagged.build_dir(Path::new("/o"))
    );
    assert!(
        flagged
            .stamp(&library)
            .contains("\"env.HIPFLAGS\" = \"-g\"")
    );
}

/// A link that failed on symbols the install lacks names them and the 3.x requirement;
/// only the last command's output counts (the log keeps earlier runs).
#[test]
fn a_link_failing_on_missing_entry_points_names_them_and_3x() {
    let gnu = "/usr/bin/ld: rocshmem_shim.hip.o: in function `symmem_shim_init':\n\
               rocshmem_shim.hip:(.text+0x4d): undefined reference to \
               `rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*)'\n\
               rocshmem_shim.hip:(.text+0x9a): undefined reference to \
               `rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*)'\n";
    let lld = "ld.lld: error: undefined symbol: rocshmem::rocshmem_init_attr(unsigned int, \
               rocshmem::rocshmem_init_attr_t*)\n>>> referenced by rocshmem_shim.hip\n";
    assert_eq!(
        undefined_symbols(&format!("{gnu}{lld}")),
        [
            "rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*)",
            "rocshmem::rocshmem_init_attr(unsigned int, rocshmem::rocshmem_init_attr_t*)"
        ]
    );
    assert!(undefined_symbols("error: 'mpi.h' file not found").is_empty());

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("symmem-build.log");
    std::fs::write(
        &log,
        format!("$ cmake --build old\n{lld}$ cmake --build b\n{gnu}collect2: error\n"),
    )
    .unwrap();
    let setup = Setup {
        backend: ProviderKind::Rocshmem,
        source: "/src".into(),
        out: dir.path().to_path_buf(),
        defines: vec![],
        library: rocshmem_library(Path::new("/prefix/a"), None),
        rocm_path_exported: None,
    };
    let status = std::os::unix::process::ExitStatusExt::from_raw(1 << 8);
    let err = StepError::Failed {
        command: "cmake --build b".into(),
        status,
        log: log.clone(),
        tail: None,
    };
    let e = step_failed(&setup, dir.path(), "building", err).to_string();
    for part in [
        "linking the rocshmem shim failed: rocSHMEM at /prefix/a",
        "does not define rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*) (see",
        "needs rocSHMEM 3.x or newer",
        "cargo xtask build-rocshmem",
    ] {
        assert!(e.contains(part), "`{part}` not in {e}");
    }
    assert!(
        !e.contains("init_attr(unsigned"),
        "an earlier run's line: {e}"
    );
}

fn text<'a>(args: impl Iterator<Item = &'a std::ffi::OsStr>) -> Vec<String> {
    args.map(|a| a.to_string_lossy().into_owned()).collect()
}

/// The ROCm location reaches CMake as definitions, and nothing is added to the environment
/// of CMake (and so of the compilers it runs).
#[test]
fn rocm_goes_to_cmake_as_definitions_only() {
    let rocm = rocm::HipRoot {
        root: "/usr".into(),
        found: "from `hipconfig --rocmpath`".into(),
        hip_clang: Some("/usr/lib/llvm-21/bin/clang++".into()),
    };
    let defines = rocshmem_defines(Path::new("/prefix/rocshmem"), Some(&rocm));
    let steps = shim_project(
        Path::new("/usr/bin/cmake"),
        crate::tools::Generator::Ninja,
        Path::new("/src/shim"),
        Path::new("/out/build"),
        Path::new("/out"),
        &defines,
    )
    .steps();
    // As the driver starts them: through the one Shell, which adds no environment.
    let sh = Shell::new().unwrap();
    let [configure, build, install] = [&steps.configure, &steps.build, &steps.install]
        .map(|step| crate::runner::command(&sh, step));
    let args = text(configure.get_args());
    for expected in [
        "-DCMAKE_PREFIX_PATH=/prefix/rocshmem;/usr",
        "-Drocshmem_DIR=/prefix/rocshmem/lib/cmake/rocshmem",
        "-DROCM_PATH=/usr",
        "-DCMAKE_HIP_COMPILER_ROCM_ROOT=/usr",
        "-DCMAKE_HIP_COMPILER=/usr/lib/llvm-21/bin/clang++",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected}: {args:?}");
    }
    for step in [&configure, &build, &install] {
        assert_eq!(step.get_envs().count(), 0, "{:?}", step.get_envs());
    }
    assert_eq!(
        text(install.get_args()),
        ["--install", "/out/build", "--prefix", "/out"]
    );
    // Without a ROCm found, CMake looks itself: only rocSHMEM's prefix is given.
    let defines = rocshmem_defines(Path::new("/prefix/rocshmem"), None);
    assert_eq!(
        defines,
        [
            ("CMAKE_PREFIX_PATH".to_string(), "/prefix/rocshmem".into()),
            (
                "rocshmem_DIR".to_string(),
                "/prefix/rocshmem/lib/cmake/rocshmem".into()
            )
        ]
    );
}

#[test]
fn missing_rocm_and_rocshmem_name_the_fix() {
    let sh = Shell::new().unwrap();
    let search = rocm::Search::from_process();
    let e = rocm::hip_root(&sh, Some(Path::new("/nonexistent/rocm")), &search)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no ROCm at /nonexistent/rocm (from --rocm-path)")
            && e.contains("pass --rocm-path DIR"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = check_rocshmem_home(dir.path()).unwrap_err().to_string();
    assert!(e.contains("cargo xtask build-rocshmem"), "{e}");
}

#[test]
fn a_given_rocm_without_hipconfig_uses_its_llvm() {
    let dir = tempfile::tempdir().unwrap();
    let clang = dir.path().join("llvm/bin/clang++");
    std::fs::create_dir_all(clang.parent().unwrap()).unwrap();
    // Looked at, never run: an executable file is what counts as a compiler.
    std::fs::write(&clang, "").unwrap();
    std::fs::set_permissions(&clang, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let found = rocm::hip_root(
        &Shell::new().unwrap(),
        Some(dir.path()),
        &rocm::Search::from_process(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.root, dir.path());
    // Not the clang of a hipconfig on PATH, which may belong to another ROCm.
    assert_eq!(found.hip_clang.as_deref(), Some(clang.as_path()));
}

/// Found as build-rocshmem finds it: the hipconfig on PATH names the ROCm (Debian's /usr
/// has no bin/hipconfig of its own here) and, asked again, HIP's clang; with nothing to
/// find, CMake is left to look.
#[test]
fn rocm_found_by_hipconfig_gives_its_clang_and_none_is_left_to_cmake() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("usr");
    let clang = dir.path().join("llvm-21/bin/clang++");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(clang.parent().unwrap()).unwrap();
    // Looked at, never run: an executable file is what counts as a compiler.
    std::fs::write(&clang, "").unwrap();
    std::fs::set_permissions(&clang, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let hipconfig = dir.path().join("bin/hipconfig");
    let body = format!(
        "#!/bin/sh\ncase \"$1\" in\n  --rocmpath) printf %s '{}' ;;\n  \
         --hipclangpath) printf %s '{}' ;;\n  *) exit 2 ;;\nesac\n",
        root.display(),
        clang.parent().unwrap().display()
    );
    symmem_test_support::command::write_script(&hipconfig, &body);
    let sh = Shell::new().unwrap();
    let search = |path: Vec<PathBuf>| rocm::Search {
        rocm_path_env: None,
        hipcc_env: None,
        path: symmem_process::SearchPath::dirs(path),
        default_rocm: dir.path().join("opt/rocm"),
    };
    let found = rocm::hip_root(&sh, None, &search(vec![dir.path().join("bin")]))
        .unwrap()
        .unwrap();
    assert_eq!(
        found,
        rocm::HipRoot {
            root: root.clone(),
            found: format!("from `{} --rocmpath`", hipconfig.display()),
            hip_clang: Some(clang),
        }
    );
    // Where the ROCm has its own llvm/bin, that comes first, as for rocSHMEM's LLVM tools.
    let own = root.join("llvm/bin/clang++");
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, "").unwrap();
    std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let found = rocm::hip_root(&sh, None, &search(vec![dir.path().join("bin")]))
        .unwrap()
        .unwrap();
    assert_eq!(found.hip_clang, Some(own));
    assert_eq!(rocm::hip_root(&sh, None, &search(vec![])).unwrap(), None);
}
