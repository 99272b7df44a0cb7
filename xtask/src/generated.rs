//! What `cargo xtask codegen` writes and checks: one file of it (made by `codegen` and by
//! `readme`, which both name it without importing each other).

/// One generated file: where it goes, what it is made from, and its contents.
pub struct Generated {
    /// Relative to the repository root.
    pub path: String,
    /// What it is generated from, for the message when it is stale.
    pub from: &'static str,
    pub contents: String,
}
