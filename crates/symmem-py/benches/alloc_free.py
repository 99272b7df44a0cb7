"""The Python face's allocation path, timed (one rank of it; rank 0 prints the figures).

Run every rank under a launcher, with any provider:

    SYMMEM_PROVIDER=nvshmem SYMMEM_SHIM_LIB=.../libsymmem_shim_nvshmem.so NVSHMEM_DISABLE_NVLS=1 \
        symmem-run --ranks 2 -- python alloc_free.py [--pairs N] [--profile]

Cases, each a collective allocate + free of 4 KiB (1024 float32) on every rank, host clock
around each call: ``torch`` (allocate_symmetric + free, torch tensors), ``dlpack`` (the raw
SymmetricArray), ``torch_nosync`` (free with ``synchronize=False``, the opt-out for a caller that
has waited for the device already), ``cupy`` (a second DLPack consumer on GPUs: the raw array
wrapped by cupy.from_dlpack), ``numpy`` (host provider only), ``native`` (symmem._native.allocate +
free: the extension with no Python around it) and, where the extension has it, ``context``
(the Rust ``Context``'s allocate + free on the session thread, timed there: the Rust floor in
the same process). The cases alternate pair by pair, the order rotating each round, so drift of
the machine (several PEs time-slicing one GPU) reaches all alike. Then
``symmetric_address_map`` of an existing tensor (not collective). Each figure: min / median /
max in microseconds.

``--profile`` adds a breakdown of one allocate_symmetric + free (torch) into its steps, timed
one by one as the package runs them, on rank 0 (the other ranks run the same collectives),
then the real calls with the extension's step marks on (``trace:`` lines: the time between two
marks, on either side of the hand-over to the session thread).
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time

import symmem
from symmem import _native

ELEMENTS = 1024  # float32: 4 KiB, as the Rust bench's alloc_free_4KiB


def summary(samples_ns):
    us = sorted(s / 1e3 for s in samples_ns)
    return {
        "min_us": round(us[0], 2),
        "median_us": round(statistics.median(us), 2),
        "max_us": round(us[-1], 2),
        "n": len(us),
    }


def emit(record):
    if symmem.rank() == 0:
        print(json.dumps(record), flush=True)


def case_functions(on_gpu):
    """name -> function doing one allocate + free, returning (allocate ns, free ns)."""
    clock = time.perf_counter_ns

    def framework(fw, wrap=None, **free_args):
        def one():
            t0 = clock()
            x, bases = symmem.allocate_symmetric(ELEMENTS, dtype="float32", framework=fw)
            if wrap is not None:
                # The consumer's arrays are views; symmem frees through the raw export.
                wrap(x), wrap(bases)
            t1 = clock()
            symmem.free(x, **free_args)
            t2 = clock()
            return t1 - t0, t2 - t1

        return one

    settle = getattr(_native, "settle", lambda: None)

    def native():
        t0 = clock()
        got = _native.allocate([ELEMENTS], "float32")
        settle()  # since issue 33's second pass the table completes after the answer
        t1 = clock()
        _native.free((got[1] if isinstance(got, tuple) else got).id)
        t2 = clock()
        return t1 - t0, t2 - t1

    cases = {"native": native, "dlpack": framework("dlpack")}
    if on_gpu:
        cases["torch"] = framework("torch")
        if "synchronize" in inspect.signature(symmem.free).parameters:
            # The documented opt-out: the caller waited for the device already.
            cases["torch_nosync"] = framework("torch", synchronize=False)
        try:
            import cupy

            cases["cupy"] = framework("dlpack", cupy.from_dlpack)
        except ImportError:
            pass
    else:
        cases["numpy"] = framework("numpy")
        try:
            import torch  # noqa: F401

            cases["torch"] = framework("torch")
        except ImportError:
            pass
    if "torch" in cases:
        try:
            from symmem.iris import Provider
        except ImportError:  # a build before symmem.iris
            Provider = None
        if Provider is not None:
            # Iris's surface over the same session: what an Iris kernel's caller pays.
            import torch

            iris = Provider()

            def iris_pair():
                t0 = clock()
                x, _ = iris.allocate_symmetric(ELEMENTS, dtype=torch.float32)
                t1 = clock()
                iris.free(x)
                t2 = clock()
                return t1 - t0, t2 - t1

            cases["iris"] = iris_pair
    bench_context = getattr(_native, "_bench_context_pair", None)
    if bench_context is not None:
        cases["context"] = lambda: tuple(bench_context(ELEMENTS * 4))
    return cases


def run_cases(cases, pairs):
    names = list(cases)
    alloc = {n: [] for n in names}
    free = {n: [] for n in names}
    for _ in range(3):  # warm-up: first calls map the heap and load code
        for n in names:
            cases[n]()
    for i in range(pairs):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            a, f = cases[n]()
            alloc[n].append(a)
            free[n].append(f)
    return alloc, free


def address_map_case(on_gpu, reps):
    fw = "torch" if on_gpu else "numpy"
    out = {}
    for label, framework in ((fw, fw), ("dlpack", "dlpack")):
        x, _ = symmem.allocate_symmetric(ELEMENTS, dtype="float32", framework=framework)
        for _ in range(10):
            symmem.symmetric_address_map(x)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            amap = symmem.symmetric_address_map(x)
            times.append(time.perf_counter_ns() - t0)
        base = x.data_ptr() if hasattr(x, "data_ptr") else x.__array_interface__["data"][0]
        assert amap.bases[symmem.rank()] == base
        symmem.free(x)
        out[label] = summary(times)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    info = symmem.init()
    on_gpu = info["device"][0] != symmem.KDL_CPU
    world = info["world_size"]
    head = {"provider": info["provider"], "ranks": world, "elements": ELEMENTS, "bytes": ELEMENTS * 4}
    cases = case_functions(on_gpu)
    alloc, free = run_cases(cases, args.pairs)
    for n in cases:
        pairs = [a + f for a, f in zip(alloc[n], free[n])]
        emit({**head, "figure": "py_alloc_free", "case": n, "pair": summary(pairs),
              "allocate": summary(alloc[n]), "free": summary(free[n])})
    for label, fig in address_map_case(on_gpu, 1000).items():
        emit({**head, "figure": "py_address_map", "case": label, **fig})
    if args.profile:
        import profile_steps

        for record in profile_steps.profile(on_gpu, args.pairs):
            emit({**head, "figure": "py_profile", **record})
    symmem.barrier()
    symmem.finalize()


if __name__ == "__main__":
    sys.exit(main())
