//! Every `SYMMEM_*` environment variable of the toolkit, declared once: its name, what it
//! does, its default and how its value is read. Code reads a setting only through these
//! declarations ([`Setting::read`], [`Defaulted::get`]); README's first table is
//! [`markdown_table`]'s output (written by `cargo xtask codegen`), and a tidy test refuses a
//! `"SYMMEM_` string literal in Rust sources anywhere else.
//!
//! An empty (or blank) value counts as unset. A value that does not parse is an
//! [`InvalidSetting`] naming the variable, the value and what is expected, never a silent
//! default.
//!
//! To add a setting: declare a `const` here as a [`Setting`] literal (or a [`Defaulted`] one),
//! list it in [`all`], read it with its getter, and run `cargo xtask codegen` (README's first
//! table).
//!
//! A setting that only symmem's own tests, benches or builds use is declared as a [`Setting`]
//! in the crate that reads it, with [`Audience::Development`]; README's second table shows its
//! [`markdown_row`] (the tidy test checks that README names it).

use crate::bootstrap_choice::BootstrapChoice;
use crate::launcher::Launcher;
use crate::provider_kind::ProviderKind;
use crate::units::{format_bytes, format_duration, parse_bytes, parse_timeout};
use std::num::NonZeroU64;
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
/// unset and the reader decides (the table says how in [`Setting::default`]). Declared with a
/// struct literal, `Setting { name: "SYMMEM_...", doc, default, expected, audience, parse }`.
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
    /// Reads a value as typed (`None`: not valid, an [`InvalidSetting`] naming `expected`).
    pub parse: fn(&str) -> Option<T>,
}

impl<T> Setting<T> {
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

fn show_plain<T: ToString>(value: &T) -> String {
    value.to_string()
}

// ---------------------------------------------------------------------------------------------
// Users' settings.
// ---------------------------------------------------------------------------------------------

/// Which provider a symmem program (the Python module, `symmem-conformance`) starts.
pub const PROVIDER: Defaulted<ProviderKind> = Defaulted::new(
    Setting {
        name: "SYMMEM_PROVIDER",
        doc: "provider that `symmem.init()` and `symmem-conformance` start (`host`, `nvshmem`, `rocshmem`)",
        default: "",
        expected: "host, nvshmem or rocshmem",
        audience: Audience::User,
        parse: ProviderKind::from_name,
    },
    ProviderKind::Host,
    show_plain,
);

/// Folder where the ranks of one job meet.
pub const RENDEZVOUS: Setting<PathBuf> = Setting {
    name: "SYMMEM_RENDEZVOUS",
    doc: "folder where the ranks of one job meet (`symmem-run` sets a fresh private one)",
    default: "derived from the job id",
    expected: "a folder path",
    audience: Audience::User,
    parse: path,
};

/// Size of each rank's host heap.
pub const HOST_HEAP_SIZE: Defaulted<u64> = Defaulted::new(
    Setting {
        name: "SYMMEM_HOST_HEAP_SIZE",
        doc: "size of each rank's host heap (sparse: untouched pages cost nothing); same on every rank",
        default: "",
        expected: "a size such as 268435456, 512M or 4G",
        audience: Audience::User,
        parse: parse_bytes,
    },
    1 << 30,
    format_bytes_ref,
);

fn format_bytes_ref(bytes: &u64) -> String {
    format_bytes(*bytes)
}

/// Emulated node of this rank (host and GPU providers).
pub const NODE_ID: Defaulted<u64> = Defaulted::new(
    Setting {
        name: "SYMMEM_NODE_ID",
        doc: "emulated node of this rank: peers on another node are not mapped (base 0, `direct = false`), even where the library could reach them",
        default: "",
        expected: "a non-negative integer",
        audience: Audience::User,
        parse: whole::<u64>,
    },
    0,
    show_plain,
);

/// How long a collective waits for the slowest rank. Zero is refused: it would fail every
/// collective that any rank reaches a moment after another.
pub const COLLECTIVE_TIMEOUT: Defaulted<Duration> = Defaulted::new(
    Setting {
        name: "SYMMEM_COLLECTIVE_TIMEOUT",
        doc: "how long a collective (and the rendezvous) waits for the slowest rank, every provider; also how long a GPU library's own init or collective may take before the rank stops, naming the call",
        default: "",
        expected: "a duration above 0 such as 60, 60s, 500ms or 2m",
        audience: Audience::User,
        parse: parse_collective_timeout,
    },
    Duration::from_secs(60),
    format_duration_ref,
);

/// A `1` or `0` switch (`expected: "1 or 0"`), as the development settings that make a
/// skipped test fail read it.
pub fn parse_switch(text: &str) -> Option<bool> {
    match text.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

fn parse_collective_timeout(text: &str) -> Option<Duration> {
    parse_timeout(text).ok()
}

fn format_duration_ref(d: &Duration) -> String {
    format_duration(*d)
}

/// Which engine the ranks meet through.
pub const BOOTSTRAP: Defaulted<BootstrapChoice> = Defaulted::new(
    Setting {
        name: "SYMMEM_BOOTSTRAP",
        doc: "engine the ranks meet through: `unix` (symmem's socket star, one host), `pmix` (the launcher's PMIx server, any hosts), `auto` (unix on one host, pmix when the job spans nodes or runs in Apptainer containers under a PMIx launcher)",
        default: "",
        expected: "auto, unix or pmix",
        audience: Audience::User,
        parse: BootstrapChoice::from_name,
    },
    BootstrapChoice::Auto,
    show_plain,
);

/// The launcher whose variables name this rank, when several disagree.
pub const RANK_FROM: Setting<Launcher> = Setting {
    name: "SYMMEM_RANK_FROM",
    doc: "the launcher whose variables name this rank (`torchrun`, `openmpi`, `slurm`, `pmi`), when several disagree",
    default: "the innermost launcher, if all agree",
    expected: "torchrun, openmpi, slurm or pmi",
    audience: Audience::User,
    parse: Launcher::from_setting,
};

/// The shim library a GPU provider loads.
pub const SHIM_LIB: Setting<PathBuf> = Setting {
    name: "SYMMEM_SHIM_LIB",
    doc: "shim library of the GPU providers (`cargo xtask build-shim` builds it)",
    default: "`libsymmem_shim_<provider>.so` next to the executable",
    expected: "a path to libsymmem_shim_nvshmem.so or libsymmem_shim_rocshmem.so",
    audience: Audience::User,
    parse: path,
};

/// Symmetric heap per PE of a GPU provider. Zero is refused: it would not be a heap, and the
/// library's own default is what leaving it unset gives.
pub const GPU_HEAP_SIZE: Setting<NonZeroU64> = Setting {
    name: "SYMMEM_GPU_HEAP_SIZE",
    doc: "symmetric heap per PE of the GPU providers",
    default: "the SHMEM library's own",
    expected: "a size above 0 such as 536870912, 512M or 4G",
    audience: Audience::User,
    parse: parse_nonzero_bytes,
};

fn parse_nonzero_bytes(text: &str) -> Option<NonZeroU64> {
    parse_bytes(text).and_then(NonZeroU64::new)
}

/// GPU of this process.
pub const DEVICE: Setting<i32> = Setting {
    name: "SYMMEM_DEVICE",
    doc: "GPU index of this process (GPU providers)",
    default: "`LOCAL_RANK` modulo the number of GPUs",
    expected: "a GPU index such as 0",
    audience: Audience::User,
    parse: whole::<i32>,
};

/// The interfaces whose address rank 0's control listener may take across nodes.
pub const SOCKET_IFNAME: Setting<crate::InterfaceFilter> = Setting {
    name: "SYMMEM_SOCKET_IFNAME",
    doc: "network interfaces rank 0's control listener may use across nodes, as `NCCL_SOCKET_IFNAME`: name prefixes (`ib,eth`), exact names (`=eth0`), or names to avoid (`^docker,lo`)",
    default: "the address rank 0's host name resolves to; where that is a loopback address only its own host reaches (Debian's `127.0.1.1`), the first interface up that is not loopback, `docker*`, `virbr*` or `veth*` (`ib*` first)",
    expected: "interface names or prefixes separated by commas, such as eth0, ib or ^docker",
    audience: Audience::User,
    parse: crate::InterfaceFilter::parse,
};

/// How many node leaders each node leader links to below it across nodes.
pub const CONTROL_FANOUT: Defaulted<usize> = Defaulted::new(
    Setting {
        name: "SYMMEM_CONTROL_FANOUT",
        doc: "across nodes, how many node leaders each node leader serves in the control plane's tree (rank 0's at its root): every collective crosses about 2 log_k(nodes) links and each leader handles 2k messages; a value at or above the node count gives a star around rank 0; same on every rank",
        default: "",
        expected: "a whole number above 0 such as 4",
        audience: Audience::User,
        parse: parse_fanout,
    },
    4,
    show_plain,
);

fn parse_fanout(text: &str) -> Option<usize> {
    whole::<usize>(text).filter(|&k| k > 0)
}

/// The run a process belongs to, set by symmem-run.
pub const RUN_ID: Setting<String> = Setting {
    name: "SYMMEM_RUN_ID",
    doc: "set by `symmem-run` for every rank: a random id of the run, by which it finds what a run left behind (do not set it)",
    default: "set by `symmem-run`",
    expected: "any text",
    audience: Audience::User,
    parse: text,
};

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

/// Every setting of the registry (the users' ones), in the order README's first table lists them.
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
        entry(&SOCKET_IFNAME),
        entry_with(&CONTROL_FANOUT),
        entry(&RUN_ID),
    ]
}

/// The Markdown table of the registry's settings for `audience`, as README shows it.
pub fn markdown_table(audience: Audience) -> String {
    let mut table = String::from("| variable | default | meaning |\n| --- | --- | --- |\n");
    for e in all().into_iter().filter(|e| e.audience == audience) {
        table.push_str(&e.markdown_row());
    }
    table
}

/// README's row for `setting` (of any crate), with its line end.
pub fn markdown_row<T>(setting: &Setting<T>) -> String {
    entry(setting).markdown_row()
}

impl Entry {
    fn markdown_row(&self) -> String {
        format!("| `{}` | {} | {} |\n", self.name, self.default, self.doc)
    }
}

#[cfg(test)]
mod tests;
