"""symmem as an Iris allocation provider.

Iris (github.com/ROCm/iris) kernels translate a pointer ``ptr`` of this rank into peer ``to``'s
copy with ``peer_bases[to] + (ptr - peer_bases[rank])``, so they run over memory from any
runtime that hands them a tensor and its ``int64[num_ranks]`` peer-bases table. Iris calls such a
runtime an *allocation provider* (``iris/experimental/``: ``RocshmemProvider``,
``TorchSymmMemProvider``); its provider test (``tests/unittests/test_provider_unified.py``)
runs one kernel over every entry of a ``PROVIDERS`` dict. :class:`Provider` is symmem's: the
same methods, arguments and return values, over symmem's host, NVSHMEM or rocSHMEM provider::

    import symmem, torch
    from symmem.iris import Provider

    provider = Provider("rocshmem")          # collective: symmem.init("rocshmem")
    x, peer_bases = provider.allocate_symmetric(4096, dtype=torch.bfloat16)   # collective
    amap = provider.symmetric_address_map(x)  # not collective
    if not amap.all_direct():                 # a peer on another node: base 0
        raise RuntimeError(f"peers {amap.indirect_peers()} are not load/store reachable")
    provider.barrier()
    ...                                       # launch Iris kernels with (x, peer_bases)
    provider.barrier()
    provider.free(x)                          # collective
    symmem.finalize()                         # collective, once, at the end

Registering it in Iris's provider test is one line per provider (the factories there take
pytest's ``request``; older versions of that test call them with no argument, which
:func:`factory` also accepts)::

    from symmem.iris import Provider
    PROVIDERS["symmem_host"] = lambda request: Provider("host")

Facts that carry over from Iris's providers:

- Allocation and free are collective: every rank makes the same calls in the same order.
  ``free`` is explicit, never driven by garbage collection (ranks would collect at different
  moments and hang).
- A peer that this process cannot reach by load/store has base 0 in the table and ``False``
  in ``SymmetricAddressMap.direct``: check :meth:`SymmetricAddressMap.all_direct` before
  launching a kernel that may address it.
- symmem maps each peer's whole heap linearly, as rocSHMEM does: a table made for one
  allocation translates pointers of every other allocation too (Iris's ``copy`` relies on
  this). Torch symmetric memory gives no such guarantee; kernels that must run on both should
  translate each tensor with its own table.

Tensors are torch tensors on this rank's device (CPU with the host provider: Iris's Triton
kernels then run under ``TRITON_INTERPRET=1``). Only :class:`Provider` needs torch;
:class:`SymmetricAddressMap` imports without it.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import symmem

__all__ = ["NotSymmetricError", "Provider", "SymmetricAddressMap", "factory"]


class NotSymmetricError(ValueError, KeyError):
    """The tensor lies in no live symmetric allocation of this rank (made elsewhere, or freed).

    A ``ValueError`` as everywhere in symmem, and a ``KeyError`` as Iris's torch provider raises
    for a tensor it did not allocate: code written for either catches it."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _host_ints(table: Any) -> List[int]:
    """A peer-bases table (torch tensor on any device, numpy array or sequence) as ints."""
    values = table.tolist() if hasattr(table, "tolist") else list(table)
    return [int(v) for v in values]


@dataclass(frozen=True)
class SymmetricAddressMap:
    """Where one symmetric allocation lies on every rank, as seen from this process.

    The first five fields are Iris's ``SymmetricAddressMap``, in its order, so this class goes
    wherever Iris takes one (by attribute; it is not a subclass, as that would import Iris):

    - ``peer_bases``: the ``int64[num_ranks]`` table a kernel takes, on the allocation's device;
      ``peer_bases[p]`` is where this process reaches peer ``p``'s copy, 0 when it cannot.
    - ``local_rank``: this rank; ``peer_bases[local_rank] == allocation_base``.
    - ``allocation_base``, ``allocation_bytes``: this rank's copy, ``[base, base + bytes)``.
    - ``direct``: per peer, whether its copy is load/store reachable from here.

    symmem adds, with defaults so that Iris's five-argument construction still works:

    - ``bases``: ``peer_bases`` as a tuple of ints on the host (read from ``peer_bases`` when
      not given, a device-to-host copy on a GPU).
    - ``allocation_id``: symmem's sequence number of the allocation (the same on every rank),
      or ``None`` for a map that did not come from symmem.

    The rules are checked on construction: an unreachable peer's base is 0 (so a kernel that
    forgot to check ``direct`` faults at a small address instead of writing somewhere wrong),
    a reachable one's is not, and this rank reaches itself at ``allocation_base``.
    """

    peer_bases: Any
    local_rank: int
    allocation_base: int
    allocation_bytes: int
    direct: Tuple[bool, ...]
    bases: Optional[Tuple[int, ...]] = None
    allocation_id: Optional[int] = None

    def __post_init__(self) -> None:
        direct = tuple(bool(d) for d in self.direct)
        bases = tuple(_host_ints(self.peer_bases if self.bases is None else self.bases))
        n = len(direct)
        if len(bases) != n:
            raise ValueError(
                f"peer_bases has {len(bases)} entries but direct has {n}: both hold one entry "
                f"per rank"
            )
        if not 0 <= self.local_rank < n:
            raise ValueError(f"local_rank {self.local_rank} is out of range for {n} ranks")
        for peer, (base, reachable) in enumerate(zip(bases, direct)):
            if reachable and base == 0:
                raise ValueError(
                    f"peer {peer} is marked direct but its base is 0: give its address, or "
                    f"direct=False"
                )
            if not reachable and base != 0:
                raise ValueError(
                    f"peer {peer} is not direct but its base is {base:#x}: an unreachable "
                    f"peer's base must be 0, so that a kernel that addresses it faults"
                )
        if not direct[self.local_rank] or bases[self.local_rank] != self.allocation_base:
            raise ValueError(
                f"peer_bases[{self.local_rank}] is {bases[self.local_rank]:#x} but "
                f"allocation_base is {self.allocation_base:#x}: a rank's own entry is the "
                f"base its kernels subtract, so the two must be equal"
            )
        object.__setattr__(self, "direct", direct)
        object.__setattr__(self, "bases", bases)

    @classmethod
    def from_address_map(cls, amap: Any) -> "SymmetricAddressMap":
        """The Iris form of ``amap``: a :class:`symmem.AddressMap` (from
        :func:`symmem.allocate_symmetric_map` or :func:`symmem.symmetric_address_map`), or any
        object with Iris's five fields. The table tensor is shared, not copied."""
        return cls(
            peer_bases=amap.peer_bases,
            local_rank=amap.local_rank,
            allocation_base=amap.allocation_base,
            allocation_bytes=amap.allocation_bytes,
            direct=tuple(amap.direct),
            bases=getattr(amap, "bases", None),
            allocation_id=getattr(amap, "allocation_id", None),
        )

    # ---- Iris's helpers ----------------------------------------------------------------------

    def all_direct(self) -> bool:
        """True when every peer is load/store reachable: a kernel may address any of them."""
        return all(self.direct)

    def indirect_peers(self) -> List[int]:
        """The ranks this process cannot reach by load/store (base 0), in order."""
        return [r for r, d in enumerate(self.direct) if not d]

    # ---- symmem's additions ------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """How many ranks share the allocation (``len(direct)``; symmem's name)."""
        return len(self.direct)

    @property
    def num_ranks(self) -> int:
        """The same as :attr:`world_size` (Iris's name, as in ``get_num_ranks``)."""
        return len(self.direct)

    def direct_peers(self) -> List[int]:
        """The ranks this process can reach by load/store (itself included), in order."""
        return [r for r, d in enumerate(self.direct) if d]

    def translate(self, addr: int, from_rank: int, to_rank: int) -> int:
        """What a kernel computes, checked: ``bases[to_rank] + (addr - bases[from_rank])``.

        ``addr`` must lie in rank ``from_rank``'s copy of this allocation (as this process sees
        it) and both ranks must be reachable; otherwise ``ValueError`` says which rule failed.
        (Kernels may translate pointers of other allocations through this table too; this
        method keeps to its own allocation.)"""
        return symmem._translate(self.bases, self.direct, self.allocation_bytes,
                                 self.local_rank, addr, from_rank, to_rank, "this allocation")


def _import_torch():
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        import torch
    except ImportError:
        raise ImportError(
            "symmem.iris.Provider hands out torch tensors and torch is not installed: "
            "`pip install torch` (symmem itself does not need it)"
        ) from None
    return torch


def _shape(size: tuple) -> tuple:
    """Iris's rule: ``f(4, 8)`` and ``f((4, 8))`` (any iterable) mean the same shape."""
    if len(size) == 1 and hasattr(size[0], "__iter__") and not isinstance(size[0], str):
        return tuple(size[0])
    return size


class Provider:
    """symmem as an Iris allocation provider: the surface of Iris's ``RocshmemProvider`` and
    ``TorchSymmMemProvider``.

    ``Provider(provider=None, *, group=None, device=None, **options)`` starts symmem
    (collective: :func:`symmem.init`) with ``provider`` ``"host"``, ``"nvshmem"`` or
    ``"rocshmem"`` (``None``: the running session's, else ``SYMMEM_PROVIDER``, else host). The
    ranks meet as :func:`symmem.init` says: through torch.distributed's group where it is
    initialised (as in Iris's tests; ``group`` names it), else through the launcher's
    environment (``symmem-run``, torchrun, Open MPI, Slurm, PMI). ``device`` is accepted as
    Iris's providers accept it and checked: symmem places a rank's memory on its own local GPU
    (the CPU for the host provider), which :attr:`device` names. Other keywords go to
    :func:`symmem.init`.

    Several Providers in one process share one symmem session (it cannot switch provider);
    end it with :func:`symmem.finalize` (collective) when done.

    Attributes (as Iris's providers): ``name`` (``"symmem_host"``, ``"symmem_nvshmem"`` or
    ``"symmem_rocshmem"``; writable, as Iris's test sets it), ``cur_rank``, ``num_ranks``,
    ``device`` (a ``torch.device``).
    """

    def __init__(self, provider: Optional[str] = None, *, group: Any = None,
                 device: Any = None, **options: Any) -> None:
        if provider is not None and not isinstance(provider, str):
            hint = ""
            if hasattr(provider, "getfixturevalue"):
                hint = (
                    ": Iris's test calls its PROVIDERS factories with pytest's request, so "
                    "register `lambda request: Provider('host')` or `factory('host')`, not the "
                    "class itself"
                )
            raise TypeError(
                f"provider must be 'host', 'nvshmem', 'rocshmem' or None, got "
                f"{type(provider).__name__}{hint}"
            )
        torch = _import_torch()
        running = symmem.info()
        if provider is None and running.get("provider") and not running.get("finalized", True):
            provider = running["provider"]  # join the session, whatever SYMMEM_PROVIDER says
        if group is not None:
            if "group" not in inspect.signature(symmem.init).parameters:
                raise TypeError(
                    "this symmem's init() takes no process group: install a symmem that does, "
                    "or leave group out (ranks then come from the launcher's environment)"
                )
            options["group"] = group
        symmem.init(provider, **options)
        info = symmem.info()
        dev_type, dev_id = info["device"]
        #: Iris's name for this provider in its test's PROVIDERS dict; writable.
        self.name: str = f"symmem_{info['provider']}"
        self.cur_rank: int = int(info["rank"])
        self.num_ranks: int = int(info["world_size"])
        #: Where this rank's symmetric tensors (and their tables) live.
        self.device = torch.device("cpu") if dev_type == symmem.KDL_CPU else torch.device(
            "cuda", dev_id)
        if device is not None:
            wanted = torch.device(device)
            if wanted.type != self.device.type or (
                    wanted.index is not None and wanted.index != self.device.index):
                raise ValueError(
                    f"device={str(wanted)!r}, but the {info['provider']} provider places rank "
                    f"{self.cur_rank}'s symmetric memory on {self.device}: leave device out or "
                    f"pass {str(self.device)!r}"
                )

    def __repr__(self) -> str:
        return (f"<symmem.iris.Provider {self.name} rank {self.cur_rank}/{self.num_ranks} "
                f"on {self.device}>")

    # ---- table form ----------------------------------------------------------------------

    def allocate_symmetric(self, *size: Any, dtype: Any = None):
        """Collective: a new symmetric tensor and its peer-bases table, ``(tensor, peer_bases)``.

        ``size`` as Iris takes it: ``allocate_symmetric(4, 8)`` or ``allocate_symmetric((4, 8))``.
        ``dtype`` defaults to ``torch.get_default_dtype()``. Contents start unspecified (as
        ``torch.empty``). ``peer_bases`` is ``int64[num_ranks]`` on the tensor's device with
        ``peer_bases[rank] == tensor.data_ptr()``; an unreachable peer's entry is 0 (see
        :meth:`allocate_symmetric_map` for which). Keep the table as long as the tensor: it is
        made once per allocation."""
        torch = _import_torch()
        if dtype is None:
            dtype = torch.get_default_dtype()
        if torch.is_inference_mode_enabled():
            # Not an inference tensor even when called under torch.inference_mode (as from a
            # model's forward): the memory outlives that call. Entered only then: the guard
            # costs microseconds, a third of a 1-PE allocate's Python share.
            with torch.inference_mode(False):
                return symmem.allocate_symmetric(*_shape(size), dtype=dtype, framework="torch")
        if len(size) == 1 and type(size[0]) is int:
            # The common case, passed on as it came: forwarding *size costs ~1.5 us a call
            # (measured here, 1 PE), a third of what this surface adds over symmem's own.
            return symmem.allocate_symmetric(size[0], dtype=dtype, framework="torch")
        return symmem.allocate_symmetric(*_shape(size), dtype=dtype, framework="torch")

    # ---- descriptor form -----------------------------------------------------------------

    def allocate_symmetric_map(self, *size: Any, dtype: Any = None):
        """Collective: as :meth:`allocate_symmetric`, returning ``(tensor,``
        :class:`SymmetricAddressMap` ``)``; the map's ``peer_bases`` is the same table."""
        torch = _import_torch()
        if dtype is None:
            dtype = torch.get_default_dtype()
        if torch.is_inference_mode_enabled():
            with torch.inference_mode(False):
                tensor, amap = symmem.allocate_symmetric_map(
                    *_shape(size), dtype=dtype, framework="torch")
        else:
            tensor, amap = symmem.allocate_symmetric_map(
                *_shape(size), dtype=dtype, framework="torch")
        return tensor, SymmetricAddressMap.from_address_map(amap)

    def symmetric_address_map(self, tensor: Any) -> SymmetricAddressMap:
        """Not collective: the map of the allocation ``tensor`` lies in.

        For a tensor :meth:`allocate_symmetric` returned, ``allocation_base`` is its
        ``data_ptr()``. For a view into one (a slice, a reshape) it is the whole allocation's
        base, not the view's: the table still translates every pointer inside the allocation.
        A tensor from elsewhere, or one already freed, raises :class:`NotSymmetricError`."""
        torch = _import_torch()
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"expected a torch.Tensor from Provider.allocate_symmetric, got "
                f"{type(tensor).__name__}"
            )
        try:
            amap = symmem.symmetric_address_map(tensor)
        except ValueError as e:
            raise NotSymmetricError(
                f"{e}. Allocate it with Provider.allocate_symmetric (every rank, same order)"
            ) from None
        return SymmetricAddressMap.from_address_map(amap)

    # ---- convenience ---------------------------------------------------------------------

    def barrier(self) -> None:
        """Collective: waits for the work this rank queued on its device, then for every rank;
        stores made before it are visible to every rank after it."""
        symmem.barrier()

    def free(self, tensor: Any) -> None:
        """Collective: frees the allocation of ``tensor`` (the one allocate_symmetric returned,
        or a view of all of it). Every rank frees the same allocations in the same order; it
        waits for the kernels this rank queued first. Freeing twice, a slice or a tensor from
        elsewhere raises ``ValueError`` on the rank that asked, before any collective, so no
        rank hangs; anything but a tensor is a ``TypeError`` naming torch.Tensor (symmem.free's
        own check: one check on this hot path, not two)."""
        symmem.free(tensor)

    def get_rank(self) -> int:
        """This rank, 0 to ``get_num_ranks() - 1``."""
        return self.cur_rank

    def get_num_ranks(self) -> int:
        """How many ranks share the symmetric memory."""
        return self.num_ranks


def factory(provider: Optional[str] = None, **kwargs: Any) -> Callable[..., Provider]:
    """A ``PROVIDERS`` entry for Iris's provider test: a callable that makes
    ``Provider(provider, **kwargs)`` and ignores its arguments (newer versions of that test
    pass pytest's ``request``, older ones nothing)::

        PROVIDERS["symmem_rocshmem"] = factory("rocshmem")
    """

    def make(*_ignored: Any) -> Provider:
        return Provider(provider, **kwargs)

    make.__name__ = make.__qualname__ = f"symmem_{provider or 'default'}"
    return make
