//! Helpers shared by the multi-process tests: the test binary re-executes itself as each rank
//! (its ignored test `rank_process`, told apart by an environment variable).

use std::path::Path;
use std::process::Command;

/// The command that runs this test binary again as rank `rank` of `world`, meeting in `dir`:
/// only the test `rank_process`, with `child_env` set so that it knows it is a rank. Callers
/// add their own settings and pipes.
pub fn rank_command(child_env: &str, dir: &Path, rank: usize, world: usize) -> Command {
    let exe = std::env::current_exe().expect("own path");
    let mut command = Command::new(exe);
    command
        .args([
            "rank_process",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env(child_env, "1")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("SYMMEM_RENDEZVOUS", dir)
        .env("SYMMEM_COLLECTIVE_TIMEOUT", "20s");
    command
}
