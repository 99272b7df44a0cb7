//! The providers symmem knows, each with its one name: the name command lines take
//! (`--provider nvshmem`), `SYMMEM_PROVIDER` holds, messages print and file names carry.
//!
//! Every fact about a provider is a `match` that lists every variant, here and in the crates
//! that decide something per provider: no `_ =>` arm and no `matches!` on a `ProviderKind`
//! (a tidy test, `xtask/tests/tidy.rs`, refuses them), so that a new variant is a compile
//! error at each place that must decide for it.

use std::fmt;
use std::str::FromStr;

/// Which SHMEM provider backs a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ProviderKind {
    /// Host shared memory: runs on any Linux machine.
    Host,
    /// NVSHMEM on NVIDIA GPUs, through the symmem shim.
    Nvshmem,
    /// rocSHMEM on AMD GPUs, through the symmem shim.
    Rocshmem,
}

impl ProviderKind {
    /// Every provider, host first.
    pub const ALL: [Self; 3] = [Self::Host, Self::Nvshmem, Self::Rocshmem];
    /// The providers that run on GPUs through the shim library.
    pub const GPU: [Self; 2] = [Self::Nvshmem, Self::Rocshmem];

    /// The provider's one name: `host`, `nvshmem`, `rocshmem`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Nvshmem => "nvshmem",
            Self::Rocshmem => "rocshmem",
        }
    }

    /// The provider named `name` (surrounding blanks and case ignored).
    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.trim();
        Self::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
    }

    /// True for the providers that run on GPUs through the shim library (those of [`GPU`]).
    ///
    /// [`GPU`]: Self::GPU
    pub const fn is_gpu(self) -> bool {
        match self {
            Self::Host => false,
            Self::Nvshmem | Self::Rocshmem => true,
        }
    }

    /// File name of the shim library a GPU provider loads (`libsymmem_shim_nvshmem.so`);
    /// `None` for the host provider, which needs none.
    pub fn shim_library(self) -> Option<String> {
        self.is_gpu()
            .then(|| format!("libsymmem_shim_{}.so", self.name()))
    }

    /// `host, nvshmem or rocshmem`: the accepted names, for messages.
    pub fn choices() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A provider name that names no provider.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider {name:?}: use {}", ProviderKind::choices())]
pub struct UnknownProvider {
    pub name: String,
}

impl FromStr for ProviderKind {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_name(s).ok_or_else(|| UnknownProvider {
            name: s.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in ProviderKind::ALL {
            assert_eq!(kind.name().parse::<ProviderKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
        assert_eq!(
            ProviderKind::from_name(" NVSHMEM "),
            Some(ProviderKind::Nvshmem)
        );
        let e = "cuda".parse::<ProviderKind>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown provider \"cuda\": use host, nvshmem or rocshmem"
        );
    }

    #[test]
    fn only_gpu_providers_have_a_shim() {
        assert_eq!(ProviderKind::Host.shim_library(), None);
        assert_eq!(
            ProviderKind::Rocshmem.shim_library().as_deref(),
            Some("libsymmem_shim_rocshmem.so")
        );
        let gpu: Vec<ProviderKind> = ProviderKind::ALL
            .into_iter()
            .filter(|k| k.is_gpu())
            .collect();
        assert_eq!(
            gpu,
            ProviderKind::GPU,
            "GPU lists the providers is_gpu says"
        );
        for kind in ProviderKind::ALL {
            assert_eq!(kind.shim_library().is_some(), kind.is_gpu(), "{kind}");
        }
    }

    /// Also: `ALL` lists every variant (clap's derive lists them all, by itself).
    #[cfg(feature = "clap")]
    #[test]
    fn clap_takes_the_same_names() {
        use clap::ValueEnum;
        assert_eq!(ProviderKind::value_variants(), ProviderKind::ALL);
        for kind in ProviderKind::ALL {
            assert_eq!(
                <ProviderKind as ValueEnum>::from_str(kind.name(), false),
                Ok(kind)
            );
        }
    }
}
