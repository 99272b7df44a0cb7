//! `symmem-matrix test` as a user runs it, over a stand-in rank binary
//! (tests/fixtures/fake-rank): what it prints, and how it exits.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
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
    matrix_test_through(&fake_rank(), args)
}

/// [`matrix_test`] with `--rank-binary RANK` (a wrapper around the fake rank).
fn matrix_test_through(rank: &Path, args: &[&str]) -> Command {
    let mut command = matrix_test_bare(&[]);
    command.arg("--rank-binary").arg(rank).args(args);
    command
}

/// `symmem-matrix test ARGS` with no rank binary given, for the fake rank's checks.
fn matrix_test_bare(args: &[&str]) -> Command {
    let mut command = with_default_signals(MATRIX);
    command
        .arg("test")
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

/// A stand-in `srun` and `mpirun` (first on PATH, by the name it is called by): writes its
/// arguments to `$FAKE_ARGV`, then runs the program `--ntasks` (srun) or `-np` (mpirun) times
/// with `RANK`, `WORLD_SIZE` set, each line prefixed as srun's `--label` (`N: `) or mpirun's
/// `--tag-output` (`[1,N]<stdout>:`) does; with `$FAKE_SRUN_FAIL` set it then reports that
/// task failure (and three witnesses) as srun does and exits 1.
const FAKE_LAUNCHER: &str = r#"#!/bin/sh
grep '^SigIgn:' /proc/$$/status >>"$FAKE_ARGV.sigign"
if [ -n "$FAKE_NO_START" ]; then
  echo "srun: error: Unable to create step for job 7: More processors requested than permitted" >&2
  exit 1
fi
printf '%s\n' "$*" >> "$FAKE_ARGV"
n=1
while [ $# -gt 0 ]; do
  case "$1" in
    --ntasks=*) n=${1#--ntasks=} ;;
    -np) n=$2; shift ;;
    --mca) shift 2 ;;
    --host|-x|--bind-to) shift ;;
    -*) ;;
    *) break ;;
  esac
  shift
done
i=0
while [ "$i" -lt "$n" ]; do
  case "$(basename "$0")" in
    srun) out="$i: " err="$i: " ;;
    *) out="[1,$i]<stdout>:" err="[1,$i]<stderr>:" ;;
  esac
  # stdout and stderr each prefixed, each on its own stream.
  ( (RANK=$i WORLD_SIZE=$n "$@" 2>&1 1>&3 | sed "s/^/$err/" >&2) 3>&1 | sed "s/^/$out/") &
  i=$((i + 1))
done
wait
if [ -n "$FAKE_SRUN_FAIL" ]; then
  echo "srun: error: node-a: tasks 0-2: Exited with exit code 75" >&2
  echo "srun: error: $FAKE_SRUN_FAIL" >&2
  exit 1
fi
"#;

/// `symmem-matrix test ARGS` with the stand-in launchers first on PATH; its output, and the
/// argument lines the launcher was started with.
fn under_fake_launchers(args: &str, env: &[(&str, &str)]) -> (Output, Vec<String>) {
    under_fake_launchers_through(&fake_rank(), args, env)
}

/// [`under_fake_launchers`] with `--rank-binary RANK`.
fn under_fake_launchers_through(
    rank: &Path,
    args: &str,
    env: &[(&str, &str)],
) -> (Output, Vec<String>) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    for name in ["srun", "mpirun"] {
        symmem_test_support::command::write_script(&bin.join(name), FAKE_LAUNCHER);
    }
    let argv = dir.path().join("argv");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = matrix_test_through(rank, &args)
        .env("PATH", path)
        .env("FAKE_ARGV", &argv)
        .envs(env.iter().copied())
        .env_remove("SLURM_JOB_NUM_NODES")
        .env_remove("SLURM_NNODES")
        .output()
        .expect("run symmem-matrix");
    let lines = std::fs::read_to_string(&argv)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    (out, lines)
}

#[test]
fn srun_gets_each_layout_as_nodes_and_tasks_and_the_matrix_its_labels() {
    let (out, argv) = under_fake_launchers(
        "--launcher srun -N 2 --ranks 2,n3 --check 9 -- --partition=debug",
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rank = fake_rank().display().to_string();
    assert_eq!(
        argv,
        [
            format!(
                "--mpi=pmix --label --kill-on-bad-exit=1 -v --nodes=2 --ntasks-per-node=2 \
                 --ntasks=4 --partition=debug {rank} --provider host --check 9"
            ),
            format!(
                "--mpi=pmix --label --kill-on-bad-exit=1 -v --nodes=2 --ntasks=3 \
                 --partition=debug {rank} --provider host --check 9"
            ),
        ]
    );
    assert!(stdout.contains("cluster: 2 nodes through srun"), "{stdout}");
    let header = stdout
        .lines()
        .find(|l| l.contains("check"))
        .unwrap_or_default();
    assert!(
        header.contains("2x2") && header.contains("3 on 2"),
        "{stdout}"
    );
    // Every task's results came back through the labels: 4 + 3 passes of check 9.
    assert!(stdout.contains("2 passed, 0 failed, 0 skipped"), "{stdout}");
    assert!(stderr.contains("[rank 2] rank 2 of 3 starting"), "{stderr}");
}

#[test]
fn srun_names_the_task_that_failed_with_its_node_not_the_witnesses() {
    let (out, _) = under_fake_launchers(
        "--launcher srun -N 2 --ranks 2 --check 1",
        &[("FAKE_SRUN_FAIL", "node-b: task 3: Killed")],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "2x2: run failed: rank 3 on node-b was killed by signal 9 (SIGKILL); ranks 0, 1, 2 gave \
             up on a lost peer (status 75)"
        ),
        "{stdout}"
    );
}

#[test]
fn an_uneven_layout_goes_to_mpirun_as_host_slots_and_srun_refuses_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hostfile = dir.path().join("hosts");
    std::fs::write(&hostfile, "# two nodes\nn1 slots=4\nn2 slots=4\n").expect("hostfile");
    let hostfile = hostfile.display().to_string();
    let (out, argv) = under_fake_launchers(
        &format!("--launcher mpirun --hostfile {hostfile} --ranks 3+1 --check 10b"),
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(argv.len(), 1, "{argv:?}");
    assert!(
        argv[0].starts_with(
            "--mca state_base_verbose 5 --mca oob_tcp_keepalive_time 5 --mca \
             oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 --tag-output --host \
             n1:3,n2:1 -np 4 "
        ),
        "{argv:?}"
    );
    assert!(
        stdout.contains("3+1") && stdout.contains("1 passed"),
        "{stdout}"
    );

    let (out, argv) = under_fake_launchers("--launcher srun -N 2 --ranks 3+1", &[]);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success() && argv.is_empty(),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("without --ntasks-per-node"), "{stderr}");
}

/// A `--rank-binary` wrapper around the fake rank, in `dir`: with `clean`, it runs the rank as
/// `apptainer exec --cleanenv` (or `docker run` without `-e`) does, with none of the launcher's
/// variables (`env -i`, keeping only PATH and the fake rank's own setting); otherwise it passes
/// the environment on.
fn rank_wrapper(dir: &Path, clean: bool) -> PathBuf {
    let rank = fake_rank().display().to_string();
    assert!(!rank.contains('\''), "{rank}");
    let body = if clean {
        format!(
            "#!/bin/sh\nexec env -i PATH=\"$PATH\" FAKE_RANK_CHECKS=\"$FAKE_RANK_CHECKS\" \
             '{rank}' \"$@\"\n"
        )
    } else {
        format!("#!/bin/sh\nexec '{rank}' \"$@\"\n")
    };
    let path = dir.join(if clean { "cleanenv-rank" } else { "rank" });
    symmem_test_support::command::write_script(&path, &body);
    path
}

/// The matrix's message for ranks that each ran as a job of their own.
const ALONE: &str = "every rank ran as rank 0 of a 1-rank job";

#[test]
fn ranks_that_did_not_get_the_launchers_variables_fail_the_layout_once_with_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = rank_wrapper(dir.path(), true);
    let out = matrix_test_through(&wrapper, &["--ranks", "4,1", "--timeout", "60s"])
        .output()
        .expect("run symmem-matrix");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // The ranks did run: each as rank 0 of its own job of 1.
    assert_eq!(
        stderr.matches("[rank 3] rank 0 of 1 starting").count(),
        1,
        "{stderr}"
    );
    // One message for the layout, naming what the ranks saw, the cause and the fix.
    let notes: Vec<&str> = stdout.lines().filter(|l| l.contains(ALONE)).collect();
    assert_eq!(notes.len(), 1, "{stdout}");
    let note = notes[0];
    assert!(
        note.trim_start().starts_with(&format!(
            "4 ranks: the layout asked for 4 ranks, but {ALONE}."
        )),
        "{note}"
    );
    for part in [
        "--cleanenv",
        "--containall",
        "docker run",
        "RANK, WORLD_SIZE",
        "APPTAINERENV_",
        "-e <NAME>",
    ] {
        assert!(note.contains(part), "no {part:?} in: {note}");
    }
    // Not a misdiagnosis per check.
    assert!(!stdout.contains("no result from"), "{stdout}");
    assert!(!stdout.contains("4 ranks, check"), "{stdout}");
    assert!(
        stderr.lines().any(|l| l.starts_with("[1/2] 4 ranks:")
            && l.contains("FAILED")
            && l.ends_with("the ranks did not meet as one 4-rank job (see below)")),
        "{stderr}"
    );
    // A 1-rank job is what one rank should see: that layout passes.
    let n = symmem_conformance::CHECKS.len();
    assert!(
        stdout.contains(&format!("{n} passed, {n} failed, 0 skipped")),
        "{stdout}"
    );
}

#[test]
fn a_wrapper_that_passes_the_environment_on_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = rank_wrapper(dir.path(), false);
    let out = matrix_test_through(&wrapper, &["--ranks", "4,1", "--timeout", "60s"])
        .output()
        .expect("run symmem-matrix");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("[rank 3] rank 3 of 4 starting"), "{stderr}");
    assert!(!stdout.contains("the layout asked for"), "{stdout}");
    let n = 2 * symmem_conformance::CHECKS.len();
    assert!(
        stdout.contains(&format!("{n} passed, 0 failed, 0 skipped")),
        "{stdout}"
    );
}

#[test]
fn under_srun_the_fix_names_slurms_variables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = rank_wrapper(dir.path(), true);
    let (out, argv) =
        under_fake_launchers_through(&wrapper, "--launcher srun -N 2 --ranks 1 --check 1", &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(argv.len(), 1, "{argv:?}");
    let notes: Vec<&str> = stdout.lines().filter(|l| l.contains(ALONE)).collect();
    assert_eq!(notes.len(), 1, "{stdout}");
    assert!(
        notes[0].contains("the layout asked for 2 ranks") && notes[0].contains("SLURM_*"),
        "{}",
        notes[0]
    );
}

/// Stand-ins for the container engines, on PATH: each logs its arguments, checks the words
/// the matrix must give it, and runs the fake rank as the image's `symmem-conformance`. The
/// Docker one, like Docker, passes the rank only the variables named with `--env`.
fn fake_engines(dir: &Path) -> PathBuf {
    let rank = fake_rank().display().to_string();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("bin folder");
    let apptainer = format!(
        "#!/bin/sh\necho \"apptainer $*\" >>\"$ENGINE_LOG\"\n[ \"$1\" = exec ] || exit 90\n\
         [ \"$2\" = \"$EXPECT_IMAGE\" ] && [ \"$3\" = symmem-conformance ] || exit 91\n\
         shift 3\nexec '{rank}' \"$@\"\n"
    );
    symmem_test_support::command::write_script(&bin.join("apptainer"), &apptainer);
    let docker = format!(
        "#!/bin/sh\necho \"docker $*\" >>\"$ENGINE_LOG\"\n[ \"$1\" = run ] || exit 90\n\
         passed=\"\"\nwhile [ $# -gt 0 ] && [ \"$1\" != \"$EXPECT_IMAGE\" ]; do\n\
         case \"$1\" in --env=*) n=${{1#--env=}}; passed=\"$passed $n=$(printenv \"$n\")\";; esac\n\
         shift\ndone\n[ \"$2\" = symmem-conformance ] || exit 91\nshift 2\n\
         # shellcheck disable=SC2086\n\
         exec env -i PATH=\"$PATH\" FAKE_RANK_CHECKS=\"$FAKE_RANK_CHECKS\" $passed '{rank}' \"$@\"\n"
    );
    symmem_test_support::command::write_script(&bin.join("docker"), &docker);
    bin
}

fn in_containers(engine: &str, image: &str) -> (Output, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake_engines(dir.path());
    let log = dir.path().join("engine.log");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = matrix_test_bare(&[
        "--ranks",
        "1,2",
        "--timeout",
        "60s",
        "--container",
        engine,
        image,
    ])
    .env("PATH", path)
    .env("ENGINE_LOG", &log)
    .env("EXPECT_IMAGE", image)
    .output()
    .expect("run symmem-matrix");
    (out, std::fs::read_to_string(&log).unwrap_or_default())
}

#[test]
fn with_apptainer_each_rank_runs_the_images_binary() {
    let (out, log) = in_containers("apptainer", "/images/symmem.sif");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{log}");
    let starts = log
        .lines()
        .filter(|l| *l == "apptainer exec /images/symmem.sif symmem-conformance --provider host")
        .count();
    assert_eq!(starts, 3, "one container per rank of 1 and 2 ranks\n{log}");
}

#[test]
fn with_docker_the_launchers_variables_reach_the_rank_by_name() {
    let (out, log) = in_containers("docker", "localhost/symmem:test");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{log}");
    assert_eq!(log.lines().count(), 3, "{log}");
    for line in log.lines() {
        for word in [
            "--network=host",
            "--volume=/tmp:/tmp",
            "--env=RANK ",
            "--env=WORLD_SIZE ",
        ] {
            assert!(line.contains(word), "{word} missing: {line}");
        }
        assert!(
            line.ends_with("localhost/symmem:test symmem-conformance --provider host"),
            "{line}"
        );
    }
}

#[test]
fn the_kill_test_and_a_rank_binary_are_refused_with_a_container() {
    let out = matrix_test_bare(&[
        "--container",
        "apptainer",
        "x.sif",
        "--kill-test",
        "--ranks",
        "2",
    ])
    .output()
    .expect("run symmem-matrix");
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--kill-test does not run with --container"),
        "{stderr}"
    );
    let out = matrix_test_bare(&["--container", "docker", "i", "--rank-binary", "/bin/true"])
        .output()
        .expect("run symmem-matrix");
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// The signals ignored in a `SigIgn:` line of /proc/PID/status, by number.
fn ignored(line: &str) -> Vec<u32> {
    let mask = u64::from_str_radix(line.trim_start_matches("SigIgn:").trim(), 16).expect("hex");
    (1..=64).filter(|n| mask & (1 << (n - 1)) != 0).collect()
}

/// A background job of a shell starts with SIGINT and SIGQUIT ignored, `nohup` ignores
/// SIGHUP: the launcher the matrix starts (srun, mpirun) must still see each (srun stops its
/// tasks on two SIGINTs), whatever the matrix inherited.
#[test]
fn the_launcher_gets_default_signal_actions_whatever_the_matrix_inherited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    symmem_test_support::command::write_script(&bin.join("srun"), FAKE_LAUNCHER);
    let argv = dir.path().join("argv");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args([
            "-c",
            "trap '' INT QUIT HUP TERM; exec \"$0\" \"$@\"",
            MATRIX,
            "test",
        ])
        .args([
            "--launcher",
            "srun",
            "-N",
            "2",
            "--ranks",
            "1",
            "--check",
            "1",
        ])
        .arg("--rank-binary")
        .arg(fake_rank())
        .env("FAKE_RANK_CHECKS", check_ids())
        .env("PATH", path)
        .env("FAKE_ARGV", &argv)
        .env_remove("SLURM_JOB_NUM_NODES")
        .env_remove("SLURM_NNODES")
        .stdin(Stdio::null())
        .output()
        .expect("run symmem-matrix");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines = std::fs::read_to_string(argv.with_extension("sigign")).expect("srun ran");
    let line = lines.lines().next().expect("one line");
    let ignored = ignored(line);
    for (name, number) in [
        ("SIGHUP", 1),
        ("SIGINT", 2),
        ("SIGQUIT", 3),
        ("SIGTERM", 15),
    ] {
        assert!(!ignored.contains(&number), "srun ignores {name}: {line}");
    }
}

/// README's `salloc -N 2 symmem-matrix test --launcher srun ...` on a `select/cons_tres`
/// cluster: the allocation holds one task slot a node. Layouts that cannot fit are refused
/// before any job starts, in one message with the `salloc` options that fit them all.
#[test]
fn layouts_that_do_not_fit_the_allocation_are_refused_before_any_job() {
    let cons_tres = [("SLURM_JOB_CPUS_PER_NODE", "1(x2)"), ("SLURM_JOB_ID", "7")];
    let (out, argv) = under_fake_launchers("--launcher srun -N 2 --ranks 1,4,n3", &cons_tres);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(argv.is_empty(), "no job may start: {argv:?}");
    assert!(
        stderr.contains("this allocation cannot run every layout asked for")
            && stderr.contains("2x4: 8 ranks on 2 nodes")
            && stderr.contains("3 on 2: 3 ranks on 2 nodes")
            && stderr
                .contains("with `salloc -N 2 --ntasks-per-node=4` (or `salloc -N 2 --exclusive`)")
            && !stderr.contains("2x1:"),
        "{stderr}"
    );
    // srun --overcommit places more tasks than CPUs: then the layouts run.
    let (out, argv) =
        under_fake_launchers("--launcher srun -N 2 --ranks 4 -- --overcommit", &cons_tres);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(argv.len(), 1, "{argv:?}");
}

/// A job srun refuses to start gives one note, not one "no result" per check.
#[test]
fn a_job_that_did_not_start_is_one_note() {
    let (out, _) =
        under_fake_launchers("--launcher srun -N 2 --ranks 2", &[("FAKE_NO_START", "1")]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("the job did not start").count(),
        1,
        "{stdout}"
    );
    assert!(!stdout.contains("no result from"), "{stdout}");
}

/// `srun -n 4 apptainer run IMAGE` runs the image's default command, this matrix, once per
/// task: each would run a matrix of its own on its own host and pass. Started as one of many
/// ranks by a rank starter (here a stand-in `orted`), the local matrix refuses, naming the way
/// across nodes; with the launcher's variables dropped too.
#[test]
fn the_matrix_started_as_one_of_many_tasks_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let orted = dir.path().join("orted");
    // A link, not a copy: a copy's write descriptor, inherited by a child another test
    // thread forks meanwhile, makes exec of it fail with ETXTBSY. The process is still named
    // after the path it was started by.
    std::os::unix::fs::symlink("/bin/sh", &orted).expect("sh linked as orted");
    // Not `exec`: orted must stay the matrix's parent.
    let script = "\"$0\" test --ranks 1 --rank-binary \"$1\"; status=$?; exit $status";
    let run = |env: &[(&str, &str)], clear: bool| {
        let mut command = Command::new(&orted);
        command.args(["-c", script, MATRIX]).arg(fake_rank());
        if clear {
            command
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default());
        }
        let out = command
            .envs(env.iter().copied())
            .env("FAKE_RANK_CHECKS", check_ids())
            .stdin(Stdio::null())
            .output()
            .expect("run symmem-matrix under the stand-in orted");
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{stdout}\n{stderr}");
        stderr
    };
    let stderr = run(
        &[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "4")],
        false,
    );
    assert!(
        stderr.contains("symmem-matrix was started as rank 1 of 4 by orted")
            && stderr.contains("--launcher srun|mpirun"),
        "{stderr}"
    );
    let stderr = run(&[], true);
    assert!(
        stderr.contains("no launcher variables reached this process")
            && stderr.contains("--container ENGINE IMAGE"),
        "{stderr}"
    );
}
