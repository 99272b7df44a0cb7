//! `symmem-matrix`: the conformance matrix (`test`) and the GPU bench (`bench`), each run
//! through symmem's launcher. It runs installed programs only (the rank binary
//! `symmem-conformance`, the bench binary `symmem-gpu-bench`, found next to it or given by
//! flag), so it needs no cargo: it is what the images and the GPU bundle ship.
//! `cargo xtask test` and `cargo xtask bench` build it and run it.

mod allocation;
mod bench;
mod container;
mod kill_test;
mod layouts;
mod plan;
mod programs;
mod target;
mod test;
mod world;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// symmem's conformance matrix and GPU bench.
///
/// Install: cargo install --path crates/symmem-matrix, and next to it the programs it runs:
/// cargo install --path crates/symmem-conformance (the rank binary) and, for the bench,
/// --path crates/symmem-gpu (symmem-gpu-bench). From a checkout, `cargo xtask test` builds
/// them and runs `symmem-matrix test`.
#[derive(Parser)]
#[command(name = "symmem-matrix", version, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Test(test::TestArgs),
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Test(args) => test::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
