"""Where one allocate_symmetric + free (torch) spends its time: the steps the package takes,
run one by one with the host clock between them (alloc_free.py --profile calls this).

The steps mirror python/symmem/__init__.py; a step the package does not take is skipped. The
sum of the steps is a little more than one real call (one clock read per step)."""

from __future__ import annotations

import statistics
import sys
import time

import symmem
from symmem import _native

ELEMENTS = 1024


def _steps(on_gpu):
    """One allocate + free as a list of (name, thunk); thunks share state through `s`."""
    s = {}
    fw = "torch" if on_gpu else "numpy"
    if fw not in sys.modules:
        __import__(fw)
    # Since issue 33 the package keeps the session's info, makes no AddressMap for
    # allocate_symmetric, and keeps what a map needs in an entry per allocation.
    lean = hasattr(symmem, "_session")
    # Since issue 33's second pass: the table completes after allocate's answer (settle), and
    # free waits for the device on the session thread.
    settled = hasattr(_native, "settle")

    def alloc_checks():
        s["shape"] = symmem._shape((ELEMENTS,))
        s["name"] = symmem._dtype_name("float32")

    def ensure():
        s["session"] = symmem._ensure()

    def framework():
        symmem._framework(fw, s["session"]["device"][0])

    def native_allocate():
        got = _native.allocate(s["shape"], s["name"])
        # Since issue 33: (tensor, allocation); before, the allocation held the tensor.
        s["data"], s["a"] = got if isinstance(got, tuple) else (got.data, got)

    def wrap_tensor():
        s["x"] = symmem._wrap(s["data"], fw)

    def identity_key():
        s["key"] = symmem._identity_key(s["x"])

    def wrap_table():
        s["bases"] = symmem._wrap(s["a"].peer_bases, fw)

    def entry():
        if settled:
            s["entry"] = symmem._Entry(s["key"], s["x"], fw, s["a"])
        else:
            symmem._Entry(s["key"], fw, s["a"])

    def same_tensor():
        s["entry"].tensor() is s["x"]

    def settle():
        _native.settle()

    def address_map_object():
        a = s["a"]
        symmem.AddressMap(
            local_rank=a.rank, world_size=a.world_size, allocation_base=a.base,
            allocation_bytes=a.nbytes, bases=tuple(a.bases), direct=tuple(a.direct),
            peer_bases=s["bases"], allocation_id=a.id,
        )

    def describe():
        symmem._describe(s["x"])

    def native_find():
        if not lean:
            symmem._ensure()
        s["hit"] = _native.find(s["a"].base)

    def device_sync():
        symmem._device_sync()

    def native_free():
        _native.free(s["a"].id)

    return [
        ("allocate: size and dtype checks", alloc_checks),
        ("allocate: session lookup (_ensure)", ensure),
        ("allocate: framework choice", framework),
        ("allocate: native allocate (collective, table, exports)", native_allocate),
        (f"allocate: wrap the tensor ({fw})", wrap_tensor),
        ("allocate: identity key", identity_key),
        (f"allocate: wrap peer_bases ({fw})", wrap_table),
        ("allocate: bookkeeping entry" if lean else "allocate: AddressMap object",
         entry if lean else address_map_object),
    ] + ([("allocate: settle (table complete)", settle)] if settled else []) + [
        ("free: describe the tensor", describe),
        ("free: session lookup + native find", native_find),
    ] + ([
        ("free: the tensor allocate returned? (weak reference)", same_tensor),
        ("free: native free with the device wait (collective)", native_free),
    ] if settled else [
        ("free: identity key", identity_key),
        ("free: device synchronisation", device_sync),
        ("free: native free (collective)", native_free),
    ])


def profile(on_gpu, pairs):
    steps = _steps(on_gpu)
    times = {name: [] for name, _ in steps}
    clock = time.perf_counter_ns
    for i in range(pairs + 3):
        for name, thunk in steps:
            t0 = clock()
            thunk()
            if i >= 3:
                times[name].append(clock() - t0)
    # Components on their own: one round trip to the session thread, and an idle device sync.
    extra = {"native find alone (one session-thread round trip)": lambda: _native.find(0),
             "native info alone": _native.info}
    if on_gpu:
        import torch

        extra["torch.cuda.synchronize() alone"] = torch.cuda.synchronize
        if hasattr(symmem, "_cu_ctx_synchronize"):
            extra["cuCtxSynchronize() alone (ctypes)"] = symmem._cu_ctx_synchronize
    for name, thunk in extra.items():
        samples = []
        for _ in range(pairs):
            t0 = clock()
            thunk()
            samples.append(clock() - t0)
        times[name] = samples
    out = [
        {"step": name, "median_us": round(statistics.median(v) / 1e3, 2),
         "min_us": round(min(v) / 1e3, 2)}
        for name, v in times.items()
    ]
    if hasattr(_native, "_trace"):
        out += traced(on_gpu, pairs)
    return out


def traced(on_gpu, pairs):
    """The real calls (allocate_symmetric + free) with the extension's step marks on: the time
    between each two marks in the order they came, on either side of the hand-over to the
    session thread. The marks are CLOCK_MONOTONIC, the clock of perf_counter_ns on Linux."""
    if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        return []
    fw = "torch" if on_gpu else "numpy"
    clock = time.perf_counter_ns
    gaps = {}
    _native._trace(True)
    try:
        for i in range(pairs + 3):
            _native._trace_take()
            marks = [("python: allocate_symmetric called", clock())]
            x, _ = symmem.allocate_symmetric(ELEMENTS, dtype="float32", framework=fw)
            marks.append(("python: allocate_symmetric returned", clock()))
            symmem.free(x)
            marks.append(("python: free returned", clock()))
            marks += _native._trace_take()
            marks.sort(key=lambda m: m[1])
            if i < 3:
                continue
            phase = "allocate"
            for (a, ta), (b, tb) in zip(marks, marks[1:]):
                gaps.setdefault(f"{phase}: {a} -> {b}", []).append(tb - ta)
                if b == "python: allocate_symmetric returned":
                    phase = "free"
    finally:
        _native._trace(False)
    return [
        {"step": f"trace: {name}", "median_us": round(statistics.median(v) / 1e3, 2),
         "min_us": round(min(v) / 1e3, 2), "count": len(v)}
        for name, v in gaps.items()
    ]
