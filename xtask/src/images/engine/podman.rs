//! Podman: Docker's CLI words and run flags, with limits of its own, a store of its own that the
//! Debian image is loaded into from Docker's, and `--tls-verify=false` for a loopback registry.
//! podman-docker installs it as `docker` too ([`super::Engine::actual`] tells).

use super::docker::{BIND, GPU_FLAGS, RUN, RUN_FLAGS};
use super::{Debian, ImageFormat, PosesAs, Run, Spec};

/// Podman's run flags beyond Docker's: explicit file and process limits (it does not inherit
/// Docker's defaults).
pub const LIMITS: &[&str] = &["--ulimit=nofile=20000:20000", "--ulimit=nproc=96362:96362"];

pub const SPEC: Spec = Spec {
    name: "podman",
    title: "Podman",
    format: ImageFormat::Oci,
    run: Run {
        subcommand: RUN,
        flags: RUN_FLAGS,
        gpu: GPU_FLAGS,
        late: LIMITS,
        bind: BIND,
        workdir: None,
    },
    version: &["--version"],
    check: &["--version"],
    daemon: None,
    install: "install Podman (https://podman.io/docs/installation, e.g. `sudo apt-get install \
              podman` on Debian/Ubuntu), or use --container docker|apptainer",
    login: "podman login {host}",
    loopback: &["--tls-verify=false"],
    // Docker's image format keeps the HEALTHCHECK (Podman's default, OCI, drops it).
    build_flags: &["--format", "docker"],
    // The Debian base is in Docker's store, so the image is built there and copied in.
    debian: Debian::Loaded {
        from_docker: "docker save {image} | podman load",
    },
    prune: "podman system prune",
    running: "podman ps",
    poses_as: Some(PosesAs {
        program: "docker",
        package: "podman-docker",
    }),
    bench_goal: 0.5,
    bench_help: "Podman, or podman-docker's `docker` [default: `podman` on PATH]",
};
