//! Errors of [`launch`](crate::launch): the run could not be started, or not
//! cleaned up. A rank failing is not an error: it is an
//! [`Outcome`](crate::Outcome) of a run.

use std::io;
use std::path::PathBuf;

use symmem_process::{Lingering, SignalsError};

/// Why a run could not be started or cleaned up.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// `ranks` was 0.
    #[error("cannot launch 0 ranks; ask for at least 1 (e.g. `--ranks 2`)")]
    NoRanks,

    /// `ranks` was above [`MAX_RANKS`](crate::MAX_RANKS).
    #[error(
        "cannot launch {ranks} ranks: symmem-launch starts at most {max} ranks on one host; \
         for more, run the program under a cluster launcher (torchrun, mpirun, srun)"
    )]
    TooManyRanks {
        /// Ranks requested.
        ranks: usize,
        /// The limit, [`MAX_RANKS`](crate::MAX_RANKS).
        max: usize,
    },

    /// `rank_env` was neither empty nor one entry per rank.
    #[error(
        "rank_env has {entries} entr{} but the run has {}; give one entry per rank or leave \
         it empty",
        if *.entries == 1 { "y" } else { "ies" },
        symmem::count_ranks(*.ranks)
    )]
    RankEnvMismatch {
        /// Entries in `rank_env`.
        entries: usize,
        /// Ranks requested.
        ranks: usize,
    },

    /// The program does not exist.
    #[error("program `{}` not found: {hint}", program.display())]
    ProgramNotFound {
        /// The program as given.
        program: PathBuf,
        /// What was looked at and what to do.
        hint: String,
    },

    /// The program exists but cannot be executed.
    #[error("program `{}` cannot be executed: {reason}", path.display())]
    ProgramNotExecutable {
        /// The path that was found.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },

    // The underlying `io::Error`s below are part of each message and not
    // also exposed as `Error::source`: reporters that print the source chain
    // (anyhow's `{:#}`) would print them twice.
    /// The per-run rendezvous directory could not be created.
    #[error(
        "could not create the rendezvous directory in {}: {cause}; point TMPDIR at a \
         writable directory (symmem-run makes a fresh private one there for every run)",
        dir.display()
    )]
    Rendezvous {
        /// Where it was to be created.
        dir: PathBuf,
        /// The underlying error (in the message).
        cause: io::Error,
    },

    /// No free TCP port could be found for `MASTER_PORT`.
    #[error(
        "could not find a free TCP port on 127.0.0.1 for MASTER_PORT: {0}; check that the \
         loopback interface is up"
    )]
    Port(io::Error),

    /// The SIGINT/SIGTERM/SIGHUP handlers could not be installed.
    #[error("could not install the signal handlers that stop the ranks on Ctrl-C: {0}")]
    Signals(io::Error),

    /// The watchdog that ends the ranks' children if the launcher dies could not be started.
    #[error(
        "could not start the watchdog (/bin/sh) that ends what the ranks started if the \
         launcher itself is killed: {0}; the launcher needs /bin/sh and /dev/urandom"
    )]
    Watchdog(io::Error),

    /// A rank could not be started; the ranks already started were stopped.
    #[error(
        "could not start rank {rank} (`{}`): {cause}; the ranks already started were stopped",
        program.display()
    )]
    Spawn {
        /// The rank that failed to start.
        rank: usize,
        /// The program.
        program: PathBuf,
        /// The underlying error (in the message).
        cause: io::Error,
    },

    /// Waiting for a rank failed; all ranks were stopped.
    #[error("could not wait for rank {rank}: {cause}; all ranks were stopped")]
    Wait {
        /// The rank.
        rank: usize,
        /// The underlying error (in the message).
        cause: io::Error,
    },

    /// The layout does not fit the ranks, or the launcher cannot place it.
    #[error("{0}")]
    Layout(String),

    /// The cluster launcher (`mpirun`, `srun`) could not be started or watched.
    #[error(
        "could not run `{command}`: {cause}; check that it is installed and on PATH (Open MPI:          apt-get install openmpi-bin; Slurm: apt-get install slurm-client)"
    )]
    Launcher {
        /// The command line, for the message.
        command: String,
        /// The underlying error (in the message).
        cause: io::Error,
    },

    /// Processes of the run's process group survived `SIGKILL`.
    #[error("{}", Lingering { pgid: *pgid, pids: pids.clone() })]
    Leftover {
        /// The run's process group.
        pgid: i32,
        /// The processes still alive.
        pids: Vec<i32>,
    },
}

impl LaunchError {
    /// Whether the spec itself was wrong (no or too many ranks, a `rank_env` of the wrong
    /// length, a program that is not there or cannot run): the caller's mistake, which a
    /// command line reports as bad usage ([`EXIT_USAGE`](crate::EXIT_USAGE)), not a failure
    /// of the launcher.
    pub fn is_usage(&self) -> bool {
        match self {
            LaunchError::NoRanks
            | LaunchError::TooManyRanks { .. }
            | LaunchError::RankEnvMismatch { .. }
            | LaunchError::ProgramNotFound { .. }
            | LaunchError::ProgramNotExecutable { .. }
            | LaunchError::Layout(_) => true,
            LaunchError::Rendezvous { .. }
            | LaunchError::Port(_)
            | LaunchError::Signals(_)
            | LaunchError::Watchdog(_)
            | LaunchError::Spawn { .. }
            | LaunchError::Wait { .. }
            | LaunchError::Launcher { .. }
            | LaunchError::Leftover { .. } => false,
        }
    }
}

impl From<SignalsError> for LaunchError {
    fn from(e: SignalsError) -> Self {
        LaunchError::Signals(e.cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_mistakes_are_usage_errors_and_the_rest_are_not() {
        let usage = [
            LaunchError::NoRanks,
            LaunchError::TooManyRanks {
                ranks: 300,
                max: 256,
            },
            LaunchError::RankEnvMismatch {
                entries: 1,
                ranks: 2,
            },
            LaunchError::ProgramNotFound {
                program: "/x".into(),
                hint: String::new(),
            },
            LaunchError::ProgramNotExecutable {
                path: "/x".into(),
                reason: String::new(),
            },
        ];
        assert!(usage.iter().all(LaunchError::is_usage));
        let others = [
            LaunchError::Port(io::Error::other("x")),
            LaunchError::Leftover {
                pgid: 1,
                pids: vec![2],
            },
        ];
        assert!(!others.iter().any(LaunchError::is_usage));
    }

    #[test]
    fn counts_are_singular_for_one() {
        let e = LaunchError::RankEnvMismatch {
            entries: 1,
            ranks: 2,
        };
        assert!(
            e.to_string()
                .starts_with("rank_env has 1 entry but the run has 2 ranks;"),
            "{e}"
        );
        let e = LaunchError::RankEnvMismatch {
            entries: 2,
            ranks: 1,
        };
        assert!(
            e.to_string()
                .starts_with("rank_env has 2 entries but the run has 1 rank;"),
            "{e}"
        );
    }

    /// anyhow's `{:#}` prints the message, then every source: a cause that is
    /// in the message must not be a source too.
    #[test]
    fn causes_are_printed_once() {
        let cause = || io::Error::other("disk on fire");
        let errors = [
            LaunchError::Rendezvous {
                dir: "/tmp".into(),
                cause: cause(),
            },
            LaunchError::Port(cause()),
            LaunchError::Signals(cause()),
            LaunchError::Watchdog(cause()),
            LaunchError::Spawn {
                rank: 1,
                program: "/bin/x".into(),
                cause: cause(),
            },
            LaunchError::Wait {
                rank: 1,
                cause: cause(),
            },
        ];
        for err in errors {
            let text = format!("{:#}", anyhow::Error::new(err).context("could not run"));
            assert_eq!(text.matches("disk on fire").count(), 1, "{text}");
        }
    }
}
