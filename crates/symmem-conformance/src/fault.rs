//! Fault injection for testing the launcher and the control plane with real failures:
//! `SYMMEM_CONFORMANCE_FAULT=<kind>@<rank>:<check>` ([`CONFORMANCE_FAULT`]), kind one of
//! `panic`, `exit`, `hang`, `hang-ignore-term`: rank `<rank>` misbehaves when it reaches check
//! `<check>`.

use symmem::settings::CONFORMANCE_FAULT;

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
    pub fn from_env() -> Result<Option<Self>, String> {
        match CONFORMANCE_FAULT.read() {
            Ok(Some(v)) => Self::parse(&v).map(Some),
            _ => Ok(None),
        }
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
