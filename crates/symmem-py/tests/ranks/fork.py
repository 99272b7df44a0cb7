"""A process forked after symmem.init() is refused every call: it shares its parent's control
sockets, and a barrier from it used to stand in for the parent's rank (issue 24, N1)."""

from __future__ import annotations

import os

from common import check, expect, main

import symmem


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    symmem.init()
    if r == 0:
        pid = os.fork()
        if pid == 0:
            # The child: every call is refused, naming the fork; then it leaves quietly.
            try:
                for call in (symmem.barrier, symmem.info, symmem.outstanding):
                    expect(symmem.SymmemError, call, contains="fork")
                expect(symmem.SymmemError, symmem.allocate_symmetric, 4, dtype="int8",
                       framework="numpy", contains="fork")
                status = 0
            except BaseException as e:  # reported by the parent through the status
                print(f"rank 0 child: {e!r}", flush=True)
                status = 1
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        check(os.waitstatus_to_exitcode(status) == 0, "the forked child's calls were accepted")
    # The ranks are still in step: the child issued nothing.
    symmem.barrier()
    x, _ = symmem.allocate_symmetric(8, dtype="int8", framework="numpy")
    symmem.free(x)
    check(symmem.finalize() == [], "nothing left")
    print(f"rank {r}/{n}: PASS fork", flush=True)


if __name__ == "__main__":
    main(body)
