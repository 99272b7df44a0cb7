//! README.md's generated tables: the users' settings (from the registry, `symmem::settings`)
//! and the exit codes of `symmem-run` and `cargo xtask test` (from the lists their `--help`
//! prints). The development settings are declared in the crates that read them (some in tests
//! and benches, out of the xtask's reach): their rows are written by hand, each checked by its
//! crate's test and the tidy test.
//!
//! Each table stands between a pair of markers, `<!-- codegen:NAME:start -->` and
//! `<!-- codegen:NAME:end -->`; `cargo xtask codegen` rewrites what is between them, and
//! `codegen --check` fails when it is stale. The rest of README is prose, never touched.

use crate::generated::Generated;
use anyhow::{Context, bail};
use std::path::Path;
use symmem::settings::{Audience, markdown_table};

/// The file, relative to the repository root.
const README: &str = "README.md";

/// What the tables are made from, for the message when README is stale.
const FROM: &str = "xtask/src/readme.rs (from the settings registry and the commands' \
                    symmem::exit_codes)";

/// Each marked region of README and its table.
fn tables() -> Vec<(&'static str, String)> {
    vec![
        ("settings-user", markdown_table(Audience::User)),
        (
            "exit-codes",
            exit_code_table(&[
                ("`symmem-run`", symmem::exit_codes::LAUNCHER),
                ("`cargo xtask test`", symmem::exit_codes::MATRIX),
            ]),
        ),
    ]
}

/// README.md as `cargo xtask codegen` writes it: the current text with every marked table
/// regenerated.
pub fn generated(root: &Path) -> anyhow::Result<Generated> {
    let path = root.join(README);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut contents = text;
    for (name, table) in tables() {
        contents = replace_region(&contents, name, &table)?;
    }
    Ok(Generated {
        path: README.into(),
        from: FROM,
        contents,
    })
}

fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- codegen:{name}:start -->\n"),
        format!("<!-- codegen:{name}:end -->"),
    )
}

/// `text` with what stands between NAME's markers replaced by `table`.
fn replace_region(text: &str, name: &str, table: &str) -> anyhow::Result<String> {
    let (start, end) = markers(name);
    let (Some(from), Some(to)) = (text.find(&start), text.find(&end)) else {
        bail!(
            "{README} lacks the markers of its {name} table: put `{}` and `{end}`, each on a \
             line of its own, where the table goes",
            start.trim_end()
        );
    };
    let body = from + start.len();
    if to < body || text[body..].matches(&start).count() + text.matches(&end).count() != 1 {
        bail!(
            "{README} must have `{}` once, before `{end}` once (the {name} table goes between \
             them)",
            start.trim_end()
        );
    }
    Ok(format!("{}{table}{}", &text[..body], &text[to..]))
}

/// One row per code, one column per command (`-` where the command does not use the code):
/// numeric codes in order, then the symbolic ones (`S`, `128+N`) as the first list has them.
fn exit_code_table(commands: &[(&str, &[(&str, &str)])]) -> String {
    let mut codes: Vec<&str> = Vec::new();
    for (_, list) in commands {
        for (code, _) in *list {
            if !codes.contains(code) {
                codes.push(code);
            }
        }
    }
    // Stable: symbolic codes keep their order behind the numeric ones.
    codes.sort_by_key(|c| c.parse::<u32>().map_or(u32::MAX, |n| n));
    let mut table = String::from("| code |");
    for (name, _) in commands {
        table.push_str(&format!(" {name} |"));
    }
    table.push_str("\n| --- |");
    table.push_str(&" --- |".repeat(commands.len()));
    table.push('\n');
    for code in codes {
        table.push_str(&format!("| `{code}` |"));
        for (_, list) in commands {
            let meaning = list
                .iter()
                .find(|(c, _)| *c == code)
                .map_or("-", |(_, m)| *m);
            table.push_str(&format!(" {meaning} |"));
        }
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_rewritten_and_the_prose_kept() {
        let text = "intro\n<!-- codegen:t:start -->\nold\nrows\n<!-- codegen:t:end -->\nafter\n";
        assert_eq!(
            replace_region(text, "t", "| a |\n").unwrap(),
            "intro\n<!-- codegen:t:start -->\n| a |\n<!-- codegen:t:end -->\nafter\n"
        );
        // Empty between the markers: the table is put there.
        let empty = "<!-- codegen:t:start -->\n<!-- codegen:t:end -->\n";
        assert_eq!(
            replace_region(empty, "t", "x\n").unwrap(),
            "<!-- codegen:t:start -->\nx\n<!-- codegen:t:end -->\n"
        );
    }

    #[test]
    fn missing_doubled_or_swapped_markers_name_the_fix() {
        let e = replace_region("no markers\n", "t", "x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lacks the markers of its t table")
                && e.contains("`<!-- codegen:t:start -->`"),
            "{e}"
        );
        let swapped = "<!-- codegen:t:end -->\n<!-- codegen:t:start -->\n";
        let twice = "<!-- codegen:t:start -->\n<!-- codegen:t:end -->\n\
                     <!-- codegen:t:start -->\n<!-- codegen:t:end -->\n";
        for text in [swapped, twice] {
            let e = replace_region(text, "t", "x").unwrap_err().to_string();
            assert!(e.contains("once, before"), "{text}: {e}");
        }
    }

    #[test]
    fn exit_codes_are_one_row_each_with_a_dash_where_a_command_lacks_one() {
        let table = exit_code_table(&[
            ("`a`", &[("S", "its status"), ("2", "usage"), ("0", "ok")]),
            ("`b`", &[("0", "all passed"), ("130", "interrupted")]),
        ]);
        assert_eq!(
            table,
            "| code | `a` | `b` |\n| --- | --- | --- |\n\
             | `0` | ok | all passed |\n\
             | `2` | usage | - |\n\
             | `130` | - | interrupted |\n\
             | `S` | its status | - |\n"
        );
    }

    /// A README whose tables are out of date fails `codegen --check`, naming it and the fix;
    /// writing it makes it current and keeps the prose around the tables.
    #[test]
    fn a_stale_table_fails_the_check_until_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("# symmem\n");
        for (name, _) in tables() {
            let (start, end) = markers(name);
            text.push_str(&format!(
                "prose before {name}\n{start}| old |\n{end}\nprose after\n"
            ));
        }
        std::fs::write(dir.path().join(README), &text).unwrap();
        let files = [generated(dir.path()).unwrap()];
        let e = format!(
            "{:#}",
            crate::codegen::check(dir.path(), &files, crate::codegen::REFRESH).unwrap_err()
        );
        assert!(
            e.starts_with("README.md differs from what xtask/src/readme.rs")
                && e.contains("run `cargo xtask codegen`"),
            "{e}"
        );
        crate::codegen::write(dir.path(), &files).unwrap();
        let files = [generated(dir.path()).unwrap()];
        crate::codegen::check(dir.path(), &files, crate::codegen::REFRESH).unwrap();
        let written = std::fs::read_to_string(dir.path().join(README)).unwrap();
        assert!(!written.contains("| old |"), "{written}");
        assert_eq!(written.matches("prose after\n").count(), tables().len());
        assert!(
            written.contains(&markdown_table(Audience::User)),
            "{written}"
        );
    }

    /// The committed README has every marked region (`codegen --check`, xtask/tests/codegen.rs,
    /// then compares its contents).
    #[test]
    fn the_readme_has_every_region() {
        let file = generated(&crate::project::project_root()).unwrap();
        for (name, table) in tables() {
            assert!(file.contents.contains(&table), "{name}");
        }
    }
}
