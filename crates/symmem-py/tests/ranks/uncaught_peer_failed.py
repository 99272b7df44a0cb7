"""A rank that does not catch PeerFailedError exits with EXIT_PEER_FAILED (the module's
excepthook), so the launcher blames the rank that left, not this witness (issue 24, N4)."""

from __future__ import annotations

import os

import symmem

r = symmem.rank()
symmem.init()
if r == 1:
    os._exit(0)  # leaves while rank 0 still needs it
symmem.barrier()  # raises PeerFailedError, uncaught
print("rank 0: the barrier passed without rank 1", flush=True)
