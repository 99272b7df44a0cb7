//! Runs one build step as a child process: output to a log file, `[x/y]` progress to a bar,
//! Ctrl-C stops the child, and failures come back with the log's tail and what to do.
//!
//! CMake is driven as plain processes rather than through the `cmake` crate: that crate is made
//! for build scripts (it panics on failure, prints `cargo:` lines and adds its own compiler
//! flags), while this step needs the output line by line for progress and a log.

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Set by SIGINT/SIGTERM while a step runs.
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn install() -> anyhow::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&flag))
                .context("installing the Ctrl-C handler")?;
        }
        Ok(Self(flag))
    }
    pub fn raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Parses ninja's `[12/345]` or make's `[ 45%]` at the start of a line as (done, total).
pub fn progress_of(line: &str) -> Option<(u64, u64)> {
    let inner = line
        .trim_start()
        .strip_prefix('[')?
        .split_once(']')?
        .0
        .trim();
    if let Some(percent) = inner.strip_suffix('%') {
        return Some((percent.trim().parse().ok()?, 100));
    }
    let (done, total) = inner.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// Runs `command`, appending its output to `log`.
pub fn run(command: &[String], log: &Path, bar: bool, interrupt: &Interrupt) -> anyhow::Result<()> {
    let mut log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening the build log {}", log.display()))?;
    writeln!(log_file, "$ {}", super::plan::shell_words(command))?;
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", command[0]))?;
    let (tx, rx) = mpsc::channel::<String>();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
    })
    .collect();
    drop(tx);
    let progress = if bar {
        let pb = ProgressBar::new(0);
        pb.set_style(
            ProgressStyle::with_template("      {bar:40} {pos}/{len} {wide_msg}")
                .expect("valid template"),
        );
        Some(pb)
    } else {
        None
    };
    let mut last_report = Instant::now();
    let mut disk_full = false;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                writeln!(log_file, "{line}")?;
                disk_full |= line.contains("No space left on device");
                if let (Some(pb), Some((done, total))) = (&progress, progress_of(&line)) {
                    pb.set_length(total);
                    pb.set_position(done);
                    // Without a terminal the bar is hidden: report every few seconds instead.
                    if pb.is_hidden() && last_report.elapsed() > Duration::from_secs(5) {
                        eprintln!("      [{done}/{total}]");
                        last_report = Instant::now();
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break child.wait().context("waiting for the build step")?;
            }
        }
        if interrupt.raised() {
            // The terminal's Ctrl-C reached the child too; a plain `kill` of xtask did not.
            let _ = child.kill();
            let _ = child.wait();
            if let Some(pb) = &progress {
                pb.finish_and_clear();
            }
            bail!("interrupted; nothing was installed. Run the same command again to resume");
        }
        if let Some(status) = child.try_wait().context("waiting for the build step")? {
            // Drain what is left in the pipes.
            for line in rx.iter() {
                writeln!(log_file, "{line}")?;
                disk_full |= line.contains("No space left on device");
            }
            break status;
        }
    };
    for reader in readers {
        let _ = reader.join();
    }
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    if status.success() {
        return Ok(());
    }
    if disk_full {
        bail!(
            "the disk is full ({}): free space there, or point CARGO_TARGET_DIR / --out-dir at a \
             larger disk, then run again",
            log.parent().unwrap_or(log).display()
        );
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(25).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    bail!(
        "`{}` failed ({status}). Last lines of the log ({}):\n{}",
        super::plan::shell_words(command),
        log.display(),
        tail.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::progress_of;

    #[test]
    fn progress_lines() {
        assert_eq!(
            progress_of("[12/345] Building CXX object src/x.o"),
            Some((12, 345))
        );
        assert_eq!(progress_of("[ 45%] Built target rocshmem"), Some((45, 100)));
        assert_eq!(progress_of("[100%] Linking"), Some((100, 100)));
        assert_eq!(progress_of("-- Configuring done"), None);
        assert_eq!(progress_of("[abc] x"), None);
    }
}
