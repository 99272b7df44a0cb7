//! Where rank 0's control listener listens, and which address a node leader dials.
//!
//! Rank 0 opens its listener before the rendezvous, on one address its card carries
//! ([`ListenPlan`]):
//! - with [`SOCKET_IFNAME`] set, the first address (IPv4 first) of the first interface it allows;
//! - else the address its host name resolves to (`/etc/hosts`, DNS), as Open MPI and Slurm name
//!   the node;
//! - where that is a loopback address (Debian and Ubuntu write `127.0.1.1 <host name>` in
//!   `/etc/hosts`) or the name does not resolve, the card also carries a fallback: the address
//!   of the first interface up that is not loopback, `docker*`, `virbr*` or `veth*`, InfiniBand
//!   (`ib*`) first, as NCCL picks by default. Rank 0 binds it, on the same port, only once the
//!   rendezvous shows a leader that cannot reach its loopback ([`dial`]).
//!
//! Two ranks share a loopback when they share a network namespace of one running kernel
//! ([`loopback_domain`]): emulated nodes on one machine's loopback do, hosts and isolated
//! namespaces do not.

use crate::BootstrapError;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use symmem::InterfaceFilter;
use symmem::settings::SOCKET_IFNAME;

/// Interfaces never taken by default: the loopback, container bridges and their links.
const NOT_BY_DEFAULT: &[&str] = &["lo", "docker", "virbr", "veth"];

/// The addresses rank 0's listener takes: `primary` before the rendezvous, `fallback` (same
/// port) when a leader cannot reach `primary`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenPlan {
    pub(crate) primary: IpAddr,
    pub(crate) fallback: Option<IpAddr>,
}

/// This rank's plan (see the module docs).
pub(crate) fn listen_plan() -> Result<ListenPlan, BootstrapError> {
    if let Some(filter) = SOCKET_IFNAME.read()? {
        return chosen(&filter, &interfaces()).map(|primary| ListenPlan {
            primary,
            fallback: None,
        });
    }
    // The interfaces are read only where the host name gives no address other hosts reach.
    let fallback = || first_usable(&interfaces());
    match node_address() {
        Ok(addr) if addr.is_loopback() => Ok(ListenPlan {
            primary: addr,
            fallback: fallback(),
        }),
        Ok(addr) => Ok(ListenPlan {
            primary: addr,
            fallback: None,
        }),
        Err(unresolved) => fallback()
            .map(|primary| ListenPlan {
                primary,
                fallback: None,
            })
            .ok_or(unresolved),
    }
}

/// The address of the first interface `filter` allows: IPv4 before IPv6, in the kernel's
/// order otherwise.
fn chosen(
    filter: &InterfaceFilter,
    interfaces: &[(String, IpAddr)],
) -> Result<IpAddr, BootstrapError> {
    let allowed = interfaces.iter().filter(|(name, _)| filter.matches(name));
    let (v4, v6): (Vec<_>, Vec<_>) = allowed.partition(|(_, addr)| addr.is_ipv4());
    v4.into_iter()
        .chain(v6)
        .map(|(_, addr)| *addr)
        .next()
        .ok_or_else(|| BootstrapError::NoInterface {
            filter: filter.to_string(),
            present: interfaces.iter().map(|(name, _)| name.clone()).collect(),
        })
}

/// The default interface's address: up, not loopback nor a container's, `ib*` first, IPv4
/// before IPv6.
fn first_usable(interfaces: &[(String, IpAddr)]) -> Option<IpAddr> {
    let usable = |(name, addr): &&(String, IpAddr)| {
        !addr.is_loopback() && !NOT_BY_DEFAULT.iter().any(|skip| name.starts_with(skip))
    };
    let rank = |(name, addr): &&(String, IpAddr)| (!name.starts_with("ib"), !addr.is_ipv4());
    let mut candidates: Vec<&(String, IpAddr)> = interfaces.iter().filter(usable).collect();
    candidates.sort_by_key(rank);
    candidates.first().map(|(_, addr)| *addr)
}

/// Every address of this host's interfaces that are up, in the kernel's order (IPv6
/// link-local addresses left out: they need a scope to be dialled).
fn interfaces() -> Vec<(String, IpAddr)> {
    use nix::net::if_::InterfaceFlags;
    let Ok(all) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    all.filter(|i| i.flags.contains(InterfaceFlags::IFF_UP))
        .filter_map(|i| {
            let addr = i.address?;
            let ip = match (addr.as_sockaddr_in(), addr.as_sockaddr_in6()) {
                (Some(v4), _) => IpAddr::V4(v4.ip()),
                (_, Some(v6)) if (v6.ip().segments()[0] & 0xffc0) != 0xfe80 => IpAddr::V6(v6.ip()),
                _ => return None,
            };
            Some((i.interface_name, ip))
        })
        .collect()
}

/// This node's address: its host name as the resolver gives it (`/etc/hosts`, DNS), the first
/// IPv4 address, else the first one.
pub(crate) fn node_address() -> Result<IpAddr, BootstrapError> {
    let host = host_name();
    let fail = |cause: String| BootstrapError::NodeAddress {
        host: host.clone(),
        cause,
    };
    let addrs: Vec<SocketAddr> = (host.as_str(), 0)
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .filter(|a| !a.ip().is_unspecified())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(SocketAddr::ip)
        .ok_or_else(|| fail("it resolves to no address".into()))
}

/// This host's name, for messages (`?` where it cannot be read).
pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// Which loopback this process reaches: its kernel's boot id and its network namespace. Two
/// ranks with the same domain reach each other's loopback addresses; `None` where either
/// cannot be read (then no loopback is taken as shared).
pub(crate) fn loopback_domain() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let net = std::fs::read_link("/proc/self/ns/net").ok()?;
    Some(format!("{}/{}", boot.trim(), net.display()))
}

/// Where a leader in loopback domain `leader` dials rank 0, which listens at `root` (domain
/// `root_domain`) with `fallback` beside it: `root`, unless that is a loopback address the
/// leader does not share; then the fallback on the same port, or `None` (nothing it can reach).
pub(crate) fn dial(
    root: SocketAddr,
    fallback: Option<IpAddr>,
    root_domain: Option<&str>,
    leader: Option<&str>,
) -> Option<SocketAddr> {
    let shared = root_domain.is_some() && root_domain == leader;
    match root.ip().is_loopback() && !shared {
        false => Some(root),
        true => fallback.map(|ip| SocketAddr::new(ip, root.port())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn ifaces(list: &[(&str, &str)]) -> Vec<(String, IpAddr)> {
        list.iter().map(|(n, a)| (n.to_string(), ip(a))).collect()
    }

    #[test]
    fn the_default_interface_skips_loopback_and_container_links_and_prefers_infiniband() {
        let host = ifaces(&[
            ("lo", "127.0.0.1"),
            ("docker0", "172.17.0.1"),
            ("veth12ab", "169.254.3.1"),
            ("eno1", "fd00::5"),
            ("eno1", "10.0.0.5"),
            ("ib0", "10.1.0.5"),
        ]);
        assert_eq!(first_usable(&host), Some(ip("10.1.0.5")));
        assert_eq!(first_usable(&host[..5]), Some(ip("10.0.0.5")));
        assert_eq!(first_usable(&host[..3]), None);
    }

    #[test]
    fn the_setting_picks_its_interface_or_names_those_present() {
        let host = ifaces(&[
            ("lo", "127.0.0.1"),
            ("eth0", "fd00::7"),
            ("eth0", "10.0.0.7"),
        ]);
        let eth = InterfaceFilter::parse("eth").unwrap();
        assert_eq!(chosen(&eth, &host).unwrap(), ip("10.0.0.7"));
        let ib = InterfaceFilter::parse("ib").unwrap();
        let err = chosen(&ib, &host).unwrap_err().to_string();
        assert!(err.contains("lo, eth0") && err.contains("ib"), "{err}");
    }

    #[test]
    fn a_loopback_rank_0_is_dialled_only_from_its_own_loopback() {
        let root: SocketAddr = "127.0.1.1:4000".parse().unwrap();
        let nic = Some(ip("198.18.0.2"));
        // Emulated nodes on one machine's loopback: the loopback address.
        assert_eq!(dial(root, nic, Some("b/n1"), Some("b/n1")), Some(root));
        // Another host, or another network namespace: the fallback, same port.
        let via_nic = Some("198.18.0.2:4000".parse().unwrap());
        assert_eq!(dial(root, nic, Some("b/n1"), Some("b/n2")), via_nic);
        assert_eq!(dial(root, nic, None, None), via_nic);
        assert_eq!(dial(root, None, Some("b/n1"), Some("c/n1")), None);
        // An address that is no loopback is dialled as it is.
        let real: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        assert_eq!(dial(real, None, Some("b/n1"), Some("c/n1")), Some(real));
    }

    #[test]
    fn this_process_has_a_loopback_domain() {
        let domain = loopback_domain().expect("Linux has a boot id and a network namespace");
        assert!(domain.contains("net:["), "{domain}");
    }
}
