"""A tensor garbage-collected without free is reported at once (stderr) and by finalize,
which never frees it; a tensor still held is reported as not dropped."""

from __future__ import annotations

import gc
import warnings

from common import check, main

import symmem


def body() -> None:
    r, n = symmem.rank(), symmem.world_size()
    kept, _ = symmem.allocate_symmetric(32, dtype="float32", framework="numpy")
    lost, _ = symmem.allocate_symmetric(16, 2, dtype="int16", framework="numpy")
    lost_id = symmem.symmetric_address_map(lost).allocation_id
    view = lost[3:]
    del lost
    gc.collect()
    check(not any(o.dropped for o in symmem.outstanding()), "a view still holds it")
    del view
    gc.collect()
    dropped = [o for o in symmem.outstanding() if o.dropped]
    check([o.id for o in dropped] == [lost_id], f"dropped: {dropped}")
    check(dropped[0].shape == (16, 2) and dropped[0].dtype == "int16", str(dropped[0]))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        left = symmem.finalize()
    check(sorted((o.id, o.dropped) for o in left) == [(0, False), (lost_id, True)], str(left))
    check(any(issubclass(w.category, symmem.SymmetricLeakWarning) for w in seen), "warned")
    kept[:] = 1.0  # memory is never freed by the collector or by finalize's report
    print(f"rank {r}/{n}: PASS leak report", flush=True)


if __name__ == "__main__":
    main(body)
