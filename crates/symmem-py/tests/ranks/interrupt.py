"""Ctrl-C during a collective raises KeyboardInterrupt while the collective still waits for the
other ranks, and the session then refuses every call: the collective's outcome is unknown
(issue 24, N2). Rank 1 enters the barrier only once rank 0 has taken its KeyboardInterrupt (a
file in the job's folder says so), so rank 0 can only pass if the interrupt arrived while the
barrier was still waiting for rank 1."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from common import check, expect, main

import symmem

TAKEN = Path(os.environ["INTERRUPT_TEST_DIR"]) / "rank0-interrupted"
# Bounded: the collective timeout (set by the test) is far above this.
WAIT_LIMIT_S = 60


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    symmem.init()
    if r == 0:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            symmem.barrier()
        except KeyboardInterrupt as e:
            interrupted = e
        else:
            raise AssertionError("rank 0: the barrier completed although rank 1 never entered it")
        TAKEN.touch()
        if sys.version_info >= (3, 11):
            notes = " ".join(getattr(interrupted, "__notes__", []))
            check("outcome" in notes or "unknown" in notes, f"no note on the interrupt: {notes!r}")
        # The session knows the barrier's outcome is unknown: every later call says so.
        expect(symmem.SymmemError, symmem.barrier, contains="interrupted")
        expect(symmem.SymmemError, symmem.allocate_symmetric, 4, dtype="int8",
               framework="numpy", contains="interrupted")
        print(f"rank {r}/{n}: PASS interrupt", flush=True)
        os._exit(0)
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not TAKEN.exists():
        check(time.monotonic() < deadline, "rank 0 never took its KeyboardInterrupt")
        time.sleep(0.01)
    # Rank 0 is gone (or its barrier completes with this one): either way this rank is done.
    try:
        symmem.barrier()
    except symmem.PeerFailedError:
        pass
    print(f"rank {r}/{n}: PASS interrupt", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main(body)
