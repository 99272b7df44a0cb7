//! `symmem-conformance --check ID`: any one check runs alone (the suite allocates what the
//! checks share before the first one that uses it), and an unknown id is a usage error that
//! lists the valid ones.

use symmem_conformance::{CHECKS, CheckResult, Status, valid_ids};
use symmem_launch::Stream;
use symmem_test_support::launch::{host_ranks, output, run};

const BIN: &str = env!("CARGO_BIN_EXE_symmem-conformance");

/// The result lines of a clean `ranks`-rank run of the rank binary with `args`.
fn results(ranks: usize, args: &[&str]) -> Vec<CheckResult> {
    let spec = host_ranks(BIN, ranks)
        .args(args.iter().copied())
        .env("SYMMEM_COLLECTIVE_TIMEOUT", "30s");
    let (report, lines, _) = run(&spec);
    let report = report.expect("launch");
    assert!(report.success(), "{args:?}: {report}\n{}", output(&lines));
    lines
        .iter()
        .filter(|l| l.stream == Stream::Stdout)
        .filter_map(|l| CheckResult::parse(&l.text))
        .collect()
}

#[test]
fn every_check_runs_alone_and_passes_on_the_host_provider_at_2_ranks() {
    for info in &CHECKS {
        let results = results(2, &["--check", info.id]);
        let mut ranks: Vec<usize> = results.iter().map(|r| r.rank).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, [0, 1], "check {}: {results:?}", info.id);
        for r in &results {
            assert_eq!(
                (r.check.as_str(), r.name.as_str(), r.status),
                (info.id, info.name, Status::Pass),
                "{r:?}"
            );
        }
    }
}

#[test]
fn chosen_checks_run_once_each_in_table_order() {
    let results = results(2, &["--check", "10b,3", "--check", "3", "--check", "7"]);
    for rank in 0..2 {
        let ids: Vec<&str> = results
            .iter()
            .filter(|r| r.rank == rank)
            .map(|r| r.check.as_str())
            .collect();
        assert_eq!(ids, ["3", "7", "10b"], "rank {rank}");
    }
    assert!(
        results.iter().all(|r| r.status == Status::Pass),
        "{results:?}"
    );
}

#[test]
fn an_unknown_check_is_a_usage_error_listing_the_valid_ids() {
    let out = std::process::Command::new(BIN)
        .args(["--check", "7,99"])
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .output()
        .expect("run the rank binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown check \"99\""), "{stderr}");
    assert!(
        stderr.contains(&valid_ids())
            && valid_ids().starts_with("1, 2, ")
            && valid_ids().ends_with("10a, 10b"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "ran checks: {:?}", out.stdout);
}
