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
