//! DLPack export of symmetric memory: the C structs of dlpack.h (legacy `DLManagedTensor` and
//! the versioned `DLManagedTensorVersioned` of DLPack 1.0) and the PyCapsules that carry them.
//!
//! An export never owns the memory it describes: symmetric memory is freed only by the
//! collective `free`. What an export keeps alive is a [`Keep`]: a reference that lets the
//! allocation notice when the last tensor viewing it is gone (see `session::index::Tracker`),
//! or the host copy of a peer-bases table.

use crate::dtype::DType;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{CStr, c_void};
use std::sync::Arc;

/// `kDLCPU`.
pub const KDL_CPU: i32 = 1;
/// `kDLCUDA`.
pub const KDL_CUDA: i32 = 2;
/// `kDLROCM`.
pub const KDL_ROCM: i32 = 10;

/// The DLPack version the versioned export claims.
const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 0 };

pub const LEGACY_NAME: &CStr = c"dltensor";
pub const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

// The sizes dlpack.h gives on 64-bit targets: a layout slip here would corrupt every consumer.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<DLTensor>() == 48);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(std::mem::offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
};

/// What an export keeps alive while a consumer holds it.
#[derive(Clone)]
#[allow(
    dead_code,
    reason = "held, never read: what matters is when it is dropped"
)]
pub enum Keep {
    /// A view of a symmetric allocation: one holder of it (the session's `DataRef`), shared by
    /// the clones of this export and released when the last one goes.
    Data(Arc<dyn std::any::Any + Send + Sync>),
    /// The host copy of a peer-bases table (host provider).
    HostTable(Arc<[i64]>),
    /// A device table inside its allocation, valid until the allocation's collective free:
    /// watches the allocation (the session's `Watch`) without holding it.
    DeviceTable(Arc<dyn std::any::Any + Send + Sync>),
}

/// A dense, C-contiguous tensor: where it is and what it holds.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub data: u64,
    pub shape: Vec<i64>,
    pub dtype: DType,
    pub device: DLDevice,
}

impl TensorSpec {
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
    pub fn nbytes(&self) -> u64 {
        self.numel() as u64 * self.dtype.itemsize() as u64
    }
    /// Row-major strides in elements.
    fn strides(&self) -> Vec<i64> {
        let mut strides = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1];
        }
        strides
    }
    fn dl_tensor(&self) -> DLTensor {
        DLTensor {
            data: self.data as *mut c_void,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: DLDataType {
                code: self.dtype.code,
                bits: self.dtype.bits,
                lanes: 1,
            },
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }
}

/// One export: the managed tensor first (so a pointer to it is a pointer to the whole), then
/// the arrays its `DLTensor` points into and what it keeps alive.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: Box<[i64]>,
    strides: Box<[i64]>,
    _keep: Keep,
}

/// The deleter of both kinds: frees the whole [`Export`].
///
/// # Safety
/// `managed` is null or came from [`new_export`] with the same `M` and was not deleted yet.
unsafe extern "C" fn delete_export<M>(managed: *mut M) {
    if !managed.is_null() {
        // SAFETY: `managed` is the first field of a `#[repr(C)]` `Export<M>` made by
        // `Box::into_raw` in `new_export`, deleted at most once (the caller's contract).
        drop(unsafe { Box::from_raw(managed.cast::<Export<M>>()) });
    }
}

/// A versioned (DLPack 1.x) export of `spec`, read-write, owned by its deleter.
fn new_versioned_export(spec: &TensorSpec, keep: Keep) -> *mut DLManagedTensorVersioned {
    new_export(
        spec,
        keep,
        |dl_tensor| DLManagedTensorVersioned {
            version: VERSION,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export::<DLManagedTensorVersioned>),
            flags: 0,
            dl_tensor,
        },
        |m| &mut m.dl_tensor,
        |m| &mut m.manager_ctx,
    )
}

/// Boxes an export and points its tensor at its own shape and strides.
fn new_export<M>(
    spec: &TensorSpec,
    keep: Keep,
    make: impl FnOnce(DLTensor) -> M,
    tensor: impl Fn(&mut M) -> &mut DLTensor,
    ctx: impl Fn(&mut M) -> &mut *mut c_void,
) -> *mut M {
    let mut export = Box::new(Export {
        managed: make(spec.dl_tensor()),
        shape: spec.shape.clone().into_boxed_slice(),
        strides: spec.strides().into_boxed_slice(),
        _keep: keep,
    });
    let (shape, strides) = (export.shape.as_mut_ptr(), export.strides.as_mut_ptr());
    let t = tensor(&mut export.managed);
    t.shape = shape;
    t.strides = strides;
    let raw = Box::into_raw(export);
    // SAFETY: `raw` is the live box just leaked; `managed` is its first field.
    unsafe { *ctx(&mut (*raw).managed) = raw.cast() };
    raw.cast::<M>()
}

/// Capsule destructor for unconsumed legacy capsules: a consumer renames the capsule
/// (`used_dltensor`) when it takes the tensor, and then calls the deleter itself.
unsafe extern "C" fn legacy_capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by CPython with the capsule being destroyed; IsValid only compares names.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let managed =
                ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr()).cast::<DLManagedTensor>();
            delete_export(managed);
        }
    }
}

/// As [`legacy_capsule_destructor`], for `dltensor_versioned`.
unsafe extern "C" fn versioned_capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `legacy_capsule_destructor`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            delete_export(managed);
        }
    }
}

/// A new DLPack capsule for `spec`: versioned (DLPack 1.0) when the consumer asked for it with
/// `max_version >= (1, 0)`, else the legacy one every DLPack consumer understands.
pub fn capsule<'py>(
    py: Python<'py>,
    spec: &TensorSpec,
    keep: Keep,
    versioned: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (pointer, name, destructor): (*mut c_void, &CStr, ffi::PyCapsule_Destructor) = if versioned
    {
        let managed = new_versioned_export(spec, keep);
        (managed.cast(), VERSIONED_NAME, versioned_capsule_destructor)
    } else {
        let managed = new_export(
            spec,
            keep,
            |dl_tensor| DLManagedTensor {
                dl_tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_export::<DLManagedTensor>),
            },
            |m| &mut m.dl_tensor,
            |m| &mut m.manager_ctx,
        );
        (managed.cast(), LEGACY_NAME, legacy_capsule_destructor)
    };
    // SAFETY: `pointer` is a live export; `name` is a static C string as the capsule requires.
    let raw = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor)) };
    if raw.is_null() {
        // SAFETY: the capsule was not made, so the export is still ours alone.
        unsafe {
            if versioned {
                delete_export(pointer.cast::<DLManagedTensorVersioned>());
            } else {
                delete_export(pointer.cast::<DLManagedTensor>());
            }
        }
    }
    // SAFETY: a new reference, or null with the Python error set.
    unsafe { Bound::from_owned_ptr_or_err(py, raw) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype;

    fn spec(shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            data: 0x1000,
            shape,
            dtype: dtype::lookup("float32").unwrap(),
            device: DLDevice {
                device_type: KDL_CPU,
                device_id: 0,
            },
        }
    }

    #[test]
    fn strides_are_row_major() {
        assert_eq!(spec(vec![2, 3, 4]).strides(), vec![12, 4, 1]);
        assert_eq!(spec(vec![5]).strides(), vec![1]);
        assert_eq!(spec(vec![2, 3, 4]).nbytes(), 96);
    }

    #[test]
    fn an_export_points_at_its_own_shape_and_deletes_once() {
        let table: Arc<[i64]> = vec![1, 2].into();
        let s = spec(vec![2, 3]);
        let managed = new_versioned_export(&s, Keep::HostTable(Arc::clone(&table)));
        assert_eq!(Arc::strong_count(&table), 2);
        // SAFETY: a live export made just above; deleted once through its own deleter.
        unsafe {
            let t = &(*managed).dl_tensor;
            assert_eq!(std::slice::from_raw_parts(t.shape, 2), &[2, 3]);
            assert_eq!(std::slice::from_raw_parts(t.strides, 2), &[3, 1]);
            assert_eq!(
                (t.ndim, t.dtype.code, t.dtype.bits, t.dtype.lanes),
                (2, 2, 32, 1)
            );
            assert_eq!((*managed).manager_ctx, managed.cast());
            ((*managed).deleter.unwrap())(managed);
        }
        assert_eq!(Arc::strong_count(&table), 1);
    }
}
