//! GPU target ids: `gfx942`, or with features, `gfx950:sramecc+:xnack-`.

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
}
