//! The meeting of the ranks over a torch.distributed group: each rank's [`Arrival`] and card,
//! and the meeting `init` starts the session through.

use crate::exceptions::SymmemError;
use crate::session;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use symmem_bootstrap::Meeting;

/// This rank's arrival at a meeting over a torch.distributed group: `card()` is what it
/// contributes to the group's all-gather; `init(..., arrival=, cards=)` takes it back with
/// every rank's card.
#[pyclass(module = "symmem._native")]
pub(crate) struct Arrival(Option<symmem_bootstrap::Arrival>);

#[pymethods]
impl Arrival {
    /// Gives up the arrival (rank 0: closes its listener) when the all-gather failed.
    fn close(&mut self) {
        self.0 = None;
    }

    /// The bytes this rank contributes to the group's all-gather.
    fn card<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let arrival = self
            .0
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("this arrival was used by init already"))?;
        Ok(pyo3::types::PyBytes::new(py, &arrival.card()))
    }
}

/// Rank `rank` of `world_size` arrives at a meeting (see [`Arrival`]) to start `provider`
/// (else `SYMMEM_PROVIDER`, else host). What would stop this rank after the all-gather (the
/// launcher's variables naming another rank, an invalid setting, an unknown provider, or
/// `refusal`, the package's own reason) rides in its card instead, and every rank's init fails
/// with it: no rank waits for one that left.
#[pyfunction]
#[pyo3(signature = (rank, world_size, provider=None, refusal=None))]
pub(crate) fn arrive(
    rank: usize,
    world_size: usize,
    provider: Option<String>,
    refusal: Option<String>,
) -> PyResult<Arrival> {
    let node = symmem::settings::NODE_ID.get();
    let launcher = symmem::RankIdentity::from_env().map_err(|e| e.to_string());
    let mut arrival =
        symmem_bootstrap::Arrival::new(rank, world_size, *node.as_ref().unwrap_or(&0), launcher)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if let Some(reason) = refusal {
        arrival.refuse(reason);
    }
    if let Err(e) = node {
        arrival.refuse(e.to_string());
    }
    if let Err(e) = symmem::settings::COLLECTIVE_TIMEOUT.get() {
        arrival.refuse(e.to_string());
    }
    match session::provider_kind(provider) {
        Ok(kind) => {
            arrival.provider(kind.name());
            // The provider's own settings, read after the meeting: an invalid one refuses now.
            let invalid = match kind {
                symmem::ProviderKind::Host => symmem::settings::HOST_HEAP_SIZE.get().err(),
                symmem::ProviderKind::Nvshmem | symmem::ProviderKind::Rocshmem => {
                    (symmem::settings::GPU_HEAP_SIZE.read().err())
                        .or(symmem::settings::DEVICE.read().err())
                }
            };
            if let Some(e) = invalid {
                arrival.refuse(e.to_string());
            }
        }
        Err(fail) => arrival.refuse(fail.message()),
    }
    Ok(Arrival(Some(arrival)))
}

/// The meeting of `init`'s `arrival` and `cards` (every rank's card, in rank order), or `None`
/// without either: the ranks then meet through the launcher's variables.
pub(crate) fn meeting(
    arrival: Option<Bound<'_, Arrival>>,
    cards: Option<Vec<Vec<u8>>>,
) -> PyResult<Option<Meeting>> {
    Ok(match (arrival, cards) {
        (None, None) => None,
        (Some(arrival), Some(cards)) => {
            let arrival = arrival.borrow_mut().0.take().ok_or_else(|| {
                PyValueError::new_err("this arrival was used by init already: arrive again")
            })?;
            let meeting = symmem_bootstrap::Meeting::new(arrival, &cards)
                .map_err(|e| SymmemError::new_err(e.to_string()))?;
            Some(meeting)
        }
        _ => {
            return Err(PyValueError::new_err(
                "give both arrival and cards, or neither",
            ));
        }
    })
}
