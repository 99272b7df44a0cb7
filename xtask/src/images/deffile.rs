//! A structural check of the Apptainer definition, following Apptainer's own parser
//! (pkg/build/types/parser/deffile.go and internal/pkg/build/args): header keywords first,
//! `Bootstrap` leading; only known `%sections`; `%arguments` as `KEY=value` lines; every
//! `{{ NAME }}` defined there (Apptainer fails on an undefined one) and never on a line with a
//! `#` before it (Apptainer treats that as a comment and leaves it unreplaced).

use super::model::{INPUTS, WORKDIR};
use super::render;
use super::tests::model;
use std::collections::{BTreeMap, BTreeSet};

const SECTIONS: &[&str] = &[
    "help",
    "setup",
    "files",
    "labels",
    "environment",
    "pre",
    "post",
    "runscript",
    "test",
    "startscript",
    "arguments",
];
const HEADER_KEYS: &[&str] = &["bootstrap", "from", "stage"];

struct Def {
    header: Vec<(String, String)>,
    sections: BTreeMap<String, Vec<String>>,
}

fn parse(text: &str) -> Result<Def, String> {
    let mut header = Vec::new();
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('%') {
            let name = name.split_whitespace().next().unwrap_or_default();
            if !SECTIONS.contains(&name) {
                return Err(format!("unknown section %{name}"));
            }
            if sections.contains_key(name) {
                return Err(format!("section %{name} given twice"));
            }
            sections.insert(name.to_string(), Vec::new());
            current = Some(name.to_string());
            continue;
        }
        match &current {
            Some(name) => sections.get_mut(name).unwrap().push(line.to_string()),
            None => {
                if trimmed.is_empty() || trimmed.starts_with('#') {
                    continue;
                }
                let (key, value) = trimmed
                    .split_once(':')
                    .ok_or_else(|| format!("header line without a value: {trimmed}"))?;
                let key = key.trim().to_lowercase();
                if !HEADER_KEYS.contains(&key.as_str()) {
                    return Err(format!("invalid header keyword {key}"));
                }
                header.push((key, value.trim().to_string()));
            }
        }
    }
    Ok(Def { header, sections })
}

fn body(def: &Def, section: &str) -> Vec<String> {
    def.sections[section]
        .iter()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn the_definition_has_header_sections_and_arguments() {
    let model = model();
    let text = render::apptainer_def(&model);
    let def = parse(&text).unwrap();

    // Header: Bootstrap first, docker agent, the pinned base.
    assert_eq!(
        def.header,
        vec![
            ("bootstrap".into(), "docker".into()),
            (
                "from".into(),
                "docker.io/rocm/dev-ubuntu-24.04:7.2.4-complete".into()
            ),
        ]
    );
    assert!(text.starts_with("Bootstrap: docker\n"));

    // Required sections.
    for section in [
        "arguments",
        "files",
        "environment",
        "post",
        "runscript",
        "test",
        "labels",
        "help",
    ] {
        assert!(def.sections.contains_key(section), "no %{section}");
    }
    assert!(
        !def.sections.contains_key("setup"),
        "%setup runs on the host"
    );

    // Arguments: KEY=value, ARCH defaulting to the pinned arch; each used, each use defined.
    let args: BTreeMap<String, String> = body(&def, "arguments")
        .iter()
        .map(|l| {
            let (k, v) = l.split_once('=').expect("KEY=value");
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    assert_eq!(args.get("ARCH").map(String::as_str), Some("gfx942"));
    assert_eq!(
        args.get(super::model::TAG_ARG).map(String::as_str),
        Some(""),
        "no default tag: images are labelled only with a computed one"
    );
    let mut used = BTreeSet::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            let end = rest[start..].find("}}").expect("closed {{") + start;
            let name = rest[start + 2..end].trim().to_string();
            assert!(
                args.contains_key(&name),
                "{{{{ {name} }}}} is not in %arguments"
            );
            assert!(
                !line[..line.find("{{").unwrap()].contains('#'),
                "Apptainer would not replace {{{{ {name} }}}} after a #: {line}"
            );
            used.insert(name);
            rest = &rest[end + 2..];
        }
    }
    assert_eq!(used, args.keys().cloned().collect(), "unused arguments");
    assert!(
        body(&def, "post")
            .iter()
            .any(|l| l == "cargo xtask build-rocshmem --arch \"{{ ARCH }}\"")
    );

    // %files: exactly the image inputs, into the workdir.
    let files: Vec<String> = body(&def, "files");
    let expected: Vec<String> = INPUTS
        .iter()
        .map(|i| format!("{i} {WORKDIR}/{i}"))
        .collect();
    assert_eq!(files, expected);

    // Build order in %post: fail fast, then the installer, the shim, the workspace.
    let post = body(&def, "post");
    assert_eq!(post[0], "set -eu");
    let position = |needle: &str| {
        post.iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("%post lacks {needle}"))
    };
    assert!(position("--default-toolchain 1.95.0") < position("cd /opt/symmem"));
    assert!(position("cd /opt/symmem") < position("cargo xtask images tag"));
    assert!(position("cargo xtask images tag") < position("cargo xtask build-rocshmem"));
    assert!(position("cargo xtask build-rocshmem") < position("cargo xtask build-shim"));
    assert!(position("cargo xtask build-shim") < position("cargo build --locked --workspace"));
    assert!(position("cargo build --locked --workspace") < position("install -s -m 0755"));
    assert!(position("cargo xtask build-shim") < position("install -m 0644"));

    // Run script and test: the rocSHMEM matrix, installed; the test runs one rank.
    let runscript = body(&def, "runscript").join("\n");
    assert!(runscript.contains("*) set -- --provider rocshmem \"$@\" ;;"));
    assert!(runscript.contains("exec symmem-matrix test \"$@\""));
    let test = body(&def, "test").join("\n");
    assert_eq!(test, "symmem-matrix test --provider rocshmem --ranks 1");

    // Labels: key value.
    let labels = body(&def, "labels");
    assert!(
        labels
            .iter()
            .any(|l| l == "io.github.symmem.arch {{ ARCH }}")
    );
    assert!(labels.iter().all(|l| l.split_once(' ').is_some()));
}

#[test]
fn the_debian_definition_bootstraps_from_the_local_engine_and_stages_its_files() {
    let model = super::tests::debian();
    let text = render::apptainer_def(&model);
    let def = parse(&text).unwrap();
    assert_eq!(
        def.header,
        vec![
            ("bootstrap".into(), "docker-daemon".into()),
            ("from".into(), super::model::debian_base_image()),
        ]
    );
    let files = body(&def, "files");
    assert_eq!(files[0], "rust /usr/local/rust");
    assert_eq!(files[1], "vendor /opt/vendor");
    assert_eq!(
        files[2],
        format!("src/{} {WORKDIR}/{}", INPUTS[0], INPUTS[0])
    );
    assert!(!text.contains("{{ ARCH }}"));
    assert!(
        body(&def, "test")
            .iter()
            .any(|l| l == "symmem-matrix test --provider host --ranks 1")
    );
    let environment = body(&def, "environment").join("\n");
    assert!(!environment.contains("ROCM_PATH"), "{environment}");
}

#[test]
fn the_checker_rejects_malformed_definitions() {
    // Apptainer appends repeated sections; the generator never repeats one, so a repeat here
    // is a generator bug.
    assert!(parse("Bootstrap: docker\nFrom: x\n%post\n").is_ok());
    assert!(
        parse("Bootstrap: docker\n%postt\n")
            .err()
            .unwrap()
            .contains("unknown section")
    );
    assert!(
        parse("Bootstrap: docker\nImage: x\n")
            .err()
            .unwrap()
            .contains("invalid header")
    );
    assert!(
        parse("Bootstrap: docker\n%post\n%post\n")
            .err()
            .unwrap()
            .contains("twice")
    );
}
