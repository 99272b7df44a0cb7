//! The rank binary's logs as they reach a log file: under a launcher its stderr is a pipe, so
//! its warnings must come without ANSI colour codes, even where NO_COLOR is not set.

use symmem_conformance::CONFORMANCE_FAULT;
use symmem_launch::Stream;
use symmem_test_support::launch::{host_ranks, run};

#[test]
fn warnings_on_a_pipe_have_no_colour_codes() {
    // Rank 1 leaves before check 3: rank 0 then warns about its allocations never freed.
    let spec = host_ranks(env!("CARGO_BIN_EXE_symmem-conformance"), 2)
        .env(CONFORMANCE_FAULT.name, "exit@1:3")
        .env("SYMMEM_COLLECTIVE_TIMEOUT", "20s")
        // Empty means unset (no-color.org): colours would be on, were stderr a terminal.
        .env("NO_COLOR", "")
        .env("RUST_LOG", "warn");
    let (report, lines, _) = run(&spec);
    report.expect("launch");
    let stderr: Vec<&str> = lines
        .iter()
        .filter(|l| l.stream == Stream::Stderr)
        .map(|l| l.text.as_str())
        .collect();
    let text = stderr.join("\n");
    assert!(
        stderr.iter().any(|l| l.contains("WARN")),
        "no warning was logged, so nothing was checked:\n{text}"
    );
    assert!(
        !text.contains('\x1b'),
        "colour codes in piped logs:\n{text}"
    );
}
