//! The value of `SYMMEM_BOOTSTRAP`, apart from the engine choice that reads it, so the
//! settings registry can name it without importing the engine module.

use std::fmt;

/// The value of [`BOOTSTRAP`](crate::settings::BOOTSTRAP): an engine, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapChoice {
    /// The launcher's environment decides (see [`choose_engine`]).
    Auto,
    Unix,
    Pmix,
}

impl BootstrapChoice {
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "unix" => Some(Self::Unix),
            "pmix" => Some(Self::Pmix),
            _ => None,
        }
    }
}

impl fmt::Display for BootstrapChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Unix => "unix",
            Self::Pmix => "pmix",
        })
    }
}
