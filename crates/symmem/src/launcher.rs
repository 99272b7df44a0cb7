//! The launchers whose environment conventions name a rank.

use std::fmt;

/// The launcher whose environment named this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// torchrun / symmem-run: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`.
    Torchrun,
    /// Open MPI: `OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}`.
    OpenMpi,
    /// Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
    /// PMI (MPICH/Hydra): `PMI_RANK`, `PMI_SIZE`.
    Pmi,
    /// No launcher variables reached this process, but the PMIx server that started it
    /// (`PMIX_NAMESPACE`, `PMIX_RANK`) said who it is: a container that passes only `PMIX_*`.
    Pmix,
    /// No launcher variables: a single rank.
    Singleton,
    /// A `torch.distributed` process group named the rank (symmem's Python package meets the
    /// other ranks through it, whatever launcher started them).
    Group,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Torchrun => "torchrun",
            Self::OpenMpi => "Open MPI",
            Self::Slurm => "Slurm",
            Self::Pmi => "PMI",
            Self::Pmix => "PMIx",
            Self::Singleton => "singleton",
            Self::Group => "torch.distributed group",
        })
    }
}

impl Launcher {
    /// The launchers `SYMMEM_RANK_FROM` can name, innermost first.
    pub const NAMED: [Self; 4] = [Self::Torchrun, Self::OpenMpi, Self::Slurm, Self::Pmi];

    /// Its name for `SYMMEM_RANK_FROM`: `torchrun`, `openmpi`, `slurm`, `pmi` (`pmix`,
    /// `singleton` and `group`, which that setting does not take).
    pub const fn setting_name(self) -> &'static str {
        match self {
            Self::Torchrun => "torchrun",
            Self::OpenMpi => "openmpi",
            Self::Slurm => "slurm",
            Self::Pmi => "pmi",
            Self::Pmix => "pmix",
            Self::Singleton => "singleton",
            Self::Group => "group",
        }
    }

    /// The launcher `SYMMEM_RANK_FROM` names with `text` (surrounding blanks and case ignored).
    pub fn from_setting(text: &str) -> Option<Self> {
        let text = text.trim();
        Self::NAMED
            .into_iter()
            .find(|l| l.setting_name().eq_ignore_ascii_case(text))
    }
}

/// Whether a PMIx server started this process: it sets both variables for each client.
pub fn pmix_present(get: &impl Fn(&str) -> Option<String>) -> bool {
    ["PMIX_NAMESPACE", "PMIX_RANK"]
        .iter()
        .all(|v| get(v).is_some_and(|s| !s.trim().is_empty()))
}

/// Whether this process runs in an Apptainer (or Singularity) container, whose runtime sets
/// `APPTAINER_CONTAINER` (`SINGULARITY_CONTAINER`) in every container it starts.
pub fn in_apptainer(get: &impl Fn(&str) -> Option<String>) -> bool {
    ["APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"]
        .iter()
        .any(|v| get(v).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_takes_the_four_launcher_names_only() {
        for l in Launcher::NAMED {
            assert_eq!(Launcher::from_setting(l.setting_name()), Some(l));
        }
        assert_eq!(Launcher::from_setting(" OpenMPI "), Some(Launcher::OpenMpi));
        assert_eq!(Launcher::from_setting("singleton"), None);
        assert_eq!(Launcher::from_setting("mpich"), None);
    }
}
