//! `cargo xtask test --container docker|apptainer`: the rocSHMEM conformance matrix inside the
//! prebuilt image for the current tag, pulled when missing, run with the ROCm device flags.

use crate::images::{self, model, model::Model};
use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Docker (or a docker-compatible CLI such as Podman's).
    Docker,
    /// Apptainer: the SIF image is pulled into target/images/.
    Apptainer,
}

impl Engine {
    fn program(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Apptainer => "apptainer",
        }
    }
}

/// What a container run needs from the machine (given explicitly, so tests can fake it).
pub struct Host {
    /// The PATH to find the engine on.
    pub path: Option<OsString>,
    /// The AMD GPU compute device; without it there is nothing to run on.
    pub kfd: PathBuf,
    /// Where pulled Apptainer images are kept.
    pub cache: PathBuf,
}

pub fn run(
    engine: Engine,
    ranks: &[usize],
    timeout: Duration,
    grace: Duration,
) -> anyhow::Result<ExitCode> {
    let root = project_root();
    let model = images::load_model(&root)?;
    let tag = images::tag::compute(&root)?;
    eprintln!("image tag {tag} (cargo xtask images --tag)");
    let host = Host {
        path: std::env::var_os("PATH"),
        kfd: PathBuf::from("/dev/kfd"),
        cache: target_dir().join("images"),
    };
    let code = execute(
        engine,
        &model,
        &tag,
        &inner_command(ranks, timeout, grace),
        &host,
    )?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// `cargo xtask test` as it runs inside the image.
pub fn inner_command(ranks: &[usize], timeout: Duration, grace: Duration) -> Vec<String> {
    let ranks: Vec<String> = ranks.iter().map(ToString::to_string).collect();
    let mut command: Vec<String> = ["cargo", "xtask", "test", "--provider", "rocshmem"]
        .map(String::from)
        .to_vec();
    command.extend([
        "--ranks".into(),
        ranks.join(","),
        "--timeout".into(),
        duration(timeout),
        "--grace".into(),
        duration(grace),
    ]);
    command
}

fn duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Finds the engine, checks it and the GPU, gets the image and runs `inner` in it; returns the
/// exit status of the run.
pub fn execute(
    engine: Engine,
    model: &Model,
    tag: &str,
    inner: &[String],
    host: &Host,
) -> anyhow::Result<i32> {
    let exe = locate(engine, host.path.as_deref())?;
    probe(engine, &exe)?;
    if !host.kfd.exists() {
        bail!(
            "no AMD GPU here ({} is missing: the amdgpu driver is not loaded), so the rocSHMEM \
             matrix has nothing to run on: run this on a node with an AMD GPU and ROCm's \
             driver, or run `cargo xtask test --provider host` here",
            host.kfd.display()
        );
    }
    let image = match engine {
        Engine::Docker => {
            let image = model.docker_image(tag);
            ensure_docker_image(&exe, &image, tag)?;
            image
        }
        Engine::Apptainer => ensure_sif(&exe, model, tag, &host.cache)?
            .to_string_lossy()
            .into_owned(),
    };
    let argv = run_arguments(engine, &image, inner);
    eprintln!("{} {}", engine.program(), argv.join(" "));
    let status = Command::new(&exe)
        .args(&argv)
        .status()
        .with_context(|| format!("starting {}", exe.display()))?;
    Ok(status.code().unwrap_or(1))
}

/// The engine's arguments for one run of `inner` in `image`.
pub fn run_arguments(engine: Engine, image: &str, inner: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = match engine {
        Engine::Docker => {
            let mut argv = vec!["run".to_string(), "--rm".to_string()];
            argv.extend(model::DOCKER_RUN_FLAGS.iter().map(|f| f.to_string()));
            argv
        }
        Engine::Apptainer => {
            let mut argv = vec!["exec".to_string()];
            argv.extend(model::APPTAINER_RUN_FLAGS.iter().map(|f| f.to_string()));
            argv.extend(["--pwd".to_string(), model::WORKDIR.to_string()]);
            argv
        }
    };
    argv.push(image.to_string());
    argv.extend(inner.iter().cloned());
    argv
}

fn install_hint(engine: Engine) -> &'static str {
    match engine {
        Engine::Docker => {
            "install Docker Engine (https://docs.docker.com/engine/install/, e.g. \
             `sudo apt-get install docker.io` on Debian/Ubuntu) and make sure your user may use \
             it (the `docker` group), or use --container apptainer on HPC clusters"
        }
        Engine::Apptainer => {
            "install Apptainer >= 1.2 (https://apptainer.org/docs/admin/main/installation.html; \
             on clusters often `module load apptainer`), or use --container docker"
        }
    }
}

fn locate(engine: Engine, path: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    let program = engine.program();
    let found = path.and_then(|path| {
        std::env::split_paths(path)
            .map(|dir| dir.join(program))
            .find(|candidate| {
                use std::os::unix::fs::PermissionsExt;
                candidate
                    .metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    });
    found.with_context(|| {
        format!(
            "no container engine: `{program}` is not on PATH, so the prebuilt image cannot be \
             run here. To get one: {}. Without containers, build rocSHMEM on this machine with \
             `cargo xtask build-rocshmem --arch gfx942` and run `cargo xtask test --provider \
             rocshmem`",
            install_hint(engine)
        )
    })
}

/// Checks the engine works; for Docker that its daemon answers.
fn probe(engine: Engine, exe: &Path) -> anyhow::Result<()> {
    let args: &[&str] = match engine {
        Engine::Docker => &["version", "--format", "{{.Server.Version}}"],
        Engine::Apptainer => &["--version"],
    };
    let output = Command::new(exe)
        .args(args)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let said = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    match engine {
        Engine::Docker => bail!(
            "{} is installed but cannot reach a Docker engine (it said: {said}): start the \
             daemon (`sudo systemctl start docker`), check DOCKER_HOST, or join the `docker` \
             group; if this machine cannot run one: {}",
            exe.display(),
            install_hint(engine)
        ),
        Engine::Apptainer => bail!(
            "{} does not run (it said: {said}): {}",
            exe.display(),
            install_hint(engine)
        ),
    }
}

fn ensure_docker_image(exe: &Path, image: &str, tag: &str) -> anyhow::Result<()> {
    let present = Command::new(exe)
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .output()
        .with_context(|| format!("running {}", exe.display()))?
        .status
        .success();
    if present {
        eprintln!("using the local {image}");
        return Ok(());
    }
    eprintln!("pulling {image} ...");
    let pulled = Command::new(exe)
        .args(["pull", image])
        .status()
        .with_context(|| format!("running {}", exe.display()))?;
    if !pulled.success() {
        bail!(
            "cannot pull {image}. CI publishes an image for each tag it builds on main; this \
             checkout's tag {tag} has none (uncommitted or unpublished changes?), or the \
             registry needs a login (`docker login ghcr.io`). Build it here instead, then run \
             again:\n  docker build -f containers/Dockerfile --build-arg \
             SYMMEM_IMAGE_TAG={tag} -t {image} ."
        );
    }
    Ok(())
}

fn ensure_sif(exe: &Path, model: &Model, tag: &str, cache: &Path) -> anyhow::Result<PathBuf> {
    let sif = cache.join(format!("symmem-rocm-{tag}.sif"));
    if sif.is_file() {
        eprintln!("using {}", sif.display());
        return Ok(sif);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let partial = sif.with_extension("sif.partial");
    let _ = std::fs::remove_file(&partial);
    let reference = model.apptainer_image(tag);
    eprintln!("pulling {reference} ...");
    let pulled = Command::new(exe)
        .arg("pull")
        .arg(&partial)
        .arg(&reference)
        .status()
        .with_context(|| format!("running {}", exe.display()))?;
    if !pulled.success() || !partial.is_file() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "cannot pull {reference}. CI publishes an image for each tag it builds on main; \
             this checkout's tag {tag} has none (uncommitted or unpublished changes?), or the \
             registry needs a login (`apptainer registry login --username USER \
             oras://ghcr.io`). Build it here instead, then run again:\n  apptainer build \
             --build-arg SYMMEM_IMAGE_TAG={tag} {} containers/symmem.def",
            sif.display()
        );
    }
    std::fs::rename(&partial, &sif)
        .with_context(|| format!("moving {} into place", partial.display()))?;
    Ok(sif)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn model() -> Model {
        images::load_model(&project_root()).unwrap()
    }

    /// A fake engine: logs its arguments, answers `version`/`image inspect`/`pull`/`run` per
    /// `script` (shell `case` arms).
    fn fake(dir: &Path, program: &str, arms: &str) -> PathBuf {
        let log = dir.join("log");
        let exe = dir.join("bin").join(program);
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in\n{arms}\n*) exit 0 ;;\nesac\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        log
    }

    fn host(dir: &Path, gpu: bool) -> Host {
        let kfd = dir.join("kfd");
        if gpu {
            std::fs::write(&kfd, "").unwrap();
        }
        Host {
            path: Some(dir.join("bin").into_os_string()),
            kfd,
            cache: dir.join("images"),
        }
    }

    fn inner() -> Vec<String> {
        inner_command(
            &[1, 8],
            Duration::from_secs(120),
            Duration::from_millis(1500),
        )
    }

    fn error(engine: Engine, host: &Host) -> String {
        let e = execute(engine, &model(), "0123456789abcdef", &inner(), host).unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn the_inner_command_carries_the_options() {
        assert_eq!(
            inner().join(" "),
            "cargo xtask test --provider rocshmem --ranks 1,8 --timeout 120s --grace 1500ms"
        );
    }

    #[test]
    fn no_engine_says_so_and_how_to_get_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        let host = host(dir.path(), true);
        let e = error(Engine::Docker, &host);
        assert!(
            e.contains("no container engine: `docker` is not on PATH"),
            "{e}"
        );
        assert!(e.contains("install Docker Engine"), "{e}");
        let e = error(Engine::Apptainer, &host);
        assert!(e.contains("`apptainer` is not on PATH"), "{e}");
        assert!(e.contains("install Apptainer"), "{e}");
    }

    #[test]
    fn a_docker_cli_without_a_daemon_says_how_to_start_one() {
        let dir = tempfile::tempdir().unwrap();
        fake(
            dir.path(),
            "docker",
            "version*) echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2; exit 1 ;;",
        );
        let e = error(Engine::Docker, &host(dir.path(), true));
        assert!(e.contains("cannot reach a Docker engine"), "{e}");
        assert!(e.contains("Cannot connect to the Docker daemon"), "{e}");
        assert!(e.contains("systemctl start docker"), "{e}");
    }

    #[test]
    fn no_gpu_is_refused_before_pulling() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(dir.path(), "docker", "");
        let e = error(Engine::Docker, &host(dir.path(), false));
        assert!(e.contains("no AMD GPU here"), "{e}");
        let log = std::fs::read_to_string(log).unwrap();
        assert!(!log.contains("pull"), "{log}");
    }

    #[test]
    fn docker_pulls_a_missing_image_then_runs_with_the_rocm_flags() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(dir.path(), "docker", "image*) exit 1 ;;\nrun*) exit 3 ;;");
        let model = model();
        let code = execute(
            Engine::Docker,
            &model,
            "0123456789abcdef",
            &inner(),
            &host(dir.path(), true),
        )
        .unwrap();
        assert_eq!(code, 3, "the run's exit status comes back");
        let log = std::fs::read_to_string(log).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        let image = model.docker_image("0123456789abcdef");
        assert_eq!(lines[0], "version --format {{.Server.Version}}");
        assert_eq!(
            lines[1],
            format!("image inspect --format {{{{.Id}}}} {image}")
        );
        assert_eq!(lines[2], format!("pull {image}"));
        assert_eq!(
            lines[3],
            format!(
                "run --rm --init --device=/dev/kfd --device=/dev/dri --group-add=video \
                 --security-opt=seccomp=unconfined --cap-add=SYS_PTRACE --ipc=host \
                 --shm-size=16G --ulimit=memlock=-1 {image} cargo xtask test --provider \
                 rocshmem --ranks 1,8 --timeout 120s --grace 1500ms"
            )
        );
    }

    #[test]
    fn docker_uses_a_present_image_and_explains_a_failed_pull() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(dir.path(), "docker", "");
        let model = model();
        execute(
            Engine::Docker,
            &model,
            "0123456789abcdef",
            &inner(),
            &host(dir.path(), true),
        )
        .unwrap();
        assert!(!std::fs::read_to_string(&log).unwrap().contains("pull"));

        let dir = tempfile::tempdir().unwrap();
        fake(dir.path(), "docker", "image*) exit 1 ;;\npull*) exit 1 ;;");
        let e = error(Engine::Docker, &host(dir.path(), true));
        assert!(e.contains("cannot pull ghcr.io/"), "{e}");
        assert!(e.contains("docker login ghcr.io"), "{e}");
        assert!(
            e.contains("docker build -f containers/Dockerfile --build-arg SYMMEM_IMAGE_TAG=0123456789abcdef"),
            "{e}"
        );
    }

    #[test]
    fn apptainer_pulls_the_sif_once_and_runs_it_writable_with_rocm() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(dir.path(), "apptainer", "pull*) : > \"$2\" ;;");
        let model = model();
        let host = host(dir.path(), true);
        for _ in 0..2 {
            let code = execute(
                Engine::Apptainer,
                &model,
                "0123456789abcdef",
                &inner(),
                &host,
            )
            .unwrap();
            assert_eq!(code, 0);
        }
        let sif = host.cache.join("symmem-rocm-0123456789abcdef.sif");
        assert!(sif.is_file());
        let log = std::fs::read_to_string(log).unwrap();
        assert_eq!(log.matches("pull").count(), 1, "{log}");
        assert!(log.contains(&format!(
            "pull {} {}",
            sif.with_extension("sif.partial").display(),
            model.apptainer_image("0123456789abcdef")
        )));
        assert!(log.contains(&format!(
            "exec --rocm --cleanenv --writable-tmpfs --pwd /opt/symmem {} cargo xtask test",
            sif.display()
        )));
    }

    #[test]
    fn apptainer_explains_a_failed_pull_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        fake(dir.path(), "apptainer", "pull*) : > \"$2\"; exit 1 ;;");
        let host = host(dir.path(), true);
        let e = error(Engine::Apptainer, &host);
        assert!(e.contains("cannot pull oras://"), "{e}");
        assert!(
            e.contains("apptainer build --build-arg SYMMEM_IMAGE_TAG="),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&host.cache).unwrap().count(), 0);
    }
}
