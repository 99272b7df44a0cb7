//! The Python objects of an allocation: its tensor and peer-bases table as DLPack exporters
//! ([`SymmetricArray`]) and the allocation itself with its address map ([`Allocation`]).
//!
//! An export asks the session nothing but whether a host table's allocation is still live: a
//! tensor's and a device table's liveness are read from the trackers they keep.

use crate::dlpack::{self, Keep, TensorSpec};
use crate::exceptions::raise;
use crate::session::{self, AllocOut};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A dense tensor in symmetric memory (or a peer-bases table), exported through DLPack.
///
/// `torch.from_dlpack(a)`, `numpy.from_dlpack(a)` (CPU) and other DLPack consumers wrap it
/// without a copy. It also has `data_ptr()` and a `dtype` named like torch's, which is all a
/// Triton kernel argument needs.
#[pyclass(frozen, weakref, module = "symmem", name = "SymmetricArray")]
pub(crate) struct SymmetricArray {
    spec: TensorSpec,
    keep: Keep,
    allocation: u64,
    role: &'static str,
}

#[pymethods]
impl SymmetricArray {
    /// A DLPack capsule viewing this memory (DLPack 1.0 when `max_version >= (1, 0)`).
    /// `stream` is accepted and needs no wait: symmem leaves no work queued on this memory.
    #[pyo3(signature = (stream=None, *, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        let released = match &self.keep {
            // Only the session makes these keeps; anything else fails closed. Neither asks the
            // session: the table's export runs while allocate completes it.
            Keep::Data(data) => data
                .downcast_ref::<session::DataRef>()
                .is_none_or(session::DataRef::released),
            Keep::DeviceTable(watch) => watch
                .downcast_ref::<session::Watch>()
                .is_none_or(session::Watch::released),
            Keep::HostTable(_) => !session::is_live(self.allocation).map_err(raise)?,
        };
        if released {
            return Err(PyBufferError::new_err(format!(
                "symmetric allocation #{} was freed (or symmem.finalize() ended the session): \
                 its memory may belong to another allocation now, so this {} is no longer \
                 exported; use the tensors of a live allocation",
                self.allocation, self.role
            )));
        }
        let own = (self.spec.device.device_type, self.spec.device.device_id);
        if let Some(wanted) = dl_device.filter(|&d| d != own) {
            return Err(PyBufferError::new_err(format!(
                "symmetric memory lives on DLPack device {own:?} and is exported only there \
                 (asked for {wanted:?}); copy it with the consumer instead"
            )));
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "symmetric memory is exported without a copy (copy=True was asked); copy the \
                 consumer's tensor instead",
            ));
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::capsule(py, &self.spec, self.keep.clone(), versioned)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (self.spec.device.device_type, self.spec.device.device_id)
    }

    /// Address of the first element in this process.
    fn data_ptr(&self) -> u64 {
        self.spec.data
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.spec.shape)
    }

    /// Element type, named as torch and numpy name it (`float32`, `int64`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.spec.dtype.name
    }

    #[getter]
    fn itemsize(&self) -> usize {
        self.spec.dtype.itemsize()
    }

    #[getter]
    fn nbytes(&self) -> u64 {
        self.spec.nbytes()
    }

    /// `(DLPack device type, device id)`: `(1, 0)` CPU, `(2, n)` CUDA, `(10, n)` ROCm.
    #[getter]
    fn device(&self) -> (i32, i32) {
        self.__dlpack_device__()
    }

    /// Sequence number of the allocation (the same on every rank).
    #[getter]
    fn allocation_id(&self) -> u64 {
        self.allocation
    }

    /// `"tensor"` or `"peer_bases"`.
    #[getter]
    fn role(&self) -> &'static str {
        self.role
    }

    fn __len__(&self) -> usize {
        self.spec.shape.first().copied().unwrap_or(1) as usize
    }

    fn __repr__(&self) -> String {
        format!(
            "SymmetricArray(role={}, allocation={}, shape={:?}, dtype={}, device={:?}, data_ptr={:#x})",
            self.role,
            self.allocation,
            self.spec.shape,
            self.spec.dtype.name,
            self.__dlpack_device__(),
            self.spec.data
        )
    }
}

/// One allocation as `allocate` and `address_map` return it (the package wraps it).
#[pyclass(frozen, module = "symmem", name = "_Allocation")]
pub(crate) struct Allocation {
    #[pyo3(get)]
    id: u64,
    #[pyo3(get)]
    rank: usize,
    #[pyo3(get)]
    world_size: usize,
    #[pyo3(get)]
    base: u64,
    #[pyo3(get)]
    nbytes: u64,
    #[pyo3(get)]
    bases: Vec<u64>,
    #[pyo3(get)]
    direct: Vec<bool>,
    #[pyo3(get)]
    data: Option<Py<SymmetricArray>>,
    #[pyo3(get)]
    peer_bases: Py<SymmetricArray>,
}

pub(crate) fn array(
    py: Python<'_>,
    (spec, keep): (TensorSpec, Keep),
    allocation: u64,
    role: &'static str,
) -> PyResult<Py<SymmetricArray>> {
    Py::new(
        py,
        SymmetricArray {
            spec,
            keep,
            allocation,
            role,
        },
    )
}

pub(crate) fn to_allocation(py: Python<'_>, out: AllocOut) -> PyResult<Allocation> {
    let data = match out.data {
        Some(data) => Some(array(py, data, out.id, "tensor")?),
        None => None,
    };
    Ok(Allocation {
        id: out.id,
        rank: out.rank,
        world_size: out.world_size,
        base: out.base,
        nbytes: out.bytes,
        bases: out.bases,
        direct: out.direct,
        data,
        peer_bases: array(py, out.table, out.id, "peer_bases")?,
    })
}
