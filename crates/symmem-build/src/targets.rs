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
        // One target id, one spelling: clang reads the features in any order, and orders
        // them by name (gfx942:sramecc+:xnack-), so this does too.
        features.sort();
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
        check_combinations(&list)?;
        Ok(list)
    }

    /// The names of its features (`["sramecc", "xnack"]`), without their signs.
    fn feature_names(&self) -> Vec<&str> {
        self.features
            .iter()
            .map(|f| &f[..f.len().saturating_sub(1)])
            .collect()
    }

    /// A form usable in file names and PATH-like variables (no `:`).
    pub fn path_safe(&self) -> String {
        self.to_string().replace(':', "_")
    }
}

/// Refuses two targets of one processor that name different features (`gfx942,gfx942:xnack-`,
/// `gfx942:xnack+:sramecc+,gfx942:xnack-`); the same features with other values are fine
/// (`gfx942:xnack+,gfx942:xnack-`). symmem's own rule, stricter than clang's: clang compares
/// each target with the first of its processor in the order given, so it builds
/// `gfx942:xnack+:sramecc+,gfx942:xnack-` but stops at the first HIP compile of
/// `gfx942:sramecc+,gfx942:sramecc+:xnack+` ("invalid offload arch combinations"); one rule
/// that does not depend on the spelling is refused up front instead.
fn check_combinations(list: &[TargetId]) -> anyhow::Result<()> {
    for (n, a) in list.iter().enumerate() {
        if let Some(b) = list[n + 1..]
            .iter()
            .find(|b| b.processor == a.processor && b.feature_names() != a.feature_names())
        {
            bail!(
                "`{a}` and `{b}` name different features of {p}: symmem builds the targets of \
                 one processor only when each names the same features (whether clang takes such \
                 a mix depends on the order they are given in). Give {p} once, with the features \
                 you need, or the same features in each (e.g. {p}:xnack+,{p}:xnack-)",
                p = a.processor
            );
        }
    }
    Ok(())
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

/// Whether `text` is meant as a CUDA compute capability (`90`, `sm_90`, `compute_90`), to
/// answer with CUDA's message rather than the list of HIP targets.
fn looks_like_cuda(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_digit())
        || text.starts_with("sm_")
        || text.starts_with("compute_")
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
            Some(t) if !looks_like_cuda(t) => bail!(
                "unknown GPU target `{t}`: HIP targets are {} (optionally with features, e.g. \
                 gfx950:sramecc+:xnack-); CUDA compute capabilities are numbers such as 90, 90a \
                 or 100",
                KNOWN_PROCESSORS.join(", ")
            ),
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

    /// [`GpuTargets::parse`], for a flag that takes HIP targets only: anything that is not
    /// a compute capability is read as a HIP target (an unknown one lists the valid ones).
    pub fn parse_hip(text: &str) -> anyhow::Result<Self> {
        let first = text.split(',').map(str::trim).find(|s| !s.is_empty());
        if first.is_some_and(|t| !t.starts_with("gfx") && !looks_like_cuda(t)) {
            return TargetId::parse_list(text).map(Self::Hip);
        }
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

    /// Two spellings of one target id are one target; targets of one processor that name
    /// different features are refused up front.
    #[test]
    fn one_spelling_per_target_and_no_mixed_features() {
        let a = TargetId::parse_list("gfx942:xnack-:sramecc+").unwrap();
        let b = TargetId::parse_list("gfx942:sramecc+:xnack-").unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].to_string(), "gfx942:sramecc+:xnack-");
        assert_eq!(
            TargetId::parse_list("gfx942:xnack-:sramecc+,gfx942:sramecc+:xnack-")
                .unwrap()
                .len(),
            1
        );
        for mixed in ["gfx942,gfx942:xnack-", "gfx942:xnack+,gfx942:sramecc+"] {
            let e = TargetId::parse_list(mixed).unwrap_err().to_string();
            assert!(
                e.contains("name different features of gfx942"),
                "{mixed}: {e}"
            );
        }
        assert_eq!(
            TargetId::parse_list("gfx942:xnack+,gfx942:xnack-,gfx90a")
                .unwrap()
                .len(),
            3
        );
    }

    /// A mix that clang builds (it compares each target with the first of its processor, in
    /// the order given) is refused as symmem's own rule, with no claim that clang refuses it,
    /// and the way out.
    #[test]
    fn a_mix_clang_builds_is_refused_as_symmems_rule() {
        for mixed in [
            "gfx942:xnack+:sramecc+,gfx942:xnack-",
            "gfx942:sramecc+,gfx942:sramecc+:xnack+",
        ] {
            let e = TargetId::parse_list(mixed).unwrap_err().to_string();
            assert!(!e.contains("clang refuses"), "{mixed}: {e}");
            for part in [
                "name different features of gfx942",
                "symmem builds the targets of one processor only when each names the same \
                 features",
                "depends on the order",
                "Give gfx942 once, with the features you need",
            ] {
                assert!(e.contains(part), "{mixed}: `{part}` not in {e}");
            }
        }
    }

    /// build-rocshmem's `--arch garbage` lists the HIP targets and says nothing of CUDA;
    /// build-shim's (either kind) names both kinds.
    #[test]
    fn garbage_lists_the_valid_targets() {
        for bad in ["garbage", "GFX942"] {
            let e = GpuTargets::parse_hip(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("unknown GPU target `{bad}`"))
                    && e.contains("gfx942, gfx950")
                    && !e.contains("CUDA"),
                "{e}"
            );
            let e = GpuTargets::parse(bad).unwrap_err().to_string();
            assert!(e.contains("gfx942") && e.contains("90a"), "{e}");
        }
        let e = GpuTargets::parse("sm_90").unwrap_err().to_string();
        assert!(e.contains("not a CUDA compute capability"), "{e}");
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
