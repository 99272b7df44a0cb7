//! `symmem-matrix test` as a user runs it, over a stand-in rank binary
//! (tests/fixtures/fake-rank): what it prints, and how it exits.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use symmem_test_support::command::{exit_codes_in_help, with_default_signals};

const MATRIX: &str = env!("CARGO_BIN_EXE_symmem-matrix");
/// Scheduling slack on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(5);

fn fake_rank() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-rank")
}

/// The ids of every conformance check, as the fake rank reports them.
fn check_ids() -> String {
    symmem_conformance::CHECKS
        .iter()
        .map(|c| c.id)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `symmem-matrix test` over the fake rank, with SIGINT, SIGTERM and SIGHUP at their defaults whatever
/// this test inherited (the launcher honours signals it inherited as ignored).
fn matrix_test(args: &[&str]) -> Command {
    let mut command = with_default_signals(MATRIX);
    command
        .arg("test")
        .arg("--rank-binary")
        .arg(fake_rank())
        .args(args)
        .env("FAKE_RANK_CHECKS", check_ids())
        .env_remove("FAKE_RANK_HANG")
        .stdin(Stdio::null());
    command
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn chosen_checks_run_alone_in_table_order() {
    let out = matrix_test(&["--ranks", "2", "--check", "9", "--check", "7,9"])
        .output()
        .expect("run symmem-matrix");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The ranks were asked for 7 and 9 only, in table order, and the matrix has just those rows.
    assert!(stderr.contains("done with check 7"), "{stderr}");
    assert!(!stderr.contains("done with check 1\n"), "{stderr}");
    let rows: Vec<&str> = symmem_conformance::CHECKS
        .iter()
        .filter(|c| {
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{:<4}{}", c.id, c.name)))
        })
        .map(|c| c.id)
        .collect();
    assert_eq!(rows, ["7", "9"], "{stdout}");
    assert!(stdout.contains("2 passed, 0 failed, 0 skipped"), "{stdout}");
}

#[test]
fn an_unknown_check_is_a_usage_error_that_lists_the_ids() {
    let out = matrix_test(&["--check", "11"])
        .output()
        .expect("run symmem-matrix");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("\"11\""), "{stderr}");
    assert!(
        stderr.contains("1, 2, 3, 4, 5, 6, 7, 8, 9, 10a, 10b"),
        "{stderr}"
    );
}

#[test]
fn rank_lines_come_without_blank_lines_around_the_progress() {
    let out = matrix_test(&["--ranks", "2,1", "--timeout", "60s"])
        .output()
        .expect("run symmem-matrix");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The fake ranks talk on stderr between their results: their lines interrupt the progress.
    assert!(stderr.contains("[rank 1] rank 1 of 2 starting"), "{stderr}");
    assert!(
        stderr.lines().all(|l| !l.trim().is_empty()),
        "blank lines on stderr:\n{stderr}"
    );
    assert!(
        stderr
            .lines()
            .filter(|l| l.contains("[rank "))
            .all(|l| l.starts_with("[rank ")),
        "a rank line shares a line with the progress:\n{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("[1/2] 2 ranks:") && l.ends_with(" s)")),
        "{stderr}"
    );
    // One rank is one rank, in the progress and the matrix.
    assert!(stderr.contains("[2/2] 1 rank:"), "{stderr}");
    assert!(stdout.contains(" 1 rank"), "{stdout}");
    assert!(
        !stdout.contains("1 ranks") && !stderr.contains("1 ranks") && !stderr.contains("rank(s)"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("22 passed, 0 failed, 0 skipped"),
        "{stdout}"
    );
}

/// Lines of the child's stderr as they come, so that a test can wait for one with a deadline.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn alive(pid: i32) -> bool {
    // A zombie counts as gone: it holds nothing, and init reaps it.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

#[test]
fn sigterm_stops_the_ranks_and_exits_130_as_symmem_run_does() {
    let mut child = matrix_test(&["--ranks", "2,4", "--grace", "1s", "--timeout", "60s"])
        .env("FAKE_RANK_HANG", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn symmem-matrix");
    let lines = stderr_lines(&mut child);
    let mut seen = Vec::new();
    let mut pids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Some((_, pid)) = line.split_once("] ready ") {
                    pids.push(pid.trim().parse::<i32>().expect("pid"));
                }
                seen.push(line);
            }
            Err(_) => {
                let _ = child.kill();
                panic!("the ranks never said ready:\n{}", seen.join("\n"));
            }
        }
    }
    let sent = Instant::now();
    // Our own child, not reaped yet.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(1) + MARGIN {
            let _ = child.kill();
            panic!("symmem-matrix did not stop within the grace period and margin");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    seen.extend(lines.iter());
    let stderr = seen.join("\n");
    assert_eq!(status.code(), Some(130), "{status:?}\n{stderr}");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    assert!(
        stderr.contains("not running the remaining layouts"),
        "{stderr}"
    );
    for pid in pids {
        assert!(!alive(pid), "rank pid {pid} survived");
    }
}

#[test]
fn a_timeout_of_zero_is_refused_with_the_fix() {
    let out = matrix_test(&["--ranks", "1", "--timeout", "0"])
        .output()
        .expect("run symmem-matrix");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--timeout") && stderr.contains("e.g. `90s`"),
        "{stderr}"
    );
    // A grace of 0 is meaningful: SIGKILL right after SIGTERM.
    let out = matrix_test(&["--ranks", "1", "--grace", "0"])
        .output()
        .expect("run symmem-matrix");
    assert!(out.status.success(), "{:?}", text(&out));
}

#[test]
fn help_lists_the_exit_codes() {
    let out = Command::new(MATRIX)
        .args(["test", "--help"])
        .output()
        .expect("run symmem-matrix");
    assert!(out.status.success());
    let (help, _) = text(&out);
    let (codes, section) = exit_codes_in_help(&help);
    assert_eq!(codes, ["0", "1", "2", "130"], "{section}");
}
