//! Who may finalise the one SHMEM library of a process: its original provider, once no sibling
//! context over it is open. Pure bookkeeping, shared (`Rc`) by a provider and its siblings.

#![forbid(unsafe_code)]

use std::cell::Cell;

/// Why the lifecycle refused a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    #[error(
        "{open} sibling context(s) over this SHMEM library are still open on some rank; \
         finalize (or drop) them, then finalize the original context again: finalizing it \
         ends the library under them"
    )]
    SiblingsOpen { open: usize },
    #[error(
        "the SHMEM library was finalized with its original context; open sibling contexts \
         before finalizing the original"
    )]
    LibraryFinalized,
}

/// The library's state: live until the original finalises it, with a count of open siblings.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    live: Cell<bool>,
    siblings: Cell<usize>,
}

impl Lifecycle {
    /// A library just initialised, with no siblings.
    pub(crate) fn started() -> Self {
        Self {
            live: Cell::new(true),
            siblings: Cell::new(0),
        }
    }

    /// A sibling context opens over the library.
    pub(crate) fn open_sibling(&self) -> Result<(), LifecycleError> {
        if !self.live.get() {
            return Err(LifecycleError::LibraryFinalized);
        }
        self.siblings.set(self.siblings.get() + 1);
        Ok(())
    }

    /// A sibling finalised or was dropped: it leaves the library as it is.
    pub(crate) fn close_sibling(&self) {
        self.siblings.set(self.siblings.get().saturating_sub(1));
    }

    /// Siblings open now: the original may finalise the library only at 0.
    pub(crate) fn open_siblings(&self) -> usize {
        self.siblings.get()
    }

    /// The original finalises the library: no sibling may open after this.
    pub(crate) fn finalizing(&self) {
        self.live.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_are_counted_until_they_close() {
        let life = Lifecycle::started();
        assert_eq!(life.open_siblings(), 0);
        life.open_sibling().unwrap();
        life.open_sibling().unwrap();
        assert_eq!(life.open_siblings(), 2);
        life.close_sibling();
        assert_eq!(life.open_siblings(), 1);
        life.close_sibling();
        assert_eq!(life.open_siblings(), 0);
    }

    #[test]
    fn no_sibling_opens_over_a_finalized_library() {
        let life = Lifecycle::started();
        life.open_sibling().unwrap();
        life.close_sibling();
        life.finalizing();
        assert_eq!(life.open_sibling(), Err(LifecycleError::LibraryFinalized));
        assert_eq!(life.open_siblings(), 0);
    }
}
