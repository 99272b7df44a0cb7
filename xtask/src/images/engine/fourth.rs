//! A fourth engine that exists only in tests, unlike the others in every word: that the
//! commands run it, pull for it and name it right, with nothing but this file, the variant
//! and its arm in `Engine::spec`, shows that they ask the engine and never match on it.

use super::{Debian, ImageFormat, Run, Spec};

pub const SPEC: Spec = Spec {
    name: "fourth",
    title: "Fourth",
    format: ImageFormat::Oci,
    run: Run {
        subcommand: &["container", "start", "--remove"],
        flags: &["--host-network"],
        gpu: &["--amd-gpus"],
        late: &[],
        bind: "--share",
        workdir: None,
    },
    version: &["--version"],
    check: &["info"],
    daemon: None,
    install: "install Fourth (it exists only in tests)",
    login: "fourth auth {host}",
    loopback: &["--plain-http"],
    build_flags: &[],
    debian: Debian::Loaded {
        from_docker: "docker save {image} | fourth load",
    },
    prune: "fourth prune",
    running: "fourth list",
    poses_as: None,
    bench_goal: 0.5,
    bench_help: "Fourth [default: `fourth` on PATH]",
};
