//! Checks of the repository's own configuration.

use std::path::Path;

/// The first `cargo xtask` compiles the xtask for minutes: a quiet alias would show nothing
/// all that time, and the command would look hung. Cargo's progress goes to stderr, so
/// `$(cargo xtask ...)` still captures only the command's own output.
#[test]
fn the_xtask_alias_shows_cargo_progress() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cargo/config.toml");
    let text = std::fs::read_to_string(&path).expect("read .cargo/config.toml");
    let config: toml::Table = text.parse().expect(".cargo/config.toml is TOML");
    let alias = config["alias"]["xtask"]
        .as_str()
        .expect("alias.xtask is one string");
    let words: Vec<&str> = alias.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"run"), "{alias}");
    assert!(
        words.windows(2).any(|w| w == ["--package", "xtask"]),
        "{alias}"
    );
    assert!(
        !words.iter().any(|w| matches!(*w, "--quiet" | "-q")),
        "alias.xtask = {alias:?} in {} hides cargo's progress: drop --quiet",
        path.display()
    );
}

/// Every program the xtask and the build library start goes through one `xshell::Shell`
/// (`cmd!`); only the runner (crates/symmem-build/src/runner.rs), which streams output, pipes
/// and hands back exit codes, converts those commands to `std::process::Command`.
#[test]
fn programs_start_through_xshell_outside_the_runner() {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = xtask.join("../crates/symmem-build/src");
    let allowed = build.join("runner.rs");
    let mut files = vec![xtask.join("src"), build];
    let mut offenders = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .map(|entry| entry.unwrap().path()),
            );
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || path == allowed {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            // `process::Command`, `process::{Command, ...}`, `Command::new(`.
            let named = line.contains("process::Command")
                || (line.contains("process::{") && line.contains("Command"))
                || line.contains("Command::new(");
            if named {
                offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "std::process::Command outside symmem-build's runner.rs: run programs with xshell's `cmd!(sh, \
         \"...\")` on the Shell passed down from main (or add what xshell cannot do to the \
         runner):\n{}",
        offenders.join("\n")
    );
}
