"""All-to-all through symmetric GPU memory with plain Triton kernels (one rank of it).

Run every rank under a launcher, with a GPU provider (the first argument, else
SYMMEM_PROVIDER):

    pip install symmem-*.whl            # a wheel of `cargo xtask wheel --backend nvshmem`
    torchrun --nproc-per-node 4 triton_alltoall.py nvshmem
    torchrun --nproc-per-node 4 triton_alltoall.py nvshmem --iris

With ``--iris`` the ranks first form a torch.distributed (gloo) group, as Iris's own scripts
do, and every allocation goes through ``symmem.iris.Provider``, Iris's provider surface.

    SYMMEM_PROVIDER=nvshmem SYMMEM_SHIM_LIB=.../libsymmem_shim_nvshmem.so NVSHMEM_DISABLE_NVLS=1 \
        symmem-run --ranks 4 -- python triton_alltoall.py

The kernels are ordinary @triton.jit functions that take the tensor and its peer-bases table as
two plain arguments and reach peer `to` at  bases[to] + (ptr - bases[from]):  nothing in them
knows about symmem. Each rank stores one block into every peer, every peer checks what all the
others wrote, and the verdicts are gathered into rank 0 through symmetric memory as well.
Prints one PASS/FAIL line per rank, and rank 0 a SUMMARY line. Exit 0 only on PASS.

The kernels need nothing but Triton: tests/ranks/triton_interpret.py runs these very kernels on
the host provider under Triton's interpreter (CPU), so CI checks their logic without a GPU.
"""

from __future__ import annotations

import os
import sys
import traceback

import triton
import triton.language as tl

import symmem

BLOCK = 256


@triton.jit
def peer_pointer(ptr, from_rank, to_rank, bases):
    """`ptr` (an address in rank `from_rank`'s heap, as seen here) moved to rank `to_rank`."""
    from_base = tl.load(bases + from_rank)
    to_base = tl.load(bases + to_rank)
    byte_offset = tl.cast(ptr, tl.int64) - from_base
    peer_bytes = tl.cast(to_base, tl.pointer_type(tl.int8)) + byte_offset
    return tl.cast(peer_bytes, ptr.dtype)


@triton.jit
def scatter_kernel(buf, bases, rank, BLOCK: tl.constexpr):
    """Program `to` writes this rank's row of `buf` into peer `to`'s copy."""
    to = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    row = buf + rank * BLOCK + cols
    values = ((rank * 1000 + to) * BLOCK + cols).to(tl.float32)
    tl.store(peer_pointer(row, rank, to, bases), values)


@triton.jit
def other_allocation_kernel(buf, bases, rank):
    """Iris style: one table translates pointers of ANY allocation (heaps map linearly).
    `bases` belongs to another allocation than `buf`."""
    to = tl.program_id(0)
    slot = buf + rank
    tl.store(peer_pointer(slot, rank, to, bases), (rank * 10 + to).to(tl.int64))


@triton.jit
def verdict_kernel(status, bases, rank, root, verdict):
    """Stores this rank's verdict into `root`'s copy of `status`."""
    tl.store(peer_pointer(status + rank, rank, root, bases), verdict)


def first_difference(got, want) -> str:
    bad = (got != want).nonzero()
    if bad.numel() == 0:
        return "none"
    idx = tuple(int(i) for i in bad[0])
    return f"{len(bad)} wrong, first at {idx}: got {got[idx].item()}, want {want[idx].item()}"


def run() -> bool:
    import torch

    args = [a for a in sys.argv[1:] if a != "--iris"]
    provider = args[0] if args else None
    if "--iris" in sys.argv:
        import torch.distributed as dist
        from symmem.iris import Provider

        dist.init_process_group("gloo")
        iris = Provider(provider)

        def allocate(*size, dtype, framework):
            return iris.allocate_symmetric(*size, dtype=dtype)

        release = iris.free
    else:
        symmem.init(provider)
        allocate, release = symmem.allocate_symmetric, symmem.free
    r, n = symmem.rank(), symmem.world_size()
    dev_type, dev_id = symmem.device()
    # A GPU provider gives device tensors. The host provider (CPU tensors) serves only to check
    # this script where there is no GPU, with TRITON_INTERPRET=1.
    on_gpu = dev_type != symmem.KDL_CPU
    problems = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    def settle() -> None:
        """Host writes and queued kernels are done before peers are told so."""
        if on_gpu:
            torch.cuda.synchronize()
        symmem.barrier()

    x, bases = allocate(n, BLOCK, dtype=torch.float32, framework="torch")
    check(x.is_cuda == on_gpu and bases.device == x.device,
          f"tensors on the provider's device: x on {x.device}, bases on {bases.device}")
    check(not on_gpu or x.device.index == dev_id, f"device {dev_id} vs {x.device}")
    check(bases.dtype == torch.int64 and tuple(bases.shape) == (n,), f"bases {bases.dtype}")
    table = [int(v) for v in bases.tolist()]
    check(table[r] == x.data_ptr(), f"peer_bases[rank] {table[r]:#x} != {x.data_ptr():#x}")
    check(all(v != 0 for v in table), f"every PE reachable: {[hex(v) for v in table]}")
    deltas = [hex(v - table[r]) for v in table]
    print(f"rank {r}/{n}: {symmem.provider()} device {dev_type}:{dev_id} "
          f"data_ptr={x.data_ptr():#x} peer deltas={deltas}", flush=True)

    x.fill_(-1.0)
    settle()
    scatter_kernel[(n,)](x, bases, r, BLOCK=BLOCK)
    settle()
    cols = torch.arange(BLOCK, device=x.device, dtype=torch.float32)
    want = torch.stack([(f * 1000 + r) * BLOCK + cols for f in range(n)])
    check(torch.equal(x, want), f"scatter: {first_difference(x, want)}")

    y, _ = allocate(n, dtype=torch.int64, framework="torch")
    y.fill_(-1)
    settle()
    other_allocation_kernel[(n,)](y, bases, r)
    settle()
    want_y = torch.arange(n, device=y.device, dtype=torch.int64) * 10 + r
    check(torch.equal(y, want_y),
          f"through another allocation's table: {first_difference(y, want_y)}")

    status, status_bases = allocate(n, dtype=torch.int32, framework="torch")
    status.zero_()
    settle()
    verdict = 1 if not problems else 2
    verdict_kernel[(1,)](status, status_bases, r, 0, verdict)
    settle()
    verdicts = status.tolist()

    word = "PASS" if not problems else "FAIL"
    detail = "; ".join(problems) if problems else (
        f"{n * BLOCK} floats from {n} PEs, second allocation via first table")
    print(f"rank {r}/{n}: {word} triton alltoall: {detail}", flush=True)
    ok = not problems
    if r == 0:
        passed = sum(v == 1 for v in verdicts)
        missing = [p for p, v in enumerate(verdicts) if v == 0]
        failed = [p for p, v in enumerate(verdicts) if v == 2]
        word = "PASS" if passed == n else "FAIL"
        print(f"SUMMARY {word}: triton alltoall on {n} PEs: {passed}/{n} ranks PASS"
              + (f", FAIL on {failed}" if failed else "")
              + (f", no verdict from {missing}" if missing else ""), flush=True)
        ok = ok and passed == n

    for t in (status, y, x):
        release(t)
    left = symmem.finalize()
    if left:
        print(f"rank {r}/{n}: FAIL left allocations behind: {left}", flush=True)
        ok = False
    return ok


def main() -> int:
    try:
        return 0 if run() else 1
    except symmem.PeerFailedError as e:
        print(f"rank {os.environ.get('RANK', '?')}: FAIL (a peer failed): {e}", flush=True)
        return symmem.EXIT_PEER_FAILED
    except Exception:
        traceback.print_exc()
        print(f"rank {os.environ.get('RANK', '?')}: FAIL (exception above)", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
