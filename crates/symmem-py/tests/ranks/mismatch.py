"""Ranks asking for different sizes get CollectiveMismatchError naming the ranks, not a hang."""

from __future__ import annotations

from common import check, main

import symmem


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    try:
        symmem.allocate_symmetric(8 + r, dtype="int8", framework="numpy")
    except symmem.CollectiveMismatchError as e:
        check("rank" in str(e), f"the message names the ranks: {e}")
        print(f"rank {r}/{n}: PASS mismatch: {e}", flush=True)
        return
    raise AssertionError(f"rank {r}: allocations of different sizes were accepted")


if __name__ == "__main__":
    main(body)
