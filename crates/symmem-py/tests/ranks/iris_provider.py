"""symmem.iris.Provider, the whole Iris provider surface, on the host provider with torch CPU
tensors: every rank writes into every peer's copy through the table (a CPU "kernel" on raw
addresses: the host provider maps every peer heap into this process), then checks what the
others wrote; the maps and their helpers; collective free, and a second free refused.
torch.distributed (gloo, from symmem-run's MASTER_ADDR/MASTER_PORT) runs beside it, as in
Iris's tests, so ranks are compared with torch's."""

from __future__ import annotations

import ctypes
import inspect

import torch
import torch.distributed as dist
from common import check, expect, main

import symmem
from symmem.iris import NotSymmetricError, Provider, SymmetricAddressMap, factory

# (size as passed, shape it means, dtype); every tensor has at least as many elements as the
# largest world tested (8), so that every writer owns one element of it.
CASES = [
    ((4, 8), (4, 8), torch.bfloat16),
    (((4, 8),), (4, 8), torch.float32),           # a tuple
    ((32,), (32,), torch.bfloat16),
    (([2, 3, 8],), (2, 3, 8), torch.float32),     # a list
    ((torch.Size([8, 5]),), (8, 5), torch.bfloat16),
    ((2, 8, 3), (2, 8, 3), torch.float32),
]


def at(addr: int, dtype: torch.dtype, count: int) -> torch.Tensor:
    """A torch view of COUNT elements at ADDR in this process (a peer's copy included)."""
    size = count * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_byte * size).from_address(addr), dtype=dtype)


def value(frm: int, to: int) -> float:
    """What rank FRM writes into rank TO's copy: exact in bfloat16 for up to 8 ranks."""
    return float(frm * 10 + to + 1)


def check_map(amap, tensor, table, r: int, n: int, what: str) -> None:
    b = table.tolist()
    check(isinstance(amap, SymmetricAddressMap), f"{what}: {type(amap)}")
    check(amap.peer_bases.tolist() == b, f"{what}: the map's table is the returned one")
    check(amap.local_rank == r, f"{what}: local_rank {amap.local_rank}")
    check(amap.allocation_base == tensor.data_ptr() == b[r], f"{what}: base {amap}")
    check(amap.allocation_bytes == tensor.numel() * tensor.element_size(), f"{what}: {amap}")
    check(amap.direct == (True,) * n and amap.all_direct(), f"{what}: direct {amap.direct}")
    check(amap.indirect_peers() == [] and amap.direct_peers() == list(range(n)), what)
    check(amap.bases == tuple(b) and amap.world_size == n == amap.num_ranks, f"{what}: {amap}")
    check(isinstance(amap.allocation_id, int), f"{what}: allocation_id {amap.allocation_id}")
    check(all(v != 0 for v in b), f"{what}: every peer is reachable on one host: {b}")


def body() -> None:
    dist.init_process_group("gloo")
    provider = Provider("host")
    r, n = provider.get_rank(), provider.get_num_ranks()
    check((r, n) == (dist.get_rank(), dist.get_world_size()), "ranks agree with torch's")
    check((r, n) == (symmem.rank(), symmem.world_size()), "ranks agree with symmem's")
    check((provider.cur_rank, provider.num_ranks) == (r, n), "cur_rank / num_ranks")
    check(provider.name == "symmem_host", f"name {provider.name!r}")
    check(provider.device == torch.device("cpu"), f"device {provider.device}")
    # A second provider joins the running session (as Iris's test builds one per module).
    again = factory("host")(object())
    check((again.get_rank(), again.get_num_ranks(), again.name) == (r, n, provider.name),
          "a second Provider shares the session")
    check(Provider("host", device="cpu").device == provider.device, "device='cpu' is accepted")
    check(Provider().name == provider.name, "Provider() joins the running session")
    expect(ValueError, Provider, "host", device="cuda:0", contains="leave device out")
    expect(TypeError, Provider, 3, contains="provider must be")
    if "group" in inspect.signature(symmem.init).parameters:
        grouped = Provider("host", group=dist.group.WORLD)
        check((grouped.get_rank(), grouped.get_num_ranks()) == (r, n), "group=WORLD")
    else:
        expect(TypeError, Provider, "host", group=dist.group.WORLD, contains="leave group out")

    # Iris's default dtype is torch's default.
    d, _ = provider.allocate_symmetric(8)
    check(d.dtype == torch.get_default_dtype(), f"default dtype {d.dtype}")
    torch.set_default_dtype(torch.float64)
    try:
        e, _ = provider.allocate_symmetric_map(8)
    finally:
        torch.set_default_dtype(torch.float32)
    check(e.dtype == torch.float64, f"default dtype follows torch's: {e.dtype}")

    tensors = []
    for i, (size, shape, dtype) in enumerate(CASES):
        what = f"allocate{'_symmetric_map' if i % 2 else '_symmetric'}{size} {dtype}"
        if i % 2:
            t, amap = provider.allocate_symmetric_map(*size, dtype=dtype)
            table = amap.peer_bases
        else:
            t, table = provider.allocate_symmetric(*size, dtype=dtype)
            amap = provider.symmetric_address_map(t)
        check(tuple(t.shape) == shape and t.dtype == dtype and t.is_contiguous(), what)
        check(isinstance(t, torch.Tensor) and t.device == provider.device, what)
        check(table.dtype == torch.int64 and tuple(table.shape) == (n,), f"{what}: {table}")
        check(table.device == t.device, f"{what}: the table is on the tensor's device")
        check(int(table[r]) == t.data_ptr(), f"{what}: peer_bases[rank] != data_ptr")
        check_map(amap, t, table, r, n, what)
        t.fill_(-1)
        tensors.append((t, table, amap))

    # symmem maps each peer's heap linearly (as rocSHMEM does): one offset per peer, shared by
    # every allocation, so any table translates any allocation's pointers.
    first = tensors[0][1].tolist()
    for t, table, _ in tensors[1:]:
        b = table.tolist()
        check([b[p] - b[r] for p in range(n)] == [first[p] - first[r] for p in range(n)],
              "peer offsets are shared between allocations")

    provider.barrier()
    for t, table, amap in tensors:
        b = table.tolist()
        mine = t.data_ptr() + r * t.element_size()  # element r of the flat tensor
        for to in range(n):
            dst = b[to] + (mine - b[r])  # what an Iris kernel computes
            check(dst == amap.translate(mine, r, to), "translate agrees with the kernel")
            at(dst, t.dtype, 1)[0] = value(r, to)
    provider.barrier()
    for t, _, _ in tensors:
        flat = t.reshape(-1).float().tolist()
        want = [value(frm, r) for frm in range(n)] + [-1.0] * (t.numel() - n)
        check(flat == want, f"{t.dtype}{tuple(t.shape)}: received {flat[:n]}, want {want[:n]}")

    # Iris's own five-field construction works and reads the host table itself.
    t0, table0, amap0 = tensors[0]
    iris_style = SymmetricAddressMap(table0, r, t0.data_ptr(), amap0.allocation_bytes,
                                     (True,) * n)
    check(iris_style.bases == amap0.bases and iris_style.allocation_id is None, str(iris_style))
    expect(ValueError, amap0.translate, t0.data_ptr() + amap0.allocation_bytes, r, r,
           contains="outside")

    # A view: its map is the whole allocation's, and freeing a slice is refused.
    view = t0[1:]
    vmap = provider.symmetric_address_map(view)
    check(vmap.allocation_base == t0.data_ptr() and vmap.peer_bases.tolist() == table0.tolist(),
          "a view maps to its whole allocation")
    expect(ValueError, provider.free, view, contains="not a slice")
    # A tensor from elsewhere: ValueError for symmem, KeyError for Iris's torch provider.
    stray = torch.zeros(8)
    expect(NotSymmetricError, provider.symmetric_address_map, stray, contains="not in a live")
    expect(KeyError, provider.symmetric_address_map, stray)
    expect(ValueError, provider.free, stray, contains="not in a live")
    expect(TypeError, provider.symmetric_address_map, [1, 2], contains="torch.Tensor")
    expect(TypeError, provider.free, [1, 2], contains="torch.Tensor")

    # Under inference_mode (a model's forward) the memory is still an ordinary tensor.
    with torch.inference_mode():
        inf, _ = provider.allocate_symmetric(n, dtype=torch.float32)
    check(not inf.is_inference(), "allocated under inference_mode: not an inference tensor")

    # Free is collective: every rank, the same order.
    provider.barrier()
    provider.free(d)
    provider.free(e)
    for t, _, _ in tensors:
        provider.free(t)
    provider.free(inf)
    expect(ValueError, provider.free, t0, contains="freed already")
    expect(NotSymmetricError, provider.symmetric_address_map, t0, contains="freed already")

    # The session is still usable after the refused free.
    z, z_table = provider.allocate_symmetric(n, dtype=torch.float32)
    check(int(z_table[r]) == z.data_ptr(), "allocate after a refused free")
    provider.barrier()
    provider.free(z)
    check(symmem.outstanding() == [], f"left over: {symmem.outstanding()}")
    check(symmem.finalize() == [], "finalize reports nothing")
    dist.destroy_process_group()
    print(f"rank {r}/{n}: PASS iris provider", flush=True)


if __name__ == "__main__":
    main(body)
