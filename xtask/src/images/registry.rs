//! Where the images are published and pulled from: the registry (pins.toml `[images]
//! registry`, overridden by `--registry` or `SYMMEM_IMAGE_REGISTRY`), the references of an
//! image in it, how each engine talks to it, and what a failed push or pull means.
//!
//! A registry on a loopback address (127.0.0.0/8, `localhost`) is spoken to over
//! plain HTTP, with each engine's [`Spec::loopback`](super::engine::Spec::loopback) flags
//! (Docker allows it by itself, Podman gets `--tls-verify=false`, Apptainer's `oras://` gets
//! `--no-https`). Every other registry is HTTPS only.

use super::engine::{self, Engine, ImageFormat};
use anyhow::bail;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use symmem::settings::{Audience, Setting};

/// The registry override of the pinned one (the flag wins over it).
pub const IMAGE_REGISTRY: Setting<String> = Setting {
    name: "SYMMEM_IMAGE_REGISTRY",
    doc: "registry (host[:port][/path]) that `cargo xtask images publish` pushes to and `cargo xtask test --container` pulls from; `--registry` wins over it",
    default: "pins.toml `[images] registry`",
    expected: "a registry such as ghcr.io/symmem or 127.0.0.1:5000",
    audience: Audience::Development,
    parse: |text| Some(text.trim().to_string()),
};

/// The key a pulled SIF must be signed with, or the opt-out.
pub const SIF_KEY: Setting<SifKey> = Setting {
    name: "SYMMEM_SIF_KEY",
    doc: "public key (PEM) a pulled SIF must be signed with (`apptainer verify --key`); `unverified` runs unsigned or tampered SIFs (opt-out)",
    default: "none: a pulled SIF is refused",
    expected: "a PEM file path, or `unverified`",
    audience: Audience::Development,
    parse: |text| match text.trim() {
        "unverified" => Some(SifKey::Unverified),
        path => Some(SifKey::Public(path.into())),
    },
};

/// How a pulled SIF is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SifKey {
    /// Verified against this public key.
    Public(std::path::PathBuf),
    /// Not verified: the user opted out.
    Unverified,
}

/// How long the registry gets to accept a connection before it counts as down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A registry: a host with an optional port, and an optional path under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// `host` or `host:port`.
    pub host: String,
    /// The path under the host (`symmem`), empty for none.
    pub path: String,
}

impl std::fmt::Display for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.host)
        } else {
            write!(f, "{}/{}", self.host, self.path)
        }
    }
}

impl Registry {
    /// Reads `host[:port][/path]` (lowercase, no scheme, tag or digest); `what` names where
    /// the text came from in the error.
    pub fn parse(text: &str, what: &str) -> anyhow::Result<Self> {
        let (host, path) = text.split_once('/').unwrap_or((text, ""));
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        };
        let name_ok = !name.is_empty()
            && !name.starts_with(['.', '-'])
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
        let path_ok = path.is_empty()
            || (!path.starts_with(['/', '.', '-'])
                && !path.ends_with('/')
                && !path.contains("//")
                && path.bytes().all(|b| {
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || matches!(b, b'.' | b'/' | b'-' | b'_')
                }));
        if !(name_ok && port_ok && path_ok) {
            bail!(
                "{what} = {text:?} is not a registry: write host[:port][/path] in lowercase, \
                 without a scheme or tag, e.g. ghcr.io/symmem or 127.0.0.1:5000"
            );
        }
        Ok(Self {
            host: host.to_string(),
            path: path.to_string(),
        })
    }

    /// The registry to use: the flag's, else the setting's, else the pinned one.
    pub fn choose(flag: Option<&str>, pinned: &str) -> anyhow::Result<Self> {
        if let Some(flag) = flag {
            return Self::parse(flag, "--registry");
        }
        if let Some(set) = IMAGE_REGISTRY.read()? {
            return Self::parse(&set, IMAGE_REGISTRY.name);
        }
        Self::parse(pinned, "pins.toml [images] registry")
    }

    /// Whether it is on this machine's loopback, spoken to over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        let name = self.host_name();
        name == "localhost" || name.starts_with("127.")
    }

    fn host_name(&self) -> &str {
        match self.host.rsplit_once(':') {
            Some((name, port)) if port.parse::<u16>().is_ok() => name,
            _ => &self.host,
        }
    }

    /// Where a connection goes: the host and its port (443 when none is given).
    pub fn address(&self) -> String {
        if self.host.len() != self.host_name().len() {
            self.host.clone()
        } else {
            format!("{}:443", self.host)
        }
    }

    /// The image `name` under this registry, in the format `engine` pulls, for `tag`:
    /// `REGISTRY/NAME:TAG` for OCI engines, `oras://REGISTRY/NAME-sif:TAG` for SIFs.
    pub fn reference(&self, engine: Engine, name: &str, tag: &str) -> String {
        match engine.format() {
            ImageFormat::Oci => format!("{self}/{name}:{tag}"),
            ImageFormat::Sif => format!("oras://{self}/{name}-sif:{tag}"),
        }
    }

    /// The flags `engine`'s push and pull need for this registry (plain HTTP on loopback).
    pub fn transport_flags(&self, engine: Engine) -> Vec<String> {
        if !self.is_loopback() {
            return Vec::new();
        }
        engine
            .spec()
            .loopback
            .iter()
            .map(|f| f.to_string())
            .collect()
    }

    /// Fails within [`CONNECT_TIMEOUT`] unless the registry accepts a connection.
    pub fn check_reachable(&self) -> Result<(), String> {
        let address = self.address();
        let addrs = address
            .to_socket_addrs()
            .map_err(|e| format!("{address} does not resolve ({e})"))?;
        let mut last = format!("{address} has no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(_) => return Ok(()),
                Err(e) => last = format!("{addr} does not accept connections ({e})"),
            }
        }
        Err(last)
    }
}

/// Why a push or pull failed, read from what the engine said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The registry has no image under this tag.
    TagMissing,
    /// The registry wants credentials (or refused the ones given).
    LoginNeeded,
    /// The disk filled up while the image was written.
    DiskFull,
    /// The engine was stopped by a signal before it finished.
    Interrupted,
    /// The registry could not be reached.
    Unreachable,
    /// Something else: the engine's own words say what.
    Other,
}

impl Failure {
    /// Reads the engine's output (`signal`: the engine was killed by one).
    pub fn classify(output: &str, signal: bool) -> Self {
        let text = output.to_lowercase();
        let any = |words: &[&str]| words.iter().any(|w| text.contains(w));
        let status = |codes: &[&str]| codes.iter().any(|c| has_status(&text, c));
        if any(&["no space left on device", "disk quota exceeded"]) {
            Failure::DiskFull
        } else if signal {
            Failure::Interrupted
        } else if any(&[
            "unauthorized",
            "authentication required",
            "no basic auth credentials",
            "denied",
        ]) || status(&["401", "403"])
        {
            Failure::LoginNeeded
        } else if any(&["manifest unknown", "not found", "name unknown"]) || status(&["404"]) {
            Failure::TagMissing
        } else if any(&[
            "connection refused",
            "no such host",
            "i/o timeout",
            "network is unreachable",
        ]) {
            Failure::Unreachable
        } else {
            Failure::Other
        }
    }

    /// What it means, in a few words.
    pub fn reason(self, registry: &Registry, engine: Engine) -> String {
        match self {
            Failure::TagMissing => format!(
                "{registry} has no image under this tag (CI publishes one per tag it builds on \
                 main: uncommitted or unpublished changes?)"
            ),
            Failure::LoginNeeded => format!(
                "{registry} needs a login: `{}`",
                engine.login(&registry.host)
            ),
            Failure::DiskFull => format!(
                "the disk filled up while it was written: free space ({}) and run again",
                engine::prune_commands()
            ),
            Failure::Interrupted => {
                "it was interrupted; nothing of it is used, and the next run pulls again".into()
            }
            Failure::Unreachable => format!("{registry} cannot be reached"),
            Failure::Other => format!("{} failed (its message is above)", engine.name()),
        }
    }
}

/// Whether `text` holds the HTTP status `code` as a word of its own ("status 401",
/// "401 unauthorized"), not as digits of a port (`127.0.0.1:36401`), an address or a tag.
fn has_status(text: &str, code: &str) -> bool {
    text.match_indices(code).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '/'))
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_parse_and_bad_ones_are_named() {
        let r = Registry::parse("ghcr.io/symmem", "x").unwrap();
        assert_eq!((r.host.as_str(), r.path.as_str()), ("ghcr.io", "symmem"));
        assert_eq!(r.address(), "ghcr.io:443");
        assert!(!r.is_loopback());
        let r = Registry::parse("127.0.0.1:5000", "x").unwrap();
        assert_eq!(r.to_string(), "127.0.0.1:5000");
        assert_eq!(r.address(), "127.0.0.1:5000");
        assert!(r.is_loopback());
        for bad in [
            "",
            "https://ghcr.io",
            "GHCR.io/x",
            "ghcr.io/x:1",
            "a:b/x",
            "h/x/",
        ] {
            let e = format!("{:#}", Registry::parse(bad, "--registry").unwrap_err());
            assert!(
                e.contains("--registry") && e.contains("host[:port][/path]"),
                "{e}"
            );
        }
    }

    #[test]
    fn references_and_plain_http_per_engine() {
        let local = Registry::parse("127.0.0.1:5000/ci", "x").unwrap();
        assert_eq!(
            local.reference(Engine::Podman, "symmem-debian", "0123"),
            "127.0.0.1:5000/ci/symmem-debian:0123"
        );
        assert_eq!(
            local.reference(Engine::Apptainer, "symmem-debian", "0123"),
            "oras://127.0.0.1:5000/ci/symmem-debian-sif:0123"
        );
        assert!(local.transport_flags(Engine::Docker).is_empty());
        assert_eq!(
            local.transport_flags(Engine::Podman),
            ["--tls-verify=false"]
        );
        assert_eq!(local.transport_flags(Engine::Apptainer), ["--no-https"]);
        let remote = Registry::parse("ghcr.io/symmem", "x").unwrap();
        for &engine in Engine::all() {
            assert!(remote.transport_flags(engine).is_empty());
        }
    }

    #[test]
    fn a_closed_port_is_down_within_the_timeout() {
        // Port 1 (tcpmux): nothing listens there, and, unlike a port freed a moment ago, no
        // other test can take it meanwhile.
        let registry = Registry::parse("127.0.0.1:1", "x").unwrap();
        let e = registry.check_reachable().unwrap_err();
        assert!(e.contains("does not accept connections"), "{e}");
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        let registry = Registry::parse(&format!("127.0.0.1:{port}"), "x").unwrap();
        registry.check_reachable().unwrap();
    }

    #[test]
    fn failures_are_read_from_the_engines_words() {
        let cases = [
            (
                "Error response from daemon: manifest unknown",
                Failure::TagMissing,
            ),
            (
                "FATAL: ... oras: 127.0.0.1:5000/x-sif:1: not found",
                Failure::TagMissing,
            ),
            (
                "unauthorized: authentication required",
                Failure::LoginNeeded,
            ),
            (
                "Head \"http://127.0.0.1:5000/v2/x\": no basic auth credentials",
                Failure::LoginNeeded,
            ),
            (
                "write /var/lib/docker/tmp/x: no space left on device",
                Failure::DiskFull,
            ),
            (
                "dial tcp 127.0.0.1:5000: connect: connection refused",
                Failure::Unreachable,
            ),
            ("something odd", Failure::Other),
            // A registry whose port holds 401: what Podman said when CI's loopback registry
            // happened to listen on 36401 (it was read as a login once).
            (
                "Error: unable to copy from source docker://127.0.0.1:36401/nothing/\
                 symmem-debian:872e373a3f1aabeb: initializing source docker://127.0.0.1:36401/\
                 nothing/symmem-debian:872e373a3f1aabeb: reading manifest 872e373a3f1aabeb in \
                 127.0.0.1:36401/nothing/symmem-debian: manifest unknown",
                Failure::TagMissing,
            ),
            (
                "dial tcp 127.0.0.1:40301: connect: connection refused",
                Failure::Unreachable,
            ),
            ("tag 4031a404b401: something odd", Failure::Other),
            (
                "received unexpected HTTP status: 403 Forbidden",
                Failure::LoginNeeded,
            ),
            (
                "response status code 401: unauthorized",
                Failure::LoginNeeded,
            ),
            (
                "unexpected status code 404 from 127.0.0.1:5000",
                Failure::TagMissing,
            ),
        ];
        for (said, failure) in cases {
            assert_eq!(Failure::classify(said, false), failure, "{said}");
        }
        assert_eq!(Failure::classify("", true), Failure::Interrupted);
        assert_eq!(
            Failure::classify("no space left on device", true),
            Failure::DiskFull
        );
    }
}
