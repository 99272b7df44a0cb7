//! `cargo xtask images bench`: what running in an image costs. The warm host-provider matrix,
//! bare and in the Debian-base image under each engine found, side by side in one run: every
//! round runs each command once, in an order shuffled anew each round, so the machine's load
//! falls on all of them alike. What an engine adds is the median over rounds of (its run -
//! the bare run of the same round).

use super::engine::{Engine, ImageFormat};
use super::model::{Base, Model};
use crate::project::{self, MATRIX, Profile, RANK, project_root, target_dir};
use anyhow::{Context, bail};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use symmem::ProviderKind;
use xshell::{Shell, cmd};

/// Time the warm conformance matrix (host provider) bare and in the Debian-base image that
/// `cargo xtask images build` made, under Docker, Podman and Apptainer, side by side.
///
/// Bare runs the same programs the image installs, built with the same profile (`image`:
/// optimized, with debug assertions and overflow checks), unstripped.
///
/// Each engine is the one given, else the one on PATH; an engine not found is left out and
/// the report says so. Beside the matrix in the image, each engine's start and exit alone
/// (`true` in the image) and its command alone (`--version`) are timed, so that what the
/// engine, and a wrapper around it, cost can be told apart. The images are this checkout's
/// tag (`--tag` to bench another); an engine on PATH whose image is missing is left out, one
/// named here must have it. One warm-up run of each command, then ROUNDS rounds; each round
/// runs every command once, in an order shuffled anew each round (the same for the same
/// ROUNDS). Every run must pass within 300 s; a failed or hung run stops the bench and shows
/// its output. The report (also written to target/bench/containers.md) gives each command's
/// median, min and max, and for each engine what it adds over bare (the median over rounds of
/// the difference to that round's bare run), against issue 25's goal.
/// Speed is reported, never enforced: the exit code says only whether every run passed.
///
/// Examples:
///   cargo xtask images bench
///   cargo xtask images bench --rounds 20 --ranks 8
///   cargo xtask images bench --podman target/ci/podman-bin/docker \
///       --apptainer target/ci/apptainer-bin/apptainer          # as .ci/run does
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Rounds after the warm-up; each runs every command once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(3..=1000))]
    rounds: u32,
    /// The matrix's rank counts (as `symmem-matrix test --ranks`).
    #[arg(long, default_value = "1,2,4,8", value_name = "LIST")]
    ranks: String,
    /// `--docker PATH`, `--podman PATH`, ...: one flag per engine.
    #[command(flatten)]
    programs: Programs,
    /// The images' tag [default: this checkout's, `cargo xtask images tag`].
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
}

/// The program of each engine where one is given: a flag `--NAME PATH` per engine, its help
/// the engine's own (`Spec::bench_help`).
#[derive(Clone, Debug, Default)]
pub struct Programs(Vec<(Engine, PathBuf)>);

impl Programs {
    fn given(&self, engine: Engine) -> Option<&Path> {
        self.0
            .iter()
            .find(|(e, _)| *e == engine)
            .map(|(_, p)| p.as_path())
    }
}

impl clap::FromArgMatches for Programs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = Engine::all().iter().filter_map(|&engine| {
            let path = matches.get_one::<PathBuf>(engine.name())?;
            Some((engine, path.clone()))
        });
        Ok(Self(given.collect()))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Programs {
    fn augment_args(command: clap::Command) -> clap::Command {
        Engine::all().iter().fold(command, |command, engine| {
            command.arg(
                clap::Arg::new(engine.name())
                    .long(engine.name())
                    .value_name("PATH")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(engine.spec().bench_help),
            )
        })
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

/// A command the bench times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contender {
    /// What the report calls it.
    pub label: String,
    /// The engine it runs under; `None`: bare.
    pub engine: Option<Engine>,
    /// Whether it runs the matrix (else only the engine's start and exit, `true`).
    pub matrix: bool,
    /// Program and arguments.
    pub argv: Vec<String>,
}

/// The times of one contender, one per round, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub contender: Contender,
    pub seconds: Vec<f64>,
}

/// The median of `values` (the mean of the two middle ones for an even count).
pub fn median(values: &[f64]) -> f64 {
    assert!(!values.is_empty(), "the median of nothing");
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// What `series` adds over `bare`: the median of the per-round differences.
pub fn added(series: &Series, bare: &Series) -> f64 {
    let differences: Vec<f64> = series
        .seconds
        .iter()
        .zip(&bare.seconds)
        .map(|(s, b)| s - b)
        .collect();
    median(&differences)
}

/// The order of round `round`: every contender once, shuffled (Fisher-Yates, seeded by the
/// round), so that no command always runs first or always after the same one.
pub fn order(contenders: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..contenders).collect();
    // SplitMix64: a fixed, well-mixed sequence per round; no need for a random crate.
    let mut state = (round as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..contenders).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order
}

/// How long one run may take: the matrix stops itself after 120 s (`symmem-matrix test
/// --timeout`), an engine that hangs does not.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Runs one command to its end (killed past `limit`, by coreutils' `timeout`); its time, or
/// an error with its status and output.
fn time_one(sh: &Shell, contender: &Contender, limit: Duration) -> anyhow::Result<f64> {
    let argv = &contender.argv;
    anyhow::ensure!(!argv.is_empty(), "a contender with no command");
    let limit_arg = format!("{}s", limit.as_secs_f64());
    let started = Instant::now();
    let output = cmd!(sh, "timeout --kill-after=10s {limit_arg} {argv...}")
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| format!("starting {} (through `timeout`)", argv[0]))?;
    let seconds = started.elapsed().as_secs_f64();
    // `timeout` exits 124 when it stopped the command, 137 when it had to kill it.
    if matches!(output.status.code(), Some(124 | 137)) {
        bail!(
            "{} did not end within {} and was stopped, so nothing was timed: `{}`. The \
             engine or the matrix hangs: look for what is left running ({}) and at the \
             engine's own log",
            contender.label,
            symmem::format_elapsed(limit),
            crate::runner::shell_words(argv),
            super::engine::running_commands()
        );
    }
    if !output.status.success() {
        let said = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        bail!(
            "{} failed ({}), so nothing was timed: `{}`\n--- stdout (end)\n{}\n--- stderr \
             (end)\n{}",
            contender.label,
            output.status,
            crate::runner::shell_words(&contender.argv),
            said(&output.stdout),
            said(&output.stderr)
        );
    }
    Ok(seconds)
}

/// One warm-up run of each contender, then `rounds` rounds, each in [`order`]; every run
/// within `limit`.
pub fn measure(
    sh: &Shell,
    contenders: &[Contender],
    rounds: usize,
    limit: Duration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Series>> {
    for contender in contenders {
        progress(&format!("warm-up: {}", contender.label));
        time_one(sh, contender, limit)?;
    }
    let mut series: Vec<Series> = contenders
        .iter()
        .map(|c| Series {
            contender: c.clone(),
            seconds: vec![0.0; rounds],
        })
        .collect();
    for round in 0..rounds {
        progress(&format!("round {}/{rounds}", round + 1));
        for at in order(contenders.len(), round) {
            series[at].seconds[round] = time_one(sh, &contenders[at], limit)?;
        }
    }
    Ok(series)
}

/// The report: a header, a Markdown table and what each engine adds against its goal.
pub fn report(header: &str, series: &[Series], left_out: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}\n");
    let _ = writeln!(
        out,
        "| command | median | min | max | adds over bare (median of round differences) | goal |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    let bare = series.iter().find(|s| s.contender.engine.is_none());
    for s in series {
        let min = s.seconds.iter().copied().fold(f64::INFINITY, f64::min);
        let max = s.seconds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (adds, goal) = match (s.contender.engine, bare) {
            (Some(engine), Some(bare)) if s.contender.matrix => {
                let adds = added(s, bare);
                let goal = engine.spec().bench_goal;
                let verdict = if adds <= goal { "met" } else { "NOT met" };
                (
                    format!("{adds:+.3} s"),
                    format!("<= {goal:.1} s: {verdict}"),
                )
            }
            _ => (String::new(), String::new()),
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} s | {:.2} s | {:.2} s | {adds} | {goal} |",
            s.contender.label,
            median(&s.seconds),
            min,
            max
        );
    }
    for line in left_out {
        let _ = writeln!(out, "\nnot measured: {line}");
    }
    out
}

/// Where an engine is: the one given (which must exist), else the one on PATH, unless that
/// is another engine's (podman-docker's `docker`).
fn find(engine: Engine, given: Option<&Path>, sh: &Shell) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
        } else {
            Err(format!(
                "--{} {}: no such file",
                engine.name(),
                path.display()
            ))
        };
    }
    let program = engine.name();
    let found = crate::tools::program(Path::new(program))
        .ok_or_else(|| format!("{program}: `{program}` is not on PATH"))?;
    let actual = engine.actual(sh, &found);
    if actual != engine {
        let package = actual.spec().poses_as.as_ref().map_or("", |p| p.package);
        return Err(format!(
            "{program}: `{program}` on PATH is {}'s ({package}); it is measured as {} when --{} \
             names it",
            actual.spec().title,
            actual.name(),
            actual.name()
        ));
    }
    Ok(found)
}

/// The image `engine` runs for `tag`, or why it cannot: the image is not there (and how to
/// make it).
fn image(
    sh: &Shell,
    engine: Engine,
    exe: &Path,
    model: &Model,
    tag: &str,
) -> Result<String, String> {
    let build = super::pull::local_build(model, engine, tag);
    match engine.format() {
        ImageFormat::Sif => {
            let sif = target_dir().join("images").join(model.sif_name(tag));
            if !sif.is_file() {
                return Err(format!(
                    "{}: {} is missing: build it with `{build}`",
                    engine.name(),
                    sif.display()
                ));
            }
            Ok(sif.display().to_string())
        }
        ImageFormat::Oci => {
            let image = model.docker_image(tag);
            let id = "{{.Id}}";
            let present = cmd!(sh, "{exe} image inspect --format {id} {image}")
                .quiet()
                .ignore_status()
                .output()
                .is_ok_and(|o| o.status.success());
            if !present {
                return Err(format!(
                    "{}: {image} is not in its store: build it with `{build}`",
                    engine.name()
                ));
            }
            Ok(image)
        }
    }
}

/// The contenders: bare, then for each engine the matrix in its image and its `true`.
fn contenders(
    sh: &Shell,
    args: &Args,
    model: &Model,
    tag: &str,
) -> anyhow::Result<(Vec<Contender>, Vec<String>)> {
    // Bare runs the programs the images install, built with their profile, so that what
    // differs is only where they run.
    eprintln!("building symmem-matrix and symmem-conformance, profile `image` (the bare run) ...");
    let built = project::build_binaries_as(sh, &[MATRIX, RANK], Profile::Image)?;
    let rest = vec!["--ranks".to_string(), args.ranks.clone()];
    let mut bare = vec![built[0].display().to_string()];
    bare.extend(["test", "--provider", "host"].map(String::from));
    bare.extend(rest.iter().cloned());
    bare.extend(["--rank-binary".to_string(), built[1].display().to_string()]);
    let mut list = vec![Contender {
        label: "bare `symmem-matrix test`".into(),
        engine: None,
        matrix: true,
        argv: bare,
    }];
    let inner = Model::matrix_test(ProviderKind::Host, &rest);
    let mut left_out = Vec::new();
    for &engine in Engine::all() {
        let given = args.programs.given(engine);
        // One not given and not usable is left out (the report says why); one given must work.
        let found = find(engine, given, sh)
            .and_then(|exe| image(sh, engine, &exe, model, tag).map(|image| (exe, image)));
        let (exe, image) = match found {
            Ok(found) => found,
            Err(why) if given.is_none() => {
                left_out.push(why);
                continue;
            }
            Err(why) => bail!("{why}"),
        };
        let argv_of = |inner: &[String]| {
            let mut argv = vec![exe.display().to_string()];
            argv.extend(engine.run_arguments(&image, false, &[], inner));
            argv
        };
        list.push(Contender {
            label: format!("{}: the matrix in the image", engine.name()),
            engine: Some(engine),
            matrix: true,
            argv: argv_of(&inner),
        });
        list.push(Contender {
            label: format!("{}: start and exit alone (`true`)", engine.name()),
            engine: Some(engine),
            matrix: false,
            argv: argv_of(&["true".to_string()]),
        });
        list.push(Contender {
            label: format!(
                "{}: its command alone (`{}`; a wrapper's cost shows here)",
                engine.name(),
                engine.spec().version.join(" ")
            ),
            engine: Some(engine),
            matrix: false,
            argv: [exe.display().to_string()]
                .into_iter()
                .chain(engine.spec().version.iter().map(|a| a.to_string()))
                .collect(),
        });
    }
    if list.len() == 1 {
        let mut flags: Vec<String> = Engine::all()
            .iter()
            .map(|e| format!("--{}", e.name()))
            .collect();
        let last = flags.pop().unwrap_or_default();
        bail!(
            "no container engine to measure ({}): install one, or name it with {} or {last}",
            left_out.join("; "),
            flags.join(", ")
        );
    }
    Ok((list, left_out))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

pub fn run(sh: &Shell, args: Args) -> anyhow::Result<()> {
    let root = project_root();
    let model = Model::load(&root, Base::Debian)?;
    let tag = match &args.tag {
        Some(tag) => tag.clone(),
        None => super::tag::compute(sh, &root)?,
    };
    let (contenders, left_out) = contenders(sh, &args, &model, &tag)?;
    for c in &contenders {
        eprintln!("will time: {}", crate::runner::shell_words(&c.argv));
    }
    let before = load_average();
    let started = Instant::now();
    let series = measure(
        sh,
        &contenders,
        args.rounds as usize,
        RUN_LIMIT,
        &mut |what| eprintln!("images bench: {what}"),
    )?;
    let header = format!(
        "Warm matrix (host provider, ranks {}), image tag {tag}: {} rounds after one warm-up, \
         each command once per round in an order shuffled per round; {} cores, load average {before} before \
         and {} after; {:.0} s in all.",
        args.ranks,
        args.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        started.elapsed().as_secs_f64()
    );
    let text = report(&header, &series, &left_out);
    print!("{text}");
    let out = target_dir().join("bench").join("containers.md");
    std::fs::create_dir_all(out.parent().unwrap())
        .and_then(|()| std::fs::write(&out, &text))
        .with_context(|| format!("writing {}", out.display()))?;
    eprintln!("images bench: written to {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(60);

    fn contender(label: &str, engine: Option<Engine>, matrix: bool, script: &str) -> Contender {
        Contender {
            label: label.into(),
            engine,
            matrix,
            argv: vec!["sh".into(), "-c".into(), script.into()],
        }
    }

    #[test]
    fn the_median_and_what_an_engine_adds_per_round() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        let bare = Series {
            contender: contender("bare", None, true, "true"),
            seconds: vec![0.4, 1.4, 0.5],
        };
        // Round 2 was slow for both: the difference, not the raw time, is what counts.
        let docker = Series {
            contender: contender("docker", Some(Engine::Docker), true, "true"),
            seconds: vec![0.7, 1.8, 0.9],
        };
        assert!((added(&docker, &bare) - 0.4).abs() < 1e-9);
    }

    #[test]
    fn every_round_runs_each_command_once_in_an_order_of_its_own() {
        // Each round is a permutation, the same for the same round, and over rounds every
        // command runs first and every command follows each other one.
        let mut first = std::collections::BTreeSet::new();
        let mut pairs = std::collections::BTreeSet::new();
        for round in 0..30 {
            let o = order(4, round);
            assert_eq!(o, order(4, round));
            let mut sorted = o.clone();
            sorted.sort();
            assert_eq!(sorted, [0, 1, 2, 3], "round {round}: {o:?}");
            first.insert(o[0]);
            pairs.extend(o.windows(2).map(|w| (w[0], w[1])));
        }
        assert_eq!(first.len(), 4, "{first:?}");
        assert_eq!(pairs.len(), 12, "{pairs:?}");
        // And measure runs them so: the warm-up in list order, then each round's order.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let log = log.display();
        let list: Vec<Contender> = ["a", "b", "c"]
            .iter()
            .map(|n| contender(n, None, true, &format!("echo {n} >> {log}")))
            .collect();
        let series = measure(&Shell::new().unwrap(), &list, 3, LIMIT, &mut |_| {}).unwrap();
        let ran = std::fs::read_to_string(dir.path().join("log")).unwrap();
        let mut expected = "abc".to_string();
        for round in 0..3 {
            expected.extend(order(3, round).iter().map(|&i| ["a", "b", "c"][i]));
        }
        assert_eq!(ran.split_whitespace().collect::<String>(), expected);
        assert!(
            series
                .iter()
                .all(|s| s.seconds.len() == 3 && s.seconds.iter().all(|t| *t > 0.0))
        );
    }

    #[test]
    fn a_run_past_the_limit_is_stopped_and_named() {
        let list = [contender("stuck", Some(Engine::Podman), true, "sleep 30")];
        let started = Instant::now();
        let e = measure(
            &Shell::new().unwrap(),
            &list,
            3,
            Duration::from_millis(300),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        let e = format!("{e:#}");
        assert!(
            e.contains("stuck did not end within 300ms and was stopped"),
            "{e}"
        );
        assert!(e.contains("sleep 30"), "{e}");
    }

    #[test]
    fn a_failed_run_stops_the_bench_and_shows_its_output() {
        let list = [
            contender("fine", None, true, "true"),
            contender(
                "broken",
                Some(Engine::Docker),
                true,
                "echo the cause >&2; exit 3",
            ),
        ];
        let e = measure(&Shell::new().unwrap(), &list, 3, LIMIT, &mut |_| {}).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("broken failed (exit status: 3), so nothing was timed"),
            "{e}"
        );
        assert!(e.contains("the cause"), "{e}");
    }

    #[test]
    fn the_report_gives_each_engine_what_it_adds_against_its_goal() {
        let series = |label, engine, matrix, seconds: &[f64]| Series {
            contender: contender(label, engine, matrix, "true"),
            seconds: seconds.to_vec(),
        };
        let text = report(
            "header",
            &[
                series("bare", None, true, &[0.40, 0.42, 0.41]),
                series(
                    "docker: matrix",
                    Some(Engine::Docker),
                    true,
                    &[0.80, 0.82, 0.81],
                ),
                series(
                    "docker: true",
                    Some(Engine::Docker),
                    false,
                    &[0.30, 0.31, 0.32],
                ),
                series(
                    "apptainer: matrix",
                    Some(Engine::Apptainer),
                    true,
                    &[0.80, 0.82, 0.81],
                ),
            ],
            &["podman: `podman` is not on PATH".into()],
        );
        assert!(text.starts_with("header\n\n| command | median |"), "{text}");
        assert!(
            text.contains("| bare | 0.41 s | 0.40 s | 0.42 s |  |  |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| docker: matrix | 0.81 s | 0.80 s | 0.82 s | +0.400 s | <= 0.5 s: met |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| docker: true | 0.31 s | 0.30 s | 0.32 s |  |  |"),
            "{text}"
        );
        assert!(text.contains("| +0.400 s | <= 0.3 s: NOT met |"), "{text}");
        assert!(
            text.contains("not measured: podman: `podman` is not on PATH"),
            "{text}"
        );
    }

    #[test]
    fn an_engine_named_but_missing_is_an_error() {
        let sh = Shell::new().unwrap();
        let e = find(
            Engine::Apptainer,
            Some(Path::new("/nonexistent/apptainer")),
            &sh,
        );
        assert_eq!(
            e.unwrap_err(),
            "--apptainer /nonexistent/apptainer: no such file"
        );
    }
}
