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

/// No crate's top-level modules depend on each other in a circle (issue 43: `bootstrap.rs` and
/// `engine.rs` of symmem-bootstrap did, once hidden behind a re-export). A module's
/// dependencies are the `crate::` paths in the code of its files (not comments, not their
/// `mod tests`), a name the crate root re-exports counting as the module it comes from.
#[test]
fn no_crate_has_a_module_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = vec![root.join("xtask/src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        sources.push(entry.unwrap().path().join("src"));
    }
    let mut circles = Vec::new();
    for src in sources.into_iter().filter(|s| s.is_dir()) {
        if let Some(circle) = module_circle(&src) {
            circles.push(format!("{}: {}", src.display(), circle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "module circles (move what both sides need into a module of its own that both use):\n{}",
        circles.join("\n")
    );
}

/// The first circle among the top-level modules of the crate whose sources are `src`.
fn module_circle(src: &Path) -> Option<Vec<String>> {
    use std::collections::BTreeMap;
    let mut modules: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    let mut root_text = String::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if matches!(stem.as_str(), "lib" | "main") {
            root_text = std::fs::read_to_string(&path).unwrap();
        } else if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
            modules.entry(stem).or_default().extend(rust_files(&path));
        }
    }
    let exported = reexports(&root_text);
    let resolve = |name: &str| -> Option<String> {
        match modules.contains_key(name) {
            true => Some(name.to_string()),
            false => exported.get(name).cloned(),
        }
    };
    let mut uses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (module, files) in &modules {
        let mut to = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            // Doc links and comments name modules without depending on them.
            let code: String = code
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            for name in crate_paths(&code) {
                if let Some(other) = resolve(&name).filter(|o| o != module && !to.contains(o)) {
                    to.push(other);
                }
            }
        }
        uses.insert(module.clone(), to);
    }
    // Depth-first from every module, with the path walked so far.
    fn walk(at: &str, uses: &BTreeMap<String, Vec<String>>, path: &mut Vec<String>) -> bool {
        if let Some(start) = path.iter().position(|p| p == at) {
            path.drain(..start);
            path.push(at.to_string());
            return true;
        }
        path.push(at.to_string());
        for next in uses.get(at).into_iter().flatten() {
            if walk(next, uses, path) {
                return true;
            }
        }
        path.pop();
        false
    }
    uses.keys().find_map(|start| {
        let mut path = Vec::new();
        walk(start, &uses, &mut path).then_some(path)
    })
}

/// Every `.rs` file at or under `path`.
fn rust_files(path: &Path) -> Vec<std::path::PathBuf> {
    if !path.is_dir() {
        return vec![path.to_path_buf()];
    }
    let entries = std::fs::read_dir(path).unwrap();
    entries
        .flat_map(|e| rust_files(&e.unwrap().path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect()
}

/// The first segment of every `crate::` path in `text` (`crate::a::b`, `crate::{a, b::c}`).
fn crate_paths(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (_, rest) in text
        .match_indices("crate::")
        .map(|(i, _)| text.split_at(i + 7))
    {
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = group.split('}').next().unwrap_or("");
                names.extend(group.split(',').map(ident));
            }
            None => names.push(ident(rest)),
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The names the crate root re-exports (`pub use module::{A, B};`), by the module they come
/// from.
fn reexports(root: &str) -> std::collections::BTreeMap<String, String> {
    let mut map = std::collections::BTreeMap::new();
    for (at, _) in root.match_indices("pub use ") {
        let statement = root[at + 8..].split(';').next().unwrap_or("");
        let Some((module, items)) = statement.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.rsplit("::").next().unwrap_or("").trim();
            let name = name.rsplit(" as ").next().unwrap_or(name).trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    map
}
