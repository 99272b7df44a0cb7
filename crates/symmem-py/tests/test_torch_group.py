"""Ranks that meet through torch.distributed's group, with no symmem launcher: Iris's way of
starting tests (torch.multiprocessing.spawn + init_process_group over tcp://) and torchrun on
one node (torchrun across two emulated nodes is crates/symmem-cluster/tests/torchrun.rs). The
rank script is ranks/torch_group.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import RANKS, default_signals, show

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed (crates/symmem-py/ci.sh installs it)")

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "SYMMEM_RENDEZVOUS", "SYMMEM_PROVIDER", "SYMMEM_NODE_ID",
                 "SYMMEM_RUN_ID")


def run(args, env=None, timeout=180):
    full_env = {k: v for k, v in os.environ.items()
                if k not in LAUNCHER_VARS and not k.startswith(("OMPI_", "PMI", "SLURM_"))}
    full_env.update({"PYTHONUNBUFFERED": "1", "SYMMEM_HOST_HEAP_SIZE": "64M", "TMPDIR": "/tmp",
                     "SYMMEM_COLLECTIVE_TIMEOUT": "30s"})
    full_env.update(env or {})
    return subprocess.run([sys.executable, *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, cwd=RANKS, preexec_fn=default_signals)


def passes(proc, ranks: int, case: str) -> None:
    assert proc.returncode == 0, show(proc)
    got = sorted(line.split(":")[0] for line in proc.stdout.splitlines()
                 if line.endswith(f"PASS torch group {case}"))
    assert got == [f"rank {r}/{ranks}" for r in range(ranks)], show(proc)


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_spawned_ranks_meet_through_the_group_not_as_one_rank_worlds(ranks):
    """No launcher variables at all: without the group each process would be rank 0 of 1."""
    passes(run(["torch_group.py", "spawn", str(ranks)]), ranks, "meet")


def test_spawned_ranks_on_two_emulated_nodes_reach_only_their_own_node():
    passes(run(["torch_group.py", "spawn", "4"], env={"NODE_OF": "even"}), 4, "meet")


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_torchrun_ranks_meet_through_the_group(ranks):
    proc = run(["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                "torch_group.py"])
    passes(proc, ranks, "meet")


def test_a_slurm_batch_step_around_spawned_ranks_does_not_stop_them():
    """sbatch + python script.py (spawn): the batch step's SLURM_PROCID=0 / SLURM_NTASKS=1
    name the script, not the group's ranks."""
    passes(run(["torch_group.py", "spawn", "2", "batch"]), 2, "batch")


def test_a_group_that_is_not_the_world_is_refused():
    passes(run(["torch_group.py", "spawn", "3", "subgroup"]), 3, "subgroup")


def test_launcher_variables_that_disagree_with_the_group_fail_every_rank_at_once():
    """Another job's Open MPI variables in every process: rank 0 agrees with them, ranks 1 and 2
    do not; all three refuse within the test's limit instead of waiting for each other."""
    passes(run(["torch_group.py", "spawn", "3", "stale"], timeout=60), 3, "stale")


def test_an_invalid_setting_on_one_rank_fails_every_rank_at_once():
    """Settings are read after the meeting; an invalid one rides in its rank's card instead,
    so the other ranks do not wait out the collective timeout (30 s here) for it."""
    proc = run(["torch_group.py", "spawn", "3", "badsetting"], timeout=25)
    passes(proc, 3, "badsetting")


def test_a_session_started_before_init_process_group_refuses_to_serve():
    """symmem.init() before init_process_group formed a one-rank world; once torch.distributed
    says the job has 2 ranks, allocate and init refuse, naming the fix."""
    passes(run(["torch_group.py", "spawn", "2", "early"], timeout=60), 2, "early")


def test_group_without_torch_distributed_is_refused():
    code = ("import symmem\n"
            "try:\n    symmem.init(group=object())\n"
            "except ValueError as e:\n    print('refused:', e)\n")
    proc = run(["-c", code])
    assert proc.returncode == 0 and "init_process_group" in proc.stdout, show(proc)
