//! The conformance suite across two real "nodes" of this machine: each a process in its own
//! UTS, mount and IPC namespaces (its own hostname, /tmp, /dev/shm and System V IPC), with
//! Open MPI's `mpirun` started inside the first and reaching the second through an rsh agent
//! that enters its namespaces instead of ssh. The ranks pick the PMIx engine by themselves
//! (`auto`: the launcher says the job spans nodes), the node ids come from PMIx, the host heaps
//! are shared only inside each node, and the inter-node checks (9: base 0 and refused, 10b)
//! run for real rather than through `SYMMEM_NODE_ID`.
//!
//! Needs root (namespaces, mounts), `unshare`/`nsenter` and `mpirun`; skipped with the reason
//! otherwise. Only loopback addresses are used; the namespaces vanish with their processes,
//! which the test ends by their ids.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

fn which(tool: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Why this machine cannot run the test, if it cannot.
fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root to create namespaces and mounts".into());
    }
    for (tool, package) in [
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("mpirun", "openmpi-bin"),
    ] {
        if which(tool).is_none() {
            return Some(format!(
                "{tool} is not installed (apt-get install {package})"
            ));
        }
    }
    // Root in a container may still lack the capability to make namespaces.
    match Command::new("unshare")
        .args(["--uts", "--mount", "--ipc", "true"])
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "cannot create namespaces here ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run unshare ({e})")),
    }
}

/// One node: a sleeping process holding the namespaces; ended (and with it its mounts) on drop.
struct Node {
    name: &'static str,
    child: Child,
}

impl Node {
    fn start(name: &'static str, hosts: &Path) -> Node {
        let script = format!(
            "hostname {name} && mount --bind {} /etc/hosts && mount -t tmpfs tmpfs /dev/shm \
             && mount -t tmpfs tmpfs /tmp && exec sleep 600",
            hosts.display()
        );
        let child = Command::new("unshare")
            .args(["--uts", "--mount", "--ipc", "--propagation", "private"])
            .args(["sh", "-c", &script])
            .spawn()
            .expect("start unshare");
        let node = Node { name, child };
        // Ready once its hostname is set (bounded: 100 tries of 50 ms).
        for _ in 0..100 {
            let out = node.enter(&["hostname"]);
            if String::from_utf8_lossy(&out.stdout).trim() == name {
                return node;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("node {name} did not come up");
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn enter(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.pid().to_string(), "-u", "-m", "-i", "--"])
            .args(args)
            .output()
            .expect("nsenter")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    agent: PathBuf,
    a: Node,
    _b: Node,
}

fn cluster() -> Cluster {
    // Under the target folder: visible from both nodes (their /tmp is private).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.2 node-a\n127.0.0.3 node-b\n",
    )
    .unwrap();
    let a = Node::start("node-a", &hosts);
    let b = Node::start("node-b", &hosts);
    // mpirun's rsh launcher calls `AGENT HOST COMMAND...`; the command carries quoted `;`,
    // so it goes through a shell in the node's namespaces.
    let agent = dir.path().join("agent");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n  {}) pid={} ;;\n  {}) pid={} ;;\n  \
             *) echo \"agent: unknown host $host\" >&2; exit 1 ;;\nesac\n\
             exec nsenter -t \"$pid\" -u -m -i -- /bin/sh -c \"$*\"\n",
            a.name,
            a.pid(),
            b.name,
            b.pid()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    Cluster {
        _dir: dir,
        agent,
        a,
        _b: b,
    }
}

fn run_suite(cluster: &Cluster, per_node: usize) -> Output {
    let hosts = format!("node-a:{per_node},node-b:{per_node}");
    let ranks = (2 * per_node).to_string();
    let agent = cluster.agent.to_string_lossy().into_owned();
    cluster.a.enter(&[
        "env",
        "OMPI_ALLOW_RUN_AS_ROOT=1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
        "RUST_LOG=symmem_bootstrap=debug",
        "mpirun",
        "--mca",
        "plm_rsh_agent",
        &agent,
        "--mca",
        "oob_tcp_if_include",
        "lo",
        "--host",
        &hosts,
        "-np",
        &ranks,
        "-x",
        "RUST_LOG",
        env!("CARGO_BIN_EXE_symmem-conformance"),
    ])
}

#[test]
fn the_suite_passes_across_two_namespace_nodes_over_pmix() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let cluster = cluster();
    for per_node in [1, 2] {
        let out = run_suite(&cluster, per_node);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let log = String::from_utf8_lossy(&out.stderr);
        let ranks = 2 * per_node;
        assert!(out.status.success(), "{ranks} ranks: {stdout}\n{log}");
        let results: Vec<serde_json::Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let status = |v: &serde_json::Value| v["status"].as_str().unwrap_or_default().to_string();
        assert!(
            results.iter().all(|v| status(v) != "fail") && !results.is_empty(),
            "{stdout}"
        );
        for check in ["9", "10b"] {
            let passed = results
                .iter()
                .filter(|v| v["check"] == check && status(v) == "pass")
                .count();
            assert_eq!(passed, ranks, "check {check} on every rank\n{stdout}");
        }
        // Every rank chose PMIx by itself, and reported itself on its node.
        let joins: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("control plane engine"))
            .collect();
        assert!(!joins.is_empty(), "{log}");
        assert!(
            joins.iter().all(|l| l.contains("engine=Pmix choice=auto")),
            "{log}"
        );
    }
}
