//! What the suite needs of a provider besides the main context: further contexts
//! ([`Extras`]), and why one could not be had ([`Unavailable`]).

use super::verify::Outcome;
use symmem::{Context, TranslatedOps};

/// Further contexts the suite needs besides the main one.
pub trait Extras<P: TranslatedOps> {
    /// A new context over the same ranks, with rank `r` on emulated node `node_ids[r]`.
    fn context_with_nodes(
        &mut self,
        label: &str,
        node_ids: &[u64],
    ) -> Result<Context<P>, Unavailable>;
}

/// Why [`Extras`] gave no context.
#[derive(Clone, Debug)]
pub enum Unavailable {
    /// The provider cannot do this at all (the check is skipped with this reason).
    Unsupported(String),
    /// It should have worked but failed (the check fails).
    Failed(String),
    /// It failed because another rank did (its opening is collective: a rank never came,
    /// or left): the check fails and the suite stops, this rank a witness.
    PeerFailed(String),
}

impl Unavailable {
    /// A second context that failed to open (`what` says which) with the provider's error
    /// `e`: [`PeerFailed`](Self::PeerFailed) where `e` blames another rank, else
    /// [`Failed`](Self::Failed).
    pub fn opening<E: symmem::ProviderError>(what: &str, e: &E) -> Self {
        let why = format!("opening {what}: {e}");
        match e.blame() {
            symmem::Blame::AnotherRank => Self::PeerFailed(why),
            _ => Self::Failed(why),
        }
    }

    pub(super) fn outcome(self) -> Outcome {
        match self {
            Self::Unsupported(reason) => Outcome::Skip(reason),
            Self::Failed(why) => Outcome::Fail(why),
            Self::PeerFailed(why) => Outcome::PeerFailed(why),
        }
    }
}
