//! Process plumbing, written once for the launcher (`symmem-launch`), the build
//! (`symmem-build`, and the xtask through it) and the emulated cluster (`symmem-cluster`):
//!
//! - [`find_program`]: a program on `PATH` (or at a path), the way `execvp` finds it, and
//!   when it is not there a [`ProgramError`] naming it, where it was looked for and how to
//!   install it;
//! - [`private_dir`]: a new folder only this user can enter, under the temp folder;
//! - [`stop_group`]: `SIGTERM` to a process group, a grace period, then `SIGKILL` until
//!   nothing in it is alive; [`signal_group`] and [`live_members`] for the callers that need
//!   one step of it;
//! - [`SignalGuard`]: while a parent waits on its children, SIGINT, SIGTERM and SIGHUP only
//!   say so (the parent then stops the children itself); afterwards they act as before;
//! - [`default_signals`], [`die_with_parent`], [`new_session`]: how a child is started (its
//!   signals at their defaults, killed with its parent, in a session of its own);
//! - [`procfs`]: the one reader of `/proc`, so that everyone agrees on what a dead process is.
//!
//! All of it is Linux's. The crate's `unsafe` is in one file (`sys.rs`): reading a signal's
//! action, registering the guard's signal action, and the calls a child makes between `fork`
//! and `exec`.

#![deny(unsafe_code)]

mod group;
pub mod procfs;
mod program;
mod signals;
mod sys;
mod temp;

pub use group::{Lingering, Pace, Stopping, live_members, signal_group, stop_group};
pub use nix::sys::signal::Signal;
pub use program::{ProgramError, SearchPath, find_program, is_executable};
pub use signals::{SignalGuard, SignalsError};
pub use sys::{default_signals, die_with_parent, new_session};
pub use temp::{TempDir, TempDirError, private_dir};
