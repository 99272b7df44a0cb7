//! What a check finds on this rank ([`Outcome`]), and [`Verify`], which collects a check's
//! failed expectations without interrupting its collectives.

use symmem::Error;

#[derive(Debug)]
pub(super) enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
    /// Another rank failed; the suite stops.
    PeerFailed(String),
}

/// Collects verification failures without interrupting the collective sequence.
#[derive(Default)]
pub(super) struct Verify(Vec<String>);

impl Verify {
    pub(super) fn eq<T: PartialEq + std::fmt::Debug>(
        &mut self,
        what: impl std::fmt::Display,
        got: T,
        want: T,
    ) {
        if got != want {
            self.0
                .push(format!("{what}: got {got:?}, expected {want:?}"));
        }
    }
    pub(super) fn ok<T>(
        &mut self,
        what: impl std::fmt::Display,
        result: Result<T, Error>,
    ) -> Option<T> {
        result.map_err(|e| self.0.push(format!("{what}: {e}"))).ok()
    }
    pub(super) fn that(&mut self, what: impl std::fmt::Display, condition: bool) {
        if !condition {
            self.0.push(what.to_string());
        }
    }
    pub(super) fn outcome(self) -> Outcome {
        if self.0.is_empty() {
            Outcome::Pass
        } else {
            // Keep the line readable: the first few problems say enough.
            let more = self.0.len().saturating_sub(3);
            let mut text = self.0.into_iter().take(3).collect::<Vec<_>>().join("; ");
            if more > 0 {
                text.push_str(&format!("; and {more} more"));
            }
            Outcome::Fail(text)
        }
    }
}
