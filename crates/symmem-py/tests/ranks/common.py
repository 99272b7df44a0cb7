"""Helpers for rank scripts: raw pointers, views of any address, and checks that name the rank."""

from __future__ import annotations

import ctypes
import sys
import traceback

import numpy as np

import symmem


def ptr(t) -> int:
    """Address of the first element of a numpy array, torch tensor or SymmetricArray."""
    if isinstance(t, np.ndarray):
        return t.__array_interface__["data"][0]
    return int(t.data_ptr())


def at(addr: int, dtype, count: int) -> np.ndarray:
    """A numpy view of COUNT elements at ADDR in this process (a peer's heap included: the
    host provider maps every peer heap in every process)."""
    dtype = np.dtype(dtype)
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(addr)
    return np.frombuffer(raw, dtype=dtype)


def table(bases) -> list:
    """A peer-bases tensor (numpy, torch or SymmetricArray) as a list of ints."""
    if isinstance(bases, symmem.SymmetricArray):
        return [int(v) for v in at(bases.data_ptr(), np.int64, bases.shape[0])]
    return [int(v) for v in bases.tolist()]


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"rank {symmem.rank()}: {what}")


def expect(exc_type, fn, *args, contains: str = "", **kwargs) -> str:
    """Calls FN and checks it raises EXC_TYPE whose message contains CONTAINS."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        text = str(e)
        check(contains.lower() in text.lower(), f"{exc_type.__name__} {text!r} lacks {contains!r}")
        return text
    raise AssertionError(f"rank {symmem.rank()}: {fn.__name__}{args} did not raise "
                         f"{exc_type.__name__}")


def main(body) -> None:
    """Runs BODY; exit 75 when a peer failed (a witness), 1 on any other failure."""
    try:
        body()
    except symmem.PeerFailedError as e:
        print(f"rank {symmem.rank()}: peer failed: {e}", file=sys.stderr)
        sys.exit(symmem.EXIT_PEER_FAILED)
    except BaseException:
        traceback.print_exc()
        print(f"rank {symmem.rank()}: FAIL", flush=True)
        sys.exit(1)
