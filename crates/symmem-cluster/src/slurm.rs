//! Debian's Slurm on the emulated nodes: `munged` and `slurmd` on every node, `slurmctld` on
//! the first, all sharing one slurm.conf in the cluster's shared folder.
//!
//! Every daemon is reached at its node's own address (`NodeAddr`, `SlurmctldHost`). On the
//! shared network the nodes share this machine's network namespace, so every daemon also has
//! its own port, picked free below the ephemeral range at start (on an isolated network the
//! same ports serve, in each node's own namespace). Spool, state and logs are in
//! each node's private `/tmp/slurm`, pid files and munge's socket in its private `/run`. No
//! cgroups: `proctrack/linuxproc` and `task/none`. [`Slurm`] drops by stopping every daemon
//! (and `slurmstepd`, `srun`) on the nodes; the cluster's sweep and watchdog end whatever is
//! left, also after a `kill -9` of the owner, since a node's processes are those in its mount
//! namespace.

use crate::procs::Process;
use crate::{Cluster, ClusterError, Node, SLURM_FIX};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, User, chown};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use symmem_process::{SearchPath, find_program};

/// The daemons (and step programs) a [`Slurm`] stops, by program name.
pub const SLURM_PROGRAMS: [&str; 5] = ["slurmctld", "slurmd", "slurmstepd", "munged", "srun"];

/// Where on a node Slurm keeps its spool, state and logs (the node's private /tmp).
const NODE_DIR: &str = "/tmp/slurm";
/// Where on a node the pid files go (the node's private /run).
const RUN_DIR: &str = "/run/slurm";
/// munged's folder on a node: socket, pid, seed and log.
const MUNGE_DIR: &str = "/run/munge";
/// How long the daemons may take until every node is idle.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Every node gets this many CPUs (`SlurmdParameters=config_overrides` accepts more than the
/// machine has), so that 8 ranks fit on each.
pub const CPUS_PER_NODE: usize = 8;

/// The programs Slurm needs (see [`program`] for the Debian package of each).
struct Programs {
    slurmctld: PathBuf,
    slurmd: PathBuf,
    munged: PathBuf,
    srun: PathBuf,
    sinfo: PathBuf,
    setpriv: PathBuf,
}

/// Slurm running on a cluster's nodes; see the module docs. Drop stops it.
#[derive(Debug)]
pub struct Slurm<'c> {
    cluster: &'c Cluster,
    conf: PathBuf,
    srun: PathBuf,
    sinfo: PathBuf,
    slurmd_version: String,
    srun_version: String,
    /// slurmctld's port, then each node's slurmd's.
    ports: Vec<u16>,
}

/// A program on PATH or in the system folders (`sudo` may keep a PATH without /usr/sbin),
/// or the error naming its package.
fn program(name: &str, package: &str) -> Result<PathBuf, ClusterError> {
    let search = SearchPath::from_env().also(["/usr/sbin", "/usr/bin", "/sbin"]);
    Ok(find_program(
        name,
        &search,
        format!("install {package}: {SLURM_FIX}"),
    )?)
}

impl Programs {
    fn find() -> Result<Self, ClusterError> {
        Ok(Self {
            slurmctld: program("slurmctld", "slurmctld")?,
            slurmd: program("slurmd", "slurmd")?,
            munged: program("munged", "munge")?,
            srun: program("srun", "slurm-client")?,
            sinfo: program("sinfo", "slurm-client")?,
            setpriv: program("setpriv", "util-linux")?,
        })
    }
}

/// The lowest port the system hands out for outgoing connections (and `bind(0)`).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// `count` TCP ports free on every address now, below the ephemeral range (so that no
/// outgoing connection, srun's own included, takes one before its daemon binds it), and never
/// handed out before by this process (tests start several clusters at once).
fn free_ports(count: usize) -> Result<Vec<u16>, ClusterError> {
    static CLAIMED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let (low, high) = (10_000u16, ephemeral_low().max(10_001));
    let span = u32::from(high - low);
    let start = (std::process::id() * 7919) % span;
    let mut ports = Vec::new();
    for step in 0..span {
        let port = low + ((start + step) % span) as u16;
        if claimed.contains(&port) || std::net::TcpListener::bind(("0.0.0.0", port)).is_err() {
            continue;
        }
        ports.push(port);
        if ports.len() == count {
            claimed.extend(&ports);
            return Ok(ports);
        }
    }
    Err(
        ClusterError::io("finding free ports for the Slurm daemons")(
            std::io::ErrorKind::AddrInUse.into(),
        ),
    )
}

/// slurm.conf for `nodes`: the controller on the first at `ports[0]`, node i's slurmd at
/// `ports[i + 1]`.
fn slurm_conf(nodes: &[Node], ports: &[u16]) -> String {
    let first = &nodes[0];
    let mut conf = format!(
        "ClusterName=symmem\n\
         SlurmctldHost={name}({addr})\n\
         SlurmctldPort={ctld}\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         AuthType=auth/munge\n\
         CredType=cred/munge\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         MpiDefault=none\n\
         SelectType=select/cons_tres\n\
         SlurmdParameters=config_overrides\n\
         ReturnToService=2\n\
         AccountingStorageType=accounting_storage/none\n\
         JobCompType=jobcomp/none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         MailProg=/bin/true\n\
         KillWait=5\n\
         InactiveLimit=0\n\
         StateSaveLocation={dir}/state\n\
         SlurmdSpoolDir={dir}/spool\n\
         SlurmctldLogFile={dir}/slurmctld.log\n\
         SlurmdLogFile={dir}/slurmd.log\n\
         SlurmctldPidFile={run}/slurmctld.pid\n\
         SlurmdPidFile={run}/slurmd.pid\n",
        name = first.name(),
        addr = first.address(),
        ctld = ports[0],
        dir = NODE_DIR,
        run = RUN_DIR,
    );
    for (node, port) in nodes.iter().zip(&ports[1..]) {
        conf.push_str(&format!(
            "NodeName={} NodeAddr={} Port={port} CPUs={CPUS_PER_NODE} State=UNKNOWN\n",
            node.name(),
            node.address()
        ));
    }
    conf.push_str(
        "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
    );
    conf
}

/// The last `lines` lines of the file at `path`, or why there are none.
fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(no log at {}: {e})", path.display()),
    }
}

/// The first line `program ARGS` prints, or the error text.
fn first_line(command: &mut Command) -> String {
    match command.output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("(printed nothing)")
            .to_string(),
        Err(e) => e.to_string(),
    }
}

/// The daemons that outlive every job step: what a sweep after a job leaves running.
const DAEMONS: [&str; 3] = ["slurmctld", "slurmd", "munged"];

/// The program name of a command line (`slurmstepd` for `slurmstepd: [1.0]`).
fn program_name(command: &str) -> &str {
    let first = command.split_whitespace().next().unwrap_or("");
    first
        .rsplit('/')
        .next()
        .unwrap_or(first)
        .trim_end_matches(':')
}

/// Whether `process` is one of [`SLURM_PROGRAMS`] (`slurmstepd: [1.0]` included).
fn is_slurm(process: &Process) -> bool {
    SLURM_PROGRAMS.contains(&program_name(&process.command))
}

/// Whether `process` is one of the [`DAEMONS`].
fn is_daemon(process: &Process) -> bool {
    DAEMONS.contains(&program_name(&process.command))
}

/// Whether `command` (a process's command line, as a sweep reports it) is Slurm's step daemon,
/// `slurmstepd: [JOB.STEP]`: Slurm's own process, which srun does not wait for. It can outlive
/// its step for good: its PMIx server may hang in `PMIx_server_finalize` once a task was
/// killed during its PMIx start-up (seen here with gdb; openpmix#1233 describes the lock a
/// killed client leaves held). A sweep ends it; it is not the job's.
pub fn is_step_daemon(command: &str) -> bool {
    program_name(command) == "slurmstepd"
}

impl Cluster {
    /// Starts Slurm on every node and waits until `sinfo` shows every node idle. Each missing
    /// piece, a daemon that does not start, or a Slurm without PMIx is an error naming the fix.
    pub fn slurm(&self) -> Result<Slurm<'_>, ClusterError> {
        let programs = Programs::find()?;
        let dir = self.shared_dir().join("slurm");
        std::fs::create_dir(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => ClusterError::SlurmRunning,
            _ => ClusterError::io("creating the Slurm folder")(e),
        })?;
        let conf = dir.join("slurm.conf");
        let made = free_ports(self.nodes().len() + 1).and_then(|ports| {
            crate::write(&conf, &slurm_conf(self.nodes(), &ports), 0o644)?;
            Ok((ports, self.on_nodes(&conf)?))
        });
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let (ports, conf) = made?;
        let mut slurm = Slurm {
            cluster: self,
            conf,
            srun: programs.srun.clone(),
            sinfo: programs.sinfo.clone(),
            slurmd_version: first_line(Command::new(&programs.slurmd).arg("-V")),
            srun_version: String::new(),
            ports,
        };
        // From here on, an error drops `slurm`, which stops what was started.
        slurm.check_pmix()?;
        // srun reads slurm.conf even for --version.
        slurm.srun_version = first_line(slurm.command(&slurm.srun).arg("--version"));
        for node in self.nodes() {
            slurm.prepare(node)?;
            slurm.start_munged(node, &programs)?;
        }
        let first = &self.nodes()[0];
        slurm.start_daemon(first, "slurmctld", &programs.slurmctld, &["-i"])?;
        for node in self.nodes() {
            slurm.start_daemon(node, "slurmd", &programs.slurmd, &["-N", node.name()])?;
        }
        slurm.wait_idle()?;
        Ok(slurm)
    }
}

impl<'c> Slurm<'c> {
    /// The slurm.conf as the nodes see it: the value of `SLURM_CONF` for `srun`, `sinfo`, ...
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The words that run a command inside the first node (where `srun` runs): the same
    /// `nsenter` wrapper as `mpirun`'s. Give the command `SLURM_CONF` ([`Slurm::env`]).
    pub fn wrapper(&self) -> Vec<String> {
        self.cluster.enter_words(&self.cluster.nodes()[0])
    }

    /// The environment a Slurm command needs: `SLURM_CONF`.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![(
            "SLURM_CONF".to_string(),
            self.conf.to_string_lossy().into_owned(),
        )]
    }

    /// `program` (e.g. `srun`) inside the first node, with [`Slurm::env`] set.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = self.cluster.on_node(&self.cluster.nodes()[0]);
        command.arg(program).envs(self.env());
        command
    }

    /// The port of `node`'s slurmd (at the node's address).
    pub fn slurmd_port(&self, node: &Node) -> u16 {
        let index = self
            .cluster
            .nodes()
            .iter()
            .position(|n| n.pid() == node.pid());
        self.ports[1 + index.expect("a node of this Slurm's cluster")]
    }

    /// A sweep for `srun`'s jobs: what a step left on the nodes once it ended (ranks,
    /// `slurmstepd`), the daemons spared.
    pub fn sweeper(&self) -> symmem_launch::Sweep {
        self.cluster.sweeper_sparing(is_daemon)
    }

    /// `srun` inside the first node with this Slurm's `SLURM_CONF`, as a launcher (add its
    /// arguments to `args`): the same wrapper as `mpirun`'s, and a sweep that spares the
    /// daemons.
    pub fn launcher(&self) -> symmem_launch::Srun {
        symmem_launch::Srun {
            program: self.srun.clone(),
            args: Vec::new(),
            wrapper: self.cluster.wrapper(),
            env: self
                .env()
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            sweep: Some(self.sweeper()),
        }
    }

    /// `srun`'s path on this machine (the nodes see the same).
    pub fn srun(&self) -> &Path {
        &self.srun
    }

    /// `slurmd -V` (`slurm-wlm 22.05.8`), for reports.
    pub fn slurmd_version(&self) -> &str {
        &self.slurmd_version
    }

    /// `srun --version` (`slurm-wlm 22.05.8`), for reports.
    pub fn srun_version(&self) -> &str {
        &self.srun_version
    }

    /// Node `node`'s Slurm log (`slurmd.log`, `slurmctld.log`), from this machine.
    pub fn log(&self, node: &Node, name: &str) -> PathBuf {
        node.view(&format!("{NODE_DIR}/{name}"))
    }

    /// `srun --mpi=list` must offer `pmix` (Slurm's PMIx plugin).
    fn check_pmix(&self) -> Result<(), ClusterError> {
        let out = self
            .command(&self.srun)
            .arg("--mpi=list")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(ClusterError::io("running srun --mpi=list"))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if text.lines().any(|l| l.trim().starts_with("pmix")) {
            return Ok(());
        }
        Err(ClusterError::SlurmNoPmix {
            list: text.trim().to_string(),
        })
    }

    /// The node's Slurm and munge folders, munge's owned by user munge.
    fn prepare(&self, node: &Node) -> Result<(), ClusterError> {
        for dir in [
            format!("{NODE_DIR}/state"),
            format!("{NODE_DIR}/spool"),
            RUN_DIR.to_string(),
            MUNGE_DIR.to_string(),
        ] {
            std::fs::create_dir_all(node.view(&dir)).map_err(ClusterError::io(format!(
                "creating {dir} on {}",
                node.name()
            )))?;
        }
        let munge = User::from_name("munge")
            .ok()
            .flatten()
            .ok_or(ClusterError::SlurmMissing {
                what: "user munge".to_string(),
                package: "munge",
            })?;
        chown(&node.view(MUNGE_DIR), Some(munge.uid), Some(munge.gid))
            .map_err(|e| ClusterError::io(format!("chown munge {MUNGE_DIR}"))(e.into()))
    }

    /// munged as user munge, with the packaged key; it returns once its socket is ready.
    fn start_munged(&self, node: &Node, programs: &Programs) -> Result<(), ClusterError> {
        let log = node.view(&format!("{MUNGE_DIR}/munged.log"));
        let setpriv = programs.setpriv.to_string_lossy();
        let munged = programs.munged.to_string_lossy();
        let seed = format!("--seed-file={MUNGE_DIR}/munged.seed");
        let log_file = format!("--log-file={MUNGE_DIR}/munged.log");
        let args = [
            "--reuid=munge",
            "--regid=munge",
            "--init-groups",
            "--",
            &munged,
            &seed,
            &log_file,
        ];
        let status = self
            .cluster
            .on_node(node)
            .arg(setpriv.as_ref())
            .args(args)
            .stdout(Stdio::null())
            .stderr(self.daemon_output(node, "munged")?)
            .status()
            .map_err(ClusterError::io("starting munged"))?;
        if status.success() {
            return Ok(());
        }
        Err(self.daemon_error(node, "munged", &log))
    }

    /// Where a daemon's own output goes before it has a log: a file in the cluster's folder.
    fn daemon_output(&self, node: &Node, daemon: &str) -> Result<std::fs::File, ClusterError> {
        let path = self.output_path(node, daemon);
        std::fs::File::create(&path)
            .map_err(ClusterError::io(format!("creating {}", path.display())))
    }

    fn output_path(&self, node: &Node, daemon: &str) -> PathBuf {
        self.cluster
            .shared_dir()
            .join("slurm")
            .join(format!("{}-{daemon}.out", node.name()))
    }

    /// The error for `daemon` on `node`: its output and the tail of its log.
    fn daemon_error(&self, node: &Node, daemon: &str, log: &Path) -> ClusterError {
        let output = tail(&self.output_path(node, daemon), 10);
        ClusterError::SlurmDaemon {
            daemon: daemon.to_string(),
            node: node.name().to_string(),
            log: format!("{}\n{}", output.trim(), tail(log, 15)),
        }
    }

    /// `program ARGS -f CONF` on `node`; it detaches from us.
    fn start_daemon(
        &self,
        node: &Node,
        daemon: &str,
        program: &Path,
        args: &[&str],
    ) -> Result<(), ClusterError> {
        let status = self
            .cluster
            .on_node(node)
            .arg(program)
            .args(args)
            .arg("-f")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(self.daemon_output(node, daemon)?)
            .status()
            .map_err(ClusterError::io(format!("starting {daemon}")))?;
        if status.success() {
            return Ok(());
        }
        Err(self.daemon_error(node, daemon, &self.log(node, &format!("{daemon}.log"))))
    }

    /// `sinfo`'s `NODE STATE` lines, or its error.
    fn sinfo(&self) -> String {
        match self
            .command(&self.sinfo)
            .args(["-h", "-N", "-o", "%N %t"])
            .stderr(Stdio::piped())
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("sinfo: {e}"),
        }
    }

    /// Waits (at most [`READY_WITHIN`]) until `sinfo` shows every node idle. After a job, that
    /// is once every node has acknowledged its end: srun returns before that, and a node stays
    /// `completing` (and takes no new job) until slurmctld reaches its slurmd.
    pub fn wait_idle(&self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + READY_WITHIN;
        let idle = |text: &str| {
            self.cluster.nodes().iter().all(|node| {
                text.lines()
                    .any(|l| l.split_whitespace().eq([node.name(), "idle"]))
            })
        };
        let mut seen = self.sinfo();
        while !idle(&seen) {
            if Instant::now() >= deadline {
                return Err(self.not_ready(&seen));
            }
            std::thread::sleep(Duration::from_millis(200));
            seen = self.sinfo();
        }
        Ok(())
    }

    /// Why the nodes are not idle: what `sinfo` says and the daemons' logs.
    fn not_ready(&self, sinfo: &str) -> ClusterError {
        let nodes = self.cluster.nodes();
        let mut logs = format!(
            "slurmctld ({}):\n{}",
            nodes[0].name(),
            tail(&self.log(&nodes[0], "slurmctld.log"), 10)
        );
        for node in nodes {
            let log = tail(&self.log(node, "slurmd.log"), 5);
            logs.push_str(&format!("\nslurmd ({}):\n{log}", node.name()));
        }
        ClusterError::SlurmNotReady {
            within: READY_WITHIN,
            sinfo: sinfo.trim().to_string(),
            logs,
        }
    }

    /// The Slurm processes still on the nodes.
    pub fn processes(&self) -> Vec<(String, Process)> {
        let mut found = Vec::new();
        for node in self.cluster.nodes() {
            for p in self.cluster.processes(node).into_iter().filter(is_slurm) {
                found.push((node.name().to_string(), p));
            }
        }
        found
    }

    /// SIGTERM to every Slurm process, SIGKILL to what is left after 5 s; then the nodes'
    /// Slurm and munge folders go.
    fn stop(&mut self) {
        for signal in [Signal::SIGTERM, Signal::SIGKILL] {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let left = self.processes();
                if left.is_empty() || Instant::now() >= deadline {
                    break;
                }
                for (_, p) in &left {
                    let _ = kill(Pid::from_raw(p.pid as i32), signal);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for node in self.cluster.nodes() {
            for dir in [NODE_DIR, RUN_DIR, MUNGE_DIR] {
                let _ = std::fs::remove_dir_all(node.view(dir));
            }
        }
        let _ = std::fs::remove_dir_all(self.cluster.shared_dir().join("slurm"));
    }
}

impl Drop for Slurm<'_> {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_programs_are_recognised_by_name() {
        let p = |command: &str| Process {
            pid: 1,
            parent: 0,
            command: command.to_string(),
        };
        assert!(is_slurm(&p("slurmstepd: [3.0]")));
        assert!(is_slurm(&p("/usr/sbin/munged --seed-file=x")));
        assert!(is_slurm(&p("/usr/sbin/slurmd -N node-b -f /x")));
        assert!(!is_slurm(&p("/bin/sh -c slurmd")));
        assert!(!is_slurm(&p("sleep 600")));
        assert!(is_daemon(&p("/usr/sbin/slurmd -N node-b -f /x")));
        assert!(is_daemon(&p("/usr/sbin/munged --seed-file=x")));
        assert!(!is_daemon(&p("slurmstepd: [3.0]")));
        assert!(is_step_daemon("slurmstepd: [3.0]"));
        assert!(is_step_daemon("/usr/sbin/slurmstepd"));
        assert!(!is_step_daemon("slurmd -N node-a"));
        assert!(!is_step_daemon("/opt/x/symmem-conformance slurmstepd"));
        assert!(!is_daemon(&p("/usr/bin/srun --mpi=pmix rank")));
    }
}
