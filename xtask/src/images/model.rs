//! The ONE description of the images. The Dockerfile, the Apptainer definition, the
//! `.dockerignore`, the image tag and `cargo xtask test --container` all read it.

use crate::pins::Pins;

/// Where the workspace lives inside both images.
pub const WORKDIR: &str = "/opt/symmem";

/// Repository entries (files and folders at the root) copied into the images: the Docker
/// build context (`.dockerignore`), Apptainer's `%files` and the tag's hash all use this list.
pub const INPUTS: &[&str] = &[
    ".cargo",
    "Cargo.lock",
    "Cargo.toml",
    "containers",
    "crates",
    "pins.toml",
    "rust-toolchain.toml",
    "xtask",
];

/// Root entries that do not go into the images. Every tracked root entry must be in
/// [`INPUTS`] or here (a test checks it), so a new top-level folder cannot be forgotten.
#[allow(dead_code, reason = "read by the classification test")]
pub const OUTSIDE: &[&str] = &[
    ".ci",
    ".dockerignore",
    ".github",
    ".gitignore",
    "docs",
    "flake.lock",
    "flake.nix",
    "nix",
    "scripts",
];

/// Root entries that builds create next to the sources and that no source tree tracks: cargo's
/// `target`, git's `.git`, and `.cargo-home`, crane's CARGO_HOME inside a Nix build's copy of
/// the sources (which has no `.git` to tell tracked files from the rest).
#[allow(dead_code, reason = "read by the classification test")]
pub const BUILD_STATE: &[&str] = &["target", ".git", ".cargo-home"];

/// Inside the inputs, what neither goes into the Docker context nor counts for the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exclude {
    /// A folder or file with this name at any depth.
    Name(&'static str),
    /// A file whose name ends so.
    Suffix(&'static str),
}

/// Build outputs, docs (Markdown) and editor leftovers.
pub const EXCLUDES: &[Exclude] = &[
    Exclude::Name("target"),
    Exclude::Name(".git"),
    Exclude::Suffix(".md"),
    Exclude::Suffix("~"),
    Exclude::Suffix(".swp"),
];

impl Exclude {
    pub fn matches(self, name: &str) -> bool {
        match self {
            Exclude::Name(n) => name == n,
            Exclude::Suffix(s) => name.ends_with(s),
        }
    }

    /// The same rule as a `.dockerignore` pattern.
    pub fn dockerignore(self) -> String {
        match self {
            Exclude::Name(n) => format!("**/{n}"),
            Exclude::Suffix(s) => format!("**/*{s}"),
        }
    }
}

/// Whether a path (relative, `/`-separated) inside the inputs is excluded.
pub fn excluded(relative: &str) -> bool {
    relative
        .split('/')
        .any(|part| EXCLUDES.iter().any(|e| e.matches(part)))
}

/// Debian packages the builds need on top of the ROCm image: git, CMake >= 3.20 and Ninja for
/// rocSHMEM and the shim, curl for rustup, a C toolchain for the workspace.
pub const PACKAGES: &[&str] = &[
    "build-essential",
    "ca-certificates",
    "cmake",
    "curl",
    "git",
    "ninja-build",
    "pkg-config",
];

/// `docker run` flags for ROCm GPUs (KFD and DRI devices, the video group, host IPC and a large
/// /dev/shm for the ranks, ptrace for cross-memory attach, unlimited locked memory), with an
/// init process that forwards signals and reaps the ranks.
pub const DOCKER_RUN_FLAGS: &[&str] = &[
    "--init",
    "--device=/dev/kfd",
    "--device=/dev/dri",
    "--group-add=video",
    "--security-opt=seccomp=unconfined",
    "--cap-add=SYS_PTRACE",
    "--ipc=host",
    "--shm-size=16G",
    "--ulimit=memlock=-1",
];

/// `apptainer exec|run|test` flags: `--rocm` binds the host's GPU devices and driver libraries;
/// the image is read-only and cargo locks its target folder, hence a writable tmpfs overlay.
pub const APPTAINER_RUN_FLAGS: &[&str] = &["--rocm", "--cleanenv", "--writable-tmpfs"];

/// A build argument: Docker `ARG`, Apptainer `%arguments`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildArg {
    pub name: &'static str,
    pub default: String,
    pub help: &'static str,
}

/// One build step: a comment and shell commands run in order (one Docker `RUN`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub title: String,
    /// Commands; `@NAME@` stands for build argument NAME.
    pub commands: Vec<String>,
}

/// Everything the renderers need, derived from the pins alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub base_image: String,
    pub rocm: String,
    pub rust_toolchain: String,
    pub rocshmem_version: String,
    pub rocshmem_commit: String,
    pub docker_repository: String,
    pub apptainer_repository: String,
    pub args: Vec<BuildArg>,
    pub labels: Vec<(String, String)>,
    /// Environment of both the build and the running image.
    pub env: Vec<(String, String)>,
    /// Steps before the workspace is copied in.
    pub system_steps: Vec<Step>,
    /// Steps after it.
    pub build_steps: Vec<Step>,
    /// The default command (Docker `CMD`, Apptainer `%runscript` with the caller's arguments).
    pub command: Vec<String>,
    /// Apptainer `%test`: the 1-rank check.
    pub test_command: Vec<String>,
}

pub const ARCH: &str = "ARCH";
pub const TAG_ARG: &str = "SYMMEM_IMAGE_TAG";

impl Model {
    pub fn new(pins: &Pins) -> anyhow::Result<Self> {
        let images = pins.images()?;
        let rust = &pins.rust.toolchain;
        let args = vec![
            BuildArg {
                name: ARCH,
                default: images.arch.clone(),
                help: "GPU targets for rocSHMEM and the shim (cargo xtask build-rocshmem --arch).",
            },
            BuildArg {
                name: TAG_ARG,
                default: String::new(),
                help: "The image tag (cargo xtask images --tag): when given, the build fails \
                       unless the copied inputs hash to it.",
            },
        ];
        let labels = vec![
            (
                "org.opencontainers.image.title".into(),
                "symmem-rocm".into(),
            ),
            (
                "org.opencontainers.image.description".into(),
                "symmem with rocSHMEM (IPC) and its GPU shim, built for ARCH; runs the \
                 conformance matrix"
                    .into(),
            ),
            (
                "org.opencontainers.image.source".into(),
                "https://github.com/symmem/symmem".into(),
            ),
            (
                "org.opencontainers.image.version".into(),
                format!("@{TAG_ARG}@"),
            ),
            ("io.github.symmem.image-tag".into(), format!("@{TAG_ARG}@")),
            ("io.github.symmem.arch".into(), format!("@{ARCH}@")),
            ("io.github.symmem.base".into(), images.base_image()),
            (
                "io.github.symmem.rocshmem".into(),
                pins.rocshmem.version.clone(),
            ),
            (
                "io.github.symmem.rocshmem.commit".into(),
                pins.rocshmem.commit.clone(),
            ),
            ("io.github.symmem.rust".into(), rust.clone()),
        ];
        let env = [
            ("ROCM_PATH", "/opt/rocm"),
            ("RUSTUP_HOME", "/usr/local/rustup"),
            ("CARGO_HOME", "/usr/local/cargo"),
            ("PATH", "/usr/local/cargo/bin:/opt/rocm/bin:$PATH"),
            ("ROCSHMEM_HOME", "/opt/rocshmem"),
            // rocSHMEM's unique-id bootstrap between the ranks of one container.
            ("ROCSHMEM_BOOTSTRAP_SOCKET_IFNAME", "lo"),
            ("ROCSHMEM_BOOTSTRAP_TIMEOUT", "120"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
        let system_steps = vec![
            Step {
                title: "System packages for the builds".into(),
                commands: vec![
                    "apt-get update".into(),
                    format!(
                        "apt-get install -y --no-install-recommends {}",
                        PACKAGES.join(" ")
                    ),
                    "rm -rf /var/lib/apt/lists/*".into(),
                ],
            },
            Step {
                title: format!("Rust {rust}, as pinned in pins.toml and rust-toolchain.toml"),
                commands: vec![
                    "curl --proto '=https' --tlsv1.2 -sSf -o /tmp/rustup-init.sh \
                     https://sh.rustup.rs"
                        .into(),
                    format!(
                        "sh /tmp/rustup-init.sh -y --no-modify-path --profile minimal \
                         --default-toolchain {rust} --component rustfmt,clippy"
                    ),
                    "rm /tmp/rustup-init.sh".into(),
                    "rustc --version".into(),
                ],
            },
        ];
        let build_steps = vec![
            Step {
                title: "Dependencies, then the image tag: the copied inputs must hash to \
                        SYMMEM_IMAGE_TAG"
                    .into(),
                commands: vec![
                    "cargo fetch --locked".into(),
                    format!(
                        "cargo xtask images --tag --expect-tag \"@{TAG_ARG}@\" > \
                         /etc/symmem-image-tag"
                    ),
                ],
            },
            Step {
                title: "rocSHMEM from the pin (the installer developers and Nix use), linked \
                        at ROCSHMEM_HOME"
                    .into(),
                commands: vec![
                    format!("cargo xtask build-rocshmem --arch \"@{ARCH}@\""),
                    format!(
                        "prefix=\"$(cargo xtask build-rocshmem --arch \"@{ARCH}@\" \
                         --print-prefix)\""
                    ),
                    "ln -s \"$prefix\" /opt/rocshmem".into(),
                ],
            },
            Step {
                title: "The GPU shim against it, the workspace and the conformance rank \
                        binary; writable for non-root runs"
                    .into(),
                commands: vec![
                    "cargo xtask build-shim --backend rocshmem".into(),
                    "cargo build --locked --workspace".into(),
                    "cargo build --locked --package symmem-conformance --bin \
                     symmem-conformance"
                        .into(),
                    format!("chmod -R a+rwX {WORKDIR}/target \"$CARGO_HOME\""),
                ],
            },
        ];
        Ok(Self {
            base_image: images.base_image(),
            rocm: images.rocm.clone(),
            rust_toolchain: rust.clone(),
            rocshmem_version: pins.rocshmem.version.clone(),
            rocshmem_commit: pins.rocshmem.commit.clone(),
            docker_repository: images.docker.clone(),
            apptainer_repository: images.apptainer.clone(),
            args,
            labels,
            env,
            system_steps,
            build_steps,
            command: ["cargo", "xtask", "test", "--provider", "rocshmem"]
                .map(String::from)
                .to_vec(),
            test_command: [
                "cargo",
                "xtask",
                "test",
                "--provider",
                "rocshmem",
                "--ranks",
                "1",
            ]
            .map(String::from)
            .to_vec(),
        })
    }

    pub fn default_arch(&self) -> &str {
        &self.args[0].default
    }

    /// The Docker image reference for a tag.
    pub fn docker_image(&self, tag: &str) -> String {
        format!("{}:{tag}", self.docker_repository)
    }

    /// The Apptainer (ORAS) image reference for a tag.
    pub fn apptainer_image(&self, tag: &str) -> String {
        format!("{}:{tag}", self.apptainer_repository)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::project_root;
    use std::collections::BTreeSet;
    use std::process::Command;

    /// The root entries of a tree that is no git checkout, minus [`BUILD_STATE`].
    fn untracked_root_entries(root: &std::path::Path) -> BTreeSet<String> {
        std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !BUILD_STATE.contains(&name.as_str()))
            .collect()
    }

    #[test]
    fn build_state_in_a_tree_without_git_is_not_a_root_entry() {
        // As crane leaves a Nix build's copy of the sources: no .git, a .cargo-home.
        let tree = tempfile::tempdir().unwrap();
        for dir in [".cargo-home", "target", "crates"] {
            std::fs::create_dir(tree.path().join(dir)).unwrap();
        }
        std::fs::write(tree.path().join("Cargo.toml"), "").unwrap();
        let entries: Vec<String> = untracked_root_entries(tree.path()).into_iter().collect();
        assert_eq!(entries, ["Cargo.toml", "crates"]);
    }

    #[test]
    fn every_tracked_root_entry_is_either_an_image_input_or_declared_outside() {
        let root = project_root();
        // Tracked entries; where the tree is no git checkout (e.g. a Nix build), what is there.
        let output = Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["ls-files", "-z"])
            .output();
        let tracked: BTreeSet<String> = match output {
            Ok(output) if output.status.success() => output
                .stdout
                .split(|&b| b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let p = String::from_utf8_lossy(p);
                    p.split('/').next().unwrap().to_string()
                })
                .collect(),
            _ => untracked_root_entries(&root),
        };
        assert!(tracked.contains("Cargo.toml"), "{tracked:?}");
        for entry in &tracked {
            let known = INPUTS.contains(&entry.as_str())
                || OUTSIDE.contains(&entry.as_str())
                || entry.ends_with(".md");
            assert!(
                known,
                "root entry `{entry}` is neither an image input nor declared outside the \
                 images: add it to INPUTS (it changes the images) or OUTSIDE (it does not) in \
                 xtask/src/images/model.rs, then run `cargo xtask images`"
            );
        }
        for input in INPUTS {
            assert!(
                root.join(input).exists(),
                "image input `{input}` is missing from the repository: remove it from INPUTS \
                 in xtask/src/images/model.rs (Apptainer's %files would fail on it)"
            );
        }
    }

    #[test]
    fn exclusions() {
        assert!(excluded("crates/a/README.md"));
        assert!(excluded("crates/a/target/debug/x"));
        assert!(excluded("xtask/src/main.rs~"));
        assert!(!excluded("crates/a/src/lib.rs"));
        assert!(!excluded("crates/symmem-shim-sys/shim/rocshmem_shim.hip"));
        assert!(!excluded("crates/targets/src/lib.rs"));
    }
}
