"""symmem.iris: the Iris provider at 1, 2 and 4 ranks (ranks/iris_provider.py, under
symmem-run), and its SymmetricAddressMap in this process (no session, no torch needed)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import run_ranks, show

import symmem
from symmem.iris import NotSymmetricError, Provider, SymmetricAddressMap, factory


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_iris_provider_surface(symmem_run, ranks):
    proc = run_ranks(symmem_run, ranks, "iris_provider.py")
    assert proc.returncode == 0, show(proc)
    lines = [line for line in proc.stdout.splitlines() if "PASS iris provider" in line]
    assert len(lines) == ranks, show(proc)


# ---- the map, single process ----------------------------------------------------------------

# Four ranks seen from rank 2, with ranks 1 and 3 on another node (base 0, not direct).
BASES = (0x10000, 0, 0x30000, 0)
DIRECT = (True, False, True, False)


def two_node_map(**changes) -> SymmetricAddressMap:
    fields = dict(peer_bases=np.array(BASES, dtype=np.int64), local_rank=2,
                  allocation_base=0x30000, allocation_bytes=256, direct=DIRECT)
    fields.update(changes)
    return SymmetricAddressMap(**fields)


def test_fields_are_iris_fields_in_iris_order():
    names = [f.name for f in dataclasses.fields(SymmetricAddressMap)]
    assert names[:5] == ["peer_bases", "local_rank", "allocation_base", "allocation_bytes",
                         "direct"]
    # Iris builds its map from these five alone; the rest have defaults.
    amap = SymmetricAddressMap(np.array(BASES), 2, 0x30000, 256, DIRECT)
    assert amap.bases == BASES and amap.allocation_id is None


def test_helpers_name_the_unreachable_peers():
    amap = two_node_map()
    assert not amap.all_direct()
    assert amap.indirect_peers() == [1, 3]
    assert amap.direct_peers() == [0, 2]
    assert amap.world_size == amap.num_ranks == 4
    assert amap.bases == BASES and amap.direct == DIRECT
    everyone = two_node_map(peer_bases=[0x10000, 0x20000, 0x30000, 0x40000],
                            direct=[1, 1, 1, 1])
    assert everyone.all_direct() and everyone.indirect_peers() == []
    assert everyone.direct == (True,) * 4  # any truthy sequence, kept as a tuple of bools


def test_translate_is_the_kernel_formula_with_checks():
    amap = two_node_map()
    assert amap.translate(0x30000 + 40, 2, 0) == 0x10000 + 40
    assert amap.translate(0x10000 + 40, 0, 2) == 0x30000 + 40
    with pytest.raises(ValueError, match="rank 1 is not load/store reachable"):
        amap.translate(0x30000, 2, 1)
    with pytest.raises(ValueError, match="outside rank 2's copy"):
        amap.translate(0x30000 + 256, 2, 0)
    with pytest.raises(ValueError, match="out of range"):
        amap.translate(0x30000, 2, 4)


@pytest.mark.parametrize("changes, message", [
    (dict(peer_bases=[0x10000, 0x20000, 0x30000, 0]), "peer 1 is not direct but its base"),
    (dict(direct=(True, True, True, False)), "peer 1 is marked direct but its base is 0"),
    (dict(allocation_base=0x30040), "must be equal"),
    (dict(local_rank=1), "must be equal"),
    (dict(local_rank=4), "out of range"),
    (dict(direct=(True, False, True)), "one entry per rank"),
])
def test_construction_enforces_the_rules(changes, message):
    with pytest.raises(ValueError, match=message):
        two_node_map(**changes)


def test_from_a_symmem_address_map_shares_the_table():
    table = np.array(BASES, dtype=np.int64)
    native = symmem.AddressMap(local_rank=2, world_size=4, allocation_base=0x30000,
                               allocation_bytes=256, bases=BASES, direct=DIRECT,
                               peer_bases=table, allocation_id=7)
    amap = SymmetricAddressMap.from_address_map(native)
    assert amap.peer_bases is table
    assert (amap.local_rank, amap.allocation_base, amap.allocation_bytes) == (2, 0x30000, 256)
    assert (amap.bases, amap.direct, amap.allocation_id) == (BASES, DIRECT, 7)
    # Any object with Iris's five fields converts too (an Iris map, say).
    iris_like = SimpleNamespace(peer_bases=table, local_rank=2, allocation_base=0x30000,
                                allocation_bytes=256, direct=DIRECT)
    assert SymmetricAddressMap.from_address_map(iris_like).bases == BASES


def test_the_map_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        two_node_map().local_rank = 0


def test_not_symmetric_error_is_both_value_and_key_error():
    err = NotSymmetricError("address 0x10 is not in a live symmetric allocation")
    assert isinstance(err, ValueError) and isinstance(err, KeyError)
    assert str(err) == "address 0x10 is not in a live symmetric allocation"  # not quoted


# ---- the provider's refusals that need no session -------------------------------------------


def test_registering_the_class_itself_names_the_fix():
    request = SimpleNamespace(getfixturevalue=lambda name: None)  # as pytest's request
    with pytest.raises(TypeError, match=r"lambda request: Provider\('host'\)"):
        Provider(request)


def test_factory_makes_a_named_iris_entry():
    make = factory("rocshmem")
    assert callable(make) and make.__name__ == "symmem_rocshmem"


def test_provider_without_torch_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ImportError, match="pip install torch"):
        Provider("host")
