use serde::{Deserialize, Serialize};

/// How one check ended on one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pass => "pass",
            Self::Fail => "fail",
            Self::Skip => "skip",
        })
    }
}

/// One rank's result for one check: one JSON line on the rank's stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Check id ("1" .. "10b").
    pub check: String,
    pub name: String,
    pub rank: usize,
    pub world_size: usize,
    pub provider: String,
    pub status: Status,
    /// Why it failed or was skipped; empty on pass.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    pub micros: u64,
}

impl CheckResult {
    /// Parses a line if it is a result line (other output is not).
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        line.starts_with('{')
            .then(|| serde_json::from_str(line).ok())
            .flatten()
    }

    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("results serialise")
    }
}
