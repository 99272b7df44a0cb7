//! Apptainer: SIF files (kept in target/images/), pulled from and pushed to `oras://`
//! references, signed before a push and verified after a pull; the images' Apptainer
//! definitions (`render.rs`) use its flags.

use super::{Debian, ImageFormat, Run, Spec};

/// `apptainer exec|run|test` flags: the host's environment left out; a writable tmpfs overlay
/// on the read-only image, so that what runs inside may write beside the image's files (the
/// matrix writes only to /tmp and /dev/shm, but a developer's cargo locks `target/`).
pub const RUN_FLAGS: &[&str] = &["--cleanenv", "--writable-tmpfs"];

/// `apptainer build` flags: %test runs as a run does, with the same overlay.
pub const BUILD_FLAGS: &[&str] = &["--writable-tmpfs"];

/// Added for GPU providers: `--rocm` binds the host's GPU devices and driver libraries.
pub const GPU_FLAGS: &[&str] = &["--rocm"];

pub const SPEC: Spec = Spec {
    name: "apptainer",
    title: "Apptainer",
    format: ImageFormat::Sif,
    run: Run {
        subcommand: &["exec"],
        flags: &[],
        gpu: GPU_FLAGS,
        late: RUN_FLAGS,
        bind: "--bind",
        // A SIF starts where the caller is, not in its workdir.
        workdir: Some("--pwd"),
    },
    version: &["--version"],
    check: &["--version"],
    daemon: None,
    install: "install Apptainer >= 1.2 (https://apptainer.org/docs/admin/main/installation.html; \
              on clusters often `module load apptainer`), or use --container docker",
    login: "apptainer registry login --username USER oras://{host}",
    loopback: &["--no-https"],
    build_flags: BUILD_FLAGS,
    // From the staged context, with the base from Docker's store (`docker-daemon`):
    // `--fakeroot`, since a root without every capability (as in a container) cannot build
    // otherwise.
    debian: Debian::Built {
        flags: &["--force", "--fakeroot"],
    },
    prune: "apptainer cache clean",
    running: "apptainer instance list",
    poses_as: None,
    bench_goal: 0.3,
    bench_help: "Apptainer [default: `apptainer` on PATH]; runs target/images/symmem-debian-TAG.sif",
};
