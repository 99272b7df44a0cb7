//! The one CMake driver, for rocSHMEM and for the shim: a project's configure, build and install
//! command lines, and running them with one log, one progress display and one error handling.
//!
//! CMake runs as plain processes rather than through the `cmake` crate: that crate is made for
//! build scripts (it panics on failure, prints `cargo:` lines on stdout and adds compiler flags
//! of its own), while these commands need CMake's output line by line for progress and a log,
//! and clean errors that name the fix.

use crate::runner::{self, Interrupt, Output, StepError};
use crate::tools::Generator;
use std::path::{Path, PathBuf};
use xshell::Shell;

/// The shim's CMake cache variables (`-D` names its CMakeLists.txt reads): which SHMEM library
/// it builds against, and the GPU architectures. CMake names, not symmem settings: no process
/// reads them from its environment, so they are named here once (the settings tidy test
/// allows exactly these two, here).
pub const SHIM_BACKEND_DEFINE: &str = "SYMMEM_SHIM_BACKEND";
pub const SHIM_ARCHS_DEFINE: &str = "SYMMEM_SHIM_ARCHS";

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
    interrupt: Interrupt,
}

impl<'a> Driver<'a> {
    /// `echo`: CMake's output also goes to stderr as it comes (build-shim); without it, the
    /// build step shows a progress bar and a failure shows the log's last lines (rocSHMEM).
    pub fn new(sh: &'a Shell, log: PathBuf, echo: bool) -> anyhow::Result<Self> {
        Ok(Self {
            sh,
            log,
            echo,
            interrupt: Interrupt::install()?,
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
}
