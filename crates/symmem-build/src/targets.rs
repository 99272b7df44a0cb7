//! GPU targets, one type for every `--arch`: HIP target ids (`gfx942`, or with features,
//! `gfx950:sramecc+:xnack-`) or CUDA compute capabilities (`90`, `90a`, `100`).

use anyhow::bail;
use std::fmt;

/// Processors rocSHMEM can be built for (its default list and the other CDNA/RDNA parts
/// ROCm >= 6.2 compiles for).
pub const KNOWN_PROCESSORS: &[&str] = &[
    "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101",
    "gfx1102", "gfx1200", "gfx1201", "gfx1250",
];
const FEATURES: &[&str] = &["sramecc", "xnack"];

/// One validated target id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TargetId {
    /// The processor, e.g. `gfx950`.
    pub processor: String,
    /// Features with their sign, in the order given, e.g. `["sramecc+", "xnack-"]`.
    pub features: Vec<String>,
}

impl TargetId {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut parts = text.trim().split(':');
        let processor = parts.next().unwrap_or_default().to_string();
        if !KNOWN_PROCESSORS.contains(&processor.as_str()) {
            bail!(
                "unknown GPU target `{processor}`; valid targets: {} (optionally with features, \
                 e.g. gfx950:sramecc+:xnack-)",
                KNOWN_PROCESSORS.join(", ")
            );
        }
        let mut features: Vec<String> = Vec::new();
        for feature in parts {
            let (name, sign) = feature.split_at(feature.len().saturating_sub(1));
            if !FEATURES.contains(&name) || !matches!(sign, "+" | "-") {
                bail!(
                    "bad feature `{feature}` in target `{text}`: use sramecc+ / sramecc- / xnack+ \
                     / xnack-"
                );
            }
            if features.iter().any(|f| f.starts_with(name)) {
                bail!("feature `{name}` given twice in target `{text}`");
            }
            features.push(feature.to_string());
        }
        Ok(Self {
            processor,
            features,
        })
    }

    /// Parses a comma-separated list; sorted and without duplicates (the order does not
    /// change what is built).
    pub fn parse_list(text: &str) -> anyhow::Result<Vec<Self>> {
        let mut list = text
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Self::parse)
            .collect::<anyhow::Result<Vec<_>>>()?;
        if list.is_empty() {
            bail!("--arch needs at least one GPU target, e.g. --arch gfx942");
        }
        list.sort();
        list.dedup();
        Ok(list)
    }

    /// A form usable in file names and PATH-like variables (no `:`).
    pub fn path_safe(&self) -> String {
        self.to_string().replace(':', "_")
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for feature in &self.features {
            write!(f, ":{feature}")?;
        }
        Ok(())
    }
}

/// One CUDA compute capability as CMake's CUDA_ARCHITECTURES takes it: `90`, `90a`, `100f`,
/// optionally `-real` or `-virtual`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaArch(String);

impl CudaArch {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let text = text.trim();
        let base = text
            .strip_suffix("-real")
            .or_else(|| text.strip_suffix("-virtual"))
            .unwrap_or(text);
        let digits = base.trim_end_matches(['a', 'f']);
        let ok = (2..=3).contains(&digits.len())
            && digits.chars().all(|c| c.is_ascii_digit())
            && base.len() - digits.len() <= 1;
        if !ok {
            bail!(
                "`{text}` is not a CUDA compute capability: use its number, e.g. 90 (H100/H200), \
                 90a, 100 (B200), optionally with -real or -virtual"
            );
        }
        Ok(Self(text.to_string()))
    }
}

impl fmt::Display for CudaArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The targets of one `--arch` flag: all HIP target ids or all CUDA compute capabilities,
/// sorted and without duplicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuTargets {
    Hip(Vec<TargetId>),
    Cuda(Vec<CudaArch>),
}

impl GpuTargets {
    /// Parses a comma-separated list: HIP targets when the first starts with `gfx`, else CUDA
    /// compute capabilities; a list mixing the two is refused by the parser of its kind.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let first = text.split(',').map(str::trim).find(|s| !s.is_empty());
        match first {
            None => bail!("--arch needs at least one GPU target, e.g. --arch gfx942 or --arch 90"),
            Some(t) if t.starts_with("gfx") => TargetId::parse_list(text).map(Self::Hip),
            Some(_) => {
                let mut list = text
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(CudaArch::parse)
                    .collect::<anyhow::Result<Vec<_>>>()?;
                list.sort();
                list.dedup();
                Ok(Self::Cuda(list))
            }
        }
    }

    /// [`GpuTargets::parse`], for a flag that takes HIP targets only.
    pub fn parse_hip(text: &str) -> anyhow::Result<Self> {
        match Self::parse(text)? {
            Self::Cuda(_) => bail!(
                "`{text}` are CUDA compute capabilities; rocSHMEM builds for HIP targets such as \
                 gfx942, gfx950, gfx90a"
            ),
            hip => Ok(hip),
        }
    }

    /// The HIP target ids, or an error naming `what` needs them.
    pub fn hip(&self, what: &str) -> anyhow::Result<&[TargetId]> {
        match self {
            Self::Hip(list) => Ok(list),
            Self::Cuda(_) => bail!(
                "{what} takes HIP targets (e.g. --arch gfx942), not CUDA compute capabilities \
                 ({self})"
            ),
        }
    }

    /// The CUDA compute capabilities, or an error naming `what` needs them.
    pub fn cuda(&self, what: &str) -> anyhow::Result<&[CudaArch]> {
        match self {
            Self::Cuda(list) => Ok(list),
            Self::Hip(_) => bail!(
                "{what} takes CUDA compute capabilities (e.g. --arch 90), not HIP targets ({self})"
            ),
        }
    }

    /// As a CMake list (`;`-separated).
    pub fn cmake_list(&self) -> String {
        self.to_string().replace(',', ";")
    }
}

impl fmt::Display for GpuTargets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<String> = match self {
            Self::Hip(list) => list.iter().map(ToString::to_string).collect(),
            Self::Cuda(list) => list.iter().map(ToString::to_string).collect(),
        };
        f.write_str(&words.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ids() {
        let t = TargetId::parse("gfx950:sramecc+:xnack-").unwrap();
        assert_eq!(t.processor, "gfx950");
        assert_eq!(t.to_string(), "gfx950:sramecc+:xnack-");
        assert_eq!(t.path_safe(), "gfx950_sramecc+_xnack-");
        let list = TargetId::parse_list("gfx950,gfx942,gfx942").unwrap();
        assert_eq!(
            list.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["gfx942", "gfx950"]
        );
    }

    #[test]
    fn bad_targets_list_the_valid_ones() {
        let e = TargetId::parse("gfx9999").unwrap_err().to_string();
        assert!(
            e.contains("unknown GPU target `gfx9999`") && e.contains("gfx942, gfx950"),
            "{e}"
        );
        assert!(
            TargetId::parse("gfx942:xnack")
                .unwrap_err()
                .to_string()
                .contains("bad feature")
        );
        assert!(
            TargetId::parse("gfx942:xnack+:xnack-")
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(
            TargetId::parse_list(",")
                .unwrap_err()
                .to_string()
                .contains("at least one")
        );
    }

    #[test]
    fn one_target_list_type_for_hip_and_cuda() {
        let hip = GpuTargets::parse("gfx950:xnack-,gfx942").unwrap();
        assert_eq!(hip.to_string(), "gfx942,gfx950:xnack-");
        assert_eq!(hip.cmake_list(), "gfx942;gfx950:xnack-");
        assert_eq!(hip.hip("build-rocshmem").unwrap().len(), 2);
        assert!(
            hip.cuda("the nvshmem shim")
                .unwrap_err()
                .to_string()
                .contains("--arch 90")
        );
        let cuda = GpuTargets::parse("100,90a,90").unwrap();
        assert_eq!(cuda.to_string(), "100,90,90a");
        assert!(
            cuda.hip("the rocshmem shim")
                .unwrap_err()
                .to_string()
                .contains("gfx942")
        );
        assert!(GpuTargets::parse("90-real").is_ok());
        for bad in ["gfx942,90", "90,gfx942", "sm_90", "9", "gfx9999", ","] {
            assert!(GpuTargets::parse(bad).is_err(), "{bad}");
        }
        assert!(
            GpuTargets::parse_hip("90")
                .unwrap_err()
                .to_string()
                .contains("HIP targets")
        );
    }
}
