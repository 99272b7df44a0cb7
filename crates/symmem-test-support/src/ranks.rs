//! Ranks of a job for tests: as threads of the test process, each with its own host provider
//! settings (own heap, own socket, as separate processes would have), or as processes that
//! run the test binary again.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use symmem::settings::{COLLECTIVE_TIMEOUT, RENDEZVOUS};
use symmem_host::HostConfig;

/// Heap of each rank the tests start: large enough for every test, small enough for many
/// ranks at once.
pub const HEAP_BYTES: u64 = 16 << 20;

/// Host settings of rank `rank` of `world_size` for tests: a [`HEAP_BYTES`] heap, collectives
/// that give up after `timeout`, meeting in `dir`.
pub fn host_config(rank: usize, world_size: usize, dir: &Path, timeout: Duration) -> HostConfig {
    let mut config = HostConfig::for_rank(rank, world_size, dir);
    config.heap_bytes = HEAP_BYTES;
    config.timeout = timeout;
    config
}

/// Runs `body` as every rank of a `world_size`-rank job, the ranks as threads of this
/// process, and returns each rank's result in rank order. Each rank gets its own
/// [`host_config`], all meeting in a temporary folder of this run. A rank's panic fails the
/// caller.
pub fn thread_ranks<T: Send>(
    world_size: usize,
    timeout: Duration,
    body: impl Fn(HostConfig) -> T + Sync,
) -> Vec<T> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..world_size)
            .map(|rank| {
                let config = host_config(rank, world_size, dir.path(), timeout);
                let body = &body;
                scope.spawn(move || body(config))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Which environment a rank process starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Environment {
    /// This process's.
    Inherited,
    /// Only `PATH` of it, as a launcher with a clean environment would give.
    PathOnly,
}

/// The command that runs this test binary again as one rank: only its ignored test
/// `rank_process`, with `child_env` set so that the test knows it is a rank (see
/// [`is_rank_process`]). Callers add the rank's variables and pipes.
pub fn rank_process_command(child_env: &str, environment: Environment) -> Command {
    let exe = std::env::current_exe().expect("own path");
    let mut command = Command::new(exe);
    command.args([
        "rank_process",
        "--exact",
        "--include-ignored",
        "--nocapture",
    ]);
    if environment == Environment::PathOnly {
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    }
    command.env(child_env, "1");
    command
}

/// [`rank_process_command`] for rank `rank` of `world` of the host provider, meeting in `dir`,
/// with collectives that give up after 20 s.
pub fn host_rank_command(child_env: &str, dir: &Path, rank: usize, world: usize) -> Command {
    let mut command = rank_process_command(child_env, Environment::Inherited);
    command
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env(RENDEZVOUS.name, dir)
        .env(COLLECTIVE_TIMEOUT.name, "20s");
    command
}

/// Runs `world` host ranks of this test binary ([`host_rank_command`]) meeting in a fresh
/// temporary folder, `setup` adding each rank's own settings, with stdout and stderr piped;
/// waits for them as [`wait_ranks`] does.
pub fn run_host_rank_processes(
    child_env: &str,
    world: usize,
    limit: Duration,
    setup: impl Fn(usize, &mut Command),
) -> Vec<RankExit> {
    let dir = tempfile::tempdir().expect("temp dir");
    let children = (0..world)
        .map(|rank| {
            let mut command = host_rank_command(child_env, dir.path(), rank, world);
            setup(rank, &mut command);
            command
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    wait_ranks(children, limit)
}

/// Whether this process is a rank started by [`rank_process_command`]. When it is not (the
/// ignored test `rank_process` run by hand), says on stderr that `parent` starts it.
pub fn is_rank_process(child_env: &str, parent: &str) -> bool {
    let is_rank = std::env::var_os(child_env).is_some();
    if !is_rank {
        eprintln!("rank_process only runs as a child of {parent}");
    }
    is_rank
}

/// How one rank process ended.
#[derive(Clone, Debug)]
pub struct RankExit {
    /// It exited with status 0 in time.
    pub ok: bool,
    /// Its stdout then its stderr (those that were piped).
    pub output: String,
}

/// Waits for every rank up to `limit` in all, kills those still running then (they count as
/// failed), and returns how each ended, in rank order. Piped output is drained while the ranks
/// run, so a rank that writes more than a pipe holds never blocks on it.
pub fn wait_ranks(children: Vec<Child>, limit: Duration) -> Vec<RankExit> {
    let deadline = Instant::now() + limit;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let running: Vec<_> = children
        .into_iter()
        .map(|mut child| {
            let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
            let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
            (child, stdout, stderr)
        })
        .collect();
    running
        .into_iter()
        .map(|(mut child, stdout, stderr)| {
            while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let status = child.wait().expect("rank status");
            RankExit {
                ok: status.success(),
                output: stdout.join().expect("stdout reader")
                    + &stderr.join().expect("stderr reader"),
            }
        })
        .collect()
}

/// Every rank exited 0 and printed `rank <rank> ok`.
pub fn assert_ranks_ok(exits: &[RankExit]) {
    for (rank, exit) in exits.iter().enumerate() {
        assert!(
            exit.ok && exit.output.contains(&format!("rank {rank} ok")),
            "rank {rank} failed:\n{}",
            exit.output
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ranks_give_each_rank_its_own_settings_in_rank_order() {
        let seen = thread_ranks(3, Duration::from_secs(7), |config| {
            (
                config.identity.rank,
                config.identity.world_size,
                config.heap_bytes,
                config.timeout,
                config.rendezvous,
            )
        });
        let ranks: Vec<usize> = seen.iter().map(|s| s.0).collect();
        assert_eq!(ranks, [0, 1, 2]);
        for (_, world, heap, timeout, dir) in &seen {
            assert_eq!(
                (*world, *heap, *timeout),
                (3, HEAP_BYTES, Duration::from_secs(7))
            );
            assert_eq!(dir, &seen[0].4, "one meeting folder");
        }
    }

    #[test]
    fn ranks_that_fail_or_overstay_are_not_ok() {
        let spawn = |script: &str| {
            Command::new("/bin/sh")
                .args(["-c", script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn sh")
        };
        let exits = wait_ranks(
            vec![
                spawn("echo rank 0 ok"),
                spawn("echo rank 1 ok; echo oops >&2; exit 3"),
                spawn("exec sleep 100"),
            ],
            Duration::from_secs(2),
        );
        assert!(exits[0].ok && exits[0].output == "rank 0 ok\n");
        assert!(!exits[1].ok && exits[1].output == "rank 1 ok\noops\n");
        assert!(!exits[2].ok);
        assert_ranks_ok(&exits[..1]);
        let failed = std::panic::catch_unwind(|| assert_ranks_ok(&exits[..2]));
        assert!(failed.is_err(), "rank 1 exited 3 and passed");
    }

    #[test]
    fn a_path_only_rank_sees_nothing_else_of_ours() {
        let command = rank_process_command("SOME_CHILD", Environment::PathOnly);
        let envs: Vec<_> = command
            .get_envs()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(envs, ["PATH", "SOME_CHILD"]);
        let command = host_rank_command("SOME_CHILD", Path::new("/tmp/x"), 2, 4);
        let get = |key: &str| {
            command
                .get_envs()
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| v)
                .map(|v| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("RANK").as_deref(), Some("2"));
        assert_eq!(get("WORLD_SIZE").as_deref(), Some("4"));
        assert_eq!(get(RENDEZVOUS.name).as_deref(), Some("/tmp/x"));
        assert_eq!(get("SOME_CHILD").as_deref(), Some("1"));
    }
}
