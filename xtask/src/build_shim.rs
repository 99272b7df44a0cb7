//! `cargo xtask build-shim`: the GPU shim (one C ABI over NVSHMEM or rocSHMEM) as a shared
//! library that carries its own device link, built by the xtask's one CMake driver (as
//! build-rocshmem is), with CMake's output on stderr and in the build folder's log.

use crate::cmake::{self, Step};
use crate::project::{project_root, target_dir};
use crate::runner::StepError;
use crate::tools;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;
use symmem::{ProviderKind, format_elapsed};
use xshell::Shell;

/// Build the GPU shim library for one backend.
///
/// NVSHMEM: needs nvcc (CUDA >= 12) and NVSHMEM 3.x (include/, lib/ with libnvshmem_host.so.3
/// and libnvshmem_device.a); no GPU is needed to build. The pip wheels work: at the versions
/// of pins.toml [nvshmem], `source scripts/gpu/nvshmem-sdk.sh` installs them and sets
/// CUDACXX and NVSHMEM_HOME.
/// rocSHMEM: needs ROCm (HIP's clang and CMake packages), CMake >= 3.24, and the install made by
/// `cargo xtask build-rocshmem` (found through ROCSHMEM_HOME). ROCm is --rocm-path, else
/// $ROCM_PATH, else what `hipconfig --rocmpath` says (Debian/Ubuntu: /usr), else /opt/rocm; it
/// reaches CMake as -D definitions only (never export ROCM_PATH=/usr: Debian's clang then
/// looks for its device libraries there and fails).
///
/// The library exports only the functions of symmem_shim.h. It lands in
/// target/shim/<backend>/lib/ where `cargo xtask test --provider <backend>` finds it; its path
/// is the only line on stdout. CMake's output goes to stderr and to
/// target/shim/<backend>/build/symmem-build.log (build-rocshmem's CMake driver and log).
///
/// Examples:
///   NVSHMEM_HOME=.../nvidia/nvshmem cargo xtask build-shim --backend nvshmem --nvcc .../bin/nvcc
///   exports=$(cargo xtask build-rocshmem --arch gfx942) && eval "$exports"; cargo xtask build-shim --backend rocshmem --arch gfx942
///   lib=$(cargo xtask build-shim --backend rocshmem --arch gfx942,gfx90a --rocm-path /usr)
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Which SHMEM library to build against (a GPU provider).
    #[arg(long, value_parser = crate::project::gpu_provider())]
    backend: ProviderKind,
    /// GPU architectures, comma-separated: CUDA compute capabilities (default 90) or HIP
    /// targets (default gfx942).
    #[arg(long)]
    arch: Option<String>,
    /// nvcc to use (default: $CUDACXX, else nvcc on PATH, else $CUDA_HOME/bin/nvcc).
    #[arg(long, value_name = "PATH")]
    nvcc: Option<PathBuf>,
    /// NVSHMEM install with include/ and lib/ (default: $NVSHMEM_HOME).
    #[arg(long, value_name = "DIR")]
    nvshmem_home: Option<PathBuf>,
    /// rocSHMEM install prefix (default: $ROCSHMEM_HOME, as build-rocshmem prints).
    #[arg(long, value_name = "DIR")]
    rocshmem_home: Option<PathBuf>,
    /// The ROCm install (default: $ROCM_PATH, else `hipconfig --rocmpath`, else /opt/rocm).
    /// Given to CMake as -DROCM_PATH, -DCMAKE_HIP_COMPILER_ROCM_ROOT and on
    /// -DCMAKE_PREFIX_PATH; never exported to the compilers.
    #[arg(long, value_name = "DIR")]
    rocm_path: Option<PathBuf>,
    /// Where to build and install (default: target/shim/<backend>).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

fn from_env(given: Option<&Path>, vars: &[&str]) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(|| {
        vars.iter()
            .find_map(|v| std::env::var_os(v).filter(|x| !x.is_empty()))
            .map(PathBuf::from)
    })
}

/// Where ROCm is and how that was decided (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rocm {
    root: PathBuf,
    found: String,
    /// HIP's clang++ (`hipconfig --hipclangpath`, else `<root>/llvm/bin`), when found: CMake
    /// looks for it only through the hipconfig on PATH.
    hip_clang: Option<PathBuf>,
}

/// What `hipconfig <flag>` prints, if that is an existing folder.
fn hipconfig_dir(sh: &Shell, hipconfig: &Path, flag: &str) -> Option<PathBuf> {
    tools::hipconfig_dir(sh, hipconfig, flag)
        .ok()
        .filter(|dir| dir.is_dir())
}

/// The ROCm install for a rocSHMEM build, as build-rocshmem finds it ([`tools::find_rocm`]:
/// `--rocm-path`, else `$ROCM_PATH`, else what hipconfig reports, else /opt/rocm). `None` when
/// none of those exists: CMake then looks on its own, and says what it could not find.
fn rocm(sh: &Shell, given: Option<&Path>, s: &tools::Search) -> anyhow::Result<Option<Rocm>> {
    let Ok(found) = tools::find_rocm(sh, given, None, s)? else {
        return Ok(None);
    };
    let root = std::path::absolute(&found.path).unwrap_or(found.path);
    // This ROCm's own hipconfig, or the one that named it: another one on PATH may belong to
    // another install.
    let hip_clang = Some(root.join("bin/hipconfig"))
        .filter(|p| p.is_file())
        .into_iter()
        .chain(found.named_by)
        .find_map(|h| hipconfig_dir(sh, &h, "--hipclangpath"))
        .map(|dir| dir.join("clang++"))
        .filter(|p| p.is_file())
        .or_else(|| Some(root.join("llvm/bin/clang++")).filter(|p| p.is_file()));
    Ok(Some(Rocm {
        root,
        found: found.how,
        hip_clang,
    }))
}

/// Checks that `home` is a rocSHMEM install that CMake can find.
fn check_rocshmem_home(home: &Path) -> anyhow::Result<()> {
    let config = ["lib/cmake/rocshmem", "lib64/cmake/rocshmem"]
        .iter()
        .any(|d| home.join(d).join("rocshmem-config.cmake").is_file());
    if !config {
        bail!(
            "{} is not a rocSHMEM install (no lib/cmake/rocshmem/rocshmem-config.cmake): build \
             one with `cargo xtask build-rocshmem --arch <arch>` and pass the prefix it prints \
             (--rocshmem-home, or ROCSHMEM_HOME)",
            home.display()
        );
    }
    Ok(())
}

/// CMake definitions for the rocSHMEM backend. The ROCm location travels only here: a
/// definition reaches CMake's package lookups and its HIP compiler check, whereas an exported
/// ROCM_PATH also reaches clang, and Debian's clang then looks for its device libraries under
/// it (they are in /usr/lib/llvm-<N>/lib/clang/<N>/amdgcn/bitcode) and fails.
fn rocshmem_defines(home: &Path, rocm: Option<&Rocm>) -> Vec<(String, String)> {
    let mut prefix_path = home.display().to_string();
    let mut defines = Vec::new();
    if let Some(rocm) = rocm {
        let root = rocm.root.display().to_string();
        prefix_path.push(';');
        prefix_path.push_str(&root);
        defines.push(("ROCM_PATH".into(), root.clone()));
        defines.push(("CMAKE_HIP_COMPILER_ROCM_ROOT".into(), root));
        if let Some(clang) = &rocm.hip_clang {
            defines.push(("CMAKE_HIP_COMPILER".into(), clang.display().to_string()));
        }
    }
    defines.insert(0, ("CMAKE_PREFIX_PATH".into(), prefix_path));
    defines
}

/// The shim as a CMake project: built in `build_dir`, installed into `out`.
fn shim_project<'a>(
    cmake: &'a Path,
    generator: crate::tools::Generator,
    source: &'a Path,
    build_dir: &'a Path,
    out: &'a Path,
    defines: &'a [(String, String)],
) -> cmake::Project<'a> {
    cmake::Project {
        cmake,
        generator,
        source,
        build_dir,
        install_prefix: out,
        defines,
        jobs: None,
    }
}

/// Runs one CMake step with its output on stderr (stdout carries only the library's path).
fn run_step(driver: &cmake::Driver<'_>, step: Step, command: &[String]) -> Result<(), StepError> {
    let what = match step {
        Step::Configure => "configure",
        Step::Build => "build",
        Step::Install => "install",
    };
    eprintln!("[build-shim] {what}");
    let started = Instant::now();
    driver.run(step, command)?;
    eprintln!(
        "[build-shim] {what}: done in {}",
        format_elapsed(started.elapsed())
    );
    Ok(())
}

pub fn run(sh: &Shell, args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let backend = args.backend;
    let source = project_root().join("crates/symmem-shim-sys/shim");
    let out = std::path::absolute(
        args.out_dir
            .clone()
            .unwrap_or_else(|| target_dir().join("shim").join(backend.name())),
    )?;
    let mut defines: Vec<(String, String)> = vec![
        ("CMAKE_BUILD_TYPE".into(), "Release".into()),
        (cmake::SHIM_BACKEND_DEFINE.into(), backend.name().into()),
    ];
    if let Some(arch) = &args.arch {
        defines.push((cmake::SHIM_ARCHS_DEFINE.into(), arch.replace(',', ";")));
    }
    let mut rocm_path_exported = None;
    match backend {
        ProviderKind::Host => {
            bail!("the host provider has no shim: build-shim takes a GPU provider")
        }
        ProviderKind::Nvshmem => {
            let nvcc = tools::nvcc(args.nvcc.as_deref())?;
            let home = from_env(args.nvshmem_home.as_deref(), &["NVSHMEM_HOME"]).context(
                "NVSHMEM not found: pass --nvshmem-home or set NVSHMEM_HOME to the folder with \
                 include/nvshmem.h and lib/libnvshmem_host.so.3 (`source \
                 scripts/gpu/nvshmem-sdk.sh` fetches pins.toml's [nvshmem] version from PyPI \
                 and sets NVSHMEM_HOME)",
            )?;
            if !home.join("include/nvshmem.h").is_file() {
                bail!(
                    "{} has no include/nvshmem.h: point --nvshmem-home at an NVSHMEM install",
                    home.display()
                );
            }
            let home = std::path::absolute(&home).unwrap_or(home);
            // A toolkit root for CMake: the folder above nvcc's bin/.
            let root = nvcc
                .parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("/"))
                .to_path_buf();
            defines.push(("CMAKE_CUDA_COMPILER".into(), nvcc.display().to_string()));
            defines.push(("CUDAToolkit_ROOT".into(), root.display().to_string()));
            defines.push(("NVSHMEM_HOME".into(), home.display().to_string()));
        }
        ProviderKind::Rocshmem => {
            let home = from_env(args.rocshmem_home.as_deref(), &["ROCSHMEM_HOME"]).context(
                "rocSHMEM not found: run `eval \"$(cargo xtask build-rocshmem --arch gfx942)\"` \
                 first, or pass --rocshmem-home",
            )?;
            let home = std::path::absolute(&home).unwrap_or(home);
            check_rocshmem_home(&home)?;
            let rocm = rocm(
                sh,
                args.rocm_path.as_deref(),
                &tools::Search::from_process(),
            )?;
            match &rocm {
                Some(r) => eprintln!(
                    "ROCm    {} ({}); HIP clang: {}",
                    r.root.display(),
                    r.found,
                    r.hip_clang
                        .as_deref()
                        .map_or_else(|| "left to CMake".to_string(), |c| c.display().to_string())
                ),
                None => eprintln!(
                    "ROCm    not found (no --rocm-path, $ROCM_PATH, hipconfig or /opt/rocm): \
                     left to CMake"
                ),
            }
            rocm_path_exported = std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty());
            defines.extend(rocshmem_defines(&home, rocm.as_ref()));
        }
    }

    // The inputs are checked first: their errors are the likelier ones, and need no tools.
    let cmake = tools::cmake(sh)?;
    let generator = tools::generator()?;

    let build_dir = out.join("build");
    std::fs::create_dir_all(&build_dir)
        .with_context(|| format!("creating {}", build_dir.display()))?;
    eprintln!(
        "building the {} shim from {} in {} ...",
        backend.name(),
        source.display(),
        build_dir.display()
    );
    let steps = shim_project(&cmake, generator, &source, &build_dir, &out, &defines).steps();
    let driver = cmake::Driver::new(sh, build_dir.join("symmem-build.log"), true)?;
    let failed = |what: &str, err: StepError| {
        let StepError::Failed { status, log, .. } = err else {
            return anyhow::Error::new(err);
        };
        let mut fix = format!(
            "CMake's messages above (also in {}) say what failed; fix that and run the same \
             command again (delete {} to start over)",
            log.display(),
            build_dir.display()
        );
        if let Some(value) = &rocm_path_exported {
            fix.push_str(&format!(
                ". Note: ROCM_PATH={} is exported; Debian's clang then looks for its device \
                 libraries there: unset it and pass --rocm-path instead",
                value.to_string_lossy()
            ));
        }
        anyhow::anyhow!(
            "{what} the {} shim failed ({status}): {fix}",
            backend.name()
        )
    };
    run_step(&driver, Step::Configure, &steps.configure).map_err(|e| failed("configuring", e))?;
    run_step(&driver, Step::Build, &steps.build).map_err(|e| failed("building", e))?;
    run_step(&driver, Step::Install, &steps.install).map_err(|e| failed("installing", e))?;
    let library = out
        .join("lib")
        .join(backend.shim_library().unwrap_or_default());
    if !library.is_file() {
        bail!(
            "CMake finished but {} is missing: delete {} and run again",
            library.display(),
            build_dir.display()
        );
    }
    eprintln!(
        "built {} in {}",
        library.display(),
        format_elapsed(started.elapsed())
    );
    println!("{}", library.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<'a>(args: impl Iterator<Item = &'a std::ffi::OsStr>) -> Vec<String> {
        args.map(|a| a.to_string_lossy().into_owned()).collect()
    }

    /// The ROCm location reaches CMake as definitions, and nothing is added to the environment
    /// of CMake (and so of the compilers it runs).
    #[test]
    fn rocm_goes_to_cmake_as_definitions_only() {
        let rocm = Rocm {
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
            [("CMAKE_PREFIX_PATH".to_string(), "/prefix/rocshmem".into())]
        );
    }

    #[test]
    fn missing_rocm_and_rocshmem_name_the_fix() {
        let sh = Shell::new().unwrap();
        let search = tools::Search::from_process();
        let e = rocm(&sh, Some(Path::new("/nonexistent/rocm")), &search)
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
        std::fs::write(&clang, "").unwrap();
        let found = rocm(
            &Shell::new().unwrap(),
            Some(dir.path()),
            &tools::Search::from_process(),
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
        std::fs::write(&clang, "").unwrap();
        let hipconfig = dir.path().join("bin/hipconfig");
        std::fs::create_dir_all(hipconfig.parent().unwrap()).unwrap();
        let body = format!(
            "#!/bin/sh\ncase \"$1\" in\n  --rocmpath) printf %s '{}' ;;\n  \
             --hipclangpath) printf %s '{}' ;;\n  *) exit 2 ;;\nesac\n",
            root.display(),
            clang.parent().unwrap().display()
        );
        // Written by a child, so no thread of this process holds it open when another test
        // forks ("Text file busy").
        let sh = Shell::new().unwrap();
        let write = "cat > \"$1\" && chmod 755 \"$1\"";
        xshell::cmd!(sh, "sh -c {write} sh {hipconfig}")
            .quiet()
            .stdin(body)
            .run()
            .unwrap();
        let search = |path: Vec<PathBuf>| tools::Search {
            rocm_path_env: None,
            hipcc_env: None,
            path,
            default_rocm: dir.path().join("opt/rocm"),
        };
        let found = rocm(&sh, None, &search(vec![dir.path().join("bin")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            found,
            Rocm {
                root: root.clone(),
                found: format!("from `{} --rocmpath`", hipconfig.display()),
                hip_clang: Some(clang),
            }
        );
        assert_eq!(rocm(&sh, None, &search(vec![])).unwrap(), None);
    }
}
