//! The one CMake driver, for rocSHMEM and for the shim: a project's configure, build and install
//! command lines, and running them with one log, one progress display and one error handling.
//!
//! CMake runs as plain processes rather than through the `cmake` crate: that crate is made for
//! build scripts (it panics on failure, prints `cargo:` lines on stdout and adds compiler flags
//! of its own), while these commands need CMake's output line by line for progress and a log,
//! and clean errors that name the fix.

use crate::runner::{self, Output, StepError};
use crate::tools::Generator;
use std::path::{Path, PathBuf};
use symmem_process::SignalGuard;
use xshell::Shell;

/// The shim's CMake cache variables (`-D` names its CMakeLists.txt reads): which SHMEM library
/// it builds against, and the GPU architectures. CMake names, not symmem settings: no process
/// reads them from its environment, so they are named here once (the settings tidy test
/// allows exactly these two, here).
pub const SHIM_BACKEND_DEFINE: &str = "SYMMEM_SHIM_BACKEND";
pub const SHIM_ARCHS_DEFINE: &str = "SYMMEM_SHIM_ARCHS";

/// Environment variables that CMake (or the compilers it checks) reads when it first
/// configures a build tree: compilers, flags, launchers, a toolchain file. A kept tree keeps
/// what its first configure recorded in its cache and ignores them later, so each set one is
/// part of a build's key (build-shim's build folder, build-rocshmem's hash).
pub const CONFIGURE_ENVIRONMENT: &[&str] = &[
    "CC",
    "CXX",
    "HIPCXX",
    "CUDACXX",
    "CUDAHOSTCXX",
    "CFLAGS",
    "CXXFLAGS",
    "HIPFLAGS",
    "CUDAFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "CMAKE_TOOLCHAIN_FILE",
    "CMAKE_BUILD_TYPE",
    "CMAKE_C_COMPILER_LAUNCHER",
    "CMAKE_CXX_COMPILER_LAUNCHER",
    "CMAKE_HIP_COMPILER_LAUNCHER",
    "CMAKE_CUDA_COMPILER_LAUNCHER",
    "CMAKE_C_LINKER_LAUNCHER",
    "CMAKE_CXX_LINKER_LAUNCHER",
    "CMAKE_HIP_LINKER_LAUNCHER",
    "CMAKE_CUDA_LINKER_LAUNCHER",
];

/// The variables of [`CONFIGURE_ENVIRONMENT`] that `lookup` finds set (and not empty), as
/// `("env.NAME", value)` inputs of a build's key.
pub fn configure_environment(lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    CONFIGURE_ENVIRONMENT
        .iter()
        .filter_map(|name| {
            let value = lookup(name).filter(|v| !v.is_empty())?;
            Some((format!("env.{name}"), value))
        })
        .collect()
}

/// [`configure_environment`] of this process.
pub fn configure_environment_of_process() -> Vec<(String, String)> {
    configure_environment(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
}

/// A CMake project to configure, build and install.
pub struct Project<'a> {
    pub cmake: &'a Path,
    pub generator: Generator,
    pub source: &'a Path,
    pub build_dir: &'a Path,
    /// Where `cmake --install` writes.
    pub install_prefix: &'a Path,
    /// `-DNAME=VALUE` for the configure step, in this order.
    pub defines: &'a [(String, String)],
    /// `--parallel N` for the build step; CMake's default without.
    pub jobs: Option<usize>,
}

/// The three command lines of a [`Project`], program first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steps {
    pub configure: Vec<String>,
    pub build: Vec<String>,
    pub install: Vec<String>,
}

impl Project<'_> {
    pub fn steps(&self) -> Steps {
        let cmake = self.cmake.display().to_string();
        let build_dir = self.build_dir.display().to_string();
        let mut configure = vec![
            cmake.clone(),
            "-S".into(),
            self.source.display().to_string(),
            "-B".into(),
            build_dir.clone(),
            "-G".into(),
            self.generator.cmake_name().into(),
        ];
        configure.extend(self.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        let mut build = vec![cmake.clone(), "--build".into(), build_dir.clone()];
        if let Some(jobs) = self.jobs {
            build.extend(["--parallel".into(), jobs.to_string()]);
        }
        let install = vec![
            cmake,
            "--install".into(),
            build_dir,
            "--prefix".into(),
            self.install_prefix.display().to_string(),
        ];
        Steps {
            configure,
            build,
            install,
        }
    }
}

/// Why the CMake cache kept in `build_dir` no longer fits, if it does not: it was made from
/// another source folder, or it names files or folders that are gone (e.g. an MPI that was
/// installed where it was configured, or in another root sharing this out folder). What is
/// installed on the machine is not part of a build's hash, so a kept tree can outlive it;
/// CMake would then fail with "Imported target ... includes non-existent path" and no hint.
pub fn stale_cache(build_dir: &Path, source: &Path) -> Option<String> {
    let text = std::fs::read_to_string(build_dir.join("CMakeCache.txt")).ok()?;
    let mut gone = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.starts_with("//") {
            continue;
        }
        let Some((name_type, value)) = line.split_once('=') else {
            continue;
        };
        let Some((name, kind)) = name_type.split_once(':') else {
            continue;
        };
        if name == "CMAKE_HOME_DIRECTORY" && Path::new(value) != source {
            return Some(format!(
                "it was configured from {value}, not {}",
                source.display()
            ));
        }
        // Where the tree installs is an output, made only when the build is published: its
        // absence never makes the tree wrong.
        if (kind != "FILEPATH" && kind != "PATH") || name == "CMAKE_INSTALL_PREFIX" {
            continue;
        }
        let missing = value
            .split(';')
            .filter(|v| v.starts_with('/') && !v.ends_with("-NOTFOUND"))
            .find(|v| !Path::new(v).exists());
        if let Some(path) = missing {
            gone.push(format!("{name} = {path}"));
        }
    }
    (!gone.is_empty()).then(|| {
        format!(
            "its cache names what this machine no longer has: {}",
            gone.join(", ")
        )
    })
}

/// Removes a kept build tree whose CMake cache no longer fits (see [`stale_cache`]), saying
/// why; the next configure starts over.
pub fn drop_stale_tree(build_dir: &Path, source: &Path) -> anyhow::Result<()> {
    let Some(why) = stale_cache(build_dir, source) else {
        return Ok(());
    };
    eprintln!(
        "note: the kept build folder {} does not fit this machine ({why}): configuring it anew",
        build_dir.display()
    );
    std::fs::remove_dir_all(build_dir).map_err(|e| {
        anyhow::anyhow!(
            "removing the stale build folder {}: {e}; remove it yourself and run again",
            build_dir.display()
        )
    })?;
    std::fs::create_dir_all(build_dir)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", build_dir.display()))
}

/// Which step runs: the build step shows progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Configure,
    Build,
    Install,
}

/// Runs CMake steps: every step's output goes to one log; Ctrl-C stops the step.
pub struct Driver<'a> {
    sh: &'a Shell,
    log: PathBuf,
    echo: bool,
    interrupt: SignalGuard,
}

impl<'a> Driver<'a> {
    /// `echo`: CMake's output also goes to stderr as it comes (build-shim); without it, the
    /// build step shows a progress bar and a failure shows the log's last lines (rocSHMEM).
    pub fn new(sh: &'a Shell, log: PathBuf, echo: bool) -> anyhow::Result<Self> {
        Ok(Self {
            sh,
            log,
            echo,
            interrupt: SignalGuard::install()?,
        })
    }

    pub fn run(&self, step: Step, command: &[String]) -> Result<(), StepError> {
        let output = match (self.echo, step) {
            (true, _) => Output::Echo,
            (false, Step::Build) => Output::Bar,
            (false, _) => Output::Log,
        };
        runner::run(self.sh, command, &self.log, output, &self.interrupt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_cmake_command_lines() {
        let defines = [("A".to_string(), "1".to_string())];
        let project = Project {
            cmake: Path::new("/usr/bin/cmake"),
            generator: Generator::Makefiles,
            source: Path::new("/src"),
            build_dir: Path::new("/b"),
            install_prefix: Path::new("/p"),
            defines: &defines,
            jobs: None,
        };
        let steps = project.steps();
        assert_eq!(
            steps.configure,
            [
                "/usr/bin/cmake",
                "-S",
                "/src",
                "-B",
                "/b",
                "-G",
                "Unix Makefiles",
                "-DA=1"
            ]
        );
        assert_eq!(steps.build, ["/usr/bin/cmake", "--build", "/b"]);
        assert_eq!(
            steps.install,
            ["/usr/bin/cmake", "--install", "/b", "--prefix", "/p"]
        );
        let steps = Project {
            jobs: Some(8),
            ..project
        }
        .steps();
        assert_eq!(steps.build[3..], ["--parallel", "8"]);
    }

    /// A cache that names a path this machine lacks (an MPI installed where the tree was
    /// configured), or another source folder, is stale; one whose paths exist, or are
    /// NOTFOUND, is kept.
    #[test]
    fn a_cache_naming_what_is_gone_is_stale_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let build = dir.path().join("build");
        let source = dir.path().join("src");
        std::fs::create_dir_all(&build).unwrap();
        std::fs::create_dir_all(&source).unwrap();
        assert_eq!(
            stale_cache(&build, &source),
            None,
            "no cache: nothing stale"
        );
        let fine = format!(
            "# This is the CMakeCache file.\n//A comment\nCMAKE_HOME_DIRECTORY:INTERNAL={}\n\
             CMAKE_CXX_COMPILER:FILEPATH=/bin/sh\nMPI_CXX_HEADER_DIR:PATH=MPI_CXX_HEADER_DIR-NOTFOUND\n\
             GPU_TARGETS:STRING=/not/a/path\n",
            source.display()
        );
        std::fs::write(build.join("CMakeCache.txt"), &fine).unwrap();
        assert_eq!(stale_cache(&build, &source), None);
        // The prefix it installs to exists only once the build is published.
        let unpublished = format!("{fine}CMAKE_INSTALL_PREFIX:PATH=/nonexistent/prefix\n");
        std::fs::write(build.join("CMakeCache.txt"), &unpublished).unwrap();
        assert_eq!(stale_cache(&build, &source), None);
        let mpi = fine.replace(
            "MPI_CXX_HEADER_DIR-NOTFOUND",
            "/usr/lib/x86_64-linux-gnu/openmpi/include;/nonexistent/openmpi/include",
        );
        std::fs::write(build.join("CMakeCache.txt"), &mpi).unwrap();
        std::fs::write(build.join("kept.o"), "").unwrap();
        let why = stale_cache(&build, &source).unwrap();
        assert!(
            why.contains("MPI_CXX_HEADER_DIR = /") && why.contains("no longer has"),
            "{why}"
        );
        drop_stale_tree(&build, &source).unwrap();
        assert!(build.is_dir() && !build.join("kept.o").exists());
        std::fs::write(build.join("CMakeCache.txt"), &fine).unwrap();
        let other = dir.path().join("other-src");
        assert!(
            stale_cache(&build, &other)
                .unwrap()
                .contains("it was configured from")
        );
    }
}
