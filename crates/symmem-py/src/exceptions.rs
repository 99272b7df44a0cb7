//! The exceptions of `symmem._native` and how a session's failure becomes one.

use crate::session::Fail;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    symmem,
    SymmemError,
    PyRuntimeError,
    "A symmem operation failed (provider, collective or state error)."
);
create_exception!(
    symmem,
    CollectiveMismatchError,
    SymmemError,
    "Ranks issued different collectives (e.g. allocations of different sizes or order)."
);
create_exception!(
    symmem,
    PeerFailedError,
    SymmemError,
    "Another rank failed or vanished; this rank only witnessed it (exit with EXIT_PEER_FAILED)."
);
create_exception!(
    symmem,
    UnavailableError,
    SymmemError,
    "The provider cannot run here (no shim library, no GPU, no SHMEM library); the message names the fix."
);

pub(crate) fn raise(fail: Fail) -> PyErr {
    match fail {
        Fail::Value(m) => PyValueError::new_err(m),
        Fail::Type(m) => PyTypeError::new_err(m),
        Fail::Symmem(m) => SymmemError::new_err(m),
        Fail::Mismatch(m) => CollectiveMismatchError::new_err(m),
        Fail::PeerFailed(m) => PeerFailedError::new_err(m),
        Fail::Unavailable(m) => UnavailableError::new_err(m),
    }
}
