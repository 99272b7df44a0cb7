"""The Triton kernels of tests/gpu/triton_alltoall.py, unchanged, run by Triton's interpreter
(CPU) on the host provider: every rank's program stores into every peer's heap through the
peer-bases table, as on a GPU. Checks the kernels' logic where there is no GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

import numpy as np  # noqa: E402
from common import check, main, ptr  # noqa: E402

import symmem  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import triton_alltoall as kernels  # noqa: E402


class HostTensor:
    """Just enough of a torch.Tensor for Triton's interpreter, viewing a numpy array in place
    (the interpreter's copies to and from the host are then no-ops on the same memory)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.dtype = array.dtype.name  # Triton reads the name, as it does torch's dtypes

    def data_ptr(self) -> int:
        return ptr(self.array)

    def untyped_storage(self):
        return self

    def cpu(self):
        return self

    def new_empty(self, *args, **kwargs):
        return HostTensor(self.array)

    def set_(self, storage, *args):
        self.array = storage.array
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self):
        return self.array.shape

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def copy_(self, other):
        return self


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    block = kernels.BLOCK
    x, bases = symmem.allocate_symmetric(n, block, dtype="float32", framework="numpy")
    check(int(bases[r]) == ptr(x), "peer_bases[rank] == data_ptr")
    x[:] = -1.0
    symmem.barrier()
    kernels.scatter_kernel[(n,)](HostTensor(x), HostTensor(bases), r, BLOCK=block)
    symmem.barrier()
    cols = np.arange(block, dtype=np.float32)
    want = np.stack([(f * 1000 + r) * block + cols for f in range(n)])
    check(np.array_equal(x, want), f"scatter: {np.argwhere(x != want)[:3]}")

    y, _ = symmem.allocate_symmetric(n, dtype="int64", framework="numpy")
    y[:] = -1
    symmem.barrier()
    kernels.other_allocation_kernel[(n,)](HostTensor(y), HostTensor(bases), r)
    symmem.barrier()
    check(np.array_equal(y, np.arange(n) * 10 + r), f"through the first table: {y}")

    status, status_bases = symmem.allocate_symmetric(n, dtype="int32", framework="numpy")
    status[:] = 0
    symmem.barrier()
    kernels.verdict_kernel[(1,)](HostTensor(status), HostTensor(status_bases), r, 0, 1)
    symmem.barrier()
    if r == 0:
        check(status.tolist() == [1] * n, f"verdicts gathered in rank 0: {status}")
    for t in (status, y, x):
        symmem.free(t)
    check(symmem.finalize() == [], "nothing left")
    print(f"rank {r}/{n}: PASS triton interpreter", flush=True)


if __name__ == "__main__":
    main(body)
