//! What symmem's tests share, so each test file says only what it tests (like cargo's
//! `cargo-test-support`). A dev-dependency only: never published, never in a library.
//!
//! - [`process`]: whether processes and process groups are gone, read from `/proc`.
//! - [`command`]: commands that start with default signal dispositions, waiting for them, and
//!   stand-in scripts written so that running them never meets "Text file busy".
//! - [`ranks`]: ranks as threads of the test process, or as processes of the test binary.
//! - [`launch`]: runs through `symmem_launch`, and assertions on their reports.

pub mod command;
pub mod launch;
pub mod process;
pub mod ranks;
