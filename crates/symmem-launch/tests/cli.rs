//! The `symmem-run` binary, as a user runs it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use symmem_launch::{EXIT_CODES, EXIT_USAGE};
use symmem_test_support::command::{exit_codes_in_help, wait_within, with_default_signals};
use symmem_test_support::launch::GRACE;
use symmem_test_support::process::{eventually, gone};

const BIN: &str = env!("CARGO_BIN_EXE_symmem-run");

/// Scheduling slack on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(3);

/// symmem-run with default signal dispositions: see [`with_default_signals`].
fn symmem_run() -> Command {
    with_default_signals(BIN)
}

fn start(args: &[&str]) -> Child {
    symmem_run()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn symmem-run")
}

/// Reads stderr up to the start line and returns the rank pids.
fn started_pids(child: &mut Child) -> (Vec<i32>, BufReader<std::process::ChildStderr>) {
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    loop {
        line.clear();
        assert_ne!(
            stderr.read_line(&mut line).expect("read"),
            0,
            "no start line"
        );
        if let Some(rest) = line.strip_prefix("symmem-run: started ") {
            let open = rest.find('(').expect("(") + 1;
            let list = rest[open..rest.find(')').expect(")")]
                .trim_start_matches("pids ")
                .trim_start_matches("pid ");
            let pids = list.split(", ").map(|p| p.parse().expect("pid")).collect();
            return (pids, stderr);
        }
    }
}

/// symmem-run of `ranks` ranks of `sh -c script`, grace 1 s, run to its end within
/// [`GRACE`] + [`MARGIN`]: how it exited, the rest of its stderr, and the rank pids.
fn run_sh(ranks: &str, script: &str) -> (ExitStatus, String, Vec<i32>) {
    let mut child = start(&[
        "--ranks", ranks, "--grace", "1s", "--", "/bin/sh", "-c", script,
    ]);
    let (pids, stderr) = started_pids(&mut child);
    let status = wait_within(&mut child, GRACE + MARGIN);
    (status, rest(stderr), pids)
}

/// Every rank pid is gone.
fn assert_ranks_gone(pids: &[i32]) {
    for &pid in pids {
        assert!(gone(pid), "rank pid {pid} survived");
    }
}

fn rest(mut stderr: impl BufRead) -> String {
    let mut text = String::new();
    let _ = stderr.read_to_string(&mut text);
    text
}

#[test]
fn sigint_stops_every_rank_and_exits_130() {
    let mut child = start(&[
        "--ranks",
        "3",
        "--grace",
        "1s",
        "--",
        "/bin/sh",
        "-c",
        "echo $$; sleep 100",
    ]);
    let (pids, stderr) = started_pids(&mut child);
    assert_eq!(pids.len(), 3);
    let sent = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).expect("SIGINT");
    let status = wait_within(&mut child, GRACE + MARGIN);
    assert!(sent.elapsed() < GRACE + MARGIN);
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(rest(stderr).contains("interrupted by SIGINT; all ranks stopped"));
    assert_ranks_gone(&pids);
}

#[test]
fn a_second_sigint_skips_the_grace_period() {
    // The ranks ignore SIGTERM and say so on stdout; a 60 s grace would be
    // waited out in full without the second SIGINT.
    let mut child = symmem_run()
        .args([
            "--ranks",
            "2",
            "--grace",
            "60s",
            "--",
            "/bin/sh",
            "-c",
            "trap '' TERM; echo ready; exec sleep 100",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn symmem-run");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (pids, stderr) = started_pids(&mut child);
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        stdout.read_line(&mut line).expect("read");
        assert!(line.ends_with("] ready\n"), "{line:?}");
    }
    let launcher = Pid::from_raw(child.id() as i32);
    kill(launcher, Signal::SIGINT).expect("SIGINT");
    // Let the first one start the grace period.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "waits for the grace"
    );
    let sent = Instant::now();
    kill(launcher, Signal::SIGINT).expect("second SIGINT");
    let status = wait_within(&mut child, MARGIN);
    assert!(sent.elapsed() < MARGIN);
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(rest(stderr).contains("interrupted by SIGINT; all ranks stopped"));
    assert_ranks_gone(&pids);
}

#[test]
fn ranks_that_lose_a_peer_exit_75_and_the_culprit_is_named() {
    let (status, text, pids) = run_sh(
        "3",
        r#"if [ "$RANK" = 2 ]; then exec sleep 100; fi; sleep 0.2; exit 75"#,
    );
    assert_eq!(status.code(), Some(75), "{status:?}");
    assert!(
        text.contains("rank 2 was still running (hung?) when ranks ")
            && text.contains("gave up waiting for it (status 75); it was stopped"),
        "{text}"
    );
    assert_ranks_gone(&pids);
}

/// Issue 24 (N7): a TMPDIR whose `<rendezvous>/rank0.sock` exceeds a socket address (107
/// bytes) used to be refused; the ranks bind through a descriptor of the folder, so it works.
#[test]
fn a_tmpdir_longer_than_a_socket_address_works() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut long = tmp.path().to_path_buf();
    while long.as_os_str().len() < 110 {
        long.push("a-rather-long-directory-name");
    }
    std::fs::create_dir_all(&long).expect("mkdir");
    let out = Command::new(BIN)
        .args(["--ranks", "2", "--", "/bin/sh", "-c"])
        .arg(r#"case $SYMMEM_RENDEZVOUS in "$TMPDIR"/*) [ -d "$SYMMEM_RENDEZVOUS" ] ;; *) exit 9 ;; esac"#)
        .env("TMPDIR", &long)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Nothing is left behind in TMPDIR.
    assert_eq!(std::fs::read_dir(&long).expect("ls").count(), 0);
}

/// Issue 24 (D7/N15): a process that leaves the group, clears its environment and closes the
/// ranks' pipes outlived a successful run without a word. symmem-run adopts the ranks' orphans
/// (child subreaper), so it finds, ends and names it.
#[test]
fn an_escapee_without_run_id_or_pipes_is_ended_and_named() {
    // A duration no other process uses: how the test finds the escapees whatever happens.
    const SLEEP: &str = "97.31";
    let ours = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == SLEEP.as_bytes()))
            })
            .collect()
    };
    // The rank exits once its child has left (setsid, then env -i, then sleep, one process).
    let script = format!(
        "setsid env -i /bin/sleep {SLEEP} </dev/null >/dev/null 2>&1 &
         until [ \"$(cat /proc/$!/comm 2>/dev/null)\" = sleep ]; do sleep 0.01; done"
    );
    let out = Command::new(BIN)
        .args(["--ranks", "2", "--grace", "1s", "--timeout", "20s"])
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .expect("run");
    let left = ours();
    for &pid in &left {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        left.is_empty(),
        "escapees survived the run: {left:?}\n{err}"
    );
    assert!(
        err.contains("2 processes started by the ranks had left their process group")
            && err.matches("(sleep)").count() == 2,
        "{err}"
    );
}

/// Issue 24 (N14): a rank ended the watchdog (a sibling of the same user) and nothing said so.
#[test]
fn a_watchdog_ended_during_the_run_is_reported() {
    // Rank 0 kills the watchdog of its own launcher (the other child of its parent whose command
    // line names symmem-watchdog), then both ranks exit 0.
    let script = r#"
        if [ "$RANK" = 0 ]; then
          for stat in /proc/[0-9]*/stat; do
            dir=${stat%/stat}; pid=${dir#/proc/}
            [ "$pid" = $$ ] && continue
            set -- $(cat "$stat" 2>/dev/null)
            [ "$4" = "$PPID" ] || continue
            tr '\0' ' ' < "$dir/cmdline" | grep -q symmem-watchdog || continue
            kill -KILL "$pid"
            # Gone for good (a zombie, until symmem-run reaps it) before this rank exits.
            until [ "$(cut -d' ' -f3 "$stat")" = Z ]; do sleep 0.01; done
          done
        fi
        exit 0"#;
    let out = Command::new(BIN)
        .args([
            "--ranks",
            "2",
            "--timeout",
            "20s",
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the watchdog that ends the run if symmem-run dies was killed by signal 9"),
        "{err}"
    );
}

#[test]
fn failing_rank_sets_the_exit_code() {
    let (status, text, pids) = run_sh(
        "3",
        r#"if [ "$RANK" = 1 ]; then exit 7; fi; exec sleep 100"#,
    );
    assert_eq!(status.code(), Some(7), "{status:?}");
    assert!(
        text.contains("rank 1 exited with status 7 first; the other ranks were stopped"),
        "{text}"
    );
    assert_ranks_gone(&pids);
}

#[test]
fn timeout_exits_124() {
    let mut child = start(&[
        "-n",
        "2",
        "--timeout",
        "500ms",
        "--grace",
        "1s",
        "--",
        "/bin/sleep",
        "100",
    ]);
    let (_, stderr) = started_pids(&mut child);
    let status = wait_within(&mut child, GRACE + MARGIN);
    assert_eq!(status.code(), Some(124), "{status:?}");
    assert!(rest(stderr).contains("timed out after 500ms; ranks still running: 0, 1"));
}

#[test]
fn ranks_die_with_a_sigkilled_launcher() {
    // A SIGKILLed launcher cannot remove its rendezvous directory: keep it in
    // a directory this test removes.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(BIN)
        .args(["--ranks", "2", "--", "/bin/sleep", "100"])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn symmem-run");
    let (pids, _stderr) = started_pids(&mut child);
    child.kill().expect("SIGKILL symmem-run");
    child.wait().expect("reap symmem-run");
    for pid in pids {
        assert!(
            eventually(MARGIN, || gone(pid)),
            "rank pid {pid} survived its launcher"
        );
    }
}

#[test]
fn usage_errors_name_the_fix_and_exit_2() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    // Refused by the launcher after parsing, and by clap while parsing: both are bad usage.
    let (code, err) = run(&["--ranks", "0", "--", "/bin/true"]);
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    assert!(err.contains("at least 1"), "{err}");
    let (code, err) = run(&["--ranks", "300", "--", "/bin/true"]);
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    assert!(
        err.contains("at most 256 ranks") && err.contains("torchrun"),
        "{err}"
    );
    let (code, err) = run(&["--ranks", "2", "--", "/nonexistent/prog"]);
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    assert!(
        err.contains("/nonexistent/prog") && err.contains("not found"),
        "{err}"
    );
    let (code, err) = run(&["--ranks", "2", "--timeout", "1.5h", "--", "/bin/true"]);
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    assert!(err.contains("500ms"), "{err}");
    let (code, err) = run(&["--ranks", "2", "--timeout", "0", "--", "/bin/true"]);
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    assert!(
        err.contains("the moment it starts") && err.contains("e.g. `90s`"),
        "{err}"
    );
    let (code, err) = run(&["--ranks", "2", "--bogus", "--", "/bin/true"]);
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    // A launcher error that is not the user's spec stays 1.
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("gone");
    let out = Command::new(BIN)
        .args(["--ranks", "1", "--", "/bin/true"])
        .env("TMPDIR", &missing)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // --grace 0 is meaningful (SIGKILL right after SIGTERM) and accepted.
    let (code, err) = run(&["--ranks", "1", "--grace", "0", "--", "/bin/true"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn help_lists_every_exit_code() {
    let out = Command::new(BIN).arg("--help").output().expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for topic in [
        "MASTER_PORT",
        "SYMMEM_RENDEZVOUS",
        "EXIT CODES",
        "torchrun",
        "SIGKILL",
        "--grace 0",
    ] {
        assert!(help.contains(topic), "--help lacks {topic}");
    }
    let (codes, section) = exit_codes_in_help(&help);
    let expected: Vec<&str> = EXIT_CODES.iter().map(|(code, _)| *code).collect();
    assert_eq!(codes, expected, "{section}");
    for code in ["0", "2", "75", "124", "130"] {
        assert!(codes.contains(&code), "--help lacks exit code {code}");
    }
}

#[test]
fn one_rank_is_one_rank() {
    let out = Command::new(BIN)
        .args(["--ranks", "1", "--", "/bin/true"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symmem-run: started 1 rank (pid "), "{err}");
    assert!(err.contains("symmem-run: 1 rank succeeded in "), "{err}");
    assert!(!err.contains("1 ranks") && !err.contains("pids"), "{err}");
    let out = Command::new(BIN)
        .args(["--ranks", "2", "--", "/bin/true"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symmem-run: started 2 ranks (pids "), "{err}");
}

#[test]
fn success_prints_output_with_rank_prefixes() {
    let out = Command::new(BIN)
        .args([
            "--ranks",
            "2",
            "--quiet",
            "--",
            "/bin/sh",
            "-c",
            "echo hello from $RANK",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[rank 0] hello from 0\n"), "{stdout}");
    assert!(stdout.contains("[rank 1] hello from 1\n"), "{stdout}");
    assert!(
        out.stderr.is_empty(),
        "--quiet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kill -9` of symmem-run: the ranks die with it (PDEATHSIG), and so must everything they
/// started, in their group or out of it (setsid), and the rendezvous folder it made.
#[test]
fn nothing_of_the_run_survives_kill_9_of_the_launcher() {
    let out = tempfile::tempdir().expect("tempdir");
    let script = r#"
        echo "$SYMMEM_RENDEZVOUS" > "$OUT/folder"
        sleep 100 & echo $! > "$OUT/child$RANK"
        setsid sleep 100 & echo $! > "$OUT/escaped$RANK"
        touch "$OUT/ready$RANK"
        wait"#;
    let mut child = symmem_run()
        .args(["--ranks", "2", "--", "/bin/sh", "-c", script])
        .env("OUT", out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn symmem-run");
    let (ranks, _stderr) = started_pids(&mut child);
    let ready = |rank: usize| out.path().join(format!("ready{rank}")).exists();
    assert!(
        eventually(MARGIN, || ready(0) && ready(1)),
        "the ranks did not start their children"
    );
    let read = |name: &str| std::fs::read_to_string(out.path().join(name)).expect(name);
    let folder = std::path::PathBuf::from(read("folder").trim());
    assert!(folder.is_dir(), "{}", folder.display());
    let mut pids: Vec<i32> = ranks;
    for name in ["child0", "child1", "escaped0", "escaped1"] {
        pids.push(read(name).trim().parse().expect("a pid"));
    }

    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).expect("SIGKILL");
    let _ = child.wait();

    assert!(
        eventually(MARGIN, || pids.iter().all(|&pid| gone(pid))),
        "survived kill -9 of the launcher: {:?}",
        pids.iter().filter(|&&pid| !gone(pid)).collect::<Vec<_>>()
    );
    assert!(
        eventually(MARGIN, || !folder.exists()),
        "the rendezvous folder {} survived kill -9 of the launcher",
        folder.display()
    );
}

/// M10: `symmem-run … 2>&1 | head -1`. Once the reader of symmem-run's stdout and stderr is
/// gone, writing there fails with EPIPE (Rust ignores SIGPIPE); that must neither end the
/// launcher (it panicked, rc 101) nor stop the ranks early, and the job's status stays its own.
#[test]
fn a_closed_output_pipe_changes_neither_the_job_nor_its_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let done = dir.path().join("done");
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let writer = std::fs::File::from(writer);
    let script = format!(
        "echo hi; echo err >&2; sleep 0.5; echo late; echo late >&2; touch {}.$RANK; exit 3",
        done.display()
    );
    let mut child = symmem_run()
        .args([
            "--ranks", "2", "--grace", "1s", "--", "/bin/sh", "-c", &script,
        ])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("dup"))
        .stderr(writer)
        .spawn()
        .expect("spawn symmem-run");
    // `head -1`: one line read, then the pipe's only reader is gone.
    let mut first = String::new();
    BufReader::new(std::fs::File::from(reader))
        .read_line(&mut first)
        .expect("read the first line");
    assert!(!first.is_empty(), "no first line");
    let status = wait_within(&mut child, GRACE + MARGIN);
    assert_eq!(status.code(), Some(3), "the ranks' status, not a panic's");
    for rank in 0..2 {
        assert!(
            dir.path().join(format!("done.{rank}")).exists(),
            "rank {rank} was stopped before its end"
        );
    }
}

/// A background job of a shell starts with SIGINT and SIGQUIT ignored, `nohup` ignores
/// SIGHUP: symmem-run keeps what it inherited, but its ranks get the default action of each,
/// so that they end when it (or a user's Ctrl-C on them) says.
#[test]
fn ranks_get_default_signal_actions_whatever_symmem_run_inherited() {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "trap '' INT QUIT HUP TERM; exec \"$0\" -q -n 2 sh -c 'grep ^SigIgn: /proc/$$/status'",
            BIN,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run symmem-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let masks: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.split("SigIgn:").nth(1))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).expect("hex mask"))
        .collect();
    assert_eq!(masks.len(), 2, "{stdout}");
    for mask in masks {
        for (name, number) in [
            ("SIGHUP", 1),
            ("SIGINT", 2),
            ("SIGQUIT", 3),
            ("SIGTERM", 15),
        ] {
            assert_eq!(
                mask & (1 << (number - 1)),
                0,
                "a rank ignores {name}: {stdout}"
            );
        }
    }
}
