"""Every rank stores its row into every peer's copy through the peer-bases table, with a CPU
"kernel" doing bases[to] + (ptr - bases[from]) on raw addresses, then checks what the others
wrote. argv[1]: the framework the tensors come as (numpy, torch or dlpack)."""

from __future__ import annotations

import sys

import numpy as np
from common import at, check, main, ptr, table

import symmem

N = 16


def as_numpy(t, framework: str) -> np.ndarray:
    """A numpy view of T without a copy."""
    if framework == "torch":
        return t.numpy()
    if framework == "dlpack":
        return np.from_dlpack(t)
    return t


def body() -> None:
    framework = sys.argv[1]
    r, n = symmem.rank(), symmem.world_size()
    x, bases = symmem.allocate_symmetric(n, N, dtype="int64", framework=framework)
    xs = as_numpy(x, framework)
    b = table(bases)
    check(len(b) == n, f"table has {len(b)} entries for {n} ranks")
    check(b[r] == ptr(x), f"peer_bases[rank] {b[r]:#x} != data_ptr {ptr(x):#x}")
    check(ptr(xs) == ptr(x) and xs.shape == (n, N), "the numpy view is the tensor, not a copy")
    check(all(v != 0 for v in b), f"every peer is reachable on one host: {b}")
    amap = symmem.symmetric_address_map(x)
    check(amap.allocation_base == b[r] and amap.allocation_bytes == n * N * 8, str(amap))
    check(list(amap.bases) == b and all(amap.direct) and amap.local_rank == r, str(amap))
    check(table(amap.peer_bases) == b, "the map's peer_bases is the same table")

    xs[:] = -1
    symmem.barrier()
    row = ptr(x) + r * N * 8  # this rank's row, in its own copy
    for to in range(n):
        dst = b[to] + (row - b[r])
        check(dst == amap.translate(row, r, to), "translate agrees with the kernel formula")
        at(dst, np.int64, N)[:] = r * 1_000_000 + to * 1_000 + np.arange(N)
    symmem.barrier()
    for frm in range(n):
        want = frm * 1_000_000 + r * 1_000 + np.arange(N)
        check(np.array_equal(xs[frm], want), f"row from rank {frm}: {xs[frm]} != {want}")

    # Iris style: heaps map linearly, so ONE table translates pointers of every allocation.
    y, ybases = symmem.allocate_symmetric(n, dtype=np.float64, framework=framework)
    ys = as_numpy(y, framework)
    ys[:] = 0.0
    check(table(ybases)[r] == ptr(y), "second allocation: peer_bases[rank] == data_ptr")
    symmem.barrier()
    mine = ptr(y) + r * 8
    for to in range(n):
        at(b[to] + (mine - b[r]), np.float64, 1)[0] = r + 0.5
    symmem.barrier()
    check(np.array_equal(ys, np.arange(n) + 0.5), f"through the first table: {ys}")

    symmem.free(y)
    symmem.free(x)
    check(symmem.outstanding() == [], f"left over: {symmem.outstanding()}")
    left = symmem.finalize()
    check(left == [], f"finalize reported {left}")
    print(f"rank {r}/{n}: PASS alltoall ({framework})", flush=True)


if __name__ == "__main__":
    main(body)
