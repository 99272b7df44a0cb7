//! The exit codes of symmem's two commands, said once: each command's `--help` lists them and
//! `cargo xtask codegen` writes README's exit-code table from them.

/// `symmem-run` (and `symmem_launch::launch`'s callers): code and meaning.
pub const LAUNCHER: &[(&str, &str)] = &[
    ("0", "all ranks exited 0"),
    (
        "S",
        "the failing rank's exit status S (the first rank that failed on its own)",
    ),
    ("128+N", "the failing rank was killed by signal N"),
    (
        "75",
        "ranks gave up on a peer (status 75) that exited 0 early or hung; the summary names it",
    ),
    ("124", "timeout (--timeout)"),
    ("130", "interrupted (SIGINT, SIGTERM or SIGHUP)"),
    (
        "2",
        "bad usage: an unknown or malformed option, --ranks outside 1-256, --timeout 0, a \
         program that is not found or cannot be executed",
    ),
    (
        "1",
        "other launcher errors (e.g. no rendezvous folder can be made in TMPDIR: point it at \
         a writable folder)",
    ),
];

/// `symmem-matrix test` (and so `cargo xtask test`): code and meaning.
pub const MATRIX: &[(&str, &str)] = &[
    (
        "0",
        "every check passed or was skipped with its reason, at every rank count",
    ),
    (
        "1",
        "a check failed, a run failed or timed out, or the matrix could not run (the error says \
         why)",
    ),
    (
        "2",
        "bad usage: an unknown or malformed option, a rank count outside 1-256, --timeout 0",
    ),
    (
        "130",
        "interrupted (SIGINT, SIGTERM or SIGHUP): the ranks were stopped and the remaining rank \
         counts not run",
    ),
];
