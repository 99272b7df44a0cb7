//! `cargo xtask test --container docker|podman|apptainer`: `symmem-matrix test` (the conformance
//! matrix) inside the prebuilt image for the current tag, pulled when missing, run with the
//! ROCm device flags.

use crate::images::engine::{Engine, ImageFormat};
use crate::images::model::{Base, Model};
use crate::images::pull::{self, Source};
use crate::images::registry::{Registry, SIF_KEY, SifKey};
use crate::images::tag;
use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use std::ffi::OsString;
use std::path::PathBuf;
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
    /// `--registry`: where a missing image is pulled from (else SYMMEM_IMAGE_REGISTRY, else
    /// pins.toml's).
    pub registry: Option<String>,
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
        let mut command = Model::matrix_test(self.provider(model), &self.rest);
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
    /// How a pulled SIF is checked (`SYMMEM_SIF_KEY`).
    pub sif_key: Option<SifKey>,
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
        sif_key: SIF_KEY.read()?,
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
    let exe = engine.locate(host.path.as_deref())?;
    let engine = engine.resolve(sh, &exe);
    engine.check(sh, &exe)?;
    if request.gpu(model) && !host.kfd.exists() {
        bail!(
            "no AMD GPU here ({} is missing: the amdgpu driver is not loaded), so the {} \
             matrix has nothing to run on: run this on a node with an AMD GPU and ROCm's \
             driver, or add `--provider host` to smoke-test the image without a GPU",
            host.kfd.display(),
            request.provider(model)
        );
    }
    let registry = Registry::choose(request.registry.as_deref(), &model.registry)?;
    let source = Source {
        registry: &registry,
        sif_key: host.sif_key.clone(),
    };
    let image = match engine.format() {
        ImageFormat::Oci => pull::oci_image(sh, engine, &exe, model, tag, &source)?,
        ImageFormat::Sif => pull::sif(sh, engine, &exe, model, tag, &host.cache, &source)?
            .to_string_lossy()
            .into_owned(),
    };
    let argv = engine.run_arguments(&image, request.gpu(model), &request.mounts()?, &inner);
    eprintln!("{} {}", exe.display(), argv.join(" "));
    let started = std::time::Instant::now();
    let status = crate::runner::status(cmd!(sh, "{exe} {argv...}"))?;
    eprintln!(
        "container run: {} (start, matrix and exit)",
        format_elapsed(started.elapsed())
    );
    Ok(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::model;
    use std::net::TcpListener;
    use std::path::Path;

    const TAG: &str = "0123456789abcdef";

    fn model() -> Model {
        Model::load(&project_root(), Base::Amd).unwrap()
    }

    fn debian() -> Model {
        Model::load(&project_root(), Base::Debian).unwrap()
    }

    fn sh() -> Shell {
        Shell::new().unwrap()
    }

    /// A fake engine: logs its arguments, answers per `arms` (shell `case` arms on "$*"),
    /// anything else with success. `$last` is its last argument, `$f` a file named after it
    /// in `dir/store` (an OCI engine's store: the image's label, when it holds the image).
    fn fake(dir: &Path, program: &str, arms: &str) -> PathBuf {
        let log = dir.join("log");
        let store = dir.join("store");
        std::fs::create_dir_all(&store).unwrap();
        let exe = dir.join("bin").join(program);
        symmem_test_support::command::write_script(
            &exe,
            &format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nfor a; do last=$a; done\n\
                 f='{}'/$(printf %s \"$last\" | tr '/:' '__')\ncase \"$*\" in\n{arms}\n\
                 *) exit 0 ;;\nesac\n",
                log.display(),
                store.display()
            ),
        );
        log
    }

    /// An OCI engine whose store starts empty: a pull stores `label` (after `pull_first`,
    /// shell commands that may fail the pull), `image inspect` answers from the store.
    fn fake_oci(dir: &Path, program: &str, pull_first: &str, label: &str) -> PathBuf {
        fake(
            dir,
            program,
            &format!(
                "image*) [ -f \"$f\" ] || exit 1; cat \"$f\" ;;\n\
                 pull*) {pull_first} echo {label} > \"$f\" ;;\nrmi*) rm -f \"$f\" ;;\n\
                 run*) exit 3 ;;"
            ),
        )
    }

    /// Apptainer pulling into `$3` (`pull --no-https PARTIAL REF`) after `pull_first`;
    /// `verify` exits with `verify`; the SIF's label is `label`.
    fn fake_apptainer(dir: &Path, pull_first: &str, verify: u8, label: &str) -> PathBuf {
        fake(
            dir,
            "apptainer",
            &format!(
                "pull*) {pull_first} echo sif > \"$3\" ;;\nverify*) exit {verify} ;;\n\
                 inspect*) echo 'org.opencontainers.image.title: x'; \
                 echo 'io.github.symmem.image-tag: {label}' ;;"
            ),
        )
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
            sif_key: Some(SifKey::Public(dir.join("pub.pem"))),
        }
    }

    /// A loopback "registry" that accepts connections for as long as it is kept.
    fn registry() -> (TcpListener, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
        (listener, address)
    }

    fn request(provider: Option<&str>) -> Request {
        Request {
            provider: provider.map(|p| ProviderKind::from_name(p).expect("a provider name")),
            shim_lib: None,
            rank_binary: None,
            registry: None,
            rest: ["--ranks", "1,8", "--timeout", "120s", "--grace", "1500ms"]
                .map(String::from)
                .to_vec(),
        }
    }

    fn inner() -> Request {
        request(None)
    }

    /// `inner()` pulling from `registry`.
    fn from(registry: &str) -> Request {
        Request {
            registry: Some(registry.into()),
            ..inner()
        }
    }

    fn error(engine: Engine, host: &Host) -> String {
        let (_registry, address) = registry();
        let e = execute(&sh(), engine, &model(), TAG, &from(&address), host).unwrap_err();
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
        let argv = Engine::Docker.run_arguments("img", true, &mounts, &[]);
        assert!(argv.contains(&format!(
            "--volume={}:/mnt/symmem/shim/libshim.so:ro",
            shim.display()
        )));
        let argv = Engine::Apptainer.run_arguments("img", true, &mounts, &[]);
        assert!(argv.contains(&format!(
            "--bind={}:/mnt/symmem/rank/rank:ro",
            rank.display()
        )));
        r.shim_lib = Some(dir.path().join("missing.so"));
        assert!(format!("{:#}", r.mounts().unwrap_err()).contains("is not a file"));
    }

    /// podman-docker's `docker` runs as Podman: its limits, its loopback flag.
    #[test]
    fn a_docker_that_is_podman_runs_as_podman() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake(
            dir.path(),
            "docker",
            &format!(
                "--version*) echo 'podman version 5.8.6' ;;\n\
                 image*) [ -f \"$f\" ] || exit 1; cat \"$f\" ;;\n\
                 pull*) echo {TAG} > \"$f\" ;;"
            ),
        );
        let (_registry, address) = registry();
        let code = execute(
            &sh(),
            Engine::Docker,
            &debian(),
            TAG,
            &from(&address),
            &host(dir.path(), false),
        )
        .unwrap();
        assert_eq!(code, 0);
        let log = std::fs::read_to_string(log).unwrap();
        assert!(
            log.contains(&format!("pull --tls-verify=false {address}/")),
            "{log}"
        );
        let run = log.lines().find(|l| l.starts_with("run ")).unwrap();
        assert!(run.contains("--ulimit=nofile=20000:20000"), "{run}");
    }

    /// An engine no command knows by name (`images/engine/fourth.rs`, in tests only) is run,
    /// pulled for and checked with its own words.
    #[test]
    fn a_fourth_engine_needs_nothing_but_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_oci(dir.path(), "fourth", "", TAG);
        let (_registry, address) = registry();
        let mut shim = request(Some("rocshmem"));
        let lib = dir.path().join("libshim.so");
        std::fs::write(&lib, "").unwrap();
        shim.shim_lib = Some(lib.clone());
        shim.registry = Some(address.clone());
        let code = execute(
            &sh(),
            Engine::Fourth,
            &model(),
            TAG,
            &shim,
            &host(dir.path(), true),
        )
        .unwrap();
        assert_eq!(code, 0);
        let remote = format!("{address}/symmem-rocm:{TAG}");
        let log = std::fs::read_to_string(log).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines[0], "info", "its check: {log}");
        assert!(lines.contains(&format!("pull --plain-http {remote}").as_str()));
        let run = lines.last().unwrap();
        assert_eq!(
            *run,
            format!(
                "container start --remove --host-network --amd-gpus --share={}:\
                 /mnt/symmem/shim/libshim.so:ro {remote} symmem-matrix test --provider \
                 rocshmem --ranks 1,8 --timeout 120s --grace 1500ms --shim-lib \
                 /mnt/symmem/shim/libshim.so",
                lib.display()
            )
        );
        // A missing program names its own install.
        let e = error(
            Engine::Fourth,
            &host(tempfile::tempdir().unwrap().path(), true),
        );
        assert!(e.contains("install Fourth"), "{e}");
    }

    #[test]
    fn the_host_provider_needs_no_gpu_and_a_local_build_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_oci(dir.path(), "docker", "", TAG);
        let local = debian().docker_image(TAG);
        std::fs::write(
            dir.path()
                .join("store")
                .join(local.replace(['/', ':'], "_")),
            TAG,
        )
        .unwrap();
        let code = execute(
            &sh(),
            Engine::Docker,
            &debian(),
            TAG,
            &request(Some("host")),
            &host(dir.path(), false),
        )
        .unwrap();
        assert_eq!(code, 3, "the run's exit status comes back");
        let log = std::fs::read_to_string(log).unwrap();
        let run = log.lines().find(|l| l.starts_with("run ")).unwrap();
        assert!(!run.contains("--device"), "{run}");
        assert!(
            run.contains(&format!(
                "{local} symmem-matrix test --provider host --ranks 1,8"
            )),
            "{run}"
        );
        assert!(!log.contains("pull"), "{log}");
    }

    #[test]
    fn the_debian_image_has_no_rocshmem() {
        let dir = tempfile::tempdir().unwrap();
        fake_oci(dir.path(), "docker", "", TAG);
        let e = execute(
            &sh(),
            Engine::Docker,
            &debian(),
            TAG,
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
        let e = error(Engine::Podman, &host);
        assert!(e.contains("`podman` is not on PATH"), "{e}");
        assert!(e.contains("install Podman"), "{e}");
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
        let log = fake_oci(dir.path(), "docker", "", TAG);
        let e = error(Engine::Docker, &host(dir.path(), false));
        assert!(e.contains("no AMD GPU here"), "{e}");
        let log = std::fs::read_to_string(log).unwrap();
        assert!(!log.contains("pull"), "{log}");
    }

    /// Runs `engine` twice against a fresh store: the first run pulls, the second uses the
    /// copy; returns the engine's log.
    fn pull_then_reuse(engine: Engine, program: &str, model: &Model) -> (String, String) {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_oci(dir.path(), program, "", TAG);
        let (_registry, address) = registry();
        for _ in 0..2 {
            let code = execute(
                &sh(),
                engine,
                model,
                TAG,
                &from(&address),
                &host(dir.path(), true),
            )
            .unwrap();
            assert_eq!(code, 3, "the run's exit status comes back");
        }
        (std::fs::read_to_string(log).unwrap(), address)
    }

    #[test]
    fn docker_pulls_a_missing_image_once_then_runs_with_the_rocm_flags() {
        let model = model();
        let (log, address) = pull_then_reuse(Engine::Docker, "docker", &model);
        let remote = format!("{address}/symmem-rocm:{TAG}");
        let lines: Vec<&str> = log.lines().filter(|l| *l != "--version").collect();
        assert_eq!(lines[0], "version --format {{.Server.Version}}");
        assert!(lines[1].starts_with("image inspect --format"), "{log}");
        assert!(
            lines.contains(&format!("pull {remote}").as_str()),
            "Docker needs no flag for a loopback registry: {log}"
        );
        assert_eq!(log.matches("pull ").count(), 1, "{log}");
        let run = lines.iter().find(|l| l.starts_with("run ")).unwrap();
        assert_eq!(
            *run,
            format!(
                "run --rm --init --security-opt=seccomp=unconfined --cap-add=SYS_PTRACE \
                 --ipc=host --network=host --device=/dev/kfd --device=/dev/dri --group-add=video \
                 --ulimit=memlock=-1 {remote} symmem-matrix test --provider rocshmem --ranks 1,8 \
                 --timeout 120s --grace 1500ms"
            )
        );
    }

    #[test]
    fn podman_pulls_over_plain_http_from_loopback_with_its_own_limits() {
        let (log, address) = pull_then_reuse(Engine::Podman, "podman", &debian());
        let remote = format!("{address}/symmem-debian:{TAG}");
        assert!(
            log.contains(&format!("pull --tls-verify=false {remote}")),
            "{log}"
        );
        assert_eq!(log.matches("pull ").count(), 1, "{log}");
        let run = log.lines().find(|l| l.starts_with("run ")).unwrap();
        assert!(run.contains("--ulimit=nofile=20000:20000"), "{run}");
    }

    #[test]
    fn a_pulled_image_built_for_another_tag_is_refused_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_oci(dir.path(), "docker", "", "fedcba9876543210");
        let e = error(Engine::Docker, &host(dir.path(), true));
        assert!(
            e.contains("says it was built for tag fedcba9876543210"),
            "{e}"
        );
        assert!(e.contains(&format!("not for {TAG}")), "{e}");
        let log = std::fs::read_to_string(log).unwrap();
        assert!(log.contains("rmi "), "{log}");
        assert!(!log.contains("run "), "{log}");
    }

    /// The error of a Docker pull that fails after `pull_first`.
    fn failed_pull(pull_first: &str) -> (String, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_oci(dir.path(), "docker", pull_first, TAG);
        let (_registry, address) = registry();
        let e = execute(
            &sh(),
            Engine::Docker,
            &model(),
            TAG,
            &from(&address),
            &host(dir.path(), true),
        )
        .unwrap_err();
        let log = std::fs::read_to_string(log).unwrap();
        (format!("{e:#}"), log, address)
    }

    #[test]
    fn pull_failures_name_the_registry_the_reason_and_the_local_build() {
        let build = format!(
            "docker build -f containers/Dockerfile --build-arg {}={TAG}",
            model::TAG_ARG
        );
        let cases = [
            (
                "echo 'manifest unknown' >&2; exit 1;",
                "has no image under this tag".to_string(),
            ),
            (
                "echo 'unauthorized: authentication required' >&2; exit 1;",
                "needs a login: `docker login 127.0.0.1:".to_string(),
            ),
            (
                "echo 'write /var/lib/docker/x: no space left on device' >&2; exit 1;",
                "the disk filled up".to_string(),
            ),
            ("kill -9 $$;", "it was interrupted".to_string()),
        ];
        for (pull_first, reason) in cases {
            let (e, log, address) = failed_pull(pull_first);
            assert!(e.contains(&format!("from the registry {address}")), "{e}");
            assert!(e.contains(&reason), "{pull_first}: {e}");
            assert!(e.contains(&build), "{e}");
            assert!(!log.contains("run "), "{log}");
        }
    }

    #[test]
    fn an_interrupted_pull_leaves_nothing_and_the_next_run_pulls_again() {
        let dir = tempfile::tempdir().unwrap();
        // The first pull is killed; later ones complete.
        let once = dir.path().join("interrupted");
        let log = fake_oci(
            dir.path(),
            "docker",
            &format!(
                "[ -f '{0}' ] || {{ : > '{0}'; kill -9 $$; }};",
                once.display()
            ),
            TAG,
        );
        let (_registry, address) = registry();
        let run = || {
            execute(
                &sh(),
                Engine::Docker,
                &model(),
                TAG,
                &from(&address),
                &host(dir.path(), true),
            )
        };
        assert!(format!("{:#}", run().unwrap_err()).contains("interrupted"));
        assert_eq!(run().unwrap(), 3);
        let log = std::fs::read_to_string(log).unwrap();
        assert_eq!(log.matches("pull ").count(), 2, "{log}");
    }

    #[test]
    fn a_registry_that_is_down_is_named_within_seconds_before_any_pull() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_oci(dir.path(), "docker", "", TAG);
        // Port 1 (tcpmux): nothing listens there, and no test can take it.
        let down = "127.0.0.1:1".to_string();
        for engine in [Engine::Docker, Engine::Apptainer] {
            if engine == Engine::Apptainer {
                fake_apptainer(dir.path(), "", 0, TAG);
            }
            let e = execute(
                &sh(),
                engine,
                &debian(),
                TAG,
                &from(&down),
                &host(dir.path(), true),
            )
            .unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains(&format!("the registry {down}")), "{e}");
            assert!(e.contains("the registry is down"), "{e}");
            assert!(
                e.contains("cargo xtask images base && cargo xtask images build"),
                "{e}"
            );
        }
        assert!(!std::fs::read_to_string(log).unwrap().contains("pull"));
    }

    #[test]
    fn apptainer_pulls_verifies_and_checks_the_sif_once_then_runs_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = fake_apptainer(dir.path(), "", 0, TAG);
        let model = model();
        let host = host(dir.path(), true);
        let (_registry, address) = registry();
        for _ in 0..2 {
            let code = execute(
                &sh(),
                Engine::Apptainer,
                &model,
                TAG,
                &from(&address),
                &host,
            )
            .unwrap();
            assert_eq!(code, 0);
        }
        let sif = host.cache.join(format!("symmem-rocm-{TAG}.sif"));
        assert!(sif.is_file());
        let partial = sif.with_extension("sif.partial");
        let log = std::fs::read_to_string(log).unwrap();
        assert_eq!(log.matches("pull ").count(), 1, "{log}");
        assert!(log.contains(&format!(
            "pull --no-https {} oras://{address}/symmem-rocm-sif:{TAG}",
            partial.display()
        )));
        assert!(log.contains(&format!(
            "verify --key {} {}",
            dir.path().join("pub.pem").display(),
            partial.display()
        )));
        assert!(log.contains(&format!(
            "exec --rocm --cleanenv --writable-tmpfs --pwd /opt/symmem {} symmem-matrix test",
            sif.display()
        )));
    }

    /// The error of an Apptainer pull with this fake, and what is left in the cache.
    fn failed_sif(
        pull_first: &str,
        verify: u8,
        label: &str,
        key: Option<SifKey>,
    ) -> (String, usize) {
        let dir = tempfile::tempdir().unwrap();
        fake_apptainer(dir.path(), pull_first, verify, label);
        let host = Host {
            sif_key: key,
            ..host(dir.path(), true)
        };
        let e = error(Engine::Apptainer, &host);
        let left = std::fs::read_dir(&host.cache).map_or(0, |d| d.count());
        (e, left)
    }

    #[test]
    fn a_sif_that_fails_a_check_or_its_pull_is_refused_and_nothing_is_left() {
        let key = || Some(SifKey::Public("/k/pub.pem".into()));
        let cases = [
            (
                "",
                255,
                TAG,
                "its signature does not verify with /k/pub.pem",
            ),
            ("", 0, "fedcba9876543210", "built for tag fedcba9876543210"),
            ("kill -9 $$;", 0, TAG, "it was interrupted"),
            (
                "echo x > \"$3\"; echo 'write: no space left on device' >&2; exit 1;",
                0,
                TAG,
                "the disk filled up",
            ),
            (
                "echo 'FATAL: oras: not found' >&2; exit 255;",
                0,
                TAG,
                "has no image under this tag",
            ),
        ];
        for (pull_first, verify, label, reason) in cases {
            let (e, left) = failed_sif(pull_first, verify, label, key());
            assert!(e.contains(reason), "{pull_first}: {e}");
            assert!(
                e.contains("cargo xtask images build --engine apptainer")
                    || e.contains("apptainer build --notest"),
                "{e}"
            );
            assert_eq!(left, 0, "a refused pull leaves nothing: {e}");
        }
        // Unsigned runs only when the user opts out.
        let (e, _) = failed_sif("", 255, TAG, None);
        assert!(e.contains(&format!("{}=PUBLIC.pem", SIF_KEY.name)), "{e}");
        let dir = tempfile::tempdir().unwrap();
        fake_apptainer(dir.path(), "", 255, TAG);
        let host = Host {
            sif_key: Some(SifKey::Unverified),
            ..host(dir.path(), true)
        };
        let (_registry, address) = registry();
        let code = execute(
            &sh(),
            Engine::Apptainer,
            &model(),
            TAG,
            &from(&address),
            &host,
        );
        assert_eq!(code.unwrap(), 0);
    }
}
