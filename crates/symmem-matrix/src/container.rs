//! `--container ENGINE IMAGE`: each rank runs in a container of its own, started on its node by
//! the launcher (srun, mpirun, or symmem's own), the way HPC sites run images:
//! `srun --mpi=pmix apptainer exec IMAGE symmem-conformance`. The matrix runs on the host,
//! where the launcher is; the rank binary is the image's.
//!
//! Each engine is data: the program the launcher starts, the words before the image, the
//! flags a GPU provider needs. What a rank needs from its node is the same for every engine:
//! the launcher's variables (who it is; PMIx's, to reach the launcher's server), the node's
//! network (the links between nodes, PMIx over loopback TCP), and the node's /tmp (a node's
//! ranks meet through a socket there).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use symmem::ProviderKind;

/// The rank binary inside the images (on their PATH).
const RANK_IN_IMAGE: &str = "symmem-conformance";

/// The container engines a rank can run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RankEngine {
    /// `apptainer exec IMAGE ...`: the host's environment, network, /tmp and user by default.
    Apptainer,
    /// `docker run IMAGE ...` with the host's network, IPC and /tmp, this user, and the
    /// launcher's variables passed by name.
    Docker,
}

/// Docker passes nothing of the caller's environment: this script, run by `sh -c` on the
/// rank's node, passes every variable a launcher or symmem sets (by name: `--env NAME` takes
/// its value from the caller) and the rest of what a rank needs, then runs the image with the
/// arguments that follow it (`$1` the engine's program, `$2` the image, `$3` the GPU flags,
/// one word each).
const DOCKER_RUN: &str = r#"docker=$1 image=$2 gpu=$3; shift 3
names=$(env | sed -n 's/^\(\(SLURM\|OMPI\|PMIX\|SYMMEM\)_[A-Za-z0-9_]*\|RANK\|WORLD_SIZE\|LOCAL_RANK\|LOCAL_WORLD_SIZE\|MASTER_ADDR\|MASTER_PORT\)=.*/--env=\1/p')
# shellcheck disable=SC2086 # one word per variable name and per flag
exec "$docker" run --rm --init --network=host --ipc=host --pid=host --volume=/tmp:/tmp \
  --user="$(id -u):$(id -g)" $names $gpu "$image" "$@""#;

/// A rank's container: the engine and the image (a SIF path or reference as the nodes see
/// it, or a Docker image reference).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankContainer {
    pub engine: RankEngine,
    /// The engine's program where a path named it (a wrapper, an engine off the nodes' PATH);
    /// else its name, looked up on the nodes.
    pub program: Option<PathBuf>,
    pub image: String,
}

impl RankContainer {
    /// From `--container ENGINE IMAGE`'s two values.
    pub fn parse(values: &[String]) -> anyhow::Result<Self> {
        let [engine, image] = values else {
            anyhow::bail!("--container takes two values: ENGINE (apptainer|docker) and IMAGE");
        };
        // A path names the program: its file name says which engine it is.
        let path = Path::new(engine);
        let program = engine.contains('/').then(|| path.to_path_buf());
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let engine = <RankEngine as clap::ValueEnum>::from_str(name, true).map_err(|_| {
            anyhow::anyhow!(
                "--container {engine}: the engine is apptainer or docker, or the path of either's \
                 program"
            )
        })?;
        Ok(Self {
            engine,
            program,
            image: image.clone(),
        })
    }

    /// The program every rank's launcher starts and its arguments up to the rank binary's own
    /// (`--provider ...` follows).
    pub fn command(&self, provider: ProviderKind) -> (PathBuf, Vec<OsString>) {
        let gpu = gpu_flags(self.engine, provider);
        let mut args: Vec<OsString> = Vec::new();
        let engine = self
            .program
            .clone()
            .unwrap_or_else(|| PathBuf::from(self.engine.name()));
        let program = match self.engine {
            RankEngine::Apptainer => {
                args.push("exec".into());
                args.extend(gpu.iter().map(OsString::from));
                args.push(self.image.clone().into());
                engine
            }
            RankEngine::Docker => {
                args.extend(["-c", DOCKER_RUN, "symmem-rank-in-docker"].map(OsString::from));
                args.push(engine.into());
                args.push(self.image.clone().into());
                args.push(gpu.join(" ").into());
                PathBuf::from("sh")
            }
        };
        args.push(RANK_IN_IMAGE.into());
        (program, args)
    }
}

impl RankEngine {
    /// Its program's name.
    fn name(self) -> &'static str {
        match self {
            Self::Apptainer => "apptainer",
            Self::Docker => "docker",
        }
    }
}

/// What gives a container `provider`'s GPUs.
fn gpu_flags(engine: RankEngine, provider: ProviderKind) -> Vec<&'static str> {
    match (engine, provider) {
        (_, ProviderKind::Host) => vec![],
        (RankEngine::Apptainer, ProviderKind::Rocshmem) => vec!["--rocm"],
        (RankEngine::Apptainer, ProviderKind::Nvshmem) => vec!["--nv"],
        (RankEngine::Docker, ProviderKind::Rocshmem) => {
            vec![
                "--device=/dev/kfd",
                "--device=/dev/dri",
                "--group-add=video",
            ]
        }
        (RankEngine::Docker, ProviderKind::Nvshmem) => vec!["--gpus=all"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: &RankContainer, p: ProviderKind) -> Vec<String> {
        let (program, args) = c.command(p);
        std::iter::once(program.display().to_string())
            .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect()
    }

    #[test]
    fn apptainer_execs_the_images_rank_binary_with_the_gpu_flag() {
        let c = RankContainer::parse(&["apptainer".into(), "/sif/symmem.sif".into()]).unwrap();
        assert_eq!(
            words(&c, ProviderKind::Host),
            ["apptainer", "exec", "/sif/symmem.sif", "symmem-conformance"]
        );
        assert_eq!(
            words(&c, ProviderKind::Rocshmem),
            [
                "apptainer",
                "exec",
                "--rocm",
                "/sif/symmem.sif",
                "symmem-conformance"
            ]
        );
    }

    #[test]
    fn docker_runs_a_script_that_passes_the_launchers_variables() {
        let c = RankContainer::parse(&["Docker".into(), "localhost/symmem:t".into()]).unwrap();
        let w = words(&c, ProviderKind::Nvshmem);
        assert_eq!(w[0], "sh");
        assert_eq!(
            &w[3..],
            [
                "symmem-rank-in-docker",
                "docker",
                "localhost/symmem:t",
                "--gpus=all",
                "symmem-conformance"
            ]
        );
        assert!(w[2].contains("--network=host") && w[2].contains("--volume=/tmp:/tmp"));
    }

    #[test]
    fn a_path_names_the_engines_program() {
        let c = RankContainer::parse(&["/ci/bin/apptainer".into(), "x.sif".into()]).unwrap();
        assert_eq!(
            words(&c, ProviderKind::Host)[..2],
            ["/ci/bin/apptainer", "exec"]
        );
        let e = RankContainer::parse(&["/ci/bin/podman".into(), "x".into()]).unwrap_err();
        assert!(
            e.to_string().contains("the path of either's program"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_engine_or_a_missing_image_is_refused() {
        let e = RankContainer::parse(&["podman".into(), "x".into()]).unwrap_err();
        assert!(e.to_string().contains("apptainer or docker"), "{e}");
        let e = RankContainer::parse(&["docker".into()]).unwrap_err();
        assert!(e.to_string().contains("two values"), "{e}");
    }
}
