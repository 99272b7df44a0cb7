//! The rendezvous folder against other local users, with real rank processes and real folders:
//! another user's folder, symbolic link or world-writable folder on the way is refused before
//! anything is removed or bound, and the ordinary cases (private runtime folder, sticky temp
//! folder, a stale socket, a long path) still work.
//!
//! The test binary re-executes itself as each rank (the ignored test `rank_process`). Tests
//! that need another user start a shell as uid [`OTHER_UID`]; they need root and print
//! "SKIPPED: ..." otherwise.

use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use symmem::{CollectiveKind, CollectiveOp, RankIdentity};
use symmem_bootstrap::{Bootstrap, default_rendezvous};
use symmem_test_support::ranks::{
    Environment, RankExit, assert_ranks_ok, is_rank_process, rank_process_command, wait_ranks,
};

const CHILD_ENV: &str = "SYMMEM_BOOTSTRAP_TEST_CHILD";
/// Another local user: no account needed, only a uid that is not ours.
const OTHER_UID: u32 = 4242;

#[test]
#[ignore = "one rank of the tests below, which start it in a child process"]
fn rank_process() {
    if !is_rank_process(CHILD_ENV, "the rendezvous folder tests") {
        return;
    }
    let identity = RankIdentity::from_env().expect("rank variables");
    let rank = identity.rank;
    let op = CollectiveOp {
        seq: 0,
        kind: CollectiveKind::Barrier,
    };
    let result = default_rendezvous(&identity).and_then(|dir| {
        let mut bootstrap =
            Bootstrap::connect(rank, identity.world_size, &dir, Duration::from_secs(4))?;
        bootstrap.barrier(&op)
    });
    match result {
        Ok(()) => println!("rank {rank} ok"),
        Err(e) => {
            println!("rank {rank} error: {e}");
            std::process::exit(1);
        }
    }
}

/// A port number no other test of this binary uses, for a distinct job id.
fn fresh_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (20000 + (std::process::id() % 20000) + n * 7) as u16
}

/// Runs `world` ranks as torchrun would start them (`MASTER_PORT` = `port`), in a clean
/// environment plus `env`.
fn run_ranks(world: usize, port: u16, env: &[(&str, &Path)]) -> Vec<RankExit> {
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let mut cmd = rank_process_command(CHILD_ENV, Environment::PathOnly);
            cmd.env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (key, value) in env {
                cmd.env(key, value);
            }
            cmd.spawn().expect("spawn rank")
        })
        .collect();
    wait_ranks(children, Duration::from_secs(30))
}

/// The error line a failed rank printed.
fn error_of(outcome: &RankExit) -> &str {
    outcome
        .output
        .lines()
        .find(|l| l.contains(" error: "))
        .unwrap_or(&outcome.output)
}

/// A temp folder like /tmp: every user may create entries, only their owner may remove them.
fn shared_tmp() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod 1777");
    dir
}

/// Runs `script` as another user, or says why it cannot (not root).
fn as_other_user(script: &str) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root to act as another user".into());
    }
    let status = Command::new("/bin/sh")
        .args(["-c", script])
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .status()
        .map_err(|e| format!("cannot start a shell as uid {OTHER_UID}: {e}"))?;
    if !status.success() {
        return Err(format!("`{script}` as uid {OTHER_UID} failed: {status}"));
    }
    Ok(())
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display())
}

fn me() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The attack: with `XDG_RUNTIME_DIR` unset, another user pre-creates
/// `$TMPDIR/symmem-<uid>` holding a symbolic link named after the job, pointing into a folder
/// of ours with a file named `rank0.sock`. Rank 0 used to remove that file and bind there.
#[test]
fn another_users_folder_with_a_link_is_refused_and_the_target_is_untouched() {
    let tmp = shared_tmp();
    let victim = tempfile::tempdir().expect("victim folder");
    let precious = victim.path().join("rank0.sock");
    std::fs::write(&precious, "precious").unwrap();
    let port = fresh_port();
    let planted = tmp.path().join(format!("symmem-{}", me()));
    let script = format!(
        "mkdir -m 777 {planted} && ln -s {victim} {planted}/127.0.0.1-{port}",
        planted = quoted(&planted),
        victim = quoted(victim.path()),
    );
    if let Err(why) = as_other_user(&script) {
        println!("SKIPPED: {why}");
        return;
    }
    let outcomes = run_ranks(2, port, &[("TMPDIR", tmp.path())]);
    assert_eq!(
        std::fs::read_to_string(&precious).ok().as_deref(),
        Some("precious"),
        "the file in the link's target was removed or replaced"
    );
    let entries: Vec<_> = std::fs::read_dir(victim.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, [OsString::from("rank0.sock")], "{entries:?}");
    for (rank, o) in outcomes.iter().enumerate() {
        assert!(!o.ok, "rank {rank} went ahead: {}", o.output);
        let e = error_of(o);
        assert!(e.contains(&planted.display().to_string()), "{e}");
        assert!(e.contains(&format!("uid {OTHER_UID}")), "{e}");
        assert!(e.contains("SYMMEM_RENDEZVOUS"), "{e}");
    }
}

/// Another user's (empty, world-writable) `symmem-<uid>` is detected even without a link in it:
/// they could swap the job's folder at any time.
#[test]
fn another_users_folder_on_the_way_is_refused_naming_owner_and_mode() {
    let tmp = shared_tmp();
    let planted = tmp.path().join(format!("symmem-{}", me()));
    if let Err(why) = as_other_user(&format!("mkdir -m 777 {}", quoted(&planted))) {
        println!("SKIPPED: {why}");
        return;
    }
    let outcomes = run_ranks(2, fresh_port(), &[("TMPDIR", tmp.path())]);
    let e = error_of(&outcomes[0]);
    assert!(!outcomes[0].ok, "rank 0 went ahead: {}", outcomes[0].output);
    assert!(e.contains(&planted.display().to_string()), "{e}");
    assert!(e.contains(&format!("uid {OTHER_UID}")), "{e}");
    assert!(e.contains("mode 0777"), "{e}");
    assert!(e.contains("SYMMEM_RENDEZVOUS"), "{e}");
    // Nothing of ours was created inside it.
    assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0);
}

#[test]
fn a_world_writable_folder_of_ones_own_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let outcomes = run_ranks(2, fresh_port(), &[("SYMMEM_RENDEZVOUS", dir.path())]);
    for (rank, o) in outcomes.iter().enumerate() {
        assert!(!o.ok, "rank {rank} went ahead: {}", o.output);
        let e = error_of(o);
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
        assert!(e.contains("mode 0777"), "{e}");
        assert!(e.contains("chmod go-w"), "{e}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_symbolic_link_as_the_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let outcomes = run_ranks(2, fresh_port(), &[("SYMMEM_RENDEZVOUS", &link)]);
    for (rank, o) in outcomes.iter().enumerate() {
        assert!(!o.ok, "rank {rank} went ahead: {}", o.output);
        let e = error_of(o);
        assert!(e.contains("symbolic link"), "{e}");
        assert!(e.contains(&real.display().to_string()), "{e}");
    }
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

/// The default folders: under a private `XDG_RUNTIME_DIR`, and under a sticky shared temp
/// folder when it is unset; both are removed again once every rank is in.
#[test]
fn default_folders_work_and_are_removed() {
    let runtime = tempfile::tempdir().unwrap();
    assert_ranks_ok(&run_ranks(
        3,
        fresh_port(),
        &[("XDG_RUNTIME_DIR", runtime.path())],
    ));
    assert_eq!(std::fs::read_dir(runtime.path()).unwrap().count(), 0);

    let tmp = shared_tmp();
    assert_ranks_ok(&run_ranks(3, fresh_port(), &[("TMPDIR", tmp.path())]));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// A socket left by a crashed job is replaced; anything else named like it is left alone.
#[test]
fn a_stale_socket_is_replaced_but_another_file_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rank0.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert_ranks_ok(&run_ranks(
        2,
        fresh_port(),
        &[("SYMMEM_RENDEZVOUS", dir.path())],
    ));
    assert!(
        !socket.exists(),
        "the socket is removed once every rank is in"
    );

    std::fs::write(&socket, "not a socket").unwrap();
    let outcomes = run_ranks(2, fresh_port(), &[("SYMMEM_RENDEZVOUS", dir.path())]);
    let e = error_of(&outcomes[0]);
    assert!(!outcomes[0].ok, "{}", outcomes[0].output);
    assert!(e.contains(&socket.display().to_string()), "{e}");
    assert!(e.contains("a regular file"), "{e}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}

/// The socket is reached through the folder's descriptor, so the folder's path may exceed the
/// 107 bytes of a Unix socket address.
#[test]
fn a_folder_path_longer_than_a_socket_address_works() {
    let tmp = tempfile::tempdir().unwrap();
    let mut long: PathBuf = tmp.path().to_path_buf();
    while long.as_os_str().len() < 120 {
        long.push("a-rather-long-folder-name");
    }
    let outcomes = run_ranks(2, fresh_port(), &[("SYMMEM_RENDEZVOUS", &long)]);
    assert_ranks_ok(&outcomes);
    // The folders rank 0 created are gone again.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// M9: two jobs at once in one `symmem-<uid>`. Job A's rank 0 made the namespace and leaves
/// while job B's folder is in it; job B's rank 0 found it there. When B leaves, nothing may be
/// left: the empty namespace was left (5 runs in 10) as neither rank 0 removed it.
#[test]
fn two_jobs_at_once_leave_no_empty_namespace() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let ns = runtime.path().join(format!("symmem-{}", me()));
    let (a, b) = (ns.join("job-a"), ns.join("job-b"));
    let timeout = Duration::from_secs(20);
    let rank = |rank: usize, dir: &Path| {
        let dir = dir.to_path_buf();
        std::thread::spawn(move || Bootstrap::connect(rank, 2, &dir, timeout).map(drop))
    };
    // Each step waits for the folder of the rank 0 it started, a bounded number of times.
    let appears = |dir: &Path| {
        for _ in 0..2000 {
            if dir.join(symmem::RENDEZVOUS_SOCKET).exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{} never appeared", dir.display());
    };
    let a0 = rank(0, &a);
    appears(&a);
    let b0 = rank(0, &b);
    appears(&b);
    let a1 = rank(1, &a);
    for job in [a0, a1] {
        job.join().expect("thread").expect("job A");
    }
    assert!(ns.exists(), "job B's folder is still in use");
    let b1 = rank(1, &b);
    for job in [b0, b1] {
        job.join().expect("thread").expect("job B");
    }
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("read")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// M9: a job ended during its rendezvous. A launcher ends the job's ranks with SIGTERM (mpirun
/// after a peer was killed); rank 0, waiting for that peer, held its folders, which were left
/// behind empty. It now removes them, then dies of the SIGTERM as it would have.
#[test]
fn sigterm_during_the_rendezvous_leaves_no_folder() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let mut cmd = rank_process_command(CHILD_ENV, Environment::PathOnly);
    cmd.env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", fresh_port().to_string())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut rank0 = cmd.spawn().expect("spawn rank 0");
    let ns = runtime.path().join(format!("symmem-{}", me()));
    let mut waited = 0;
    while !has_socket(&ns) {
        assert!(waited < 2000, "rank 0 never listened in {}", ns.display());
        std::thread::sleep(Duration::from_millis(5));
        waited += 1;
    }
    let pid = nix::unistd::Pid::from_raw(rank0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = symmem_test_support::command::wait_within(&mut rank0, Duration::from_secs(10));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(15),
        "rank 0 did not die of SIGTERM: {status}"
    );
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("read")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Whether a job folder in `ns` holds rank 0's socket.
fn has_socket(ns: &Path) -> bool {
    std::fs::read_dir(ns).is_ok_and(|jobs| {
        jobs.flatten()
            .any(|job| job.path().join(symmem::RENDEZVOUS_SOCKET).exists())
    })
}
