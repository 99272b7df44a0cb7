//! Every `SYMMEM_*` environment variable of the toolkit, declared once: its name, what it
//! does, its default and how its value is read. Code reads a setting only through these
//! declarations ([`Setting::read`], [`Defaulted::get`]); README's tables are [`markdown_table`]'s
//! output (a test keeps them equal), and a tidy test refuses a `"SYMMEM_` string literal in
//! Rust sources anywhere else.
//!
//! An empty (or blank) value counts as unset. A value that does not parse is an
//! [`InvalidSetting`] naming the variable, the value and what is expected, never a silent
//! default.
//!
//! To add a setting: declare a `const` here with [`Setting::new`] or [`Defaulted::new`], list
//! it in [`all`], read it with its getter, and paste the table the README test prints.

use crate::engine::BootstrapChoice;
use crate::provider_kind::ProviderKind;
use crate::units::{format_bytes, format_duration, parse_bytes, parse_timeout};
use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

/// A `SYMMEM_*` variable holding a value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not valid: expected {expected}; fix it or unset it")]
pub struct InvalidSetting {
    pub var: &'static str,
    pub value: String,
    pub expected: &'static str,
}

/// Who a setting is for, which is also the README table that documents it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    /// Users running symmem programs: README's first "Settings" table.
    User,
    /// Developers running symmem's own tests, benches and builds: README's second "Settings"
    /// table.
    Development,
}

/// One `SYMMEM_*` variable without a fixed default: [`Setting::read`] gives `None` when it is
/// unset and the reader decides (the table says how in [`Setting::default`]).
#[derive(Debug)]
pub struct Setting<T: 'static> {
    /// `SYMMEM_...`.
    pub name: &'static str,
    /// What it does, one line (README's "meaning" column).
    pub doc: &'static str,
    /// What happens when it is unset (README's "default" column); empty for a [`Defaulted`]
    /// setting, whose table shows its value.
    pub default: &'static str,
    /// What a valid value looks like, for [`InvalidSetting`].
    pub expected: &'static str,
    pub audience: Audience,
    parse: fn(&str) -> Option<T>,
}

impl<T> Setting<T> {
    /// Declares a setting (see the module docs).
    pub const fn new(
        name: &'static str,
        audience: Audience,
        doc: &'static str,
        default: &'static str,
        expected: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Self {
        Self {
            name,
            doc,
            default,
            expected,
            audience,
            parse,
        }
    }

    /// The value set in this process's environment, `None` when unset or blank.
    pub fn read(&self) -> Result<Option<T>, InvalidSetting> {
        self.read_from(|name| std::env::var(name).ok())
    }

    /// As [`read`](Self::read), with the variables given by `get` (tests, or an environment
    /// that is not this process's).
    pub fn read_from(
        &self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<T>, InvalidSetting> {
        match get(self.name).filter(|v| !v.trim().is_empty()) {
            Some(value) => self.parse(&value).map(Some),
            None => Ok(None),
        }
    }

    /// Parses `value` as this setting takes it.
    pub fn parse(&self, value: &str) -> Result<T, InvalidSetting> {
        (self.parse)(value).ok_or_else(|| InvalidSetting {
            var: self.name,
            value: value.to_string(),
            expected: self.expected,
        })
    }

    /// `NAME=value`, as a child's environment entry carries it.
    pub fn assignment(&self, value: &str) -> String {
        format!("{}={value}", self.name)
    }
}

impl Setting<PathBuf> {
    /// The path set in this process's environment, taken as the OS gives it (not necessarily
    /// UTF-8); `None` when unset or empty.
    pub fn read_path(&self) -> Option<PathBuf> {
        std::env::var_os(self.name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }
}

/// One `SYMMEM_*` variable with a default value: [`Defaulted::get`] always has a value.
#[derive(Debug)]
pub struct Defaulted<T: 'static> {
    pub setting: Setting<T>,
    /// The value when the variable is unset or blank.
    pub value: T,
    show: fn(&T) -> String,
}

impl<T: Clone> Defaulted<T> {
    /// Declares a setting with a default `value`, which `show` writes as a user types it.
    pub const fn new(setting: Setting<T>, value: T, show: fn(&T) -> String) -> Self {
        Self {
            setting,
            value,
            show,
        }
    }

    /// The value set in this process's environment, else the default.
    pub fn get(&self) -> Result<T, InvalidSetting> {
        self.get_from(|name| std::env::var(name).ok())
    }

    /// As [`get`](Self::get), with the variables given by `get`.
    pub fn get_from(&self, get: impl Fn(&str) -> Option<String>) -> Result<T, InvalidSetting> {
        Ok(self
            .setting
            .read_from(get)?
            .unwrap_or_else(|| self.value.clone()))
    }

    /// The default as a user would type it (`60s`, `1G`).
    pub fn default_text(&self) -> String {
        (self.show)(&self.value)
    }
}

impl<T> Deref for Defaulted<T> {
    type Target = Setting<T>;
    fn deref(&self) -> &Setting<T> {
        &self.setting
    }
}

fn path(text: &str) -> Option<PathBuf> {
    Some(PathBuf::from(text))
}

fn text(text: &str) -> Option<String> {
    Some(text.trim().to_string())
}

fn whole<T: std::str::FromStr>(text: &str) -> Option<T> {
    text.trim().parse().ok()
}

fn flag(text: &str) -> Option<bool> {
    match text.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

fn show_plain<T: ToString>(value: &T) -> String {
    value.to_string()
}

// ---------------------------------------------------------------------------------------------
// Users' settings.
// ---------------------------------------------------------------------------------------------

/// Which provider a symmem program (the Python module, `symmem-conformance`) starts.
pub const PROVIDER: Defaulted<ProviderKind> = Defaulted::new(
    Setting::new(
        "SYMMEM_PROVIDER",
        Audience::User,
        "provider that `symmem.init()` and `symmem-conformance` start (`host`, `nvshmem`, `rocshmem`)",
        "",
        "host, nvshmem or rocshmem",
        ProviderKind::from_name,
    ),
    ProviderKind::Host,
    show_plain,
);

/// Folder where the ranks of one job meet.
pub const RENDEZVOUS: Setting<PathBuf> = Setting::new(
    "SYMMEM_RENDEZVOUS",
    Audience::User,
    "folder where the ranks of one job meet (`symmem-run` sets a fresh private one)",
    "derived from the job id",
    "a folder path",
    path,
);

/// Size of each rank's host heap.
pub const HOST_HEAP_SIZE: Defaulted<u64> = Defaulted::new(
    Setting::new(
        "SYMMEM_HOST_HEAP_SIZE",
        Audience::User,
        "size of each rank's host heap (sparse: untouched pages cost nothing); same on every rank",
        "",
        "a size such as 268435456, 512M or 4G",
        parse_bytes,
    ),
    1 << 30,
    format_bytes_ref,
);

fn format_bytes_ref(bytes: &u64) -> String {
    format_bytes(*bytes)
}

/// Emulated node of this rank (host and GPU providers).
pub const NODE_ID: Defaulted<u64> = Defaulted::new(
    Setting::new(
        "SYMMEM_NODE_ID",
        Audience::User,
        "emulated node of this rank: peers on another node are not mapped (base 0, `direct = false`), even where the library could reach them",
        "",
        "a non-negative integer",
        whole::<u64>,
    ),
    0,
    show_plain,
);

/// How long a collective waits for the slowest rank. Zero is refused: it would fail every
/// collective that any rank reaches a moment after another.
pub const COLLECTIVE_TIMEOUT: Defaulted<Duration> = Defaulted::new(
    Setting::new(
        "SYMMEM_COLLECTIVE_TIMEOUT",
        Audience::User,
        "how long a collective (and the rendezvous) waits for the slowest rank, every provider",
        "",
        "a duration above 0 such as 60, 60s, 500ms or 2m",
        parse_collective_timeout,
    ),
    Duration::from_secs(60),
    format_duration_ref,
);

fn parse_collective_timeout(text: &str) -> Option<Duration> {
    parse_timeout(text).ok()
}

fn format_duration_ref(d: &Duration) -> String {
    format_duration(*d)
}

/// Which engine the ranks meet through.
pub const BOOTSTRAP: Defaulted<BootstrapChoice> = Defaulted::new(
    Setting::new(
        "SYMMEM_BOOTSTRAP",
        Audience::User,
        "engine the ranks meet through: `unix` (symmem's socket star, one host), `pmix` (the launcher's PMIx server, any hosts), `auto` (unix on one host, pmix when the job spans nodes)",
        "",
        "auto, unix or pmix",
        BootstrapChoice::from_name,
    ),
    BootstrapChoice::Auto,
    show_plain,
);

/// The launcher whose variables name this rank, when several disagree.
pub const RANK_FROM: Setting<String> = Setting::new(
    "SYMMEM_RANK_FROM",
    Audience::User,
    "the launcher whose variables name this rank (`torchrun`, `openmpi`, `slurm`, `pmi`), when several disagree",
    "the innermost launcher, if all agree",
    "torchrun, openmpi, slurm or pmi",
    text,
);

/// The shim library a GPU provider loads.
pub const SHIM_LIB: Setting<PathBuf> = Setting::new(
    "SYMMEM_SHIM_LIB",
    Audience::User,
    "shim library of the GPU providers (`cargo xtask build-shim` builds it)",
    "`libsymmem_shim_<provider>.so` next to the executable",
    "a path to libsymmem_shim_nvshmem.so or libsymmem_shim_rocshmem.so",
    path,
);

/// Symmetric heap per PE of a GPU provider.
pub const GPU_HEAP_SIZE: Setting<u64> = Setting::new(
    "SYMMEM_GPU_HEAP_SIZE",
    Audience::User,
    "symmetric heap per PE of the GPU providers",
    "the SHMEM library's own",
    "a size such as 536870912, 512M or 4G",
    parse_bytes,
);

/// GPU of this process.
pub const DEVICE: Setting<i32> = Setting::new(
    "SYMMEM_DEVICE",
    Audience::User,
    "GPU index of this process (GPU providers)",
    "`LOCAL_RANK` modulo the number of GPUs",
    "a GPU index such as 0",
    whole::<i32>,
);

/// The run a process belongs to, set by symmem-run.
pub const RUN_ID: Setting<String> = Setting::new(
    "SYMMEM_RUN_ID",
    Audience::User,
    "set by `symmem-run` for every rank: a random id of the run, by which it finds what a run left behind (do not set it)",
    "set by `symmem-run`",
    "any text",
    text,
);

// ---------------------------------------------------------------------------------------------
// Developers' settings: symmem's own tests, benches and builds.
// ---------------------------------------------------------------------------------------------

/// A fault the conformance binary injects into itself.
pub const CONFORMANCE_FAULT: Setting<String> = Setting::new(
    "SYMMEM_CONFORMANCE_FAULT",
    Audience::Development,
    "fault `symmem-conformance` injects into itself: `<kind>@<rank>:<check>`, kind `panic`, `exit`, `hang`, `hang-ignore-term` (tests of the failure reports)",
    "no fault",
    "<kind>@<rank>:<check>",
    text,
);

/// The symmem-run binary the Python tests use.
pub const RUN: Setting<PathBuf> = Setting::new(
    "SYMMEM_RUN",
    Audience::Development,
    "the `symmem-run` the Python tests start ranks with",
    "the workspace's own build, else `PATH`",
    "a path to symmem-run",
    path,
);

/// Makes a skipped real-hipcc test a failure.
pub const REAL_HIPCC: Setting<bool> = Setting::new(
    "SYMMEM_REAL_HIPCC",
    Audience::Development,
    "`1` (with `CI` set): xtask's real-hipcc test must run, a missing hipcc fails it (`.ci/real-hipcc` sets it)",
    "the test skips without hipcc",
    "1 or 0",
    flag,
);

/// Marks the peer process the host bench starts.
pub const BENCH_COPY_PEER: Setting<PathBuf> = Setting::new(
    "SYMMEM_BENCH_COPY_PEER",
    Audience::Development,
    "set by symmem-host's bench on the peer process it starts: the rendezvous folder of its copy bench (do not set it)",
    "this process is the bench itself",
    "a folder path",
    path,
);

/// Marks the copy of itself that xtask's image-tag test runs as another user.
pub const TAG_TEST_UNREADABLE_ROOT: Setting<PathBuf> = Setting::new(
    "SYMMEM_TAG_TEST_UNREADABLE_ROOT",
    Audience::Development,
    "set by xtask's image-tag test on the copy of itself it runs as another user: the tree to hash, with an input that user cannot read (do not set it)",
    "this process is the test itself",
    "a folder path",
    path,
);

/// One setting as the tables show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: &'static str,
    pub default: String,
    pub doc: &'static str,
    pub audience: Audience,
}

fn entry<T>(s: &Setting<T>) -> Entry {
    Entry {
        name: s.name,
        default: s.default.to_string(),
        doc: s.doc,
        audience: s.audience,
    }
}

fn entry_with<T: Clone>(s: &Defaulted<T>) -> Entry {
    Entry {
        default: format!("`{}`", s.default_text()),
        ..entry(&s.setting)
    }
}

/// Every setting, in the order the tables list them.
pub fn all() -> Vec<Entry> {
    vec![
        entry(&RENDEZVOUS),
        entry_with(&PROVIDER),
        entry_with(&HOST_HEAP_SIZE),
        entry_with(&NODE_ID),
        entry_with(&COLLECTIVE_TIMEOUT),
        entry_with(&BOOTSTRAP),
        entry(&RANK_FROM),
        entry(&SHIM_LIB),
        entry(&GPU_HEAP_SIZE),
        entry(&DEVICE),
        entry(&RUN_ID),
        entry(&CONFORMANCE_FAULT),
        entry(&RUN),
        entry(&REAL_HIPCC),
        entry(&BENCH_COPY_PEER),
        entry(&TAG_TEST_UNREADABLE_ROOT),
    ]
}

/// The Markdown table of the settings for `audience`, as README shows it.
pub fn markdown_table(audience: Audience) -> String {
    let mut table = String::from("| variable | default | meaning |\n| --- | --- | --- |\n");
    for e in all().into_iter().filter(|e| e.audience == audience) {
        table.push_str(&format!("| `{}` | {} | {} |\n", e.name, e.default, e.doc));
    }
    table
}

#[cfg(test)]
mod tests;
