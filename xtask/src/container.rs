//! `cargo xtask test --container docker|podman|apptainer`: `symmem-matrix test` (the conformance
//! matrix) inside the prebuilt image for the current tag, pulled when missing, run with the
//! ROCm device flags.

use crate::images::model::{self, Base, Engine, ImageFormat, Model};
use crate::images::tag;
use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use symmem::{ProviderKind, format_elapsed};
use xshell::{Shell, cmd};

/// What `cargo xtask test` asks of the run inside the image.
#[derive(Clone, Debug)]
pub struct Request {
    /// The provider given on the command line; `None`: the image's default (rocshmem in the
    /// AMD image, host in the Debian one).
    pub provider: Option<ProviderKind>,
    /// Host files bind-mounted read-only into the run and passed on.
    pub shim_lib: Option<PathBuf>,
    pub rank_binary: Option<PathBuf>,
    /// The other arguments of `symmem-matrix test`, passed on as given (it checks them).
    pub rest: Vec<String>,
}

/// Where `--shim-lib` and `--rank-binary` files appear inside the container.
pub const MOUNTS: &str = "/mnt/symmem";

impl Request {
    pub fn provider(&self, model: &Model) -> ProviderKind {
        self.provider.unwrap_or(model.default_provider)
    }

    /// Whether the run needs the GPU devices.
    pub fn gpu(&self, model: &Model) -> bool {
        self.provider(model).is_gpu()
    }

    /// (host path, container path) of each file passed in.
    pub fn mounts(&self) -> anyhow::Result<Vec<(PathBuf, String)>> {
        let mut mounts = Vec::new();
        for (what, path) in [("shim", &self.shim_lib), ("rank", &self.rank_binary)] {
            if let Some(path) = path {
                let host =
                    std::path::absolute(path).with_context(|| format!("{}", path.display()))?;
                if !host.is_file() {
                    bail!(
                        "{} is not a file: --shim-lib and --rank-binary name host files, \
                         mounted into the container",
                        host.display()
                    );
                }
                let name = host.file_name().unwrap().to_string_lossy().into_owned();
                mounts.push((host, format!("{MOUNTS}/{what}/{name}")));
            }
        }
        Ok(mounts)
    }

    /// `symmem-matrix test` as it runs inside the image.
    pub fn inner_command(&self, model: &Model) -> anyhow::Result<Vec<String>> {
        let mut command: Vec<String> = model::MATRIX_TEST.map(String::from).to_vec();
        command.extend(["--provider".into(), self.provider(model).name().to_string()]);
        command.extend(self.rest.iter().cloned());
        let mounts = self.mounts()?;
        let mut mounted = mounts.iter().map(|(_, inside)| inside.clone());
        if self.shim_lib.is_some() {
            command.extend(["--shim-lib".into(), mounted.next().unwrap()]);
        }
        if self.rank_binary.is_some() {
            command.extend(["--rank-binary".into(), mounted.next().unwrap()]);
        }
        Ok(command)
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

pub fn run(sh: &Shell, engine: Engine, base: Base, request: &Request) -> anyhow::Result<ExitCode> {
    let root = project_root();
    let model = Model::load(&root, base)?;
    let tag = tag::compute(sh, &root)?;
    eprintln!("image tag {tag} (cargo xtask images tag)");
    let host = Host {
        path: std::env::var_os("PATH"),
        kfd: PathBuf::from("/dev/kfd"),
        cache: target_dir().join("images"),
    };
    let code = execute(sh, engine, &model, &tag, request, &host)?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Finds the engine, checks it and (for GPU providers) the GPU, gets the image and runs the
/// request in it; returns the exit status of the run.
pub fn execute(
    sh: &Shell,
    engine: Engine,
    model: &Model,
    tag: &str,
    request: &Request,
    host: &Host,
) -> anyhow::Result<i32> {
    if model.base == Base::Debian && request.provider(model) == ProviderKind::Rocshmem {
        bail!(
            "the Debian-base image has no rocSHMEM (its pinned source is on GitHub, which its \
             offline build cannot reach): use --image-base amd for --provider rocshmem, or \
             --provider host"
        );
    }
    let inner = request.inner_command(model)?;
    let exe = locate(engine, host.path.as_deref())?;
    let engine = resolve(sh, engine, &exe);
    probe(sh, engine, &exe)?;
    if request.gpu(model) && !host.kfd.exists() {
        bail!(
            "no AMD GPU here ({} is missing: the amdgpu driver is not loaded), so the {} \
             matrix has nothing to run on: run this on a node with an AMD GPU and ROCm's \
             driver, or add `--provider host` to smoke-test the image without a GPU",
            host.kfd.display(),
            request.provider(model)
        );
    }
    let image = match engine.format() {
        ImageFormat::Oci => {
            let image = model.docker_image(tag);
            ensure_docker_image(sh, &exe, model, &image, tag)?;
            image
        }
        ImageFormat::Sif => ensure_sif(sh, &exe, model, tag, &host.cache)?
            .to_string_lossy()
            .into_owned(),
    };
    let argv = run_arguments(
        engine,
        &image,
        request.gpu(model),
        &request.mounts()?,
        &inner,
    );
    eprintln!("{} {}", exe.display(), argv.join(" "));
    let started = std::time::Instant::now();
    let status = crate::runner::status(cmd!(sh, "{exe} {argv...}"))?;
    eprintln!(
        "container run: {} (start, matrix and exit)",
        format_elapsed(started.elapsed())
    );
    Ok(status.code().unwrap_or(1))
}

/// Whether the `docker` CLI is Podman's (podman-docker), which refuses some of Docker's flag
/// combinations.
pub(crate) fn is_podman(sh: &Shell, exe: &Path) -> bool {
    let real = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    if real.file_name().is_some_and(|n| n == "podman") {
        return true;
    }
    cmd!(sh, "{exe} --version")
        .quiet()
        .ignore_status()
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .to_lowercase()
                .contains("podman")
        })
}

/// The engine a program really is: podman-docker's `docker` is Podman.
pub(crate) fn resolve(sh: &Shell, engine: Engine, exe: &Path) -> Engine {
    if engine == Engine::Docker && is_podman(sh, exe) {
        eprintln!("{}: Podman's docker CLI, run as podman", exe.display());
        return Engine::Podman;
    }
    engine
}

/// The engine's arguments for one run of `inner` in `image`.
pub fn run_arguments(
    engine: Engine,
    image: &str,
    gpu: bool,
    mounts: &[(PathBuf, String)],
    inner: &[String],
) -> Vec<String> {
    let mut argv: Vec<String> = engine
        .run_subcommand()
        .iter()
        .map(|a| a.to_string())
        .collect();
    argv.extend(engine.run_flags(gpu));
    for (host, inside) in mounts {
        argv.push(engine.bind_flag(host, inside));
    }
    if engine == Engine::Apptainer {
        argv.extend(["--pwd".to_string(), model::WORKDIR.to_string()]);
    }
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
        Engine::Podman => {
            "install Podman (https://podman.io/docs/installation, e.g. `sudo apt-get install \
             podman` on Debian/Ubuntu), or use --container docker|apptainer"
        }
        Engine::Apptainer => {
            "install Apptainer >= 1.2 (https://apptainer.org/docs/admin/main/installation.html; \
             on clusters often `module load apptainer`), or use --container docker"
        }
    }
}

fn locate(engine: Engine, path: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    let program = engine.name();
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
fn probe(sh: &Shell, engine: Engine, exe: &Path) -> anyhow::Result<()> {
    let args: &[&str] = match engine {
        Engine::Docker => &["version", "--format", "{{.Server.Version}}"],
        Engine::Podman | Engine::Apptainer => &["--version"],
    };
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
    match engine {
        Engine::Docker => bail!(
            "{} is installed but cannot reach a Docker engine (it said: {said}): start the \
             daemon (`sudo systemctl start docker`), check DOCKER_HOST, or join the `docker` \
             group; if this machine cannot run one: {}",
            exe.display(),
            install_hint(engine)
        ),
        Engine::Podman | Engine::Apptainer => bail!(
            "{} does not run (it said: {said}): {}",
            exe.display(),
            install_hint(engine)
        ),
    }
}

fn ensure_docker_image(
    sh: &Shell,
    exe: &Path,
    model: &Model,
    image: &str,
    tag: &str,
) -> anyhow::Result<()> {
    let id = "{{.Id}}";
    let present = cmd!(sh, "{exe} image inspect --format {id} {image}")
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| format!("running {}", exe.display()))?
        .status
        .success();
    if present {
        eprintln!("using the local {image}");
        return Ok(());
    }
    if model.base == Base::Debian {
        bail!(
            "{image} is not in the engine, and the Debian-base image is never published: build \
             it here (no network needed but a Debian mirror), then run again:\n  cargo xtask \
             images base && cargo xtask images build"
        );
    }
    eprintln!("pulling {image} ...");
    let pulled = crate::runner::status(cmd!(sh, "{exe} pull {image}"))?;
    if !pulled.success() {
        bail!(
            "cannot pull {image}. CI publishes an image for each tag it builds on main; this \
             checkout's tag {tag} has none (uncommitted or unpublished changes?), or the \
             registry needs a login (`docker login ghcr.io`). Build it here instead, then run \
             again:\n  docker build -f containers/Dockerfile --build-arg \
             {}={tag} -t {image} .",
            model::TAG_ARG
        );
    }
    Ok(())
}

fn ensure_sif(
    sh: &Shell,
    exe: &Path,
    model: &Model,
    tag: &str,
    cache: &Path,
) -> anyhow::Result<PathBuf> {
    let sif = cache.join(model.sif_name(tag));
    if sif.is_file() {
        eprintln!("using {}", sif.display());
        return Ok(sif);
    }
    let Some(reference) = model.apptainer_image(tag) else {
        bail!(
            "{} is missing, and the Debian-base image is never published: build it here, then \
             run again:\n  cargo xtask images base && cargo xtask images build --engine \
             apptainer",
            sif.display()
        );
    };
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let partial = sif.with_extension("sif.partial");
    let _ = std::fs::remove_file(&partial);
    eprintln!("pulling {reference} ...");
    let pulled = crate::runner::status(cmd!(sh, "{exe} pull {partial} {reference}"))?;
    if !pulled.success() || !partial.is_file() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "cannot pull {reference}. CI publishes an image for each tag it builds on main; \
             this checkout's tag {tag} has none (uncommitted or unpublished changes?), or the \
             registry needs a login (`apptainer registry login --username USER \
             oras://ghcr.io`). Build it here instead (`--notest` without an AMD GPU: a \
             failing %test writes no image), then run again:\n  apptainer build --notest \
             --build-arg {}={tag} {} containers/symmem.def",
            model::TAG_ARG,
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

    fn model() -> Model {
        Model::load(&project_root(), Base::Amd).unwrap()
    }

    fn debian() -> Model {
        Model::load(&project_root(), Base::Debian).unwrap()
    }
    /// A fake engine: logs its arguments, answers `version`/`image inspect`/`pull`/`run` per
    /// `script` (shell `case` arms).
    fn sh() -> Shell {
        Shell::new().unwrap()
    }

    fn fake(dir: &Path, program: &str, arms: &str) -> PathBuf {
        let log = dir.join("log");
        let exe = dir.join("bin").join(program);
        symmem_test_support::command::write_script(
            &exe,
            &format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in\n{arms}\n*) exit 0 ;;\nesac\n",
                log.display()
            ),
        );
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

    fn request(provider: Option<&str>) -> Request {
        Request {
            provider: provider.map(|p| ProviderKind::from_name(p).expect("a provider name")),
            shim_lib: None,
            rank_binary: None,
            rest: ["--ranks", "1,8", "--timeout", "120s", "--grace", "1500ms"]
                .map(String::from)
                .to_vec(),
        }
    }

    fn inner() -> Request {
        request(None)
    }

    fn error(engine: Engine, host: &Host) -> String {
        let e = execute(&sh(), engine, &model(), "0123456789abcdef", &inner(), host).unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn the_inner_command_carries_the_options() {
        assert_eq!(
            inner().inner_command(&model()).unwrap().join(" "),
            "symmem-matrix test --provider rocshmem --ranks 1,8 --timeout 120s --grace 1500ms"
        );
    }

    #[test]
    fn chosen_checks_reach_the_inner_command() {
        let mut two = request(Some("host"));
        two.rest.extend(["--check".into(), "7,10b".into()]);
        assert_eq!(
            two.inner_command(&model()).unwrap().join(" "),
            "symmem-matrix test --provider host --ranks 1,8 --timeout 120s --grace 1500ms \
             --check 7,10b"
        );
    }

    #[test]
    fn a_given_provider_is_kept_and_the_default_is_the_images() {
        let host = request(Some("host"));
        assert!(
            host.inner_command(&model())
                .unwrap()
                .join(" ")
                .starts_with("symmem-matrix test --provider host --ranks 1,8")
        );
        assert!(!host.gpu(&model()));
        assert!(request(None).gpu(&model()));
        assert_eq!(request(None).provider(&debian()), ProviderKind::Host);
        assert!(!request(None).gpu(&debian()));
    }

    #[test]
    fn shim_lib_and_rank_binary_are_mounted_and_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let (shim, rank) = (dir.path().join("libshim.so"), dir.path().join("rank"));
        std::fs::write(&shim, "").unwrap();
        std::fs::write(&rank, "").unwrap();
        let mut r = request(Some("rocshmem"));
        r.shim_lib = Some(shim.clone());
        r.rank_binary = Some(rank.clone());
        let inner = r.inner_command(&model()).unwrap().join(" ");
        assert!(
            inner.ends_with(
                "--shim-lib /mnt/symmem/shim/libshim.so --rank-binary /mnt/symmem/rank/rank"
            ),
            "{inner}"
        );
        let mounts = r.mounts().unwrap();
        let argv = run_arguments(Engine::Docker, "img", true, &mounts, &[]);
        assert!(argv.contains(&format!(
            "--volume={}:/mnt/symmem/shim/libshim.so:ro",
            shim.display()
        )));
        let argv = run_arguments(Engine::Apptainer, "img", true, &mounts, &[]);
        assert!(argv.contains(&format!(
            "--bind={}:/mnt/symmem/rank/rank:ro",
            rank.display()
        )));
        r.shim_lib = Some(dir.path().join("missing.so"));
        assert!(format!("{:#}", r.mounts().unwrap_err()).contains("is not a file"));
    }

    #[test]
    fn gpu_devices_only_for_gpu_providers_and_never_shm_size_with_host_ipc() {
        let host = run_arguments(Engine::Docker, "img", false, &[], &[]);
        let gpu = run_arguments(Engine::Docker, "img", true, &[], &[]);
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
        assert!(
            !run_arguments(Engine::Apptainer, "i", false, &[], &[]).contains(&"--rocm".to_string())
        );
        assert!(
            run_arguments(Engine::Apptainer, "i", true, &[], &[]).contains(&"--rocm".to_string())
        );
        assert!(
            !Engine::Docker
                .run_flags(true)
                .iter()
                .any(|f| f.starts_with("--ulimit=nofile"))
        );
        let podman = run_arguments(Engine::Podman, "img", false, &[], &[]);
        assert!(podman.contains(&"--ulimit=nofile=20000:20000".to_string()));
        assert!(podman.contains(&"--ipc=host".to_string()));
        assert!(!podman.iter().any(|a| a.starts_with("--shm-size")));
    }

    #[test]
    fn podman_as_docker_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        fake(
            dir.path(),
            "docker",
            "--version*) echo 'podman version 5.8.6' ;;",
        );
        let exe = dir.path().join("bin/docker");
        assert!(is_podman(&sh(), &exe));
        assert_eq!(resolve(&sh(), Engine::Docker, &exe), Engine::Podman);
        let dir = tempfile::tempdir().unwrap();
        fake(
            dir.path(),
            "docker",
            "--version*) echo 'Docker version 28.2.2' ;;",
        );
        assert!(!is_podman(&sh(), &dir.path().join("bin/docker")));
    }

    #[test]
    fn the_host_provider_needs_no_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(dir.path(), "docker", "");
        let code = execute(
            &sh(),
            Engine::Docker,
            &debian(),
            "0123456789abcdef",
            &request(Some("host")),
            &host(dir.path(), false),
        )
        .unwrap();
        assert_eq!(code, 0);
        let log = std::fs::read_to_string(log).unwrap();
        let run = log.lines().find(|l| l.starts_with("run ")).unwrap();
        assert!(!run.contains("--device"), "{run}");
        assert!(run.contains("localhost/symmem/symmem-debian:0123456789abcdef symmem-matrix test --provider host --ranks 1,8"), "{run}");
        assert!(!log.contains("pull"), "{log}");
    }

    #[test]
    fn the_debian_image_is_built_not_pulled_and_has_no_rocshmem() {
        let dir = tempfile::tempdir().unwrap();
        fake(dir.path(), "docker", "image*) exit 1 ;;");
        let e = execute(
            &sh(),
            Engine::Docker,
            &debian(),
            "0123456789abcdef",
            &request(None),
            &host(dir.path(), false),
        );
        let e = format!("{:#}", e.unwrap_err());
        assert!(
            e.contains("cargo xtask images base && cargo xtask images build"),
            "{e}"
        );
        let e = execute(
            &sh(),
            Engine::Docker,
            &debian(),
            "0123456789abcdef",
            &request(Some("rocshmem")),
            &host(dir.path(), true),
        );
        assert!(format!("{:#}", e.unwrap_err()).contains("has no rocSHMEM"));
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
            &sh(),
            Engine::Docker,
            &model,
            "0123456789abcdef",
            &inner(),
            &host(dir.path(), true),
        )
        .unwrap();
        assert_eq!(code, 3, "the run's exit status comes back");
        let log = std::fs::read_to_string(log).unwrap();
        // `--version`: the check for Podman's docker CLI.
        let lines: Vec<&str> = log.lines().filter(|l| *l != "--version").collect();
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
                "run --rm --init --security-opt=seccomp=unconfined --cap-add=SYS_PTRACE \
                 --ipc=host --network=host --device=/dev/kfd --device=/dev/dri --group-add=video \
                 --ulimit=memlock=-1 {image} symmem-matrix test --provider rocshmem --ranks 1,8 \
                 --timeout 120s --grace 1500ms"
            )
        );
    }

    #[test]
    fn docker_uses_a_present_image_and_explains_a_failed_pull() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(dir.path(), "docker", "");
        let model = model();
        execute(
            &sh(),
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
            e.contains(&format!(
                "docker build -f containers/Dockerfile --build-arg {}=0123456789abcdef",
                model::TAG_ARG
            )),
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
                &sh(),
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
            model.apptainer_image("0123456789abcdef").unwrap()
        )));
        assert!(log.contains(&format!(
            "exec --rocm --cleanenv --writable-tmpfs --pwd /opt/symmem {} symmem-matrix test",
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
            e.contains(&format!(
                "apptainer build --notest --build-arg {}=",
                model::TAG_ARG
            )),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&host.cache).unwrap().count(), 0);
    }
}
