"""Shared helpers: where symmem-run is, and running a rank script under it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RANKS = HERE / "ranks"
REPO = HERE.parents[2]


def find_symmem_run() -> str:
    """SYMMEM_RUN, else the workspace's own build, else PATH. Missing is a failure, never a
    skip: the multi-rank tests are the point of this suite."""
    explicit = os.environ.get("SYMMEM_RUN")
    candidates = [explicit] if explicit else []
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    candidates += [str(target / "debug" / "symmem-run"), str(target / "release" / "symmem-run")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    on_path = shutil.which("symmem-run")
    if on_path:
        return on_path
    pytest.fail(
        "symmem-run not found: build it with `cargo build -p symmem-launch --bin symmem-run` "
        "or set SYMMEM_RUN"
    )


@pytest.fixture(scope="session")
def symmem_run() -> str:
    return find_symmem_run()


def run_ranks(launcher: str, ranks: int, script: str, *args: str, env=None, timeout=120):
    """Runs tests/ranks/SCRIPT on RANKS ranks; returns the CompletedProcess (text)."""
    cmd = [launcher, "--ranks", str(ranks), "--timeout", f"{timeout}s", "--grace", "2s", "--",
           sys.executable, str(RANKS / script), *args]
    full_env = dict(os.environ)
    # A rank must not inherit a parent's identity or rendezvous.
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SYMMEM_RENDEZVOUS",
                "SYMMEM_PROVIDER", "SYMMEM_NODE_ID"):
        full_env.pop(var, None)
    full_env.update({"TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1", "SYMMEM_HOST_HEAP_SIZE": "64M"})
    full_env.update(env or {})
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True,
                          timeout=timeout + 30, preexec_fn=default_signals)


def default_signals() -> None:
    """Runs in the child before exec: SIGINT, SIGTERM and SIGHUP at their defaults, as in a
    job started from a terminal. A shell without job control starts background commands with
    SIGINT ignored, and symmem-run and Python both keep an inherited SIG_IGN: the ranks would
    then never see Ctrl-C (as `symmem_test_support::command::with_default_signals` says for
    the Rust tests)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def show(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
