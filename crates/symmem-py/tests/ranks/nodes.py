"""Emulated nodes (SYMMEM_NODE_ID = rank % 2): peers on the other node have table entry 0 and
direct = False; stores through the table reach the peers of this node only."""

from __future__ import annotations

import os

import numpy as np
from common import at, check, expect, main, ptr, table

import symmem


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    os.environ["SYMMEM_NODE_ID"] = str(r % 2)  # read when the session starts
    x, amap = symmem.allocate_symmetric_map(n, dtype="int32", framework="numpy")
    b = table(amap.peer_bases)
    same = [p % 2 == r % 2 for p in range(n)]
    check(list(amap.direct) == same, f"direct {amap.direct} != {same}")
    check([v != 0 for v in b] == same, f"bases {b}: 0 exactly for the other node")
    check(b[r] == ptr(x), "peer_bases[rank] == data_ptr")
    other = (r + 1) % n
    if not same[other]:
        expect(ValueError, amap.translate, ptr(x), r, other, contains="not load/store reachable")
    expect(ValueError, amap.translate, ptr(x) + 4 * n, r, r, contains="outside")
    x[:] = -1
    symmem.barrier()
    for to in range(n):
        if same[to]:
            at(b[to] + (ptr(x) + 4 * r - b[r]), np.int32, 1)[0] = 100 + r
    symmem.barrier()
    want = np.array([100 + p if same[p] else -1 for p in range(n)], dtype=np.int32)
    check(np.array_equal(x, want), f"{x} != {want}")
    symmem.free(x)
    check(symmem.finalize() == [], "nothing left")
    print(f"rank {r}/{n}: PASS nodes", flush=True)


if __name__ == "__main__":
    main(body)
