//! An emulated cluster on one Linux machine, for testing jobs that span nodes.
//!
//! A node is a holder process in its own UTS, mount and IPC namespaces: its own hostname
//! (`node-a`, `node-b`, ...), an `/etc/hosts` that maps every node to its own loopback address
//! (127.0.0.2, 127.0.0.3, ...), and private tmpfs mounts on `/tmp`, `/run` and `/dev/shm`, so
//! that what one node leaves in them is invisible to the others, as on separate hosts. The
//! network is the machine's loopback ([`Network::Shared`]), or, with
//! [`Network::Isolated`], a network namespace per node linked by a bridge in one more
//! namespace, so that the nodes talk over their own addresses only; see [`Network`]. Nothing
//! of this machine's network is touched. [`Cluster::up_named`] with [`HostNames::Debian`]
//! writes each node's own name on `127.0.1.1` instead, as Debian and Ubuntu install hosts.
//!
//! [`Cluster::slurm`] starts Debian's Slurm on the nodes (munged and slurmd on each,
//! slurmctld on the first); see [`Slurm`].
//!
//! Jobs are `symmem-launch`'s: the cluster hands a launcher ([`Cluster::mpirun`]) its hosts,
//! a wrapper that starts it inside the first node, an rsh agent script that enters the other
//! nodes' namespaces (`nsenter`) where it would use ssh, and a sweep of what a job left. There is no private PID namespace: the agent, inside the first node, must
//! reach the other nodes' holders, and a process cannot enter a sibling PID namespace.
//! A node's processes are therefore those in its mount namespace.
//!
//! Everything is removed when the [`Cluster`] drops (also after an error half-way through
//! [`Cluster::up`]): every process in a node's namespaces is killed, the holders exit (their
//! namespaces and mounts go with them) and the cluster's own temp folder is removed. Should
//! the owner die without dropping it (`kill -9`), a watchdog process does the same.

mod error;
mod launcher;
mod network;
mod procs;
mod slurm;
mod versions;
mod watchdog;

pub use error::{ClusterError, SLURM_FIX};
pub use network::{HostNames, Network};
pub use procs::Process;
pub use slurm::{CPUS_PER_NODE, SLURM_PROGRAMS, Slurm, is_step_daemon};
pub use versions::{engine_version, launcher_version};

use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The most nodes a cluster has (names `node-a` .. `node-z`, then `node-aa` .. `node-af`; see
/// [`node_name`]). Node i is 127.0.0.(i + 2), or 198.18.0.(i + 2) on an isolated network.
pub const MAX_NODES: usize = 32;

/// Where a node sees the cluster's folder (the agent script, [`Cluster::shared_dir`]).
pub const NODE_VIEW: &str = "/run/symmem-cluster";

/// The PATH sshd gives a remote command (Debian's default).
pub const SSH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The one variable the rsh agent adds to the clean environment of what it starts on a node,
/// as sshd adds `SSH_CONNECTION`: `cluster=<the cluster's folder name>`, then
/// ` ci-run=<mark>` when the cluster's owner had `SYMMEM_CI_RUN=<mark>` (`.ci/cluster`'s mark of
/// its run). So a daemon an agent started (node-b's `orted`) still says whose it is: CI's last
/// check finds one left behind by its run although its environment is otherwise ssh's.
pub const ORIGIN_VARIABLE: &str = "SYMMEM_CLUSTER_ORIGIN";

/// The variable that marks the processes of one CI run (`.ci/cluster`).
pub const CI_RUN_VARIABLE: &str = "SYMMEM_CI_RUN";

/// How to install what a cluster job needs (Debian / Ubuntu).
pub const OPEN_MPI_FIX: &str =
    "apt-get install openmpi-bin libopenmpi-dev libpmix-dev (Debian / Ubuntu)";

/// One emulated node.
#[derive(Debug)]
pub struct Node {
    name: String,
    address: Ipv4Addr,
    holder: Child,
    /// `/proc/<holder>/ns/mnt` as the kernel names it (`mnt:[4026532...]`).
    mount_ns: String,
}

impl Node {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }
    /// The holder's pid: `nsenter -t PID -u -m -i` enters this node.
    pub fn pid(&self) -> u32 {
        self.holder.id()
    }
    /// Its mount namespace as `readlink /proc/PID/ns/mnt` names it: a process is on this
    /// node when it is in this namespace.
    pub fn mount_namespace(&self) -> &str {
        &self.mount_ns
    }
    /// A path as this node sees it, from outside (`/proc/<holder>/root/...`).
    pub fn view(&self, path_on_node: &str) -> PathBuf {
        Path::new(&format!("/proc/{}/root", self.pid())).join(path_on_node.trim_start_matches('/'))
    }
}

/// Nodes on this machine; see the crate docs. Drop tears everything down.
#[derive(Debug)]
pub struct Cluster {
    /// Own temp folder: hosts file, agent script, shared folder, holders' stderr.
    root: PathBuf,
    nodes: Vec<Node>,
    mpirun: PathBuf,
    nsenter: PathBuf,
    network: Network,
    host_names: HostNames,
    /// The bridge's namespace of an isolated network.
    fabric: Option<network::Fabric>,
    watchdog: Option<watchdog::Watchdog>,
}

/// What [`Cluster::down`] found and had to end.
#[derive(Debug, Default)]
pub struct Teardown {
    /// Processes still in a node's namespaces (besides its holder), killed.
    pub killed: Vec<(String, Process)>,
}

/// Programs the nodes need, found on PATH; `fix` installs them.
fn tool(name: &str, fix: &str) -> Result<PathBuf, ClusterError> {
    let search = symmem_process::SearchPath::from_env();
    Ok(symmem_process::find_program(
        name,
        &search,
        format!("install it: {fix}"),
    )?)
}

/// The program `mpirun` of this machine, or the error naming the packages.
pub fn find_mpirun() -> Result<PathBuf, ClusterError> {
    tool("mpirun", OPEN_MPI_FIX)
}

/// Names `node-a`, `node-b`, ... `node-z`, then on as spreadsheet columns: `node-aa`,
/// `node-ab`, ... (index 0 is `node-a`, 26 is `node-aa`).
pub fn node_name(index: usize) -> String {
    // Bijective base 26: the letters of index + 1, 'a' being 1 and 'z' 26.
    let mut letters = Vec::new();
    let mut rest = index + 1;
    while rest > 0 {
        rest -= 1;
        letters.push(char::from(b'a' + (rest % 26) as u8));
        rest /= 26;
    }
    let name: String = letters.into_iter().rev().collect();
    format!("node-{name}")
}

/// Single-quotes `text` for /bin/sh.
pub(crate) fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Cluster {
    /// Starts `nodes` nodes (2 ..= [`MAX_NODES`]) on this machine's loopback
    /// ([`Network::Shared`]). Needs root, util-linux's `unshare` and `nsenter`, and Open MPI's
    /// `mpirun`; each missing piece is an error naming the fix.
    pub fn up(nodes: usize) -> Result<Self, ClusterError> {
        Self::up_with(nodes, Network::Shared)
    }

    /// Starts `nodes` nodes wired as `network` says ([`Network::Isolated`] also needs
    /// iproute2's `ip`).
    pub fn up_with(nodes: usize, network: Network) -> Result<Self, ClusterError> {
        Self::up_named(nodes, network, HostNames::Addresses)
    }

    /// Starts `nodes` nodes wired as `network` says, each with an `/etc/hosts` as `host_names`
    /// says ([`HostNames::Debian`]: each node's own name on `127.0.1.1`, as Debian and Ubuntu
    /// install hosts).
    pub fn up_named(
        nodes: usize,
        network: Network,
        host_names: HostNames,
    ) -> Result<Self, ClusterError> {
        if !(2..=MAX_NODES).contains(&nodes) {
            return Err(ClusterError::NodeCount { asked: nodes });
        }
        if !nix::unistd::geteuid().is_root() {
            return Err(ClusterError::NotRoot);
        }
        const UTIL_LINUX: &str = "apt-get install util-linux (Debian / Ubuntu)";
        let unshare = tool("unshare", UTIL_LINUX)?;
        let nsenter = tool("nsenter", UTIL_LINUX)?;
        let mpirun = find_mpirun()?;
        let ip = match network {
            Network::Shared => None,
            Network::Isolated => Some(tool("ip", "apt-get install iproute2 (Debian / Ubuntu)")?),
        };
        let mut cluster = Cluster {
            // Kept: teardown removes it, or the watchdog if this process is killed.
            root: symmem_process::private_dir("symmem-cluster-")?.keep(),
            nodes: Vec::new(),
            mpirun,
            nsenter,
            network,
            host_names,
            fabric: None,
            watchdog: None,
        };
        cluster.watchdog = Some(watchdog::Watchdog::start(&cluster.root)?);
        // From here on, an error drops `cluster`, which removes what was made so far.
        std::fs::create_dir(cluster.shared_dir())
            .map_err(ClusterError::io("creating the cluster's shared folder"))?;
        if let Some(ip) = ip {
            cluster.start_fabric(&unshare, ip)?;
        }
        cluster.start_nodes(&unshare, nodes)?;
        cluster.write_agent()?;
        Ok(cluster)
    }

    /// The hosts files, then the nodes, each watched and linked to the fabric (if any).
    fn start_nodes(&mut self, unshare: &Path, nodes: usize) -> Result<(), ClusterError> {
        for i in 0..nodes {
            let hosts = self.host_names.file(self.network, nodes, i);
            write(
                &self.root.join(format!("hosts-{}", node_name(i))),
                &hosts,
                0o644,
            )?;
        }
        for i in 0..nodes {
            let node = self.start_node(unshare, i)?;
            let (holder, ns) = (node.pid(), node.mount_ns.clone());
            self.nodes.push(node);
            if let Some(watchdog) = &mut self.watchdog {
                watchdog.watch(holder, &ns)?;
            }
            if let Some(fabric) = &self.fabric {
                fabric.connect(&self.nodes[i], i)?;
            }
        }
        Ok(())
    }

    /// The fabric of an isolated network, watched like a node.
    fn start_fabric(&mut self, unshare: &Path, ip: PathBuf) -> Result<(), ClusterError> {
        let script = network::Fabric::script();
        let (holder, ns) = self.spawn_holder(unshare, "fabric", &["--net", "--mount"], &script)?;
        let pid = holder.id();
        self.fabric = Some(network::Fabric::new(holder, ip, self.nsenter.clone()));
        if let Some(watchdog) = &mut self.watchdog {
            watchdog.watch(pid, &ns)?;
        }
        Ok(())
    }

    /// How the nodes are wired.
    pub fn network(&self) -> Network {
        self.network
    }

    /// The pid of the fabric's holder in an isolated network: `nsenter -t PID -n` enters the
    /// namespace of the bridge between the nodes (where a rule cuts a node off both ways).
    pub fn fabric_pid(&self) -> Option<u32> {
        self.fabric.as_ref().map(network::Fabric::pid)
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// A folder every node sees, at `NODE_VIEW/shared` (see [`Cluster::on_nodes`]); the
    /// place for programs and files of a test (the nodes' /tmp is their own).
    pub fn shared_dir(&self) -> PathBuf {
        self.root.join("shared")
    }

    /// Where the nodes see `path` (a path on this machine): itself, or under [`NODE_VIEW`]
    /// when it is in the cluster's folder. Paths the nodes cannot see (under /tmp, /run or
    /// /dev/shm) are an error naming the fix.
    pub fn on_nodes(&self, path: &Path) -> Result<PathBuf, ClusterError> {
        let path = std::path::absolute(path).map_err(ClusterError::io("resolving a path"))?;
        if let Ok(rest) = path.strip_prefix(&self.root) {
            return Ok(Path::new(NODE_VIEW).join(rest));
        }
        if ["/tmp", "/run", "/dev/shm"]
            .iter()
            .any(|private| path.starts_with(private))
        {
            return Err(ClusterError::HiddenOnNodes(path));
        }
        Ok(path)
    }

    /// `path` (a program, a library) as the nodes see it: [`Cluster::on_nodes`] where they
    /// see it, else a copy in [`Cluster::shared_dir`] (a checkout under /tmp, say, which each
    /// node has of its own). The copy keeps the file's name and mode.
    pub fn visible(&self, path: &Path) -> Result<PathBuf, ClusterError> {
        match self.on_nodes(path) {
            Err(ClusterError::HiddenOnNodes(hidden)) => {
                let name = hidden.file_name().ok_or_else(|| ClusterError::Io {
                    what: format!("{} names no file to copy for the nodes", hidden.display()),
                    source: std::io::ErrorKind::InvalidInput.into(),
                })?;
                let staged = self.shared_dir().join(name);
                std::fs::copy(&hidden, &staged).map_err(ClusterError::io(format!(
                    "copying {} into the cluster's shared folder {} (the nodes have their own /tmp)",
                    hidden.display(),
                    staged.display()
                )))?;
                self.on_nodes(&staged)
            }
            seen => seen,
        }
    }

    fn start_node(&self, unshare: &Path, index: usize) -> Result<Node, ClusterError> {
        let name = node_name(index);
        let root = self.root.to_str().ok_or_else(|| ClusterError::NodeStart {
            node: name.clone(),
            detail: format!("the temp folder {} is not UTF-8", self.root.display()),
        })?;
        // The cluster's folder is bound into the node's /run before /tmp (where it may live)
        // is covered by the node's own tmpfs.
        let script = format!(
            "set -e\n\
             hostname {name}\n\
             {network}\
             mount --bind {hosts} /etc/hosts\n\
             mount -t tmpfs -o mode=0755,size=64m symmem-cluster-run /run\n\
             mkdir {view}\n\
             mount --bind {root} {view}\n\
             mount -t tmpfs -o mode=1777 symmem-cluster-tmp /tmp\n\
             mount -t tmpfs -o mode=1777 symmem-cluster-shm /dev/shm\n\
             echo ready\n\
             exec sleep infinity\n",
            network = self.network.node_script(),
            hosts = sh_quote(&format!("{root}/hosts-{name}")),
            view = NODE_VIEW,
            root = sh_quote(root),
        );
        let flags = self.network.unshare_flags();
        let (holder, mount_ns) = self.spawn_holder(unshare, &name, flags, &script)?;
        Ok(Node {
            name,
            address: self.network.address(index),
            holder,
            mount_ns,
        })
    }

    /// A holder process in new namespaces `flags` that runs `script` until it prints
    /// `ready`; its stderr goes to `<name>.stderr` in the cluster's folder. Returns it and
    /// its mount namespace.
    fn spawn_holder(
        &self,
        unshare: &Path,
        name: &str,
        flags: &[&str],
        script: &str,
    ) -> Result<(Child, String), ClusterError> {
        let stderr_path = self.root.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(ClusterError::io("creating a node's log"))?;
        let mut command = network::holder_command(unshare, flags, script, stderr);
        let mut holder = command.spawn().map_err(|e| ClusterError::NodeStart {
            node: name.to_string(),
            detail: format!("starting {}: {e}", unshare.display()),
        })?;
        let mut line = String::new();
        let read = holder
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut line));
        let started = matches!(read, Some(Ok(_))) && line.trim() == "ready";
        if !started {
            let _ = holder.kill();
            let _ = holder.wait();
            let mut log = String::new();
            let _ = std::fs::File::open(&stderr_path).and_then(|mut f| f.read_to_string(&mut log));
            return Err(ClusterError::NodeStart {
                node: name.to_string(),
                detail: format!("its set-up failed: {}", log.trim()),
            });
        }
        let mount_ns = std::fs::read_link(format!("/proc/{}/ns/mnt", holder.id()))
            .map_err(ClusterError::io("reading a node's mount namespace"))?
            .to_string_lossy()
            .into_owned();
        Ok((holder, mount_ns))
    }

    /// The rsh agent: `agent HOST CMD...` runs CMD in HOST's namespaces, as ssh would.
    fn write_agent(&self) -> Result<(), ClusterError> {
        let mut cases = String::new();
        for node in &self.nodes {
            cases.push_str(&format!(
                "  {}|{}) pid={} ;;\n",
                node.name,
                node.address,
                node.pid()
            ));
        }
        // As sshd would, the command starts with a clean environment: HOME, USER, LOGNAME,
        // SHELL of the user and the system PATH; mpirun's `-x` carries what the job exports.
        // One variable of the emulator's own says whose it is (ORIGIN_VARIABLE), as sshd's
        // SSH_CONNECTION says where it came from.
        let agent = format!(
            "#!/bin/sh\n\
             # mpirun's rsh agent for the emulated cluster: enters the node's namespaces.\n\
             host=$1\n\
             shift\n\
             case \"$host\" in\n\
             {cases}\
             \x20 *) echo \"symmem-cluster agent: no node named $host (nodes: {names})\" >&2; exit 255 ;;\n\
             esac\n\
             user=$(id -un)\n\
             entry=$(getent passwd \"$user\")\n\
             home=$(echo \"$entry\" | cut -d: -f6)\n\
             shell=$(echo \"$entry\" | cut -d: -f7)\n\
             exec {nsenter} -t \"$pid\" {flags} -- env -i \"HOME=${{home:-/}}\" \"USER=$user\" \\\n\
             \x20 \"LOGNAME=$user\" \"SHELL=${{shell:-/bin/sh}}\" \"PATH={SSH_PATH}\" {origin} \\\n\
             \x20 /bin/sh -c \"$*\"\n",
            origin = sh_quote(&format!("{ORIGIN_VARIABLE}={}", self.origin())),
            names = self
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            nsenter = sh_quote(&self.nsenter.to_string_lossy()),
            flags = self.network.nsenter_flags().join(" "),
        );
        write(&self.root.join("agent"), &agent, 0o755)
    }

    /// What the rsh agent sets [`ORIGIN_VARIABLE`] to: this cluster's folder name, and the
    /// owner's CI mark (`SYMMEM_CI_RUN`) when it had one.
    pub fn origin(&self) -> String {
        let name = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        origin(&name, std::env::var(CI_RUN_VARIABLE).ok().as_deref())
    }

    /// The words that run a command inside `node` (its UTS, mount and IPC namespaces):
    /// `nsenter -t PID -u -m -i [-n] --`, then the command.
    pub fn enter_words(&self, node: &Node) -> Vec<String> {
        let mut words = vec![
            self.nsenter.to_string_lossy().into_owned(),
            "-t".into(),
            node.pid().to_string(),
        ];
        words.extend(self.network.nsenter_flags().iter().map(|f| f.to_string()));
        words.push("--".into());
        words
    }

    /// A command inside `node` (add the program and its arguments): [`Cluster::enter_words`],
    /// in `/`, stdin from /dev/null, without this machine's `TMPDIR` and `XDG_RUNTIME_DIR`
    /// (the node has its own /tmp and /run).
    pub fn on_node(&self, node: &Node) -> Command {
        let words = self.enter_words(node);
        let mut command = Command::new(&words[0]);
        command
            .args(&words[1..])
            .current_dir("/")
            .stdin(Stdio::null())
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("TMPDIR");
        command
    }

    /// Processes in `node`'s namespaces other than its holder.
    pub fn processes(&self, node: &Node) -> Vec<Process> {
        procs::in_mount_ns(&node.mount_ns)
            .into_iter()
            .filter(|p| p.pid != node.pid())
            .collect()
    }

    /// Entries under `dir` on every node (e.g. "/tmp") whose name starts with `prefix`, as
    /// `(node, path on the node)`.
    pub fn leftovers(&self, dir: &str, prefix: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for node in &self.nodes {
            let Ok(entries) = std::fs::read_dir(node.view(dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(prefix) {
                    found.push((
                        node.name.clone(),
                        format!("{}/{name}", dir.trim_end_matches('/')),
                    ));
                }
            }
        }
        found
    }

    /// Kills every process in the nodes' namespaces but the holders, and waits (at most
    /// `within`) until they are gone. Returns them.
    pub fn sweep(&self, within: Duration) -> Vec<(String, Process)> {
        procs::sweep(&self.node_refs(), within)
    }

    /// Tears the cluster down and says what was still running on its nodes.
    pub fn down(mut self) -> Teardown {
        self.teardown()
    }

    fn teardown(&mut self) -> Teardown {
        // Each holder lives until its node is empty, which keeps the node's namespaces, and so
        // the names `processes` matches, from being freed and reused by someone else's.
        let killed = self.sweep(Duration::from_secs(5));
        for node in &mut self.nodes {
            let _ = node.holder.kill();
            let _ = node.holder.wait();
        }
        // The namespaces, and with them the nodes' mounts, end with their last process.
        self.nodes.clear();
        if let Some(mut fabric) = self.fabric.take() {
            let _ = fabric.holder.kill();
            let _ = fabric.holder.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
        if let Some(mut watchdog) = self.watchdog.take() {
            watchdog.stand_down();
        }
        Teardown { killed }
    }

    pub(crate) fn first_node(&self) -> &Node {
        &self.nodes[0]
    }
    pub(crate) fn mpirun_path(&self) -> &Path {
        &self.mpirun
    }
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// [`ORIGIN_VARIABLE`]'s value for the cluster of folder `name`, owned by CI's run `mark`.
fn origin(name: &str, mark: Option<&str>) -> String {
    match mark.filter(|m| !m.is_empty()) {
        Some(mark) => format!("cluster={name} ci-run={mark}"),
        None => format!("cluster={name}"),
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), ClusterError> {
    std::fs::write(path, text)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)))
        .map_err(ClusterError::io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn nodes_are_named_as_spreadsheet_columns() {
        let names: Vec<String> = [0, 1, 7, 25, 26, 27, 31, 51, 52, 701, 702]
            .into_iter()
            .map(super::node_name)
            .collect();
        assert_eq!(
            names,
            [
                "node-a", "node-b", "node-h", "node-z", "node-aa", "node-ab", "node-af", "node-az",
                "node-ba", "node-zz", "node-aaa"
            ]
        );
        let all: Vec<String> = (0..super::MAX_NODES).map(super::node_name).collect();
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }

    #[test]
    fn the_origin_names_the_cluster_and_the_ci_run() {
        assert_eq!(
            super::origin("symmem-cluster-1-0-ab", None),
            "cluster=symmem-cluster-1-0-ab"
        );
        assert_eq!(super::origin("c", Some("")), "cluster=c");
        assert_eq!(
            super::origin("c", Some("cluster-42-17")),
            "cluster=c ci-run=cluster-42-17"
        );
    }
}
