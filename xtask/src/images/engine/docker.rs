//! Docker Engine's `docker` CLI: OCI images in the daemon's store, where `cargo xtask images
//! base` imports the Debian base and `cargo xtask images build` builds on it.

use super::{Debian, ImageFormat, Run, Spec};

/// `docker run` flags for every provider: an init process that forwards signals and reaps the
/// ranks, the host's IPC namespace (its /dev/shm, so no `--shm-size`: Podman refuses the two
/// together), ptrace for cross-memory attach, and the host's network: the ranks of a node meet
/// over Unix sockets in a folder, ranks on other nodes over the host's network, and Docker's
/// default bridge (a veth pair and firewall rules made and removed per run) was about 0.25 s
/// of every run's start and exit here (docs/benchmarks.md).
pub const RUN_FLAGS: &[&str] = &[
    "--init",
    "--security-opt=seccomp=unconfined",
    "--cap-add=SYS_PTRACE",
    "--ipc=host",
    "--network=host",
];

/// `docker run` flags added for GPU providers: the ROCm KFD and DRI devices, the video group,
/// unlimited locked memory (pinned buffers; an engine without the right to raise the limit,
/// as in a nested container, refuses to start any container that asks for it).
pub const GPU_FLAGS: &[&str] = &[
    "--device=/dev/kfd",
    "--device=/dev/dri",
    "--group-add=video",
    "--ulimit=memlock=-1",
];

/// `docker run --rm`: the container goes when the run ends.
pub const RUN: &[&str] = &["run", "--rm"];

/// Mounts a host file: `--volume=HOST:INSIDE:ro`.
pub const BIND: &str = "--volume";

pub const SPEC: Spec = Spec {
    name: "docker",
    title: "Docker",
    format: ImageFormat::Oci,
    run: Run {
        subcommand: RUN,
        flags: RUN_FLAGS,
        gpu: GPU_FLAGS,
        late: &[],
        bind: BIND,
        // The images set their WORKDIR.
        workdir: None,
    },
    version: &["--version"],
    // The client alone answers `--version`; the server's version needs the daemon.
    check: &["version", "--format", "{{.Server.Version}}"],
    daemon: Some(
        "start the daemon (`sudo systemctl start docker`), check DOCKER_HOST, or join the \
         `docker` group",
    ),
    install: "install Docker Engine (https://docs.docker.com/engine/install/, e.g. `sudo \
              apt-get install docker.io` on Debian/Ubuntu) and make sure your user may use it \
              (the `docker` group), or use --container apptainer on HPC clusters",
    login: "docker login {host}",
    // Docker allows plain HTTP to loopback registries by itself.
    loopback: &[],
    build_flags: &[],
    debian: Debian::Built { flags: &[] },
    prune: "docker system prune",
    running: "docker ps",
    poses_as: None,
    bench_goal: 0.5,
    bench_help: "Docker's CLI [default: `docker` on PATH, unless that is Podman's]",
};
