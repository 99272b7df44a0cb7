"""Bad input raises a clear Python exception before any collective, and leaves the session
whole: after each one, a collective allocation, barrier and free still work on every rank."""

from __future__ import annotations

import numpy as np
from common import check, expect, main, ptr

import symmem


def still_whole() -> None:
    t, bases = symmem.allocate_symmetric(8, dtype="float32", framework="numpy")
    check(int(bases[symmem.rank()]) == ptr(t), "a fresh allocation works")
    symmem.barrier()
    symmem.free(t)


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    live, _ = symmem.allocate_symmetric(4, 4, dtype="int64", framework="numpy")

    # Allocation arguments.
    expect(TypeError, symmem.allocate_symmetric, 4, dtype="complex32", contains="not supported")
    expect(TypeError, symmem.allocate_symmetric, 4, dtype=object, contains="not supported")
    expect(TypeError, symmem.allocate_symmetric, 4, dtype=3.5, contains="dtype must be")
    expect(ValueError, symmem.allocate_symmetric, 0, contains="no elements")
    expect(ValueError, symmem.allocate_symmetric, 3, 0, dtype="int8", contains="no elements")
    expect(ValueError, symmem.allocate_symmetric, -2, contains="negative")
    expect(ValueError, symmem.allocate_symmetric, 1 << 62, 1 << 62, contains="overflow")
    expect(TypeError, symmem.allocate_symmetric, contains="size")
    expect(TypeError, symmem.allocate_symmetric, 2.5, contains="integers")
    expect(ValueError, symmem.allocate_symmetric, 4, framework="jax", contains="framework")
    expect(TypeError, symmem.allocate_symmetric, 4, dtype="bfloat16", framework="numpy",
           contains="bfloat16")
    still_whole()

    # Issue 24 (N8, N9): refused before the collective, not guessed or failed after it.
    expect(TypeError, symmem.allocate_symmetric, 4, dtype=np.dtype(">f4"), contains="big-endian")
    expect(TypeError, symmem.allocate_symmetric, 4, dtype=np.dtype(">i8"), contains="byte order")
    for name in ("float", "int", "cfloat"):
        expect(TypeError, symmem.allocate_symmetric, 4, dtype=name, contains="ambiguous")
    expect(ValueError, symmem.allocate_symmetric, *([1] * 65), contains="at most 64")
    check([o.id for o in symmem.outstanding()] == [symmem.symmetric_address_map(live).allocation_id],
          "nothing allocated by the refusals")
    still_whole()

    # Issue 24 (N10): a SymmetricArray of a freed allocation no longer exports its memory.
    stale, stale_bases = symmem.allocate_symmetric(8, dtype="int32", framework="dlpack")
    symmem.free(stale)
    expect(BufferError, stale.__dlpack__, contains="freed")
    expect(BufferError, stale_bases.__dlpack__, contains="freed")
    expect(BufferError, np.from_dlpack, stale, contains="freed")
    still_whole()

    # Freeing what is not a symmetric tensor.
    expect(ValueError, symmem.free, np.zeros(16), contains="not in a live symmetric allocation")
    expect(TypeError, symmem.free, [1, 2, 3], contains="expected a tensor")
    expect(TypeError, symmem.free, None, contains="expected a tensor")
    expect(ValueError, symmem.free, live[1:], contains="not a slice")
    expect(ValueError, symmem.free, live[:, :2], contains="not a slice")
    expect(ValueError, symmem.symmetric_address_map, np.ones(3), contains="not in a live")
    still_whole()

    # Freeing twice, also after the address was handed out again.
    a, _ = symmem.allocate_symmetric(64, dtype="uint8", framework="numpy")
    old = ptr(a)
    symmem.free(a)
    expect(ValueError, symmem.free, a, contains="freed already")
    b, _ = symmem.allocate_symmetric(64, dtype="uint8", framework="numpy")
    check(ptr(b) == old, "the allocator hands the same address out again (deterministic)")
    expect(ValueError, symmem.free, a, contains="freed already")
    check(any(o.id != 0 and o.address == old for o in symmem.outstanding()),
          "the new allocation is untouched by the stale free")
    b[:] = 7
    symmem.free(b.reshape(8, 8))  # a reshaped view of the whole tensor frees it
    expect(ValueError, symmem.free, b, contains="freed already")
    still_whole()

    # A view of the whole tensor is fine; the map of any view names the allocation.
    check(symmem.symmetric_address_map(live[2:]).allocation_base == ptr(live), "map of a view")
    symmem.free(live.T)
    left = symmem.outstanding()
    check(left == [], f"nothing lost, nothing left: {left}")
    check(symmem.finalize() == [], "finalize: nothing left")
    expect(symmem.SymmemError, symmem.allocate_symmetric, 4, contains="finalize")
    # Reads answered on this thread (issue 33) say so too.
    expect(symmem.SymmemError, symmem._native.address_map, 0, contains="finalize")
    print(f"rank {r}/{n}: PASS bad input", flush=True)


if __name__ == "__main__":
    main(body)
