//! Project tasks: `cargo xtask <command>`. One module per command.

mod build_rocshmem;
mod build_shim;
mod codegen;
mod container;
mod generated;
mod images;
mod matrix;
mod project;
mod readme;
mod wheel;

// The build library's shared floor, under the names the xtask's modules use.
use symmem_build::{pins, runner, tools};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// symmem's project tasks.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Test(matrix::TestArgs),
    BuildRocshmem(build_rocshmem::Args),
    BuildShim(build_shim::Args),
    Bench(matrix::BenchArgs),
    Images(images::Args),
    Codegen(codegen::Args),
    Wheel(wheel::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = xshell::Shell::new()
        .context("reading the current folder")
        .and_then(|sh| run(&sh, cli.command));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            // Bad usage is 2, as clap's own errors and symmem-matrix's (README's exit codes).
            match e.downcast_ref::<matrix::Misplaced>() {
                Some(_) => ExitCode::from(2),
                None => ExitCode::FAILURE,
            }
        }
    }
}

/// Runs one command; every program it starts goes through `sh`.
fn run(sh: &xshell::Shell, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Test(args) => matrix::test(sh, args),
        Command::BuildRocshmem(args) => build_rocshmem::run(sh, args).map(|()| ExitCode::SUCCESS),
        Command::BuildShim(args) => build_shim::run(sh, args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => matrix::bench(sh, args),
        Command::Images(args) => images::run(sh, args).map(|()| ExitCode::SUCCESS),
        Command::Codegen(args) => codegen::run(sh, args).map(|()| ExitCode::SUCCESS),
        Command::Wheel(args) => wheel::run(sh, args).map(|()| ExitCode::SUCCESS),
    }
}
