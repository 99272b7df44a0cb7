"""Ranks that meet through a torch.distributed process group, with no symmem launcher:

    python torch_group.py spawn N [CASE]    torch.multiprocessing.spawn + init_process_group
                                            (a file:// store, no launcher variables), as
                                            Iris's own tests start ranks
    torchrun ... torch_group.py [CASE]      torchrun's env:// variables, one node or several

CASE: ``meet`` (default; SYMMEM_NODE_ID from NODE_OF=even makes rank % 2 the emulated node),
``subgroup`` (a group that is not the world is refused, then the world meets), ``stale`` (the
launcher variables of another job disagree with the group: every rank refuses, none waits),
``early`` (spawn only: symmem started before init_process_group refuses to serve as a
one-rank world), ``batch`` (spawn only: a Slurm batch step's variables around the processes
say nothing of the group's ranks: they meet), ``badsetting`` (spawn only: rank 1's invalid
setting fails every rank at once).
Each rank prints ``PASS torch group <case>``."""

from __future__ import annotations

import os
import socket
import sys

import numpy as np
from common import at, check, expect, table

import symmem


def meet() -> None:
    import torch
    import torch.distributed as dist

    r, n = dist.get_rank(), dist.get_world_size()
    if os.environ.get("NODE_OF") == "even":
        os.environ["SYMMEM_NODE_ID"] = str(r % 2)  # read when the session starts
    info = symmem.init()
    check((info["rank"], info["world_size"]) == (r, n), f"symmem says {info}, torch {r}/{n}")
    check(info["launcher"] == "torch.distributed group", f"met through {info['launcher']}")
    check((symmem.rank(), symmem.world_size()) == (r, n), "rank() and world_size() follow it")
    x, bases = symmem.allocate_symmetric(n, dtype=torch.int32)
    b = table(bases)
    # Reachable: the ranks of this host (torchrun --nnodes 2 across emulated nodes) and, with
    # NODE_OF=even, of this emulated node.
    hosts = [None] * n
    dist.all_gather_object(hosts, socket.gethostname())
    even = os.environ.get("NODE_OF") == "even"
    same = [hosts[p] == hosts[r] and (not even or p % 2 == r % 2) for p in range(n)]
    check(info["local_world_size"] == hosts.count(hosts[r]), f"local size {info}")
    check(b[r] == x.data_ptr(), "peer_bases[rank] == data_ptr")
    check([v != 0 for v in b] == same, f"bases {b}: 0 exactly for the other node")
    x.fill_(-1)
    symmem.barrier()
    for to in range(n):
        if same[to]:
            at(b[to] + (x.data_ptr() + 4 * r - b[r]), np.int32, 1)[0] = 100 + r
    symmem.barrier()
    want = [100 + p if same[p] else -1 for p in range(n)]
    check(x.tolist() == want, f"{x.tolist()} != {want}: every peer of this node wrote here")
    symmem.free(x)
    check(symmem.finalize() == [], "nothing left")


def subgroup() -> None:
    import torch.distributed as dist

    r, n = dist.get_rank(), dist.get_world_size()
    part = dist.new_group(list(range(n - 1)))
    if r < n - 1:
        expect(ValueError, symmem.init, group=part, contains="whole group")
    meet()


def stale() -> None:
    # Another job's Open MPI variables, the same in every process: rank 0 of the group agrees
    # with them, the others do not. Every rank must fail at once, naming a disagreeing rank.
    text = expect(symmem.SymmemError, symmem.init, contains="cannot join this job")
    check("Open MPI's variables say rank 0" in text, f"names the launcher: {text}")


def early() -> None:
    # Started before init_process_group (see spawned): a one-rank world that must not serve.
    check(symmem.info()["world_size"] == 1, "started alone")
    expect(symmem.SymmemError, symmem.allocate_symmetric, 4, contains="init_process_group")
    expect(symmem.SymmemError, symmem.init, contains="init_process_group")


def badsetting() -> None:
    # Rank 1's heap setting is invalid (see spawned): every rank refuses at once, naming it.
    text = expect(symmem.SymmemError, symmem.init, contains="rank 1 cannot join this job")
    check("SYMMEM_HOST_HEAP_SIZE" in text, f"names the setting: {text}")


CASES = {"meet": meet, "subgroup": subgroup, "stale": stale, "early": early, "batch": meet,
         "badsetting": badsetting}


def run(case: str) -> None:
    import torch.distributed as dist

    CASES[case]()
    # One write per line: the ranks share torchrun's stdout.
    sys.stdout.write(f"rank {dist.get_rank()}/{dist.get_world_size()}: PASS torch group {case}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def spawned(rank: int, world: int, store: str, case: str) -> None:
    import torch.distributed as dist

    if case == "stale":
        os.environ.update({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": str(world),
                           "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                           "OMPI_COMM_WORLD_LOCAL_SIZE": str(world)})
    if case == "badsetting" and rank == 1:
        os.environ["SYMMEM_HOST_HEAP_SIZE"] = "lots"
    if case == "batch":
        # A Slurm batch step around the spawned processes: one task, rank 0 of 1.
        os.environ.update({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
                           "SLURM_JOB_ID": "4242"})
    if case == "early":
        symmem.init()  # the mistake: before torch.distributed knows the job
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    run(case)


if __name__ == "__main__":
    if sys.argv[1:2] == ["spawn"]:
        import torch.multiprocessing as mp

        import tempfile

        world, case = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "meet")
        with tempfile.TemporaryDirectory() as folder:  # the group's store: no port to race for
            store = os.path.join(folder, "store")
            mp.spawn(spawned, args=(world, store, case), nprocs=world, join=True)
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        run(sys.argv[1] if len(sys.argv) > 1 else "meet")
