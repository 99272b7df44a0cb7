use super::*;
use std::path::{Path, PathBuf};

fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn unset_and_blank_take_the_default() {
    for env in [
        &[][..],
        &[("SYMMEM_COLLECTIVE_TIMEOUT", "")],
        &[("SYMMEM_COLLECTIVE_TIMEOUT", "  ")],
    ] {
        assert_eq!(
            COLLECTIVE_TIMEOUT.get_from(vars(env)),
            Ok(Duration::from_secs(60))
        );
    }
    assert_eq!(DEVICE.read_from(vars(&[("SYMMEM_DEVICE", "")])), Ok(None));
    assert_eq!(HOST_HEAP_SIZE.get_from(vars(&[])), Ok(1 << 30));
    assert_eq!(PROVIDER.get_from(vars(&[])), Ok(ProviderKind::Host));
}

#[test]
fn values_parse_as_documented() {
    let env = [
        ("SYMMEM_COLLECTIVE_TIMEOUT", "500ms"),
        ("SYMMEM_HOST_HEAP_SIZE", "64M"),
        ("SYMMEM_NODE_ID", " 3 "),
        ("SYMMEM_PROVIDER", "ROCshmem"),
        ("SYMMEM_DEVICE", "2"),
    ];
    assert_eq!(
        COLLECTIVE_TIMEOUT.get_from(vars(&env)),
        Ok(Duration::from_millis(500))
    );
    assert_eq!(HOST_HEAP_SIZE.get_from(vars(&env)), Ok(64 << 20));
    assert_eq!(NODE_ID.get_from(vars(&env)), Ok(3));
    assert_eq!(PROVIDER.get_from(vars(&env)), Ok(ProviderKind::Rocshmem));
    assert_eq!(DEVICE.read_from(vars(&env)), Ok(Some(2)));
}

#[test]
fn a_zero_collective_timeout_is_refused() {
    for zero in ["0", "0s", "0ms"] {
        let e = COLLECTIVE_TIMEOUT
            .get_from(vars(&[("SYMMEM_COLLECTIVE_TIMEOUT", zero)]))
            .unwrap_err();
        assert_eq!(e.var, "SYMMEM_COLLECTIVE_TIMEOUT");
        assert_eq!(e.value, zero);
    }
}

#[test]
fn a_zero_gpu_heap_is_refused_and_a_size_kept() {
    for zero in ["0", "0M", " 0 "] {
        let e = GPU_HEAP_SIZE
            .read_from(vars(&[("SYMMEM_GPU_HEAP_SIZE", zero)]))
            .unwrap_err();
        assert_eq!(e.var, "SYMMEM_GPU_HEAP_SIZE");
        assert_eq!(e.value, zero);
        assert!(e.to_string().contains("a size above 0"), "{e}");
    }
    assert_eq!(
        GPU_HEAP_SIZE.read_from(vars(&[("SYMMEM_GPU_HEAP_SIZE", "1G")])),
        Ok(NonZeroU64::new(1 << 30))
    );
    assert_eq!(GPU_HEAP_SIZE.read_from(vars(&[])), Ok(None));
}

#[test]
fn an_invalid_value_names_variable_value_and_what_is_expected() {
    let e = HOST_HEAP_SIZE
        .get_from(vars(&[("SYMMEM_HOST_HEAP_SIZE", "lots")]))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "SYMMEM_HOST_HEAP_SIZE=\"lots\" is not valid: expected a size such as 268435456, 512M \
         or 4G; fix it or unset it"
    );
    let e = PROVIDER
        .get_from(vars(&[("SYMMEM_PROVIDER", "cuda")]))
        .unwrap_err();
    assert_eq!(e.expected, "host, nvshmem or rocshmem");
    assert_eq!(e.expected, ProviderKind::choices());
    assert!(NODE_ID.parse("-1").is_err());
}

#[test]
fn every_setting_is_declared_once() {
    let all = all();
    for (i, e) in all.iter().enumerate() {
        assert!(e.name.starts_with("SYMMEM_"), "{}", e.name);
        assert!(!e.doc.is_empty() && !e.default.is_empty(), "{e:?}");
        assert!(
            all[..i].iter().all(|other| other.name != e.name),
            "{} is declared twice",
            e.name
        );
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `"SYMMEM_` string literals that name no setting, each as (file, the whole literal): narrow
/// on purpose, so a setting read by hand next to one of them still fails the test.
const NOT_SETTINGS: &[(&str, &str)] = &[
    // Marks, not settings: the emulated cluster's rsh agent sets SYMMEM_CLUSTER_ORIGIN on what
    // it starts on a node (as sshd sets SSH_CONNECTION), carrying `.ci/cluster`'s run mark
    // SYMMEM_CI_RUN, so that CI's last check finds its own leftovers. Nothing reads them as
    // configuration.
    ("crates/symmem-cluster/src/lib.rs", "SYMMEM_CLUSTER_ORIGIN"),
    ("crates/symmem-cluster/src/lib.rs", "SYMMEM_CI_RUN"),
    // The shim's CMake cache variables (`-D` names of shim/CMakeLists.txt), named once for
    // the build library's CMake driver (symmem-build).
    ("crates/symmem-build/src/cmake.rs", "SYMMEM_SHIM_BACKEND"),
    ("crates/symmem-build/src/cmake.rs", "SYMMEM_SHIM_ARCHS"),
    // symmem-shim-sys's opt-in build script reads `SYMMEM_SHIM_ARCHS` from its environment
    // and passes it on as the build's `--arch`, as CMake's own inputs are passed.
    ("crates/symmem-shim-sys/build.rs", "SYMMEM_SHIM_ARCHS"),
    // Compile-time variables that build script sets for the crate (`option_env!`).
    (
        "crates/symmem-shim-sys/build.rs",
        "cargo:rustc-env=SYMMEM_SHIM_BUILT_{}={}",
    ),
    (
        "crates/symmem-shim-sys/src/lib.rs",
        "SYMMEM_SHIM_BUILT_NVSHMEM",
    ),
    (
        "crates/symmem-shim-sys/src/lib.rs",
        "SYMMEM_SHIM_BUILT_ROCSHMEM",
    ),
    // bindgen's allow-list of the C header's constants (`SYMMEM_SHIM_ABI_VERSION`, ...).
    ("xtask/src/codegen.rs", "SYMMEM_SHIM_.*"),
    // The container images' build argument with the tag (a Docker `ARG`), named once.
    ("xtask/src/images/model.rs", "SYMMEM_IMAGE_TAG"),
];

/// `SYMMEM_` and capitals, digits or underscores: a variable's whole name.
fn is_variable_name(text: &str) -> bool {
    text.strip_prefix("SYMMEM_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// Test files set variables for the processes they start, including test-only markers of
/// their child processes.
fn is_test_file(relative: &str) -> bool {
    relative.contains("/tests/")
}

/// The registry itself (`settings.rs`) and these tests of it (`settings/`).
const REGISTRY: &str = "crates/symmem/src/settings";

#[test]
fn no_setting_name_literal_outside_the_registry() {
    let root = workspace_root();
    let mut files = Vec::new();
    // Every Rust source of the workspace lives under these.
    for top in ["crates", "xtask"] {
        rust_files(&root, &root.join(top), &mut files);
    }
    assert!(
        files
            .iter()
            .any(|f| f == "crates/symmem-host/src/config.rs"),
        "the scan found no sources under {}",
        root.display()
    );
    let mut offences = Vec::new();
    let mut used = vec![false; NOT_SETTINGS.len()];
    // Settings declared outside the registry (development ones, in the crate that reads them).
    let mut declared = Vec::new();
    for relative in files {
        if relative.starts_with(REGISTRY) {
            continue;
        }
        let source = std::fs::read_to_string(root.join(&relative)).expect("readable source");
        for Literal {
            line,
            text: literal,
            names_a_setting,
        } in string_literals(&source)
        {
            let allowed = NOT_SETTINGS
                .iter()
                .position(|&(file, text)| file == relative && text == literal);
            if names_a_setting && is_variable_name(&literal) {
                declared.push(format!("{relative}:{line}: {literal}"));
            } else if let Some(i) = allowed {
                used[i] = true;
            } else if literal.contains("SYMMEM_") && !is_test_file(&relative) {
                offences.push(format!("{relative}:{line}: {literal}"));
            }
        }
    }
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let unlisted: Vec<&String> = declared
        .iter()
        .filter(|d| {
            let name = d.rsplit(' ').next().unwrap_or_default();
            !readme.contains(&format!("| `{name}` |"))
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "settings declared outside {REGISTRY} that README's settings tables do not list; add \
         their `settings::markdown_row` to README's second table:\n{unlisted:?}"
    );
    let stale: Vec<String> = NOT_SETTINGS
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((file, text), _)| format!("{file}: {text}"))
        .collect();
    assert!(
        stale.is_empty(),
        "NOT_SETTINGS allows literals that are gone; remove these exceptions:\n{}",
        stale.join("\n")
    );
    assert!(
        offences.is_empty(),
        "string literals naming a SYMMEM_ variable outside {REGISTRY}; declare the setting \
         there (or, for symmem's own tests only, as a `Setting {{ name: \"SYMMEM_...\", .. }}` \
         in the crate that reads it) and use its `.name` (or its getter):\n{}",
        offences.join("\n")
    );
}

fn rust_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under the root");
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// A string literal of a Rust source.
struct Literal {
    /// The line it starts on.
    line: usize,
    text: String,
    /// It is the first field of a `Setting` literal: `Setting { name: "..."`.
    names_a_setting: bool,
}

/// The string literals of Rust `source` (plain, byte and raw); comments (doc comments
/// included) and character literals are skipped.
fn string_literals(source: &str) -> Vec<Literal> {
    let chars: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '"'), or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 3; // the quote, the backslash and the escaped character
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c == 'r' && (at(i + 1) == '"' || at(i + 1) == '#') && !ident_before(&chars, i) {
            let mut hashes = 0;
            let mut j = i + 1;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                i += 1; // r#ident
                continue;
            }
            let start = line;
            let mut text = String::new();
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                    break;
                }
                line += usize::from(chars[j] == '\n');
                text.push(chars[j]);
                j += 1;
            }
            found.push(Literal {
                line: start,
                names_a_setting: is_setting_name(&chars, i),
                text,
            });
            i = j + 1 + hashes;
        } else if c == '"' {
            let (start, opening) = (line, i);
            let mut text = String::new();
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    text.push(chars[i]);
                    i += 1;
                }
                line += usize::from(at(i) == '\n');
                text.push(at(i));
                i += 1;
            }
            found.push(Literal {
                line: start,
                names_a_setting: is_setting_name(&chars, opening),
                text,
            });
            i += 1;
        } else {
            i += 1;
        }
    }
    found
}

/// True when the literal opening at `chars[at]` follows `Setting { name:` (blanks aside).
fn is_setting_name(chars: &[char], at: usize) -> bool {
    let mut end = at;
    let mut take = |word: &str| {
        while end > 0 && chars[end - 1].is_whitespace() {
            end -= 1;
        }
        let word: Vec<char> = word.chars().collect();
        let found = end >= word.len() && chars[end - word.len()..end] == word[..];
        if found {
            end -= word.len();
        }
        found
    };
    let declared = take("name:") && take("{") && take("Setting");
    declared && !(end > 0 && (chars[end - 1].is_alphanumeric() || chars[end - 1] == '_'))
}

#[test]
fn a_setting_literals_name_is_told_from_other_literals() {
    let source = concat!(
        "pub const A: Setting<u8> = Setting {\n    name: \"SYMMEM_A\",\n    doc: \"SYMMEM_B\",\n",
        "let x = MySetting { name: \"SYMMEM_C\" }; let y = Other { name: \"SYMMEM_D\" };\n",
        "let z = Setting{name:\"SYMMEM_E\"}; f(\"SYMMEM_F\");\n",
    );
    let named: Vec<(String, bool)> = string_literals(source)
        .into_iter()
        .map(|l| (l.text, l.names_a_setting))
        .collect();
    let expected = [
        ("SYMMEM_A", true),
        ("SYMMEM_B", false),
        ("SYMMEM_C", false),
        ("SYMMEM_D", false),
        ("SYMMEM_E", true),
        ("SYMMEM_F", false),
    ];
    assert_eq!(named, expected.map(|(t, n)| (t.to_string(), n)),);
    assert!(is_variable_name("SYMMEM_RUN_2") && !is_variable_name("SYMMEM_{}"));
}

/// True when `chars[i]` continues an identifier (so `r` there is not a raw-string prefix).
fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && {
        let p = chars[i - 1];
        (p.is_alphanumeric() || p == '_') && p != 'b'
            || (p == 'b' && i > 1 && (chars[i - 2].is_alphanumeric() || chars[i - 2] == '_'))
    }
}

#[test]
fn the_literal_scan_finds_literals_and_skips_comments() {
    let source = concat!(
        "// \"SYMMEM_A\" in a comment\n",
        "/* \"SYMMEM_B\" /* nested */ */\n",
        "let q = '\"'; let l: &'static str = \"SYMMEM_C\";\n",
        "let r = r#\"raw \"SYMMEM_D\" \"#; let e = \"esc \\\" SYMMEM_E\";\n",
        "let b = br\"SYMMEM_F\"; let n = 'x'; let bs = '\\\\'; let q = '\\'';\n",
        "/// doc \"SYMMEM_G\"\n",
        "let multi = \"a\nSYMMEM_H\"; let after = \"SYMMEM_I\";\n",
    );
    let hits: Vec<(usize, String)> = string_literals(source)
        .into_iter()
        .filter(|l| l.text.contains("SYMMEM_"))
        .map(|l| (l.line, l.text))
        .collect();
    let names: Vec<(usize, &str)> = hits
        .iter()
        .map(|(line, t)| (*line, &t[t.find("SYMMEM_").unwrap()..][..8]))
        .collect();
    assert_eq!(
        names,
        [
            (3, "SYMMEM_C"),
            (4, "SYMMEM_D"),
            (4, "SYMMEM_E"),
            (5, "SYMMEM_F"),
            (7, "SYMMEM_H"),
            (8, "SYMMEM_I"),
        ]
    );
}
