"""Symmetric memory from Python, Iris style.

Every rank of a job allocates together; each gets its own tensor and the peer-bases table
that lets one kernel reach every peer's copy::

    import symmem, torch
    x, bases = symmem.allocate_symmetric(1024, dtype=torch.float32)  # collective
    assert bases[symmem.rank()] == x.data_ptr()
    # a kernel stores to peer `to` at  bases[to] + (ptr - bases[rank])
    symmem.barrier()                                                  # collective
    symmem.free(x)                                                    # collective
    symmem.finalize()                                                 # collective

The provider is the host one (CPU tensors, any Linux machine) unless ``SYMMEM_PROVIDER`` or
``init(provider=...)`` names ``nvshmem`` or ``rocshmem`` (device tensors; the shim library
comes from ``SYMMEM_SHIM_LIB``). The ranks meet through ``torch.distributed``'s
group where it is initialised (torchrun on any number of nodes, ``torch.multiprocessing.spawn``),
else through the launcher's environment (``symmem-run``, Open MPI, Slurm, PMI).

Tensors are DLPack exports: torch (``framework="torch"``), numpy (``"numpy"``, CPU only) or any
DLPack consumer (``"dlpack"`` returns the raw :class:`SymmetricArray`) wraps them without a
copy. torch is optional. Memory is never freed by garbage collection: ``free`` is collective,
and an allocation whose last tensor is collected without it is reported (on stderr at once,
and by :func:`finalize`).
"""

from __future__ import annotations

import atexit
import collections
import importlib
import importlib.util
import operator
import os
import sys
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import _native
from ._native import (
    CollectiveMismatchError,
    PeerFailedError,
    SymmemError,
    SymmetricArray,
    UnavailableError,
)

__all__ = [
    "AddressMap",
    "CollectiveMismatchError",
    "EXIT_PEER_FAILED",
    "Outstanding",
    "PeerFailedError",
    "SymmemError",
    "SymmetricArray",
    "SymmetricLeakWarning",
    "UnavailableError",
    "allocate_symmetric",
    "allocate_symmetric_map",
    "barrier",
    "device",
    "dtypes",
    "finalize",
    "free",
    "info",
    "init",
    "local_rank",
    "outstanding",
    "provider",
    "rank",
    "symmetric_address_map",
    "world_size",
]

#: Exit status for a rank that stops because another rank failed (launchers tell it apart).
EXIT_PEER_FAILED: int = _native.EXIT_PEER_FAILED

KDL_CPU: int = _native.KDL_CPU
KDL_CUDA: int = _native.KDL_CUDA
KDL_ROCM: int = _native.KDL_ROCM

FRAMEWORKS = ("torch", "numpy", "dlpack")


class SymmetricLeakWarning(UserWarning):
    """finalize() found symmetric allocations that were never freed."""


@dataclass(frozen=True)
class AddressMap:
    """Everything a kernel needs about one allocation, as seen from this rank."""

    local_rank: int
    world_size: int
    #: The allocation's address in this process (``bases[local_rank]``).
    allocation_base: int
    #: The allocation's size in bytes (the same on every rank).
    allocation_bytes: int
    #: Per rank, where this process reaches that rank's copy (0 when not reachable).
    bases: Tuple[int, ...]
    #: Per rank, whether its copy is load/store reachable from here.
    direct: Tuple[bool, ...]
    #: The same table as an int64 tensor on the allocation's device, for kernels.
    peer_bases: Any
    #: Sequence number of the allocation (the same on every rank).
    allocation_id: int

    def translate(self, addr: int, from_rank: int, to_rank: int) -> int:
        """``bases[to] + (addr - bases[from])``, refusing an address outside rank
        ``from_rank``'s copy of this allocation and peers that are not reachable."""
        return _translate(self.bases, self.direct, self.allocation_bytes, self.local_rank,
                          addr, from_rank, to_rank, f"allocation #{self.allocation_id}")


def _translate(bases, direct, nbytes: int, local_rank: int, addr: int, from_rank: int,
               to_rank: int, what: str) -> int:
    """``bases[to] + (addr - bases[from])`` of one allocation (``what``, for messages) of
    ``nbytes`` per rank, refusing ranks out of range, peers that are not load/store reachable
    from ``local_rank`` and an address outside rank ``from_rank``'s copy."""
    n = len(bases)
    for r in (from_rank, to_rank):
        if not 0 <= r < n:
            raise ValueError(f"rank {r} is out of range for a world of {n}")
        if not direct[r]:
            unreachable = [p for p in range(n) if not direct[p]]
            raise ValueError(
                f"rank {r} is not load/store reachable from rank {local_rank} (its base is 0; "
                f"not reachable: {unreachable})"
            )
    base = bases[from_rank]
    if not base <= addr < base + nbytes:
        raise ValueError(
            f"address {addr:#x} is outside rank {from_rank}'s copy of {what} "
            f"[{base:#x}, +{nbytes} B)"
        )
    return bases[to_rank] + (addr - base)


@dataclass(frozen=True)
class Outstanding:
    """A symmetric allocation not freed (yet)."""

    id: int
    address: int
    nbytes: int
    dtype: str
    shape: Tuple[int, ...]
    #: True when no Python object views it any more: it can no longer be freed.
    dropped: bool


# ---- bookkeeping of the tensors handed out ------------------------------------------------


class _Entry:
    """What the package keeps per live allocation: the tensor's identity key and framework,
    the extension's allocation (address map and raw peer-bases export, never the tensor:
    holding that would keep a dropped allocation from being noticed), and the table and maps
    made from it, once per framework (the same memory either way)."""

    __slots__ = ("key", "tensor", "framework", "alloc", "tables", "maps")

    def __init__(self, key: Optional[tuple], tensor: Any, framework: str, alloc: Any) -> None:
        self.key = key
        # A weak reference to the tensor allocate returned (None where the type takes none):
        # freeing that very tensor needs no identity key of its own.
        self.tensor = _weak(tensor)
        self.framework = framework
        self.alloc = alloc
        self.tables: Dict[str, Any] = {}
        self.maps: Dict[str, "AddressMap"] = {}

    def peer_bases(self, framework: str) -> Any:
        wrapped = self.tables.get(framework)
        if wrapped is None:
            wrapped = self.tables[framework] = _wrap(self.alloc.peer_bases, framework)
        return wrapped

    def address_map(self, framework: str) -> "AddressMap":
        amap = self.maps.get(framework)
        if amap is None:
            a = self.alloc
            amap = self.maps[framework] = AddressMap(
                local_rank=a.rank,
                world_size=a.world_size,
                allocation_base=a.base,
                allocation_bytes=a.nbytes,
                bases=tuple(a.bases),
                direct=tuple(a.direct),
                peer_bases=self.peer_bases(framework),
                allocation_id=a.id,
            )
        return amap


_entries: Dict[int, _Entry] = {}
# Identity keys of tensors whose allocation was freed: a second free of one is named as such
# even after the address was reused. Bounded; a newer allocation's key always wins.
_freed: "collections.OrderedDict[tuple, int]" = collections.OrderedDict()
_FREED_KEEP = 4096


def _weak(obj: Any) -> Optional[weakref.ref]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _identity_key(obj: Any) -> Optional[tuple]:
    """What tells the tensors of one allocation apart from any other object viewing the
    same address: the torch storage, the numpy base (the DLPack capsule), or the export."""
    if isinstance(obj, SymmetricArray):
        return ("symmem", obj.allocation_id)
    module = type(obj).__module__ or ""
    if module.startswith("torch"):
        try:
            return ("torch", obj.untyped_storage()._cdata)
        except (AttributeError, RuntimeError):
            return None
    if module.startswith("numpy"):
        import numpy as np

        root = obj
        while isinstance(root.base, np.ndarray):
            root = root.base
        return ("numpy", id(root.base if root.base is not None else root))
    return None


def _describe(obj: Any) -> Tuple[int, int]:
    """(address of the first element, bytes covered) of a tensor-like object."""
    if isinstance(obj, SymmetricArray):
        return obj.data_ptr(), obj.nbytes
    module = type(obj).__module__ or ""
    if module.startswith("torch"):
        return obj.data_ptr(), obj.nbytes
    if module.startswith("numpy") and hasattr(obj, "__array_interface__"):
        return obj.__array_interface__["data"][0], obj.nbytes
    if callable(getattr(obj, "data_ptr", None)) and hasattr(obj, "nbytes"):
        return int(obj.data_ptr()), int(obj.nbytes)
    raise TypeError(
        f"expected a tensor from symmem.allocate_symmetric (torch.Tensor, numpy.ndarray or "
        f"symmem.SymmetricArray), got {type(obj).__name__}"
    )


# ---- session ------------------------------------------------------------------------------


def init(provider: Optional[str] = None, *, group: Any = None) -> Dict[str, Any]:
    """Collective: starts symmem with ``provider`` (``host``, ``nvshmem``, ``rocshmem``; else
    ``SYMMEM_PROVIDER``; else ``host``). Calling it again with the same provider does nothing.
    Returns :func:`info`. Every other function calls it on first use.

    How the ranks meet: where ``torch.distributed`` is initialised (or ``group`` is given, which
    must be the job's whole group, ``torch.distributed.group.WORLD``), through that group: one
    all-gather carries what each rank needs to reach the others, then symmem's own links run
    every collective. So ``torchrun`` on one or several nodes and
    ``torch.multiprocessing.spawn`` + ``init_process_group`` need no symmem launcher. Otherwise
    through the launcher's variables (``symmem-run``, ``srun --mpi=pmix``, ``mpirun``, a
    one-host ``torchrun``). Call it on every rank alike: after ``init_process_group`` on all of
    them, or before it on none.

    With ``nvshmem`` or ``rocshmem`` it sets the SHMEM library's environment variables (heap
    size, interface, no multicast) just before the library reads them: call it before starting
    threads that read or write the environment (``os.environ``, ``getenv``), as for
    ``os.putenv`` in a threaded program. A wheel built with its shim (``cargo xtask wheel``)
    runs that backend when neither ``provider`` nor ``SYMMEM_PROVIDER`` names one, and loads
    that shim unless ``SYMMEM_SHIM_LIB`` names another."""
    global _session
    provider = _provider_name(provider)
    if _native.info() is not None:
        # Started before: _native.init only checks the provider (no second meeting).
        _native.init(provider)
        current = info()
        if not current["finalized"]:
            _session = current
            _refuse_a_lone_rank(current)
        return current
    name = (provider or os.environ.get("SYMMEM_PROVIDER") or "host").strip().lower()
    shim_lib, shim_error = None, None
    if name != "host" and not os.environ.get("SYMMEM_SHIM_LIB"):
        from . import _shim

        try:
            shim_lib = _shim.locate(name)
        except Exception as e:  # raised after the meeting, which it refuses on every rank
            shim_error = e
    meeting = _meet(group, provider, shim_error)
    if shim_error is not None:
        raise shim_error
    if meeting is None:
        started = _native.init(provider, shim_lib=shim_lib)
    else:
        started = _native.init(provider, shim_lib=shim_lib, arrival=meeting[0], cards=meeting[1])
    if started:
        dev_type, dev_id = _native.info()["device"]
        if dev_type != KDL_CPU and importlib.util.find_spec("torch") is not None:
            import torch

            # Kernels launched through torch and Triton run on torch's current device.
            torch.cuda.set_device(dev_id)
    current = info()
    if not current.get("finalized", True):
        _session = current
    return current


def _provider_name(provider: Optional[str]) -> Optional[str]:
    """The provider init starts: ``provider``; else None where ``SYMMEM_PROVIDER`` names one
    (the extension reads it); else the backend of the shim a GPU wheel carries (cargo xtask
    wheel); else None (host)."""
    if (provider or "").strip() or os.environ.get("SYMMEM_PROVIDER", "").strip():
        return provider
    from . import _shim

    build = _shim.packaged()
    return build["backend"] if build is not None else None


def _initialised_dist() -> Any:
    """torch.distributed where the program imported and initialised it, else None (symmem
    never imports torch itself)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def _torch_world(group: Any) -> Any:
    """torch.distributed and the group to meet through: ``group``, else the default group
    where torch.distributed is initialised, else None (the launcher's variables). A group that
    is not the whole job is refused: symmem's ranks are the job's."""
    dist = _initialised_dist()
    if group is None:
        if dist is None:
            return None
        group = dist.group.WORLD
    elif dist is None:
        raise ValueError(
            "symmem.init(group=...) needs torch.distributed initialised: call "
            "torch.distributed.init_process_group(...) first, on every rank"
        )
    size, world = dist.get_world_size(group), dist.get_world_size()
    if size != world or dist.get_rank(group) != dist.get_rank():
        raise ValueError(
            f"symmem meets through the job's whole group, and this group holds {size} of the "
            f"world's {world} ranks (this process is rank {dist.get_rank(group)} in it, "
            f"{dist.get_rank()} in the world): pass group=torch.distributed.group.WORLD, "
            f"or nothing"
        )
    return dist, group


def _refuse_a_lone_rank(session: Dict[str, Any]) -> None:
    """A session that started as a one-rank world with no launcher while torch.distributed
    now says the job has more ranks (symmem.init ran before init_process_group): its
    allocations would reach no peer. Raises, saying how to start instead."""
    if session["world_size"] != 1 or session.get("launcher") != "singleton":
        return
    dist = _initialised_dist()
    if dist is None:
        return
    world = dist.get_world_size()
    if world > 1:
        raise SymmemError(
            f"symmem started as a one-rank world (no launcher variables, torch.distributed not "
            f"initialised yet), and torch.distributed now says this job has {world} ranks: its "
            f"symmetric memory would reach no peer. Call torch.distributed.init_process_group "
            f"before symmem's first call (init or allocate) on every rank"
        )


#: A gloo group over the whole job, made once where the default group's backend is not gloo
#: (NCCL's object collectives need each rank's GPU chosen before symmem chooses it).
_gloo_world: Any = None


def _meet(
    group: Any, provider: Optional[str], refusal: Optional[BaseException]
) -> Optional[Tuple[Any, List[bytes]]]:
    """Where the ranks meet through a torch.distributed group (see :func:`init`): this rank's
    arrival and every rank's card, gathered over the group in rank order. ``refusal`` (this
    rank cannot start ``provider``) rides in the card: every rank's init then fails with it."""
    global _gloo_world
    found = _torch_world(group)
    if found is None:
        return None
    dist, group = found
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    reason = None if refusal is None else f"{type(refusal).__name__}: {refusal}"
    arrival = _native.arrive(rank, size, provider, reason)
    try:
        gather = group
        if dist.get_backend(group) != "gloo":
            if _gloo_world is None:
                _gloo_world = dist.new_group(backend="gloo")
            gather = _gloo_world
        cards: List[Any] = [None] * size
        dist.all_gather_object(cards, arrival.card(), group=gather)
    except BaseException:
        arrival.close()  # rank 0's listener, not kept open by the traceback
        raise
    return arrival, [bytes(card) for card in cards]


#: The running session's info once init succeeded, until finalize: the hot path reads it
#: instead of asking the extension each time (which still refuses other threads, forks and
#: a poisoned or finalized session on every call that reaches it).
_session: Optional[Dict[str, Any]] = None


def _ensure() -> Dict[str, Any]:
    if _session is not None:
        return _session
    current = _native.info()
    return current if current is not None else init()


def info() -> Dict[str, Any]:
    """The session (``provider``, ``rank``, ``world_size``, ``device`` as a DLPack
    ``(type, id)``, ``finalized``); before :func:`init`, the launcher's view only."""
    current = _native.info()
    if current is not None:
        return dict(current)
    r, n, _, _, launcher = _native.identity()
    return {"provider": None, "rank": r, "world_size": n, "launcher": launcher}


def rank() -> int:
    """This process's rank: the running session's, else the launcher's (needs no session)."""
    if _session is not None:
        return _session["rank"]
    return _native.identity()[0]


def world_size() -> int:
    """The job's number of ranks: the running session's, else the launcher's."""
    if _session is not None:
        return _session["world_size"]
    return _native.identity()[1]


def local_rank() -> int:
    """This process's rank among those of its node: the running session's, else the
    launcher's."""
    if _session is not None:
        return _session["local_rank"]
    return _native.identity()[2]


def provider() -> str:
    return _ensure()["provider"]


def device() -> Tuple[int, int]:
    """DLPack ``(device type, device id)`` of this rank's symmetric memory."""
    return tuple(_ensure()["device"])


def dtypes() -> List[str]:
    """Element types that symmetric tensors can hold."""
    return list(_native.dtypes())


# ---- allocation ---------------------------------------------------------------------------

# Names torch and numpy read alike.
_DTYPE_ALIASES = {
    "half": "float16",
    "double": "float64",
    "long": "int64",
    "short": "int16",
    "cdouble": "complex128",
}
# Names torch and numpy read differently: refused rather than guessed.
_AMBIGUOUS = {
    "float": ("float32", "float64"),
    "int": ("int32", "int64"),
    "cfloat": ("complex64", "complex128"),
}

#: The most dimensions a tensor may have (DLPack consumers such as numpy take at most 64).
MAX_DIMS = 64


#: dtype names resolved before, keyed by (type, dtype): the checks below run once per dtype.
_dtype_names: Dict[Tuple[type, Any], str] = {}


def _dtype_name(dtype: Any) -> str:
    try:
        return _dtype_names[(type(dtype), dtype)]
    except (KeyError, TypeError):  # new, or unhashable
        pass
    name = _resolve_dtype(dtype)
    try:
        _dtype_names[(type(dtype), dtype)] = name
    except TypeError:
        pass
    return name


def _resolve_dtype(dtype: Any) -> str:
    if dtype is None:
        name = "float32"
    elif isinstance(dtype, str):
        name = dtype[len("torch."):] if dtype.startswith("torch.") else dtype
    elif dtype in (bool, int, float, complex):
        name = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}[dtype]
    elif type(dtype).__module__ == "torch":
        name = str(dtype)[len("torch."):]
    elif "numpy" in sys.modules:
        import numpy as np

        try:
            parsed = np.dtype(dtype)
        except TypeError:
            parsed = None
        if parsed is not None and not parsed.isnative:
            raise TypeError(
                f"dtype {dtype!r} is {'big' if parsed.byteorder == '>' else 'little'}-endian, "
                f"but symmetric memory holds this machine's byte order: use "
                f"{parsed.newbyteorder('=')!r} and swap the bytes where they are read"
            )
        name = parsed.name if parsed is not None else None
    else:
        name = None
    if name is None:
        raise TypeError(
            f"dtype must be a torch dtype, a numpy dtype or a name such as 'float32', "
            f"got {dtype!r}"
        )
    if name in _AMBIGUOUS:
        torch_name, numpy_name = _AMBIGUOUS[name]
        raise TypeError(
            f"dtype {dtype!r} is ambiguous: torch reads it as {torch_name}, numpy and Python as "
            f"{numpy_name}; write {torch_name!r} or {numpy_name!r}"
        )
    name = _DTYPE_ALIASES.get(name, name)
    if name not in _native.dtypes():
        raise TypeError(
            f"dtype {dtype!r} is not supported by symmem; use one of "
            f"{', '.join(_native.dtypes())}"
        )
    return name


def _shape(size: tuple) -> List[int]:
    if len(size) == 1 and type(size[0]) is int and 0 < size[0] < 1 << 63:
        return [size[0]]  # the common case: one positive int
    if len(size) == 1 and isinstance(size[0], (tuple, list)) or (
        len(size) == 1 and type(size[0]).__name__ == "Size"
    ):
        size = tuple(size[0])
    if not size:
        raise TypeError("give the tensor's size, e.g. allocate_symmetric(1024, dtype='float32')")
    if len(size) > MAX_DIMS:
        raise ValueError(
            f"a symmetric tensor has at most {MAX_DIMS} dimensions (DLPack consumers such as "
            f"numpy take no more), got {len(size)}"
        )
    dims = []
    for d in size:
        if isinstance(d, bool):
            raise TypeError(f"size must be integers, got {d!r}")
        try:
            d = operator.index(d)
        except TypeError:
            raise TypeError(f"size must be integers, got {d!r}") from None
        if d >= 1 << 63:
            raise ValueError(f"dimension {d} overflows the address space")
        dims.append(d)
    return dims


#: The default framework per device type, found once.
_default_frameworks: Dict[int, str] = {}


def _framework(framework: Optional[str], device_type: int) -> str:
    if framework is None:
        found = _default_frameworks.get(device_type)
        if found is None:
            found = _default_frameworks[device_type] = _find_default_framework(device_type)
        return found
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if framework == "numpy" and device_type != KDL_CPU:
        raise ValueError(
            "numpy holds CPU memory only and this provider's memory is on a GPU: use "
            "framework='torch' or 'dlpack'"
        )
    return framework


def _find_default_framework(device_type: int) -> str:
    if importlib.util.find_spec("torch") is not None:
        return "torch"
    if device_type == KDL_CPU and importlib.util.find_spec("numpy") is not None:
        return "numpy"
    return "dlpack"


def _wrap(array: SymmetricArray, framework: str) -> Any:
    if framework == "torch":
        # The capsule itself, not the exporter: torch then skips the stream handshake, which
        # symmem needs none of (nothing is queued on this memory; a table is uploaded before
        # allocate returns). Torch takes a DLPack capsule as it takes an exporter.
        return sys.modules["torch"].from_dlpack(array.__dlpack__())
    if framework == "numpy":
        return sys.modules["numpy"].from_dlpack(array)
    return array


def _address_map(a: Any, framework: str) -> AddressMap:
    return AddressMap(
        local_rank=a.rank,
        world_size=a.world_size,
        allocation_base=a.base,
        allocation_bytes=a.nbytes,
        bases=tuple(a.bases),
        direct=tuple(a.direct),
        peer_bases=_wrap(a.peer_bases, framework),
        allocation_id=a.id,
    )


def _allocate(size: tuple, dtype: Any, framework: Optional[str]) -> Tuple[Any, int]:
    """Collective: the tensor and its allocation id (its entry in ``_entries``)."""
    # Everything that can be refused is refused before the collective.
    shape = _shape(size)
    name = _dtype_name(dtype)
    session = _ensure()
    if session["world_size"] == 1:
        _refuse_a_lone_rank(session)
    fw = _framework(framework, session["device"][0])
    if fw != "dlpack" and fw not in sys.modules:
        importlib.import_module(fw)
    if fw == "numpy" and name == "bfloat16":
        raise TypeError("numpy has no bfloat16: use framework='torch' or 'dlpack'")
    data, a = _native.allocate(shape, name)
    # The peer-bases table's entries are written meanwhile; settle() waits for them.
    tensor = _wrap(data, fw)
    key = _identity_key(tensor)
    alloc_id = a.id
    entry = _Entry(key, tensor, fw, a)
    entry.peer_bases(fw)
    _native.settle()
    _entries[alloc_id] = entry
    if key is not None:
        _freed.pop(key, None)
    return tensor, alloc_id


def allocate_symmetric(*size: Any, dtype: Any = None, framework: Optional[str] = None):
    """Collective: a new symmetric tensor of ``size`` and ``dtype`` (default float32) and its
    peer-bases table, an int64 tensor indexed by rank on the tensor's device, with
    ``peer_bases[rank] == tensor.data_ptr()``. Contents start unspecified (as torch.empty).

    ``framework``: ``"torch"``, ``"numpy"`` (CPU providers) or ``"dlpack"`` (the raw
    :class:`SymmetricArray`); by default torch when installed, else numpy on CPU."""
    tensor, alloc_id = _allocate(size, dtype, framework)
    entry = _entries[alloc_id]
    return tensor, entry.peer_bases(entry.framework)


def allocate_symmetric_map(*size: Any, dtype: Any = None, framework: Optional[str] = None):
    """Collective: as :func:`allocate_symmetric`, returning ``(tensor, AddressMap)``."""
    tensor, alloc_id = _allocate(size, dtype, framework)
    entry = _entries[alloc_id]
    return tensor, entry.address_map(entry.framework)


def _lookup(tensor: Any) -> Tuple[int, int, int, int, int]:
    """(allocation id, base, bytes, address, bytes covered) of the allocation ``tensor``
    lies in; ValueError naming why when it lies in none."""
    addr, nbytes = _describe(tensor)
    if _session is None:
        _ensure()
    hit = _native.find(addr)
    if hit is None:
        key = _identity_key(tensor)
        if key is not None and key in _freed:
            raise ValueError(
                f"this tensor's symmetric allocation #{_freed[key]} was freed already"
            )
        raise ValueError(
            f"address {addr:#x} is not in a live symmetric allocation of this rank: the tensor "
            f"was not made by symmem.allocate_symmetric (or its allocation was freed)"
        )
    return (*hit, addr, nbytes)


def symmetric_address_map(tensor: Any) -> AddressMap:
    """The address map of the allocation that ``tensor`` (or a view of it) lies in.
    Not collective. Its ``peer_bases`` is made once per allocation and framework: every map of
    one allocation shares that tensor (the same device memory either way)."""
    alloc_id, _, _, _, _ = _lookup(tensor)
    entry = _entries.get(alloc_id)
    if isinstance(tensor, SymmetricArray):
        fw = "dlpack"
    elif (type(tensor).__module__ or "").startswith("numpy"):
        fw = "numpy"
    elif (type(tensor).__module__ or "").startswith("torch"):
        fw = "torch"
    else:
        fw = entry.framework if entry else "dlpack"
    if entry is not None:
        return entry.address_map(fw)
    return _address_map(_native.address_map(alloc_id), fw)


def free(tensor: Any, *, synchronize: bool = True) -> None:
    """Collective: frees the allocation of ``tensor`` (the tensor allocate_symmetric returned,
    or a view of all of it). Every rank frees the same allocations in the same order.
    Tensors still viewing the memory must not be used afterwards.

    First it waits for the work this process queued on its device (every stream of the
    device's primary context, which torch, cupy and Triton share), so no kernel still reads or
    writes the memory when another allocation reuses it. ``synchronize=False`` skips that wait
    (a few microseconds when the device is idle): safe only when the caller has already waited
    for every kernel that touches this allocation on this rank, e.g. right after
    ``torch.cuda.synchronize()``."""
    alloc_id, base, nbytes, addr, covered = _lookup(tensor)
    entry = _entries.get(alloc_id)
    if entry is not None and entry.tensor is not None and entry.tensor() is tensor:
        key = entry.key  # the tensor allocate returned for this very allocation
    else:
        key = _identity_key(tensor)
    if key is not None and key in _freed and (entry is None or entry.key != key):
        raise ValueError(
            f"this tensor's symmetric allocation #{_freed[key]} was freed already (its memory "
            f"now belongs to allocation #{alloc_id}, which this call leaves alone)"
        )
    if addr != base or covered != nbytes:
        raise ValueError(
            f"the tensor covers [{addr:#x}, +{covered} B) but its symmetric allocation "
            f"#{alloc_id} is [{base:#x}, +{nbytes} B): free the whole tensor that "
            f"allocate_symmetric returned, not a slice of it"
        )
    _native.free(alloc_id, synchronize)
    entry = _entries.pop(alloc_id, None)
    if entry is not None and entry.key is not None:
        _freed[entry.key] = alloc_id
    if key is not None:
        _freed[key] = alloc_id
    while len(_freed) > _FREED_KEEP:
        _freed.popitem(last=False)


def barrier() -> None:
    """Collective: waits for every rank; stores made before it (kernels included: the work
    queued on this rank's device is waited for first) are visible to every rank after it."""
    _ensure()
    _native.barrier()


def outstanding() -> List[Outstanding]:
    """Allocations not freed yet on this rank."""
    _ensure()
    return [Outstanding(**r) for r in _native.outstanding()]


def finalize() -> List[Outstanding]:
    """Collective: ends symmem in this process. Returns (and warns about) the allocations
    that were never freed; nothing can be allocated afterwards."""
    global _session
    _ensure()
    records = [Outstanding(**r) for r in _native.finalize()]
    _session = None
    _entries.clear()
    if records:
        dropped = sum(r.dropped for r in records)
        warnings.warn(
            SymmetricLeakWarning(
                f"{len(records)} symmetric allocation(s) never freed ({dropped} of them "
                f"garbage-collected without symmem.free): "
                + ", ".join(f"#{r.id} {r.dtype}{list(r.shape)}" for r in records)
            ),
            stacklevel=2,
        )
    return records


def _at_exit() -> None:
    try:
        current = _native.info()
        if current is None or current["finalized"]:
            return
        count = len(_native.outstanding())
    except Exception:
        return
    tail = f"; {count} symmetric allocation(s) never freed" if count else ""
    sys.stderr.write(
        f"symmem: rank {current['rank']} exits without symmem.finalize(){tail}\n"
    )


atexit.register(_at_exit)


def _peer_failed_exit_hook(previous):
    """An uncaught PeerFailedError makes this rank a witness: after the usual traceback and
    the exit handlers, the process exits with EXIT_PEER_FAILED (not Python's 1), so that the
    launcher blames the rank that failed first, not this one."""

    def hook(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        if not (isinstance(exc_type, type) and issubclass(exc_type, PeerFailedError)):
            return
        try:
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        finally:
            os._exit(EXIT_PEER_FAILED)

    hook.symmem_previous = previous
    return hook


sys.excepthook = _peer_failed_exit_hook(sys.excepthook)
