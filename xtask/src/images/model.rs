//! The ONE description of the images. The Dockerfile, the Apptainer definition, the
//! `.dockerignore`, the image tag and `cargo xtask test --container` all read it.

use crate::pins::Pins;
use crate::project::{Binary, MATRIX, Profile, RANK, RUN};
use symmem::ProviderKind;
use symmem::settings::SHIM_LIB;

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

/// The two bases the images are generated for, from this one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Base {
    /// AMD's published ROCm image (pins.toml `[images]`); builds rocSHMEM from the pin, Rust
    /// through rustup, crates from crates.io.
    Amd,
    /// A Debian sid root with Debian's ROCm, made here (`cargo xtask images base`: `.ci/sid-root` +
    /// `docker import`). Needs only the Debian mirror: Rust is this machine's pinned toolchain
    /// and the crates are vendored, both copied in through a staged build context; no
    /// rocSHMEM (its pinned source is on GitHub), so its default provider is `host`.
    Debian,
}

impl Base {
    pub const ALL: [Base; 2] = [Base::Amd, Base::Debian];

    /// The generated Dockerfile and Apptainer definition, relative to the repository root.
    pub fn files(self) -> (&'static str, &'static str) {
        match self {
            Base::Amd => ("containers/Dockerfile", "containers/symmem.def"),
            Base::Debian => (
                "containers/Dockerfile.debian",
                "containers/symmem-debian.def",
            ),
        }
    }
}

/// Debian sid packages of the Debian base: Debian's ROCm (HIP 6.4, hipcc 7, clang 21), what
/// the workspace build needs, and the PMIx client ([`PMIX_PACKAGE`]). The only copy of the
/// list: `.ci/real-hipcc` asks for it (`cargo xtask images base --packages`), so one sid root
/// made in CI serves both (its `ROOT.packages` file says which list a root was made with); a
/// change here remakes that root and changes the base's tag.
pub const DEBIAN_PACKAGES: &[&str] = &[
    "hipcc",
    "libamdhip64-dev",
    "libhsa-runtime-dev",
    "rocm-cmake",
    "rocm-device-libs-21",
    "cmake",
    "ninja-build",
    "git",
    "g++",
    "ca-certificates",
    PMIX_PACKAGE,
];

/// The PMIx client library the PMIx engine opens at run time: a job that `srun --mpi=pmix` or
/// `mpirun` starts in the image needs it in every rank.
pub const PMIX_LIBRARY: &str = symmem_pmix_sys::LIBRARY;
/// Its package in both bases (Debian sid and Ubuntu 24.04 name it so since the 64-bit time_t
/// transition; it Provides `libpmix2`). The client talks to older servers: sid's 7.0.0~rc1
/// passed the conformance checks against PMIx 4.2.2's (Open MPI 4.1.4's mpirun, Slurm 22.05's
/// srun), with the bindings made from 4.2.2's header.
pub const PMIX_PACKAGE: &str = "libpmix2t64";
/// The Debian suite and mirror of the base: those `.ci/sid-root` makes every root from (named
/// here for the base's label and tag).
pub const DEBIAN_SUITE: &str = "sid";
pub const DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";
/// Where the Debian base image is imported (never pushed: `localhost/` keeps Docker and
/// Podman from looking for it in a registry).
pub const DEBIAN_BASE_REPOSITORY: &str = "localhost/symmem/debian-rocm";
/// Where the Debian-base image is built (locally; `cargo xtask images publish` pushes it).
pub const DEBIAN_IMAGE_REPOSITORY: &str = "localhost/symmem/symmem-debian";
/// In the Debian image's staged build context: the toolchain and the vendored crates.
pub const CONTEXT_RUST: &str = "rust";
pub const CONTEXT_VENDOR: &str = "vendor";
/// In the staged context: the image inputs (the files the tag hashes, nothing else).
pub const CONTEXT_SOURCES: &str = "src";

/// The Debian base's tag: a hash of its suite, mirror and package list. Debian's sid keeps
/// only its newest versions, so the versions cannot be pinned; `cargo xtask images base`
/// records those it got (a label on the image and a file next to the root).
pub fn debian_base_tag() -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"symmem-debian-base-v1\0");
    hasher.update(DEBIAN_SUITE.as_bytes());
    hasher.update([0]);
    hasher.update(DEBIAN_MIRROR.as_bytes());
    hasher.update([0]);
    hasher.update(DEBIAN_PACKAGES.join(",").as_bytes());
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    hex[..16].to_string()
}

pub fn debian_base_image() -> String {
    format!("{DEBIAN_BASE_REPOSITORY}:{}", debian_base_tag())
}

/// A published image reference with its registry spelled out: Podman rejects short names
/// such as `rocm/dev-ubuntu-24.04` ("short-name resolution enforced"), Docker reads both.
pub fn qualified(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let has_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_registry {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

/// Debian packages the builds need on top of AMD's ROCm image: git, CMake >= 3.20 and Ninja for
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

/// Everything the renderers need, derived from the pins and the base alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub base: Base,
    pub base_image: String,
    /// Apptainer's bootstrap agent for the base (`docker`: a registry; `docker-daemon`: the
    /// local engine's image store).
    pub bootstrap: &'static str,
    /// What the base says about ROCm (for %help).
    pub rocm: String,
    pub rust_toolchain: String,
    pub rocshmem_version: String,
    pub rocshmem_commit: String,
    /// The image's name in a registry (`REGISTRY/NAME:TAG`, `oras://REGISTRY/NAME-sif:TAG`).
    pub name: &'static str,
    /// The registry the images are published to (pins.toml `[images] registry`, unchecked:
    /// [`super::registry::Registry::choose`] reads it).
    pub registry: String,
    /// Where a local build puts the Docker image (without the tag).
    pub docker_repository: String,
    /// The provider the image runs when none is given (`rocshmem` where it has rocSHMEM).
    pub default_provider: ProviderKind,
    pub args: Vec<BuildArg>,
    pub labels: Vec<(String, String)>,
    /// Environment of both the build and the running image.
    pub env: Vec<(String, String)>,
    /// Build-context entries copied into the image before the system steps (context path,
    /// image path).
    pub copies: Vec<(String, String)>,
    /// Where the image inputs are in the build context (`.`: the repository root).
    pub sources: String,
    /// Steps before the workspace is copied in.
    pub system_steps: Vec<Step>,
    /// Steps after it.
    pub build_steps: Vec<Step>,
    /// Apptainer `%test` and Docker `HEALTHCHECK`: the 1-rank check, arguments to
    /// `symmem-matrix test`.
    pub test_args: Vec<String>,
}

pub const ARCH: &str = "ARCH";
/// The images' build argument with the tag (Docker `ARG`, Apptainer `{{ }}`): a name of the
/// container files, not a symmem setting (no process reads it from its environment), named
/// here once (the settings tidy test allows it here only).
pub const TAG_ARG: &str = "SYMMEM_IMAGE_TAG";

/// The cargo configuration of the Debian image: the vendored crates, never the network.
fn offline_cargo_config() -> String {
    let lines = [
        "[source.crates-io]".to_string(),
        "replace-with = \"vendored-sources\"".to_string(),
        "[source.vendored-sources]".to_string(),
        format!("directory = \"/opt/{CONTEXT_VENDOR}\""),
        "[net]".to_string(),
        "offline = true".to_string(),
    ];
    let quoted: Vec<String> = lines.iter().map(|l| format!("'{l}'")).collect();
    format!(
        "printf '%s\\n' {} > \"$CARGO_HOME/config.toml\"",
        quoted.join(" ")
    )
}

/// The cargo profile of the programs the images install (Cargo.toml's `[profile.image]`).
pub const INSTALL_PROFILE: &str = Profile::Image.cargo_name();
/// The programs the images run, installed into [`BIN`] from an [`INSTALL_PROFILE`] build: the
/// matrix, the rank binary it starts, and the launcher for users' own rank programs.
pub const INSTALLED: &[Binary] = &[MATRIX, RANK, RUN];
/// Where the images install [`INSTALLED`] (on every PATH).
pub const BIN: &str = "/usr/local/bin";
/// Where the AMD image installs the rocSHMEM shim (named by `SYMMEM_SHIM_LIB`).
pub const LIB: &str = "/usr/local/lib";
/// The matrix as the images run it: the installed binary, no cargo.
pub const MATRIX_TEST: [&str; 2] = ["symmem-matrix", "test"];

/// The build argument with the tag, the same in both images.
fn tag_build_arg() -> BuildArg {
    BuildArg {
        name: TAG_ARG,
        default: String::new(),
        help: "The image tag (cargo xtask images tag): when given, the build fails unless the \
               copied inputs hash to it.",
    }
}

/// The labels every image has, before its own.
fn common_labels(title: &str, description: &str) -> Vec<(String, String)> {
    vec![
        ("org.opencontainers.image.title".into(), title.into()),
        (
            "org.opencontainers.image.description".into(),
            description.into(),
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
    ]
}

fn owned_env(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The build step that proves the image has a PMIx client symmem can use:
/// [`pmix_check_command`] over [`PMIX_LIBRARY`] and every function the bindings resolve
/// ([`symmem_pmix_sys::FUNCTIONS`]), after the package's version for the build log.
fn pmix_client_step() -> Step {
    Step {
        title: format!(
            "The PMIx client ({PMIX_PACKAGE}), for jobs srun --mpi=pmix or mpirun start: \
             {PMIX_LIBRARY} must load and have every function symmem calls"
        ),
        commands: vec![
            format!("dpkg-query -W {PMIX_PACKAGE}"),
            pmix_check_command(PMIX_LIBRARY, symmem_pmix_sys::FUNCTIONS),
        ],
    }
}

/// A shell command that fails unless `library` opens, every symbol resolved as the dynamic
/// loader would (`PERL_DL_NONLAZY`: a missing dependency fails here, not in a user's job), and
/// exports each of `functions`, as the bindings' loader wants. Perl's DynaLoader does the
/// dlopen: perl-base is essential in both bases, so the check needs nothing installed.
fn pmix_check_command(library: &str, functions: &[&str]) -> String {
    // DynaLoader's error ends with where the script failed ("at -e line 1."): cut off.
    let code = "my $lib = shift; \
                my $h = DynaLoader::dl_load_file($lib, 0) or die \"cannot load the PMIx client: \", \
                DynaLoader::dl_error() =~ s/ at -e line.*//sr, \"\\n\"; \
                for my $f (@ARGV) { DynaLoader::dl_find_symbol($h, $f) or die \"$lib lacks $f\\n\" } \
                print \"$lib loads, with the \", scalar(@ARGV), \" functions symmem calls\\n\"";
    format!(
        "PERL_DL_NONLAZY=1 perl -MDynaLoader -e '{code}' {library} {}",
        functions.join(" ")
    )
}

/// The build step that proves the copied inputs hash to the tag build argument.
fn tag_check() -> String {
    format!("cargo xtask images tag --expect-tag \"@{TAG_ARG}@\" > /etc/symmem-image-tag")
}

/// The commands that install [`INSTALLED`] into [`BIN`]: a build of them alone with the
/// `image` profile (Cargo.toml: optimized, the checks of a debug build kept), stripped.
/// Optimized, not the workspace's debug build: an Apptainer run mounts the image anew, so
/// every run reads and unpacks from the squashfs what its programs touch, and the debug
/// programs were 13.9 MB (docs/benchmarks.md). The build's folder is removed: the image keeps
/// the debug one for developers.
fn install_programs() -> Vec<String> {
    let mut selection = String::new();
    for b in INSTALLED {
        selection.push_str(&format!(" --package {} --bin {}", b.package, b.bin));
    }
    let built: Vec<String> = INSTALLED
        .iter()
        .map(|b| format!("{WORKDIR}/target/{INSTALL_PROFILE}/{}", b.bin))
        .collect();
    vec![
        format!("cargo build --locked --profile {INSTALL_PROFILE}{selection}"),
        format!("install -s -m 0755 {} {BIN}/", built.join(" ")),
        format!("rm -rf {WORKDIR}/target/{INSTALL_PROFILE}"),
    ]
}

/// The last build step of both images: the workspace, the programs installed, `target/`
/// writable for a developer's cargo inside.
fn workspace_step(title: &str, builds: &[&str], extra: &[String]) -> Step {
    let mut commands: Vec<String> = builds.iter().map(|b| b.to_string()).collect();
    // The rank binary as `cargo xtask test` builds it, so that a developer's first run in the
    // image builds nothing.
    commands
        .push("cargo build --locked --package symmem-conformance --bin symmem-conformance".into());
    commands.extend(install_programs());
    commands.extend(extra.iter().cloned());
    commands.push(format!("chmod -R a+rwX {WORKDIR}/target \"$CARGO_HOME\""));
    Step {
        title: title.into(),
        commands,
    }
}

/// The AMD image's steps before the workspace is copied in: packages, Rust through rustup.
fn amd_system_steps(rust: &str) -> Vec<Step> {
    vec![
        Step {
            title: "System packages for the builds".into(),
            commands: vec![
                "apt-get update".into(),
                format!(
                    "apt-get install -y --no-install-recommends {} {PMIX_PACKAGE}",
                    PACKAGES.join(" ")
                ),
                "rm -rf /var/lib/apt/lists/*".into(),
            ],
        },
        pmix_client_step(),
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
    ]
}

/// The AMD image's steps after: the tag check, rocSHMEM, the shim, the workspace, the programs
/// and the shim installed (build-shim prints where it put the library).
fn amd_build_steps() -> Vec<Step> {
    vec![
        Step {
            title: format!(
                "Dependencies, then the image tag: the copied inputs must hash to {TAG_ARG}"
            ),
            commands: vec!["cargo fetch --locked".into(), tag_check()],
        },
        Step {
            title: "rocSHMEM from the pin (the installer developers and Nix use), linked at \
                    ROCSHMEM_HOME"
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
        workspace_step(
            "The GPU shim against it and the workspace; the matrix, the rank binary, \
             symmem-run and the shim installed (runs need no cargo); target/ writable for \
             non-root cargo",
            &[
                "shim=\"$(cargo xtask build-shim --backend rocshmem)\"",
                "cargo build --locked --workspace",
            ],
            &[format!("install -m 0644 \"$shim\" {LIB}/")],
        ),
    ]
}

impl Model {
    /// The model of `base`, from the checkout at `root` (its pins.toml).
    pub fn load(root: &std::path::Path, base: Base) -> anyhow::Result<Self> {
        Self::new(&Pins::load(&root.join("pins.toml"))?, base)
    }

    /// The models of every base.
    pub fn load_all(root: &std::path::Path) -> anyhow::Result<Vec<Self>> {
        Base::ALL.iter().map(|&b| Self::load(root, b)).collect()
    }

    pub fn new(pins: &Pins, base: Base) -> anyhow::Result<Self> {
        match base {
            Base::Amd => Self::amd(pins),
            Base::Debian => Ok(Self::debian(pins)),
        }
    }

    /// The model's fields that follow from the pins and the provider alone.
    fn with(pins: &Pins, base: Base, base_image: String, default_provider: ProviderKind) -> Self {
        Self {
            base,
            base_image,
            bootstrap: "docker",
            rocm: String::new(),
            rust_toolchain: pins.rust.toolchain.clone(),
            rocshmem_version: pins.rocshmem.version.clone(),
            rocshmem_commit: pins.rocshmem.commit.clone(),
            name: "",
            registry: pins
                .images()
                .map(|i| i.registry.clone())
                .unwrap_or_default(),
            docker_repository: String::new(),
            default_provider,
            args: Vec::new(),
            labels: Vec::new(),
            env: Vec::new(),
            copies: Vec::new(),
            sources: ".".into(),
            system_steps: Vec::new(),
            build_steps: Vec::new(),
            test_args: ["--provider", default_provider.name(), "--ranks", "1"]
                .map(String::from)
                .to_vec(),
        }
    }

    /// On AMD's published ROCm image: rocSHMEM from the pin, Rust through rustup.
    fn amd(pins: &Pins) -> anyhow::Result<Self> {
        let images = pins.images()?;
        let rust = &pins.rust.toolchain;
        let base_image = qualified(&images.base_image());
        let mut model = Self::with(pins, Base::Amd, base_image.clone(), ProviderKind::Rocshmem);
        model.rocm = format!("ROCm {}", images.rocm);
        model.name = "symmem-rocm";
        model.docker_repository = format!("{}/{}", images.registry, model.name);
        model.args = vec![
            BuildArg {
                name: ARCH,
                default: images.arch.clone(),
                help: "GPU targets for rocSHMEM and the shim (cargo xtask build-rocshmem --arch).",
            },
            tag_build_arg(),
        ];
        model.labels = common_labels(
            "symmem-rocm",
            "symmem with rocSHMEM (IPC) and its GPU shim, built for ARCH; runs the conformance \
             matrix",
        );
        model.labels.extend([
            ("io.github.symmem.arch".into(), format!("@{ARCH}@")),
            ("io.github.symmem.base".into(), base_image),
            (
                "io.github.symmem.rocshmem".into(),
                pins.rocshmem.version.clone(),
            ),
            (
                "io.github.symmem.rocshmem.commit".into(),
                pins.rocshmem.commit.clone(),
            ),
            ("io.github.symmem.rust".into(), rust.clone()),
        ]);
        let shim = ProviderKind::Rocshmem.shim_library().unwrap_or_default();
        let shim_env = format!("{LIB}/{shim}");
        model.env = owned_env(&[
            ("ROCM_PATH", "/opt/rocm"),
            ("RUSTUP_HOME", "/usr/local/rustup"),
            ("CARGO_HOME", "/usr/local/cargo"),
            ("PATH", "/usr/local/cargo/bin:/opt/rocm/bin:$PATH"),
            ("ROCSHMEM_HOME", "/opt/rocshmem"),
            // rocSHMEM's unique-id bootstrap between the ranks of one container.
            ("ROCSHMEM_BOOTSTRAP_SOCKET_IFNAME", "lo"),
            ("ROCSHMEM_BOOTSTRAP_TIMEOUT", "120"),
            // The installed shim, for the installed rank binary.
            (SHIM_LIB.name, &shim_env),
        ]);
        model.system_steps = amd_system_steps(rust);
        model.build_steps = amd_build_steps();
        Ok(model)
    }

    /// On Debian sid's ROCm, made here: an offline build from a staged context.
    fn debian(pins: &Pins) -> Self {
        let rust = &pins.rust.toolchain;
        let base_image = debian_base_image();
        let mut model = Self::with(pins, Base::Debian, base_image.clone(), ProviderKind::Host);
        model.bootstrap = "docker-daemon";
        model.rocm = "Debian sid's ROCm (HIP 6.4, in /usr)".into();
        model.name = "symmem-debian";
        model.docker_repository = DEBIAN_IMAGE_REPOSITORY.into();
        model.args = vec![tag_build_arg()];
        model.labels = common_labels(
            "symmem-debian",
            "symmem on Debian sid's ROCm, built offline (vendored crates, a copied toolchain); \
             no rocSHMEM; runs the host-provider conformance matrix",
        );
        model.labels.extend([
            ("io.github.symmem.base".into(), base_image),
            ("io.github.symmem.rust".into(), rust.clone()),
        ]);
        // Debian's ROCm is in /usr and its clang finds its device libraries only while
        // ROCM_PATH is unset (exporting ROCM_PATH=/usr breaks it): no ROCM_PATH here.
        model.env = owned_env(&[
            ("CARGO_HOME", "/usr/local/cargo"),
            ("PATH", "/usr/local/rust/bin:/usr/local/cargo/bin:$PATH"),
        ]);
        model.copies = vec![
            (CONTEXT_RUST.to_string(), "/usr/local/rust".to_string()),
            (CONTEXT_VENDOR.to_string(), format!("/opt/{CONTEXT_VENDOR}")),
        ];
        model.sources = CONTEXT_SOURCES.into();
        model.system_steps = vec![
            Step {
                title: format!(
                    "Rust {rust} (the builder's pinned toolchain, copied in) and the vendored \
                 crates: no network"
                ),
                commands: vec![
                    "mkdir -p \"$CARGO_HOME\"".into(),
                    offline_cargo_config(),
                    format!("rustc --version | grep -q '^rustc {rust} '"),
                    "cargo --version".into(),
                ],
            },
            // The PMIx client is in the base (DEBIAN_PACKAGES).
            pmix_client_step(),
        ];
        model.build_steps = vec![
            Step {
                title: format!("The image tag: the copied inputs must hash to {TAG_ARG}"),
                commands: vec![tag_check()],
            },
            workspace_step(
                "The workspace (the Python bindings need a Python: not here); the matrix, the \
                 rank binary and symmem-run installed (runs need no cargo); target/ writable \
                 for non-root cargo",
                &["cargo build --locked --workspace --exclude symmem-py"],
                &[],
            ),
        ];
        model
    }

    /// Apptainer's `%test` and Docker's `HEALTHCHECK`: the 1-rank matrix, installed binary.
    pub fn test_command(&self) -> Vec<String> {
        let mut command: Vec<String> = MATRIX_TEST.map(String::from).to_vec();
        command.extend(self.test_args.iter().cloned());
        command
    }

    /// The image's default command: the conformance matrix with its default provider.
    pub fn command(&self) -> Vec<String> {
        Self::matrix_test(self.default_provider, &[])
    }

    /// `symmem-matrix test --provider PROVIDER REST` as it runs inside the images.
    pub fn matrix_test(provider: ProviderKind, rest: &[String]) -> Vec<String> {
        let mut command: Vec<String> = MATRIX_TEST.map(String::from).to_vec();
        command.extend(["--provider".into(), provider.name().into()]);
        command.extend(rest.iter().cloned());
        command
    }

    pub fn default_arch(&self) -> Option<&str> {
        self.args
            .iter()
            .find(|a| a.name == ARCH)
            .map(|a| a.default.as_str())
    }

    /// The Docker image reference for a tag.
    pub fn docker_image(&self, tag: &str) -> String {
        format!("{}:{tag}", self.docker_repository)
    }

    /// The local SIF's file name for a tag.
    pub fn sif_name(&self, tag: &str) -> String {
        format!("{}-{tag}.sif", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::project_root;
    use std::collections::BTreeSet;
    use xshell::{Shell, cmd};

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
        let sh = Shell::new().unwrap();
        let output = cmd!(sh, "git -C {root} ls-files -z")
            .quiet()
            .ignore_status()
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
                 xtask/src/images/model.rs, then run `cargo xtask codegen`"
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

    /// Both images get the PMIx client and check at build time that it loads with every
    /// function the bindings resolve, before anything is built.
    #[test]
    fn both_images_install_the_pmix_client_and_check_that_it_loads() {
        use crate::images::{render, tests};
        assert!(DEBIAN_PACKAGES.contains(&PMIX_PACKAGE));
        let check = pmix_check_command(PMIX_LIBRARY, symmem_pmix_sys::FUNCTIONS);
        for model in [tests::model(), tests::debian()] {
            for text in [render::dockerfile(&model), render::apptainer_def(&model)] {
                let at = text.find(&check).expect("the PMIx check");
                assert!(text.contains(&format!("dpkg-query -W {PMIX_PACKAGE}")));
                assert!(at < text.find("images tag --expect-tag").unwrap());
            }
        }
        for function in symmem_pmix_sys::FUNCTIONS {
            assert!(check.contains(&format!(" {function}")), "{function}");
        }
        // The AMD image installs it from Ubuntu's archive; the Debian one has it in its base.
        let amd = render::dockerfile(&tests::model());
        let install = amd.lines().find(|l| l.contains("apt-get install")).unwrap();
        assert!(
            install.ends_with(&format!(" {PMIX_PACKAGE} \\")),
            "{install}"
        );
        let debian = render::dockerfile(&tests::debian());
        assert!(!debian.contains("apt-get"), "{debian}");
    }

    /// The check itself, run on this machine against the C library: it passes where every
    /// function is there and names what fails. Perl is essential on Debian and Ubuntu (CI's
    /// machine and both bases); where there is none (a Nix build's sandbox), this is skipped.
    #[test]
    fn the_pmix_check_names_a_missing_library_or_function() {
        let sh = Shell::new().unwrap();
        if cmd!(sh, "perl -e 1")
            .quiet()
            .ignore_status()
            .output()
            .is_err()
        {
            eprintln!("SKIPPED: no perl on PATH");
            return;
        }
        let run = |library: &str, functions: &[&str]| {
            let script = pmix_check_command(library, functions);
            let out = cmd!(sh, "sh -c {script}")
                .quiet()
                .ignore_status()
                .output()
                .unwrap();
            let text = |b: Vec<u8>| String::from_utf8(b).unwrap().trim().to_string();
            (out.status.success(), text(out.stdout), text(out.stderr))
        };
        assert_eq!(
            run("libc.so.6", &["malloc", "free"]),
            (
                true,
                "libc.so.6 loads, with the 2 functions symmem calls".into(),
                String::new()
            )
        );
        assert_eq!(
            run("libc.so.6", &["malloc", "PMIx_Init"]),
            (false, String::new(), "libc.so.6 lacks PMIx_Init".into())
        );
        let (ok, _, err) = run("libsymmem-none.so.2", &["PMIx_Init"]);
        assert!(!ok);
        assert_eq!(
            err,
            "cannot load the PMIx client: libsymmem-none.so.2: cannot open shared object file: \
             No such file or directory"
        );
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
