//! The container engines that build, publish, pull, run and bench the images. One file per
//! engine (`docker.rs`, `podman.rs`, `apptainer.rs`), each one [`Spec`]: the engine's facts as
//! data. What they share is written once here: finding the program, checking that it runs,
//! telling podman-docker's `docker` from Docker's, a run's arguments, a registry's flags and
//! login. Commands ask [`Engine::spec`] and never match on the engine; what differs by image
//! format (an OCI store, SIF files) they match on [`ImageFormat`].
//!
//! A new engine is one more file and one more variant of [`Engine`] with its arm in
//! [`Engine::spec`]; `fourth.rs`, an engine that exists only in tests, shows it.

pub mod apptainer;
mod docker;
#[cfg(test)]
mod fourth;
mod podman;

use anyhow::{Context, bail};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// The container engines: the one vocabulary of `images build|publish|bench` and `test
/// --container` (`--engine`, `--container` and the bench's flags take their names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Docker Engine's `docker` CLI.
    Docker,
    /// Podman (`podman`, or podman-docker's `docker`, which is recognised as Podman).
    Podman,
    /// Apptainer: SIF images, kept in target/images/.
    Apptainer,
    /// An engine that exists only in tests: a new engine needs nothing outside its file. Not
    /// offered on the command line (nor in [`Engine::all`]), so that the flags' lists are the
    /// same in tests.
    #[cfg(test)]
    #[value(skip)]
    Fourth,
}

/// What an engine's images are: OCI images in the engine's store, or SIF files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    Oci,
    Sif,
}

/// One engine's facts: what the commands ask of it.
#[derive(Debug)]
pub struct Spec {
    /// Its name in reports and on the command line, and its program on PATH.
    pub name: &'static str,
    /// Its name in prose: "Docker".
    pub title: &'static str,
    pub format: ImageFormat,
    /// How it runs a command in an image.
    pub run: Run,
    /// The arguments that print its version (the bench times it alone, and the answer says
    /// whose CLI a program is).
    pub version: &'static [&'static str],
    /// The arguments that check it can run anything (Docker: that its daemon answers).
    pub check: &'static [&'static str],
    /// When the check fails for want of a daemon: what to do about it (else the program itself
    /// does not run).
    pub daemon: Option<&'static str>,
    /// How to install it.
    pub install: &'static str,
    /// How to log in to a registry (`{host}`: the registry's host[:port]).
    pub login: &'static str,
    /// Its push and pull flags for a registry on loopback, spoken to over plain HTTP.
    pub loopback: &'static [&'static str],
    /// `PROGRAM build` flags for the images' container files.
    pub build_flags: &'static [&'static str],
    /// How the Debian-base image gets to it (its base is imported into Docker's store).
    pub debian: Debian,
    /// What frees the disk space its images took.
    pub prune: &'static str,
    /// What lists what it still runs.
    pub running: &'static str,
    /// Another engine's program that this one is installed as too (podman-docker's `docker`).
    pub poses_as: Option<PosesAs>,
    /// What running the warm matrix in its image may add over bare (issue 25, item 3), in
    /// seconds: the goal `images bench` reports against.
    pub bench_goal: f64,
    /// The help of `images bench --NAME PATH`.
    pub bench_help: &'static str,
}

/// How an engine runs a command in an image: `PROGRAM SUBCOMMAND FLAGS [GPU] LATE BINDS
/// [WORKDIR] IMAGE COMMAND`.
#[derive(Debug)]
pub struct Run {
    pub subcommand: &'static [&'static str],
    /// Flags for every run.
    pub flags: &'static [&'static str],
    /// Flags added for GPU providers.
    pub gpu: &'static [&'static str],
    /// Flags after those.
    pub late: &'static [&'static str],
    /// The flag that mounts a host file read-only: `FLAG=HOST:INSIDE:ro`.
    pub bind: &'static str,
    /// The flag that sets the folder the command starts in (the image's workdir), where the
    /// image's own is not used.
    pub workdir: Option<&'static str>,
}

/// How the Debian-base image gets to an engine.
#[derive(Debug)]
pub enum Debian {
    /// `cargo xtask images build --engine NAME` builds it: `PROGRAM build FLAGS BUILD_FLAGS`.
    Built { flags: &'static [&'static str] },
    /// Docker builds it (`cargo xtask images build`), then this command copies it in
    /// (`{image}`: the image).
    Loaded { from_docker: &'static str },
}

/// An engine's CLI installed under another engine's program name.
#[derive(Debug)]
pub struct PosesAs {
    /// The program it is installed as.
    pub program: &'static str,
    /// The package that installs it so.
    pub package: &'static str,
}

/// The engines CI publishes the images with, one per image format: `images refs` prints
/// their references and run flags.
pub const PUBLISHED: [Engine; 2] = [Engine::Docker, Engine::Apptainer];

impl Engine {
    /// Every engine, in the command line's order.
    pub fn all() -> &'static [Engine] {
        <Engine as clap::ValueEnum>::value_variants()
    }

    /// Its facts.
    pub fn spec(self) -> &'static Spec {
        match self {
            Engine::Docker => &docker::SPEC,
            Engine::Podman => &podman::SPEC,
            Engine::Apptainer => &apptainer::SPEC,
            #[cfg(test)]
            Engine::Fourth => &fourth::SPEC,
        }
    }

    /// Its name in reports and on the command line, and its program on PATH.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn format(self) -> ImageFormat {
        self.spec().format
    }

    /// Finds its program on `path` (a PATH value), or says how to get it.
    pub fn locate(self, path: Option<&OsStr>) -> anyhow::Result<PathBuf> {
        let program = self.name();
        let search = symmem_process::SearchPath::new(path.unwrap_or_default());
        symmem_process::find_program(program, &search, self.spec().install).with_context(|| {
            format!(
                "no container engine: `{program}` is not on PATH, so the prebuilt image cannot \
                 be run here. To get one: {}. Without containers, build rocSHMEM on this \
                 machine with `cargo xtask build-rocshmem --arch gfx942` and run `cargo xtask \
                 test --provider rocshmem`",
                self.spec().install
            )
        })
    }

    /// The engine whose CLI `exe`, found as this engine's program, really is: podman-docker's
    /// `docker` is Podman. The one place that tells them apart.
    pub fn actual(self, sh: &Shell, exe: &Path) -> Engine {
        let posing = |other: &Engine| {
            other
                .spec()
                .poses_as
                .as_ref()
                .is_some_and(|p| p.program == self.name())
        };
        Engine::all()
            .iter()
            .copied()
            .filter(posing)
            .find(|other| other.is_behind(sh, exe))
            .unwrap_or(self)
    }

    /// [`Engine::actual`], saying so when it is another engine.
    pub fn resolve(self, sh: &Shell, exe: &Path) -> Engine {
        let actual = self.actual(sh, exe);
        if actual != self {
            eprintln!(
                "{}: {}'s {} CLI, run as {}",
                exe.display(),
                actual.spec().title,
                self.name(),
                actual.name()
            );
        }
        actual
    }

    /// Whether `exe` is this engine's program: its real file has the engine's name, or its
    /// version names the engine.
    fn is_behind(self, sh: &Shell, exe: &Path) -> bool {
        let real = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
        if real.file_name().is_some_and(|n| n == self.name()) {
            return true;
        }
        let version = self.spec().version;
        cmd!(sh, "{exe} {version...}")
            .quiet()
            .ignore_status()
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .to_lowercase()
                    .contains(self.name())
            })
    }

    /// Checks that it runs (for Docker: that its daemon answers), or says what to do.
    pub fn check(self, sh: &Shell, exe: &Path) -> anyhow::Result<()> {
        let spec = self.spec();
        let args = spec.check;
        let output = cmd!(sh, "{exe} {args...}")
            .quiet()
            .ignore_status()
            .output()
            .with_context(|| format!("running {}", exe.display()))?;
        if output.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&output.stderr);
        let said = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        match spec.daemon {
            Some(advice) => bail!(
                "{} is installed but cannot reach a {} engine (it said: {said}): {advice}; if \
                 this machine cannot run one: {}",
                exe.display(),
                spec.title,
                spec.install
            ),
            None => bail!(
                "{} does not run (it said: {said}): {}",
                exe.display(),
                spec.install
            ),
        }
    }

    /// The flags of a run after the subcommand: the common ones, the GPU devices for GPU
    /// providers, then the late ones.
    pub fn run_flags(self, gpu: bool) -> Vec<String> {
        let run = &self.spec().run;
        let gpu: &[&str] = if gpu { run.gpu } else { &[] };
        [run.flags, gpu, run.late]
            .concat()
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Its arguments for one run of `inner` in `image`, with `mounts` (host path, path
    /// inside) bound read-only and the image's workdir as the current folder.
    pub fn run_arguments(
        self,
        image: &str,
        gpu: bool,
        mounts: &[(PathBuf, String)],
        inner: &[String],
    ) -> Vec<String> {
        let run = &self.spec().run;
        let mut argv: Vec<String> = run.subcommand.iter().map(|a| a.to_string()).collect();
        argv.extend(self.run_flags(gpu));
        for (host, inside) in mounts {
            argv.push(format!("{}={}:{inside}:ro", run.bind, host.display()));
        }
        if let Some(flag) = run.workdir {
            argv.extend([flag.to_string(), super::model::WORKDIR.to_string()]);
        }
        argv.push(image.to_string());
        argv.extend(inner.iter().cloned());
        argv
    }

    /// The command that logs in to the registry at `host`.
    pub fn login(self, host: &str) -> String {
        self.spec().login.replace("{host}", host)
    }

    /// How the Debian-base image (`image`) is made for it, after `cargo xtask images base`.
    pub fn debian_build(self, image: &str) -> String {
        match &self.spec().debian {
            Debian::Built { .. } => format!("cargo xtask images build --engine {}", self.name()),
            Debian::Loaded { from_docker } => format!(
                "cargo xtask images build && {}",
                from_docker.replace("{image}", image)
            ),
        }
    }
}

/// What frees disk space, every engine's way: `docker system prune`, ...
pub fn prune_commands() -> String {
    let commands: Vec<String> = Engine::all()
        .iter()
        .map(|e| format!("`{}`", e.spec().prune))
        .collect();
    commands.join(", ")
}

/// What lists what is left running, every engine's way: `docker ps`, ...
pub fn running_commands() -> String {
    let commands: Vec<String> = Engine::all()
        .iter()
        .map(|e| format!("`{}`", e.spec().running))
        .collect();
    commands.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh() -> Shell {
        Shell::new().unwrap()
    }

    /// A program `dir/NAME` that prints `version` for `--version`.
    fn program(dir: &Path, name: &str, version: &str) -> PathBuf {
        let exe = dir.join(name);
        symmem_test_support::command::write_script(
            &exe,
            &format!("#!/bin/sh\n[ \"$1\" = --version ] && echo '{version}'\nexit 0\n"),
        );
        exe
    }

    #[test]
    fn podman_as_docker_is_recognised_once_for_every_command() {
        let dir = tempfile::tempdir().unwrap();
        let exe = program(dir.path(), "docker", "podman version 5.8.6");
        assert_eq!(Engine::Docker.actual(&sh(), &exe), Engine::Podman);
        assert_eq!(Engine::Docker.resolve(&sh(), &exe), Engine::Podman);
        // A link named docker to a program named podman is Podman too.
        let real = program(dir.path(), "podman", "");
        let link = dir.path().join("bin");
        std::fs::create_dir(&link).unwrap();
        std::os::unix::fs::symlink(&real, link.join("docker")).unwrap();
        assert_eq!(
            Engine::Docker.actual(&sh(), &link.join("docker")),
            Engine::Podman
        );
        let dir = tempfile::tempdir().unwrap();
        let exe = program(dir.path(), "docker", "Docker version 28.2.2");
        assert_eq!(Engine::Docker.actual(&sh(), &exe), Engine::Docker);
        // Nothing poses as Podman or Apptainer.
        let exe = program(dir.path(), "podman", "podman version 5.8.6");
        assert_eq!(Engine::Podman.actual(&sh(), &exe), Engine::Podman);
    }

    #[test]
    fn names_are_unique_and_every_engine_has_its_facts() {
        let names: std::collections::BTreeSet<&str> =
            Engine::all().iter().map(|e| e.name()).collect();
        assert_eq!(names.len(), Engine::all().len());
        for engine in Engine::all() {
            let spec = engine.spec();
            assert!(!spec.run.subcommand.is_empty(), "{engine:?}");
            assert!(spec.login.contains("{host}"), "{engine:?}");
            assert!(!spec.install.is_empty() && !spec.version.is_empty());
            assert!(spec.bench_goal > 0.0, "{engine:?}");
            if let Debian::Loaded { from_docker } = spec.debian {
                assert!(from_docker.contains("{image}"), "{engine:?}");
            }
            let clap_name = clap::ValueEnum::to_possible_value(engine).unwrap();
            assert_eq!(clap_name.get_name(), spec.name);
        }
        assert_eq!(
            prune_commands(),
            "`docker system prune`, `podman system prune`, `apptainer cache clean`"
        );
        assert_eq!(
            running_commands(),
            "`docker ps`, `podman ps`, `apptainer instance list`"
        );
    }

    #[test]
    fn binds_and_the_workdir_per_engine() {
        let mounts = [(PathBuf::from("/h/libshim.so"), "/mnt/s/libshim.so".into())];
        let argv = Engine::Docker.run_arguments("img", true, &mounts, &["x".into()]);
        assert!(argv.contains(&"--volume=/h/libshim.so:/mnt/s/libshim.so:ro".to_string()));
        assert!(argv.ends_with(&["img".to_string(), "x".to_string()]));
        let argv = Engine::Apptainer.run_arguments("i.sif", true, &mounts, &[]);
        assert_eq!(
            argv.join(" "),
            "exec --rocm --cleanenv --writable-tmpfs --bind=/h/libshim.so:/mnt/s/libshim.so:ro \
             --pwd /opt/symmem i.sif"
        );
    }

    #[test]
    fn gpu_devices_only_for_gpu_providers_and_never_shm_size_with_host_ipc() {
        let host = Engine::Docker.run_arguments("img", false, &[], &[]);
        let gpu = Engine::Docker.run_arguments("img", true, &[], &[]);
        for argv in [&host, &gpu] {
            assert!(argv.contains(&"--ipc=host".to_string()));
            assert!(argv.contains(&"--network=host".to_string()));
            assert!(
                !argv.iter().any(|a| a.starts_with("--shm-size")),
                "{argv:?}"
            );
        }
        assert!(
            !host
                .iter()
                .any(|a| a.starts_with("--device") || a == "--group-add=video")
        );
        assert!(gpu.contains(&"--device=/dev/kfd".to_string()));
        assert!(gpu.contains(&"--device=/dev/dri".to_string()));
        let apptainer = |gpu| Engine::Apptainer.run_arguments("i", gpu, &[], &[]);
        assert!(!apptainer(false).contains(&"--rocm".to_string()));
        assert!(apptainer(true).contains(&"--rocm".to_string()));
        assert!(
            !Engine::Docker
                .run_flags(true)
                .iter()
                .any(|f| f.starts_with("--ulimit=nofile"))
        );
        let podman = Engine::Podman.run_arguments("img", false, &[], &[]);
        assert!(podman.contains(&"--ulimit=nofile=20000:20000".to_string()));
        assert!(podman.contains(&"--ipc=host".to_string()));
        assert!(!podman.iter().any(|a| a.starts_with("--shm-size")));
    }

    #[test]
    fn logins_and_the_debian_image_per_engine() {
        assert_eq!(Engine::Docker.login("r:5000"), "docker login r:5000");
        assert_eq!(
            Engine::Apptainer.login("r:5000"),
            "apptainer registry login --username USER oras://r:5000"
        );
        assert_eq!(
            Engine::Podman.debian_build("localhost/i:1"),
            "cargo xtask images build && docker save localhost/i:1 | podman load"
        );
        assert_eq!(
            Engine::Apptainer.debian_build("x"),
            "cargo xtask images build --engine apptainer"
        );
    }

    #[test]
    fn a_missing_program_says_how_to_install_it() {
        let dir = tempfile::tempdir().unwrap();
        for (engine, install) in [
            (Engine::Docker, "install Docker Engine"),
            (Engine::Podman, "install Podman"),
            (Engine::Apptainer, "install Apptainer"),
        ] {
            let e = engine.locate(Some(dir.path().as_os_str())).unwrap_err();
            let e = format!("{e:#}");
            assert!(
                e.contains(&format!(
                    "no container engine: `{}` is not on PATH",
                    engine.name()
                )),
                "{e}"
            );
            assert!(e.contains(install), "{e}");
        }
    }
}
