"""One rank, in this process (no launcher variables: a world of one): the DLPack protocol,
argument handling and zero-copy views. The session ends with the test session."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap
from contextlib import nullcontext

import numpy as np
import pytest

import symmem


# Allocations that a test drops on purpose (their last holder is gone: they cannot be freed).
DROPPED = []


@pytest.fixture(scope="module", autouse=True)
def session():
    symmem.init("host")
    yield
    with pytest.warns(symmem.SymmetricLeakWarning) if DROPPED else nullcontext():
        left = symmem.finalize()
    assert sorted((o.id, o.dropped) for o in left) == sorted((i, True) for i in DROPPED)


def capsule_name(capsule) -> str:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    return get_name(capsule).decode()


def test_identity_without_a_launcher_is_a_world_of_one():
    assert (symmem.rank(), symmem.world_size(), symmem.local_rank()) == (0, 1, 0)
    assert symmem.provider() == "host"
    assert symmem.device() == (symmem.KDL_CPU, 0)
    assert symmem.info()["finalized"] is False


def test_numpy_view_is_zero_copy_and_the_table_names_it():
    x, bases = symmem.allocate_symmetric(3, 5, dtype=np.float32, framework="numpy")
    try:
        assert isinstance(x, np.ndarray) and x.shape == (3, 5) and x.dtype == np.float32
        assert bases.dtype == np.int64 and bases.shape == (1,)
        addr = x.__array_interface__["data"][0]
        assert int(bases[0]) == addr
        x[:] = np.arange(15, dtype=np.float32).reshape(3, 5)
        seen = np.ctypeslib.as_array((ctypes.c_float * 15).from_address(int(bases[0])))
        assert list(seen) == list(range(15))
    finally:
        symmem.free(x)


def test_raw_export_speaks_both_dlpack_versions():
    x, bases = symmem.allocate_symmetric(4, dtype="int32", framework="dlpack")
    try:
        assert isinstance(x, symmem.SymmetricArray) and isinstance(bases, symmem.SymmetricArray)
        assert (x.shape, x.dtype, x.itemsize, x.nbytes, x.role) == ((4,), "int32", 4, 16, "tensor")
        assert bases.role == "peer_bases" and bases.dtype == "int64" and bases.shape == (1,)
        assert x.__dlpack_device__() == (symmem.KDL_CPU, 0)
        assert capsule_name(x.__dlpack__()) == "dltensor"
        assert capsule_name(x.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
        assert capsule_name(x.__dlpack__(max_version=(0, 8))) == "dltensor"
        # Unconsumed capsules are released (by their destructor) without touching the memory.
        gc.collect()
        a = np.from_dlpack(x)
        a[:] = [1, 2, 3, 4]
        assert a.__array_interface__["data"][0] == x.data_ptr()
        assert np.from_dlpack(bases)[0] == x.data_ptr()
        with pytest.raises(BufferError, match="without a copy"):
            x.__dlpack__(copy=True)
        with pytest.raises(BufferError, match="device"):
            x.__dlpack__(dl_device=(symmem.KDL_CUDA, 0))
        x.__dlpack__(dl_device=(symmem.KDL_CPU, 0), copy=False)
        assert "SymmetricArray(role=tensor" in repr(x)
    finally:
        symmem.free(x)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


def consume(capsule, name: str, struct):
    """What a DLPack consumer does: take the pointer, rename the capsule (it owns the tensor
    now), read the tensor, and call the deleter when done."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    managed = ctypes.cast(api.PyCapsule_GetPointer(capsule, name.encode()),
                          ctypes.POINTER(struct))
    assert api.PyCapsule_SetName(capsule, b"used_" + name.encode()) == 0
    return managed


@pytest.mark.parametrize("versioned", [False, True])
def test_a_consumer_reads_the_dlpack_struct_and_its_deleter_lets_go(versioned):
    x, _ = symmem.allocate_symmetric(2, 3, dtype="int16", framework="dlpack")
    alloc_id = x.allocation_id
    if versioned:
        capsule = x.__dlpack__(max_version=(1, 3))
        managed = consume(capsule, "dltensor_versioned", DLManagedTensorVersioned)
        assert (managed.contents.major, managed.contents.minor) == (1, 0)
        assert managed.contents.flags == 0
    else:
        capsule = x.__dlpack__()
        managed = consume(capsule, "dltensor", DLManagedTensor)
    t = managed.contents.dl_tensor
    assert t.data == x.data_ptr() and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (symmem.KDL_CPU, 0)
    assert (t.ndim, t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 0, 16, 1)
    assert (t.shape[0], t.shape[1], t.strides[0], t.strides[1]) == (2, 3, 3, 1)
    del x, capsule  # the consumer's export is now the only holder
    gc.collect()
    mine = [o for o in symmem.outstanding() if o.id == alloc_id]
    assert len(mine) == 1 and not mine[0].dropped
    managed.contents.deleter(managed)  # the consumer is done: the last holder goes
    mine = [o for o in symmem.outstanding() if o.id == alloc_id]
    assert mine[0].dropped and mine[0].shape == (2, 3)
    DROPPED.append(alloc_id)


@pytest.mark.parametrize(
    "dtype,name",
    [(np.float32, "float32"), ("torch.float16", "float16"), ("half", "float16"),
     (float, "float64"), (int, "int64"), (bool, "bool"), (np.dtype("u2"), "uint16"),
     ("complex64", "complex64"), (None, "float32")],
)
def test_dtypes_are_named_as_torch_and_numpy_name_them(dtype, name):
    x, _ = symmem.allocate_symmetric(2, dtype=dtype, framework="dlpack")
    try:
        assert x.dtype == name
        assert np.from_dlpack(x).dtype == np.dtype(name)
    finally:
        symmem.free(x)


def test_size_may_be_a_tuple_and_the_map_describes_it():
    x, amap = symmem.allocate_symmetric_map((2, 3), dtype="int16", framework="numpy")
    try:
        assert x.shape == (2, 3)
        assert amap.allocation_bytes == 12 and amap.world_size == 1 and amap.direct == (True,)
        assert amap.allocation_base == x.__array_interface__["data"][0] == amap.bases[0]
        assert amap.translate(amap.allocation_base + 4, 0, 0) == amap.allocation_base + 4
        with pytest.raises(ValueError, match="out of range"):
            amap.translate(amap.allocation_base, 0, 1)
        again = symmem.symmetric_address_map(x)
        assert (again.allocation_id, again.bases) == (amap.allocation_id, amap.bases)
    finally:
        symmem.free(x)


def test_bfloat16_stays_a_dlpack_object():
    x, _ = symmem.allocate_symmetric(8, dtype="bfloat16", framework="dlpack")
    try:
        assert (x.dtype, x.nbytes) == ("bfloat16", 16)
    finally:
        symmem.free(x)


def test_calls_from_another_thread_are_refused():
    import threading

    seen = []
    worker = threading.Thread(target=lambda: seen.append(
        pytest.raises(symmem.SymmemError, symmem.barrier)))
    worker.start()
    worker.join()
    assert seen and "another thread" in str(seen[0].value)


def test_import_needs_neither_torch_nor_numpy():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None
        sys.modules["numpy"] = None
        import symmem
        x, bases = symmem.allocate_symmetric(4, dtype="uint8")
        assert isinstance(x, symmem.SymmetricArray), type(x)
        assert bases.data_ptr() != 0
        symmem.free(x)
        assert symmem.finalize() == []
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_exit_without_finalize_is_reported():
    code = "import symmem\nx, _ = symmem.allocate_symmetric(4, framework='dlpack')\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "exits without symmem.finalize(); 1 symmetric allocation(s) never freed" in proc.stderr


def test_free_waits_for_the_device_unless_the_caller_already_did():
    # The wait is the session's (the provider's device-wide one; on the host provider a
    # no-op), counted by the extension.
    waits = symmem._native._device_waits
    x, _ = symmem.allocate_symmetric(4, framework="numpy")
    y, _ = symmem.allocate_symmetric(4, framework="numpy")
    before = waits()
    symmem.free(x)
    assert waits() == before + 1
    symmem.free(y, synchronize=False)
    assert waits() == before + 1
    for freed in (x, y):
        with pytest.raises(ValueError, match="freed already"):
            symmem.symmetric_address_map(freed)
    # Misuse is still refused before the collective and before any wait: by the package (a
    # slice) and by the extension (an allocation that is not live).
    z, _ = symmem.allocate_symmetric(8, framework="numpy")
    with pytest.raises(ValueError, match="not a slice"):
        symmem.free(z[2:])
    with pytest.raises(ValueError, match="no live symmetric allocation"):
        symmem._native.free(2**40)
    assert waits() == before + 1
    symmem.free(z)
    assert waits() == before + 2
    # A barrier waits for the device too: stores of queued kernels are complete after it.
    symmem.barrier()
    assert waits() == before + 3


def test_address_maps_of_one_allocation_share_their_table_until_it_is_freed():
    x, bases = symmem.allocate_symmetric(16, dtype="float64", framework="numpy")
    first = symmem.symmetric_address_map(x)
    again = symmem.symmetric_address_map(x[4:])
    assert again is first
    addr = x.__array_interface__["data"][0]
    assert int(bases[0]) == int(first.peer_bases[0]) == first.allocation_base == addr
    assert first.peer_bases.__array_interface__["data"][0] == bases.__array_interface__["data"][0]
    symmem.free(x)
    with pytest.raises(ValueError, match="freed already"):
        symmem.symmetric_address_map(x)


def test_reads_from_another_thread_are_refused_too():
    import threading

    x, bases = symmem.allocate_symmetric(4, framework="dlpack")
    seen = []

    def worker():
        for call in (lambda: symmem._native.find(x.data_ptr()),
                     lambda: symmem.symmetric_address_map(x),
                     bases.__dlpack__):
            with pytest.raises(symmem.SymmemError) as caught:
                call()
            seen.append(str(caught.value))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(seen) == 3 and all("another thread" in s for s in seen)
    symmem.free(x)


def test_the_context_floor_of_the_bench_leaves_nothing_behind():
    before = [o.id for o in symmem.outstanding()]
    allocate_ns, free_ns = symmem._native._bench_context_pair(4096)
    assert isinstance(allocate_ns, int) and isinstance(free_ns, int)
    assert [o.id for o in symmem.outstanding()] == before
    with pytest.raises(ValueError, match="at least 1"):
        symmem._native._bench_context_pair(0)
