//! The conformance suite under a real PMIx launcher: Open MPI's `mpirun` starts the rank binary
//! on this host, and the ranks meet through its PMIx server (`SYMMEM_BOOTSTRAP=pmix`), also
//! with emulated nodes, so the engine's all-gather, its order check and the node-local star
//! that passes the host heaps all run for real. Also: `auto` keeps the Unix star on one host,
//! and a job that says it spans nodes without an engine stops at once, naming the fix.
//!
//! Skipped, with the reason, where `mpirun` is not installed (Debian: openmpi-bin); under CI
//! (CI set) a missing `mpirun` is a failure, since `.ci/run` installs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use symmem::settings::{BOOTSTRAP, COLLECTIVE_TIMEOUT, NODE_ID};

fn mpirun() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("mpirun"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "mpirun is not installed (apt-get install openmpi-bin libpmix-dev)";
        assert!(
            std::env::var_os("CI").is_none(),
            "{why}; CI must provide it (.ci/run installs it)"
        );
        eprintln!("SKIPPED: {why}");
    }
    found
}

/// Runs `ranks` ranks of the conformance binary under mpirun, each through `sh -c SCRIPT`
/// where `$BIN` is the binary, with `env` for every rank.
fn launch(mpirun: &Path, ranks: usize, script: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(mpirun);
    cmd.args(["-np", &ranks.to_string(), "--oversubscribe"])
        // mpirun refuses root unless told twice; harmless otherwise.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("BIN", env!("CARGO_BIN_EXE_symmem-conformance"))
        .env("RUST_LOG", "symmem_bootstrap=debug")
        .env(COLLECTIVE_TIMEOUT.name, "30s");
    for (k, v) in env {
        cmd.env(k, v);
        cmd.args(["-x", k]);
    }
    cmd.args(["-x", "BIN", "-x", "RUST_LOG", "-x", COLLECTIVE_TIMEOUT.name]);
    cmd.args(["sh", "-c", script]);
    cmd.output().expect("start mpirun")
}

/// What the job wrote, stdout then stderr.
fn both_streams(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

struct Results {
    pass: usize,
    skip: usize,
    fail: usize,
    /// `(check, rank)` of each pass.
    passed: Vec<(String, usize)>,
    /// The world size of every result line.
    worlds: Vec<usize>,
    log: String,
}

fn results(out: &Output) -> Results {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut r = Results {
        pass: 0,
        skip: 0,
        fail: 0,
        passed: Vec::new(),
        worlds: Vec::new(),
        log,
    };
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(world) = v["world_size"].as_u64() {
            r.worlds.push(world as usize);
        }
        match v["status"].as_str() {
            Some("pass") => {
                r.pass += 1;
                r.passed.push((
                    v["check"].as_str().unwrap_or_default().to_string(),
                    v["rank"].as_u64().unwrap_or(u64::MAX) as usize,
                ));
            }
            Some("skip") => r.skip += 1,
            Some(_) => r.fail += 1,
            None => {}
        }
    }
    r
}

/// The ranks that joined a control plane, checking that every join (the suite opens several
/// providers) went through `engine`.
fn joined_through(log: &str, engine: &str) -> Vec<usize> {
    let mut ranks: Vec<usize> = log
        .lines()
        .filter(|l| l.contains("control plane engine"))
        .map(|l| {
            assert!(l.contains(&format!("engine={engine} ")), "{l}");
            l.rsplit("rank=").next().unwrap().trim().parse().unwrap()
        })
        .collect();
    ranks.sort();
    ranks.dedup();
    ranks
}

fn assert_suite_passes(ranks: usize, script: &str, env: &[(&str, &str)], engine: &str) -> Results {
    let Some(mpirun) = mpirun() else {
        return results(&Command::new("true").output().unwrap());
    };
    let out = launch(&mpirun, ranks, script, env);
    let r = results(&out);
    assert!(
        out.status.success() && r.fail == 0 && r.pass > 0,
        "status {:?}, {} pass, {} fail\n{}\n{}",
        out.status,
        r.pass,
        r.fail,
        String::from_utf8_lossy(&out.stdout),
        r.log
    );
    assert_eq!(
        joined_through(&r.log, engine),
        (0..ranks).collect::<Vec<_>>(),
        "{}",
        r.log
    );
    r
}

#[test]
fn the_suite_passes_over_pmix_at_2_and_4_ranks() {
    for ranks in [2, 4] {
        let r = assert_suite_passes(ranks, "exec \"$BIN\"", &[(BOOTSTRAP.name, "pmix")], "Pmix");
        if mpirun().is_some() {
            assert_eq!(r.skip, 0, "one node: nothing to skip\n{}", r.log);
        }
    }
}

#[test]
fn emulated_nodes_over_pmix_pass_the_inter_node_checks() {
    // Ranks 0-1 on node 0, 2-3 on node 1: each sees two peers with base 0 and direct = false.
    let script = format!(
        "{}=$((OMPI_COMM_WORLD_RANK / 2)) exec \"$BIN\"",
        NODE_ID.name
    );
    let r = assert_suite_passes(4, &script, &[(BOOTSTRAP.name, "pmix")], "Pmix");
    if mpirun().is_some() {
        for check in ["9", "10b"] {
            let ranks = r.passed.iter().filter(|(c, _)| c == check).count();
            assert_eq!(ranks, 4, "check {check} must pass on every rank\n{}", r.log);
        }
    }
}

/// Slurm's default block distribution puts `srun -N2 -n4` as 3+1; hostfiles give any layout.
/// Whether a check runs must be decided alike on every rank, whatever the layout: before, the
/// rank alone on its node skipped check 3 that the others ran, and the collectives went out
/// of order across ranks ("ranks 0, 1, 2 issued #6 barrier, rank 3 issued #6 malloc").
#[test]
fn uneven_layouts_run_the_same_checks_on_every_rank() {
    // (ranks, the emulated node of rank $OMPI_COMM_WORLD_RANK as a shell expression)
    let layouts = [
        (4, "$((OMPI_COMM_WORLD_RANK / 3))"),       // 3+1
        (4, "$(((OMPI_COMM_WORLD_RANK + 2) / 3))"), // 1+3
        (8, "$((OMPI_COMM_WORLD_RANK / 2))"),       // 4 nodes of 2
        (8, "$OMPI_COMM_WORLD_RANK"),               // 8 nodes of 1
    ];
    for (ranks, node) in layouts {
        let script = format!("{}={node} exec \"$BIN\"", NODE_ID.name);
        let r = assert_suite_passes(ranks, &script, &[(BOOTSTRAP.name, "pmix")], "Pmix");
        if mpirun().is_some() {
            for check in ["9", "10b"] {
                let passed = r.passed.iter().filter(|(c, _)| c == check).count();
                assert_eq!(passed, ranks, "{node}: check {check}\n{}", r.log);
            }
        }
    }
}

#[test]
fn auto_keeps_the_unix_star_on_one_host() {
    assert_suite_passes(2, "exec \"$BIN\"", &[], "Unix");
}

#[test]
fn a_job_across_nodes_without_an_engine_stops_at_once_naming_the_fix() {
    let Some(mpirun) = mpirun() else { return };
    // What a launcher without PMIx across two nodes looks like to the rank: one rank of this
    // node, no PMIx server.
    let without_pmix = "unset PMIX_NAMESPACE PMIX_RANK; OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 exec \"$BIN\"";
    let out = launch(&mpirun, 2, without_pmix, &[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        log.contains("this job spans nodes (Open MPI says 1 of its 2 ranks run on this node)")
            && log.contains("srun --mpi=pmix"),
        "{log}"
    );
    // Forcing the Unix star across nodes is refused the same way.
    let forced = "OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 exec \"$BIN\"";
    let out = launch(&mpirun, 2, forced, &[(BOOTSTRAP.name, "unix")]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(log.contains("=unix but this job spans nodes"), "{log}");
}

/// Strips every Open MPI variable from the rank's environment, as a container that passes
/// only `PMIX_*` does, then runs the binary.
const PMIX_ONLY: &str = "for v in $(env | sed -n 's/^\\(OMPI_[A-Za-z0-9_]*\\)=.*/\\1/p'); do unset \"$v\"; done; exec \"$BIN\"";

/// A rank that only PMIx's variables reached learns its rank and the job's size from the PMIx
/// server: one job of 4, on the Unix star of one host (auto) or through the PMIx engine, also
/// across emulated nodes; never 4 jobs of one rank.
#[test]
fn with_only_pmix_variables_the_ranks_meet_as_one_job() {
    for (bootstrap, engine) in [(None, "Unix"), (Some("pmix"), "Pmix")] {
        let env: Vec<(&str, &str)> = bootstrap.map(|b| (BOOTSTRAP.name, b)).into_iter().collect();
        let r = assert_suite_passes(4, PMIX_ONLY, &env, engine);
        if mpirun().is_some() {
            assert!(
                !r.worlds.is_empty() && r.worlds.iter().all(|&w| w == 4),
                "world sizes {:?}\n{}",
                r.worlds,
                r.log
            );
            assert!(
                r.log.contains("the PMIx server named this rank"),
                "{}",
                r.log
            );
        }
    }
    let nodes = format!("export {}=$((PMIX_RANK / 2)); {PMIX_ONLY}", NODE_ID.name);
    let r = assert_suite_passes(4, &nodes, &[(BOOTSTRAP.name, "pmix")], "Pmix");
    if mpirun().is_some() {
        let inter_node = r.passed.iter().filter(|(c, _)| c == "9").count();
        assert_eq!(inter_node, 4, "{}", r.log);
    }
}

/// A rank that no launcher variable reached at all (`apptainer exec --cleanenv`) is refused,
/// naming the launcher it descends from and the fix, rather than passing as a job of one.
#[test]
fn a_rank_whose_environment_was_dropped_is_refused() {
    let Some(mpirun) = mpirun() else { return };
    let script = "exec env -i PATH=\"$PATH\" \"$BIN\"";
    let out = launch(&mpirun, 2, script, &[]);
    let r = results(&out);
    assert!(!out.status.success(), "{}", r.log);
    assert_eq!(r.pass, 0, "{}", String::from_utf8_lossy(&out.stdout));
    let text = both_streams(&out);
    assert!(
        text.contains("no launcher variables reached this process, yet it descends from mpirun")
            && text.contains("--cleanenv"),
        "{text}"
    );
}

/// Two ranks of one host with a /tmp each (one container per rank with a private /tmp, here
/// a mount namespace with a tmpfs on /tmp for rank 1) cannot meet on their node's star: every
/// rank says so at once, naming the bind that fixes it, instead of waiting out the timeout.
#[test]
fn ranks_of_one_host_with_a_tmp_each_are_refused_naming_the_bind() {
    let Some(mpirun) = mpirun() else { return };
    let private_tmp = Command::new("unshare")
        .args(["--mount", "sh", "-c", "mount -t tmpfs tmpfs /tmp"])
        .status();
    if !private_tmp.is_ok_and(|s| s.success()) {
        let why = "`unshare --mount` + `mount -t tmpfs` needs root (CAP_SYS_ADMIN)";
        assert!(std::env::var_os("CI").is_none(), "{why}; CI runs as root");
        eprintln!("SKIPPED: {why}");
        return;
    }
    let script = "unset XDG_RUNTIME_DIR; if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then \
                  exec unshare --mount sh -c 'mount -t tmpfs tmpfs /tmp && exec \"$BIN\"'; \
                  else exec \"$BIN\"; fi";
    // Open MPI 4.1's PMIx 4.2 keeps the job's data in a shared-memory store under the node's
    // /tmp, which rank 1 cannot see: its client then reads it from the server (`hash`), as the
    // images' PMIx 7 client always does. Without, its first get is found or not at random.
    let out = launch(
        &mpirun,
        2,
        script,
        &[
            (BOOTSTRAP.name, "pmix"),
            ("TMPDIR", "/tmp"),
            ("PMIX_MCA_gds", "hash"),
        ],
    );
    let text = both_streams(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("ranks 0 and 1 run on one host")
            && text.contains("see different folders at /tmp")
            && text.contains("--bind /tmp"),
        "{text}"
    );
    assert!(!text.contains("could not reach rank 0"), "{text}");
    // In a container (Apptainer's variable), `auto` on one host takes the PMIx engine, which
    // checks the same at once, rather than the Unix star, which would wait out the timeout.
    let out = launch(
        &mpirun,
        2,
        script,
        &[
            ("APPTAINER_CONTAINER", "/images/x.sif"),
            ("TMPDIR", "/tmp"),
            ("PMIX_MCA_gds", "hash"),
        ],
    );
    let text = both_streams(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("ranks 0 and 1 run on one host"), "{text}");
}

#[test]
fn a_hung_rank_over_pmix_ends_the_collective_on_every_other_rank() {
    let Some(mpirun) = mpirun() else { return };
    // Rank 1 hangs at check 4; the others must give up after the collective timeout, report
    // it by rank (the PMIx engine carries the rendezvous only; collectives go over symmem's
    // own links, which know who is missing), and exit as witnesses; mpirun then ends the job.
    let out = launch(
        &mpirun,
        3,
        "exec \"$BIN\"",
        &[
            (BOOTSTRAP.name, "pmix"),
            (symmem_conformance::CONFORMANCE_FAULT.name, "hang@1:4"),
            (COLLECTIVE_TIMEOUT.name, "2s"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let reports = stdout
        .lines()
        .filter(|l| {
            l.contains("\"status\":\"fail\"")
                && l.contains("rank 1 never arrived at collective #4 barrier within 2s")
        })
        .count();
    assert!(
        reports >= 1,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_gpu_provider_over_the_stub_shim_starts_through_pmix() {
    if mpirun().is_none() {
        return;
    }
    // The stand-in shim (the C ABI over host memory): rank 0's unique id reaches every rank
    // through the PMIx engine, as NVSHMEM's would across hosts.
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("libsymmem_shim_nvshmem.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../symmem-gpu/tests/stub/stub_shim.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-I"])
        .arg(symmem_shim_sys::SOURCE_DIR)
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .status();
    match built {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{cc} failed on {} ({s})", source.display()),
        Err(e) => {
            let why = format!("the stub shim needs a C compiler ({cc}: {e}); set CC");
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("SKIPPED: {why}");
            return;
        }
    }
    let script = format!(
        "{}=$((OMPI_COMM_WORLD_RANK / 2)) exec \"$BIN\" --provider nvshmem",
        NODE_ID.name
    );
    let lib = library.to_string_lossy().into_owned();
    let r = assert_suite_passes(
        4,
        &script,
        &[
            (BOOTSTRAP.name, "pmix"),
            (symmem::settings::SHIM_LIB.name, &lib),
        ],
        "Pmix",
    );
    for check in ["9", "10b"] {
        let ranks = r.passed.iter().filter(|(c, _)| c == check).count();
        assert_eq!(ranks, 4, "check {check} must pass on every rank\n{}", r.log);
    }
}
