//! Which network interfaces the control plane may take its address from
//! ([`SOCKET_IFNAME`](crate::settings::SOCKET_IFNAME)), written as NCCL's and NVSHMEM's
//! `*_SOCKET_IFNAME` are: a comma-separated list of name prefixes (`ib,eth`), each an exact name
//! with a leading `=` on the whole list (`=eth0`), and the whole list turned into the names to
//! avoid with a leading `^` (`^docker,lo`).

/// A parsed interface list; [`matches`](Self::matches) tells whether an interface is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceFilter {
    /// `^`: the names listed are the ones to avoid.
    pub exclude: bool,
    /// `=`: whole names, not prefixes.
    pub exact: bool,
    /// At least one, none empty.
    pub names: Vec<String>,
}

impl InterfaceFilter {
    /// Reads `ib,eth`, `=eth0`, `^docker,lo` or `^=docker0`; `None` for an empty list or name.
    pub fn parse(text: &str) -> Option<Self> {
        let mut rest = text.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let names: Vec<String> = rest.split(',').map(|n| n.trim().to_string()).collect();
        if names
            .iter()
            .any(|n| n.is_empty() || n.contains(char::is_whitespace))
        {
            return None;
        }
        Some(Self {
            exclude,
            exact,
            names,
        })
    }

    /// Whether the interface `name` may be used.
    pub fn matches(&self, name: &str) -> bool {
        let listed = self.names.iter().any(|n| match self.exact {
            true => name == n,
            false => name.starts_with(n.as_str()),
        });
        listed != self.exclude
    }
}

impl std::fmt::Display for InterfaceFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (not, exact) = (
            if self.exclude { "^" } else { "" },
            if self.exact { "=" } else { "" },
        );
        write!(f, "{not}{exact}{}", self.names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_exact_names_and_exclusions_read_as_nccl_reads_them() {
        let prefixes = InterfaceFilter::parse("ib,eth").unwrap();
        assert!(prefixes.matches("ib0") && prefixes.matches("eth1"));
        assert!(!prefixes.matches("enp3s0") && !prefixes.matches("lo"));
        let exact = InterfaceFilter::parse("=eth0").unwrap();
        assert!(exact.matches("eth0") && !exact.matches("eth01"));
        let avoid = InterfaceFilter::parse("^docker,lo").unwrap();
        assert!(avoid.matches("eth0") && !avoid.matches("docker0") && !avoid.matches("lo"));
        let avoid_exact = InterfaceFilter::parse("^=docker0").unwrap();
        assert!(avoid_exact.matches("docker1") && !avoid_exact.matches("docker0"));
        assert_eq!(avoid_exact.to_string(), "^=docker0");
    }

    #[test]
    fn empty_names_are_refused() {
        for bad in ["", "^", "=", "eth0,", ",ib", "eth 0"] {
            assert_eq!(InterfaceFilter::parse(bad), None, "{bad:?}");
        }
    }
}
