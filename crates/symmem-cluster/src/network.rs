//! How the nodes are wired.
//!
//! [`Network::Shared`] (the default): the nodes share this machine's network namespace and
//! are 127.0.0.2, 127.0.0.3, ... on its loopback. A connection *to* a node's address carries
//! it (Slurm reaches each `slurmd` at its `NodeAddr`), but every connection a node makes
//! leaves from 127.0.0.1, and Open MPI's daemons, which pick addresses by interface, all use
//! 127.0.0.1: a rule on a node's address cuts only what others open towards it.
//!
//! [`Network::Isolated`]: each node also has its own network namespace, with its own
//! loopback and an `eth0` at 198.18.0.2, 198.18.0.3, ... (RFC 2544's benchmarking range),
//! all linked by a bridge in one more namespace made for it, the fabric. Every byte between
//! nodes then crosses the fabric with the nodes' own addresses, as between hosts, and a rule
//! in the fabric cuts a node off both ways. Nothing is added to this machine's network: the
//! veth pairs are made with their ends already in the namespaces, and go with them.

use crate::{ClusterError, Node};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// How the nodes are wired; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Network {
    #[default]
    Shared,
    Isolated,
}

/// How each node's `/etc/hosts` names the nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostNames {
    /// Every node by its address on the [`Network`].
    #[default]
    Addresses,
    /// As Debian and Ubuntu install a host: its own name on `127.0.1.1`, a loopback address
    /// only it reaches; the other nodes by their addresses.
    Debian,
}

impl HostNames {
    /// The `/etc/hosts` of node `index` among `nodes` on `network`.
    pub(crate) fn file(self, network: Network, nodes: usize, index: usize) -> String {
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for i in 0..nodes {
            let address = match self {
                HostNames::Debian if i == index => "127.0.1.1".to_string(),
                _ => network.address(i).to_string(),
            };
            hosts.push_str(&format!("{address} {}\n", crate::node_name(i)));
        }
        hosts
    }
}

/// The bridge in the fabric's namespace.
const BRIDGE: &str = "br0";

impl Network {
    /// The address of node `index` (0 = node-a).
    pub fn address(self, index: usize) -> Ipv4Addr {
        let last = 2 + index as u8;
        match self {
            Network::Shared => Ipv4Addr::new(127, 0, 0, last),
            Network::Isolated => Ipv4Addr::new(198, 18, 0, last),
        }
    }

    /// What Open MPI's `oob_tcp_if_include` (and `btl_tcp_if_include`) takes to use the
    /// nodes' network: the loopback interface, or the nodes' subnet as a CIDR.
    pub fn mpi_interfaces(self) -> &'static str {
        match self {
            Network::Shared => "lo",
            Network::Isolated => "198.18.0.0/24",
        }
    }

    /// The namespaces a node holder is made with.
    pub(crate) fn unshare_flags(self) -> &'static [&'static str] {
        match self {
            Network::Shared => &["--uts", "--mount", "--ipc"],
            Network::Isolated => &["--uts", "--mount", "--ipc", "--net"],
        }
    }

    /// The namespaces `nsenter` enters to be on a node.
    pub(crate) fn nsenter_flags(self) -> &'static [&'static str] {
        match self {
            Network::Shared => &["-u", "-m", "-i"],
            Network::Isolated => &["-u", "-m", "-i", "-n"],
        }
    }

    /// The node set-up's own lines for this network (its loopback up).
    pub(crate) fn node_script(self) -> &'static str {
        match self {
            Network::Shared => "",
            Network::Isolated => "ip link set lo up\n",
        }
    }
}

/// The fabric of an isolated network: a holder in its own network (and mount) namespace
/// with the bridge every node's veth is a port of.
#[derive(Debug)]
pub(crate) struct Fabric {
    pub(crate) holder: Child,
    ip: PathBuf,
    nsenter: PathBuf,
}

impl Fabric {
    /// The holder's script: the bridge, then it waits.
    pub(crate) fn script() -> String {
        format!(
            "set -e\nip link set lo up\nip link add {BRIDGE} type bridge\nip link set {BRIDGE} up\n\
             echo ready\nexec sleep infinity\n"
        )
    }

    pub(crate) fn new(holder: Child, ip: PathBuf, nsenter: PathBuf) -> Self {
        Self {
            holder,
            ip,
            nsenter,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// `ip ARGS` in the network namespace of `pid`, or in this machine's with `None`.
    fn ip(&self, pid: Option<u32>, args: &str, node: &str) -> Result<(), ClusterError> {
        let mut command = match pid {
            Some(pid) => {
                let mut c = Command::new(&self.nsenter);
                c.args(["-t", &pid.to_string(), "-n", "--"]).arg(&self.ip);
                c
            }
            None => Command::new(&self.ip),
        };
        let out = command
            .args(args.split_whitespace())
            .stdin(Stdio::null())
            .output()
            .map_err(ClusterError::io(format!("running {}", self.ip.display())))?;
        if out.status.success() {
            return Ok(());
        }
        Err(ClusterError::NodeStart {
            node: node.to_string(),
            detail: format!(
                "`ip {args}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }

    /// Links `node` (number `index`) to the bridge: a veth pair made with one end in the
    /// fabric and the other, `eth0` with the node's address, in the node.
    pub(crate) fn connect(&self, node: &Node, index: usize) -> Result<(), ClusterError> {
        let port = format!("v{index}");
        let (name, pid) = (node.name(), node.pid());
        let fabric = self.pid();
        self.ip(
            None,
            &format!("link add {port} netns {fabric} type veth peer name eth0 netns {pid}"),
            name,
        )?;
        self.ip(
            Some(fabric),
            &format!("link set {port} master {BRIDGE} up"),
            name,
        )?;
        let address = format!("{}/24", node.address());
        self.ip(Some(pid), &format!("addr add {address} dev eth0"), name)?;
        self.ip(Some(pid), "link set eth0 up", name)
    }
}

/// The `unshare` command that makes a holder in the namespaces `flags` running `script`
/// (which prints `ready` once set up), its stderr to `stderr`.
pub(crate) fn holder_command(
    unshare: &Path,
    flags: &[&str],
    script: &str,
    stderr: std::fs::File,
) -> Command {
    let mut command = Command::new(unshare);
    command
        .args(flags)
        .args(["--propagation", "private", "--"])
        .args(["/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    command
}
