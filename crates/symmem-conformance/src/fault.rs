//! Fault injection for testing the launcher and the control plane with real failures:
//! `SYMMEM_CONFORMANCE_FAULT=<kind>@<rank>:<check>` ([`CONFORMANCE_FAULT`]), kind one of
//! `panic`, `exit`, `hang`, `hang-ignore-term`: rank `<rank>` misbehaves when it reaches check
//! `<check>`, or with `<check>` = [`AT_START`] before its provider starts (before the ranks
//! meet).

use symmem::settings::{Audience, Setting};

/// The fault `symmem-conformance` injects into itself (symmem's tests of the failure reports).
pub const CONFORMANCE_FAULT: Setting<PlannedFault> = Setting {
    name: "SYMMEM_CONFORMANCE_FAULT",
    doc: "fault `symmem-conformance` injects into itself: `<kind>@<rank>:<check>`, kind `panic`, `exit`, `hang`, `hang-ignore-term`, check a check's id or `start` (before the provider starts) (tests of the failure reports)",
    default: "no fault",
    expected: "<panic|exit|hang|hang-ignore-term>@<rank>:<check>",
    audience: Audience::Development,
    parse: |text| PlannedFault::parse(text).ok(),
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Panics (exit status 101).
    Panic,
    /// Returns from main with status 0 before the check's first collective, as a buggy rank
    /// that skips the rest of the program would.
    Exit,
    /// Sleeps forever.
    Hang,
    /// Sleeps forever and ignores SIGTERM, so only SIGKILL ends it.
    HangIgnoreTerm,
}

/// A fault planned for one rank at one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFault {
    pub fault: Fault,
    pub rank: usize,
    pub check: String,
}

impl PlannedFault {
    /// The fault [`CONFORMANCE_FAULT`] plans, if set; a value that does not parse is an error.
    pub fn from_env() -> Result<Option<Self>, String> {
        CONFORMANCE_FAULT.read().map_err(|e| e.to_string())
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{}={text:?}: expected <panic|exit|hang|hang-ignore-term>@<rank>:<check>",
                CONFORMANCE_FAULT.name
            )
        };
        let (kind, rest) = text.trim().split_once('@').ok_or_else(bad)?;
        let (rank, check) = rest.split_once(':').ok_or_else(bad)?;
        let fault = match kind {
            "panic" => Fault::Panic,
            "exit" => Fault::Exit,
            "hang" => Fault::Hang,
            "hang-ignore-term" => Fault::HangIgnoreTerm,
            _ => return Err(bad()),
        };
        Ok(Self {
            fault,
            rank: rank.parse().map_err(|_| bad())?,
            check: check.to_string(),
        })
    }
}

/// The check name of the point before the provider starts: a fault there strikes during the
/// job's start-up, before any rank has met another.
pub const AT_START: &str = "start";

/// Makes rank `rank` misbehave before its provider starts, if [`CONFORMANCE_FAULT`] plans a
/// fault for it at [`AT_START`]; a value that does not parse is an error.
pub fn at_start(rank: usize) -> Result<(), String> {
    apply(PlannedFault::from_env()?.as_ref(), rank, AT_START);
    Ok(())
}

/// Makes this rank misbehave as `planned` says, if it plans a fault for `rank` at `check`.
pub(crate) fn apply(planned: Option<&PlannedFault>, rank: usize, check: &str) {
    let Some(p) = planned.filter(|p| p.rank == rank && p.check == check) else {
        return;
    };
    eprintln!("injecting fault {:?} at check {check}", p.fault);
    match p.fault {
        Fault::Panic => panic!("injected panic at check {check}"),
        Fault::Exit => std::process::exit(0),
        Fault::Hang => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        Fault::HangIgnoreTerm => {
            // SAFETY: setting a signal disposition to SIG_IGN installs no handler code.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_a_plan_and_names_a_bad_one() {
        let plan = CONFORMANCE_FAULT.parse("hang@1:3").unwrap();
        assert_eq!(
            (plan.fault, plan.rank, plan.check.as_str()),
            (Fault::Hang, 1, "3")
        );
        let e = CONFORMANCE_FAULT.parse("sleep@1:3").unwrap_err();
        assert_eq!(
            (e.var, e.value.as_str()),
            (CONFORMANCE_FAULT.name, "sleep@1:3")
        );
        assert!(e.to_string().contains("hang-ignore-term"), "{e}");
    }

    #[test]
    fn readme_lists_the_setting() {
        let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(readme).expect("README.md");
        let row = symmem::settings::markdown_row(&CONFORMANCE_FAULT);
        assert!(
            readme.contains(&row),
            "README.md's second settings table lacks:\n{row}"
        );
    }
}
