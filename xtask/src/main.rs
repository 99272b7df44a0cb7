//! Project tasks: `cargo xtask <command>`. One module per command.

mod bench;
mod build_rocshmem;
mod build_shim;
mod container;
mod images;
mod pins;
mod project;
mod test;

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
    Test(test::TestArgs),
    BuildRocshmem(build_rocshmem::Args),
    BuildShim(build_shim::Args),
    Bench(bench::Args),
    Images(images::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Test(args) => test::run(args),
        Command::BuildRocshmem(args) => build_rocshmem::run(args).map(|()| ExitCode::SUCCESS),
        Command::BuildShim(args) => build_shim::run(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => bench::run(args),
        Command::Images(args) => images::run(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
