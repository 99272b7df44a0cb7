"""Ranks started by symmem-run on the host provider (the rank scripts are in ranks/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import run_ranks, show

RANK_COUNTS = [1, 2, 4, 8]


def passes(proc, ranks: int, what: str) -> None:
    assert proc.returncode == 0, show(proc)
    lines = [line for line in proc.stdout.splitlines() if f"PASS {what}" in line]
    assert len(lines) == ranks, show(proc)


@pytest.mark.parametrize("ranks", RANK_COUNTS)
def test_alltoall_numpy(symmem_run, ranks):
    passes(run_ranks(symmem_run, ranks, "alltoall.py", "numpy"), ranks, "alltoall")


@pytest.mark.parametrize("ranks", [1, 4])
def test_alltoall_raw_dlpack(symmem_run, ranks):
    passes(run_ranks(symmem_run, ranks, "alltoall.py", "dlpack"), ranks, "alltoall")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("ranks", [1, 4])
def test_alltoall_torch(symmem_run, ranks):
    passes(run_ranks(symmem_run, ranks, "alltoall.py", "torch"), ranks, "alltoall")


@pytest.mark.parametrize("ranks", [2, 4])
def test_emulated_nodes(symmem_run, ranks):
    passes(run_ranks(symmem_run, ranks, "nodes.py"), ranks, "nodes")


@pytest.mark.parametrize("ranks", [1, 3])
def test_bad_input_is_refused_and_nothing_is_lost(symmem_run, ranks):
    passes(run_ranks(symmem_run, ranks, "bad_input.py"), ranks, "bad input")


def test_mismatched_collective_is_an_error_not_a_hang(symmem_run):
    proc = run_ranks(symmem_run, 3, "mismatch.py", timeout=60)
    passes(proc, 3, "mismatch")


def test_dropped_tensor_is_reported(symmem_run):
    proc = run_ranks(symmem_run, 2, "leak.py")
    passes(proc, 2, "leak report")
    warned = [line for line in proc.stderr.splitlines()
              if "garbage-collected without symmem.free()" in line]
    assert len(warned) == 2, show(proc)
    assert "allocation=1" in warned[0], show(proc)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_gpu_triton_kernels_on_the_host_provider(symmem_run, ranks):
    """tests/gpu/triton_alltoall.py's kernels, unchanged, under Triton's CPU interpreter."""
    passes(run_ranks(symmem_run, ranks, "triton_interpret.py", timeout=300), ranks,
           "triton interpreter")


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
    reason="needs torch and triton",
)
@pytest.mark.parametrize("ranks", [2, 4])
def test_gpu_script_itself_on_the_host_provider(symmem_run, ranks):
    """tests/gpu/triton_alltoall.py as the GPU machine runs it, here on CPU tensors with Triton's
    interpreter: the whole script, not only its kernels."""
    script = str(Path(__file__).resolve().parent / "gpu" / "triton_alltoall.py")
    proc = run_ranks(symmem_run, ranks, script, env={"TRITON_INTERPRET": "1"}, timeout=300)
    passes(proc, ranks, "triton alltoall")
    assert f"SUMMARY PASS: triton alltoall on {ranks} PEs: {ranks}/{ranks} ranks PASS" \
        in proc.stdout, show(proc)


def test_a_fork_after_init_is_refused_and_the_ranks_stay_in_step(symmem_run):
    passes(run_ranks(symmem_run, 2, "fork.py", timeout=60), 2, "fork")


def test_ctrl_c_interrupts_a_waiting_collective_and_poisons_the_session(symmem_run, tmp_path):
    proc = run_ranks(symmem_run, 2, "interrupt.py", timeout=90,
                     env={"INTERRUPT_TEST_DIR": str(tmp_path), "SYMMEM_COLLECTIVE_TIMEOUT": "70s"})
    passes(proc, 2, "interrupt")


def test_an_uncaught_peer_failure_exits_as_a_witness(symmem_run):
    proc = run_ranks(symmem_run, 2, "uncaught_peer_failed.py", timeout=60)
    assert proc.returncode == 75, show(proc)
    assert "PeerFailedError" in proc.stderr, show(proc)
    summary = [line for line in proc.stderr.splitlines() if line.startswith("symmem-run:")]
    assert any("rank 1" in line for line in summary), show(proc)
    assert not any("rank 0 exited with status 1" in line for line in summary), show(proc)
