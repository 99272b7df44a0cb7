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

/// A provider is exhaustive (issue 43): a `match` whose arms name a `ProviderKind` variant has
/// no catch-all arm (`_ =>`, or a lone binding such as `other =>`), anywhere, tests included;
/// and production code has no `matches!` on one (a match with a hidden `_ => false`, as
/// `is_gpu` once was). A new provider is then a compile error at every place that decides
/// something per provider.
///
/// Read as text, with comments and literals blanked: a match's arms are found by bracket
/// depth, and a match is one on `ProviderKind` when one of its arms' patterns names
/// `ProviderKind::` (in the file that defines the enum, `Self::` too), which every match that
/// decides by provider does. Not covered: a variant compared with `==` or `!=`, and patterns
/// that reach the variants through another name (`use ProviderKind::*`, an alias).
#[test]
fn every_match_on_a_provider_kind_lists_every_provider() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut offenders = Vec::new();
    let mut on_provider = 0;
    for path in provider_scan_sources(&[root.join("crates"), root.join("xtask")]) {
        let text = std::fs::read_to_string(&path).unwrap();
        let shown = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let scan = scan_provider_matches(&text, is_test_file(&path));
        on_provider += scan.matches;
        offenders.extend(scan.offenders.iter().map(|o| format!("{shown}:{o}")));
    }
    assert!(
        offenders.is_empty(),
        "a catch-all on a ProviderKind decides silently for every provider added later: list \
         each variant in the match (`ProviderKind::Host | ProviderKind::Nvshmem => ...`) \
         instead of `_ =>` or `matches!`:\n{}",
        offenders.join("\n")
    );
    // The scan found the matches it is about (the core's `name` and `is_gpu` among them).
    assert!(
        on_provider >= 10,
        "only {on_provider} matches on ProviderKind"
    );
}

/// The scanner finds catch-alls after block and expression arms, in nested matches and in
/// `matches!`, and passes exhaustive matches, other enums' catch-alls and tests' `matches!`.
#[test]
fn the_provider_match_scan_finds_catch_alls() {
    let bad = r#"
fn a(k: ProviderKind) -> u8 {
    match k {
        ProviderKind::Host => { 1 }
        _ => 2,
    }
}
fn b(k: Option<ProviderKind>, e: E) -> bool {
    let x = match e { E::A => "_ => {", _ => "}" };
    match k {
        Some(ProviderKind::Nvshmem) => Foo { a: 1 }.b(),
        other => match other { Some(ProviderKind::Host) => true, _ => false },
    }
}
fn c(k: ProviderKind) -> bool { matches!(k, ProviderKind::Host) }
fn d(k: ProviderKind, c: char) -> u8 {
    match k {
        ProviderKind::Host => if c == '}' { 1 } else { 2 }
        _ => 3,
    }
}
"#;
    let scan = scan_provider_matches(bad, false);
    assert_eq!(scan.matches, 4, "{:?}", scan.offenders);
    let lines: Vec<&str> = scan
        .offenders
        .iter()
        .map(|o| o.split(':').next().unwrap())
        .collect();
    assert_eq!(lines, ["5", "12", "12", "19", "15"], "{:?}", scan.offenders);
    let good = r#"
fn a(k: ProviderKind, t: Topology) -> u8 {
    // _ => in a comment
    match (k, t.spans()) {
        (ProviderKind::Rocshmem, Some(_)) => 1,
        (ProviderKind::Rocshmem, None) | (ProviderKind::Host | ProviderKind::Nvshmem, _) => 2,
    }
}
#[cfg(test)]
mod tests {
    fn t(e: Error) { assert!(matches!(e, Error::NotGpu { kind: ProviderKind::Host })); }
}
"#;
    let scan = scan_provider_matches(good, false);
    assert_eq!(
        (scan.matches, scan.offenders.len()),
        (1, 0),
        "{:?}",
        scan.offenders
    );
}

/// What [`scan_provider_matches`] found in one file.
struct ProviderScan {
    /// Matches whose arms name a `ProviderKind` variant.
    matches: usize,
    /// `line: what`, for each catch-all on a `ProviderKind`.
    offenders: Vec<String>,
}

/// The catch-alls on `ProviderKind` in one file's `text` (see
/// [`every_match_on_a_provider_kind_lists_every_provider`]); `test_file`: all of it is tests.
fn scan_provider_matches(text: &str, test_file: bool) -> ProviderScan {
    let code = blank_comments_and_literals(text);
    let defines = text.contains("pub enum ProviderKind");
    let names_provider =
        |s: &str| s.contains("ProviderKind::") || (defines && s.contains("Self::"));
    let line = |at: usize| code[..at].iter().filter(|&&c| c == '\n').count() + 1;
    let production_end = if test_file {
        0
    } else {
        text.lines()
            .position(|l| l.trim() == "#[cfg(test)]")
            .map_or(code.len(), |n| {
                text.lines().take(n).map(|l| l.chars().count() + 1).sum()
            })
    };
    let mut scan = ProviderScan {
        matches: 0,
        offenders: Vec::new(),
    };
    for at in keyword_positions(&code, "match") {
        let Some((open, close)) = match_braces(&code, at + "match".len()) else {
            continue;
        };
        let patterns = arm_patterns(&code, open, close);
        if !patterns.iter().any(|(_, p)| names_provider(p)) {
            continue;
        }
        scan.matches += 1;
        for (start, pattern) in patterns.iter().filter(|(_, p)| is_catch_all(p)) {
            let start = *start
                + code[*start..]
                    .iter()
                    .take_while(|c| c.is_whitespace())
                    .count();
            scan.offenders
                .push(format!("{}: `{pattern} =>`", line(start)));
        }
    }
    for at in keyword_positions(&code, "matches!") {
        let from = at + "matches!".len();
        let Some(open) = (from..code.len()).find(|&i| !code[i].is_whitespace()) else {
            continue;
        };
        let Some(close) = closing(&code, open) else {
            continue;
        };
        let inside: String = code[open..close].iter().collect();
        if at < production_end && names_provider(&inside) {
            scan.offenders
                .push(format!("{}: `matches!` on a ProviderKind", line(at)));
        }
    }
    scan
}

/// Every `.rs` file under `dirs`, but not under a `target` folder.
fn provider_scan_sources(dirs: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut todo = dirs.to_vec();
    let mut files = Vec::new();
    while let Some(path) = todo.pop() {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Whether all of `path` is tests: under a `tests/`, `benches/` or `examples/` folder.
fn is_test_file(path: &Path) -> bool {
    path.components().any(|c| {
        matches!(
            c.as_os_str().to_str(),
            Some("tests" | "benches" | "examples")
        )
    })
}

/// `text` as chars with the insides of comments, strings and char literals blanked (newlines
/// kept), so that brackets and words in them are not read as code.
fn blank_comments_and_literals(text: &str) -> Vec<char> {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        let to = to.min(c.len());
        for ch in &mut out[from.min(to)..to] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    let ident = |i: usize| {
        c.get(i)
            .is_some_and(|ch| ch.is_alphanumeric() || *ch == '_')
    };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && next == Some('*') {
            let (mut depth, mut j) = (0, i);
            while j < c.len() {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    (depth, j) = (depth + 1, j + 2);
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    (depth, j) = (depth - 1, j + 2);
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if c[i] == 'r'
            && (!ident(i.wrapping_sub(1)) || (c[i - 1] == 'b' && !ident(i.wrapping_sub(2))))
            && matches!(next, Some('"' | '#'))
        {
            let hashes = c[i + 1..].iter().take_while(|&&ch| ch == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                // A raw identifier (`r#match`).
                i += 1;
                continue;
            }
            let closes = |j: usize| c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#'));
            let start = i + 2 + hashes;
            let end = (start..c.len()).find(|&j| closes(j)).unwrap_or(c.len());
            blank(&mut out, start, end);
            i = end + 1 + hashes;
        } else if c[i] == '\'' && next == Some('\\') {
            // The escaped char (`'\''`) is not the end.
            let end = (i + 3..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len());
            blank(&mut out, i + 1, end);
            i = end + 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            blank(&mut out, i + 1, i + 2);
            i += 3;
        } else {
            // Code, or a lifetime's quote.
            i += 1;
        }
    }
    out
}

/// Where `word` starts in `code` as a word of its own.
fn keyword_positions(code: &[char], word: &str) -> Vec<usize> {
    let word: Vec<char> = word.chars().collect();
    let ident = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
    (0..code.len().saturating_sub(word.len() - 1))
        .filter(|&i| code[i..i + word.len()] == word[..])
        .filter(|&i| !ident(i.checked_sub(1).and_then(|p| code.get(p))))
        .filter(|&i| !ident(code.get(i + word.len())) && code.get(i + word.len()) != Some(&'!'))
        .collect()
}

/// The index of the bracket that closes the one at `open`.
fn closing(code: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code.iter().enumerate().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The braces around a match's arms, for a `match` keyword ending at `from`: the first `{`
/// outside the scrutinee's brackets, and the brace that closes it.
fn match_braces(code: &[char], from: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    for (i, c) in code.iter().enumerate().skip(from) {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.checked_sub(1)?,
            '{' if depth == 0 => return Some((i, closing(code, i)?)),
            ';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The arms' patterns (guards included) of the match whose arms are between `open` and
/// `close`, each with where it starts. An arm ends at a `,` outside brackets, or at the `}`
/// that closes a block arm.
fn arm_patterns(code: &[char], open: usize, close: usize) -> Vec<(usize, String)> {
    let mut patterns = Vec::new();
    let (mut depth, mut start, mut in_arm) = (0usize, open + 1, false);
    let mut i = open + 1;
    while i < close {
        match code[i] {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '}' => {
                depth = depth.saturating_sub(1);
                // A block arm ends here, unless an `else` carries it on.
                let rest = code[i + 1..close].iter().skip_while(|c| c.is_whitespace());
                let word: String = rest
                    .take_while(|c| c.is_alphanumeric() || **c == '_')
                    .collect();
                if depth == 0 && in_arm && word != "else" {
                    (start, in_arm) = (i + 1, false);
                }
            }
            ',' if depth == 0 => (start, in_arm) = (i + 1, false),
            '=' if depth == 0 && code.get(i + 1) == Some(&'>') && !in_arm => {
                let pattern: String = code[start..i].iter().collect();
                patterns.push((start, pattern.trim().to_string()));
                in_arm = true;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    patterns
}

/// Whether an arm's pattern matches anything: `_` or a lone binding, guarded or not.
fn is_catch_all(pattern: &str) -> bool {
    let pattern = pattern.trim_start_matches('|').trim();
    let pattern = pattern.split(" if ").next().unwrap_or(pattern).trim();
    let binding = pattern
        .trim_start_matches("ref ")
        .trim_start_matches("mut ")
        .trim();
    pattern == "_"
        || (binding.starts_with(|c: char| c.is_lowercase() || c == '_')
            && binding.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !matches!(binding, "true" | "false"))
}
