//! What every run of the matrix shares: the rank program, its provider and checks, and how
//! long a run may take. `test` makes one; each layout's run and the kill test use it.

use std::path::PathBuf;
use std::time::Duration;
use symmem::ProviderKind;
use symmem::settings::SHIM_LIB;
use symmem_conformance::CheckInfo;
use symmem_launch::{LaunchSpec, Layout};

/// What every run of the matrix shares.
pub struct Plan {
    pub provider: ProviderKind,
    /// The rank binary, as the nodes see it (with `--container`, the engine's program).
    pub binary: PathBuf,
    /// Arguments before the rank binary's own (with `--container`, up to the image's binary).
    pub lead: Vec<std::ffi::OsString>,
    /// The shim library for a GPU provider, as the nodes see it.
    pub shim: Option<PathBuf>,
    pub timeout: Duration,
    pub grace: Duration,
    pub checks: Vec<&'static CheckInfo>,
    /// Whether --check chose them (then the ranks get `--check`).
    pub chosen: bool,
}

impl Plan {
    /// One run of the suite: `ranks` ranks laid out as `layout`, every check of the plan.
    pub fn spec(&self, ranks: usize, layout: Layout) -> LaunchSpec {
        let spec = self.bare(ranks, layout);
        if !self.chosen {
            return spec;
        }
        let ids: Vec<&str> = self.checks.iter().map(|c| c.id).collect();
        spec.args(["--check".to_string(), ids.join(",")])
    }

    /// [`Plan::spec`] without `--check`.
    pub fn bare(&self, ranks: usize, layout: Layout) -> LaunchSpec {
        let mut spec = LaunchSpec::new(&self.binary, ranks)
            .layout(layout)
            .args(&self.lead)
            .args(["--provider", self.provider.name()])
            .timeout(self.timeout)
            .grace(self.grace);
        if let Some(shim) = &self.shim {
            spec = spec.env(SHIM_LIB.name, shim);
        }
        spec
    }
}
