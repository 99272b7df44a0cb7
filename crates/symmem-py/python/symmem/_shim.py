"""The GPU shim a wheel carries, and what it needs loaded first.

A wheel built by ``cargo xtask wheel --backend nvshmem|rocshmem`` holds the shim library at
``symmem/_lib/<library>`` beside ``symmem/_lib/BUILD.json`` (backend, arch, versions,
commit). :func:`locate` answers where it is for a provider; a wheel built without one (the
plain ``maturin build``, the host provider's) has no ``_lib`` folder and gets ``None``.

The NVSHMEM shim links ``libnvshmem_host.so.3`` (ELF NEEDED, no run path); the wheel requires
the pip package that ships it (``nvidia-nvshmem-cu13``, at the exact version the shim was
built against), and :func:`locate` loads that file first, so that the dynamic loader finds it
already loaded when the shim is opened.
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Dict, Optional

from ._native import UnavailableError

__all__ = ["MissingRuntimeError", "locate", "packaged"]

#: The folder of the packaged shim and its BUILD.json.
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")

#: The library the NVSHMEM shim needs (its NEEDED entry), inside the NVSHMEM pip package.
NVSHMEM_HOST = "libnvshmem_host.so.3"
_NVSHMEM_HOST_IN_PACKAGE = "nvidia/nvshmem/lib/" + NVSHMEM_HOST

_GPU_PROVIDERS = ("nvshmem", "rocshmem")

# Handles of what was preloaded: kept for the process's life (the shim binds to them).
_preloaded: Dict[str, ctypes.CDLL] = {}


class MissingRuntimeError(UnavailableError, ImportError):
    """The packaged shim's SHMEM library is not installed (or not at the version it was built
    against); the message names the ``pip install`` that fixes it. Both a
    ``symmem.UnavailableError`` and an ``ImportError``."""


def packaged() -> Optional[Dict[str, Any]]:
    """The packaged shim's BUILD.json (``backend``, ``library``, ``arch``,
    ``symmem_version``, ``commit``, and ``nvshmem_version`` / ``nvshmem_package`` or
    ``rocshmem_version`` / ``rocshmem_commit``), or ``None`` when this install carries no shim.
    Reads one small file; loads nothing."""
    path = os.path.join(SHIM_DIR, "BUILD.json")
    try:
        with open(path, encoding="utf-8") as f:
            build = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UnavailableError(
            f"the symmem install is damaged: cannot read {path} ({e}); reinstall the wheel "
            f"(pip install --force-reinstall <the symmem wheel>)"
        ) from e
    if not isinstance(build, dict) or not isinstance(build.get("backend"), str):
        raise UnavailableError(
            f"the symmem install is damaged: {path} names no backend; reinstall the wheel"
        )
    return build


def locate(provider: str) -> Optional[str]:
    """The path of the shim this install carries for ``provider``, ready to be opened, or
    ``None`` when it carries none for it (the host provider, a wheel without a shim, a wheel
    of the other GPU backend).

    For ``"nvshmem"``, first loads ``libnvshmem_host.so.3`` from the ``nvidia-nvshmem-cu13``
    package (``RTLD_NOW | RTLD_GLOBAL``, once per process), after checking that its version is
    the one BUILD.json names; raises :class:`MissingRuntimeError` (an ``ImportError`` and a
    ``symmem.UnavailableError``) naming ``pip install nvidia-nvshmem-cu13==X`` when it is
    missing or another version, and ``symmem.UnavailableError`` when the install is damaged.
    For any provider but ``nvshmem`` and ``rocshmem`` it returns ``None`` at once, touching
    nothing.
    """
    provider = provider.strip().lower()
    if provider not in _GPU_PROVIDERS:
        return None
    build = packaged()
    if build is None or build["backend"] != provider:
        return None
    path = os.path.join(SHIM_DIR, str(build.get("library", "")))
    if not build.get("library") or not os.path.isfile(path):
        raise UnavailableError(
            f"the symmem install is damaged: {os.path.join(SHIM_DIR, 'BUILD.json')} names the "
            f"{provider} shim {build.get('library')!r}, which is not in {SHIM_DIR}; reinstall "
            f"the wheel (pip install --force-reinstall <the symmem wheel>)"
        )
    if provider == "nvshmem":
        _preload_nvshmem(build)
    return path


def _preload_nvshmem(build: Dict[str, Any]) -> None:
    """Loads NVSHMEM's host library from its pip package, at the version the shim needs."""
    if NVSHMEM_HOST in _preloaded:
        return
    package = build.get("nvshmem_package")
    version = build.get("nvshmem_version")
    if not package or not version:
        raise UnavailableError(
            f"the symmem install is damaged: {os.path.join(SHIM_DIR, 'BUILD.json')} names no "
            f"NVSHMEM package and version; reinstall the wheel"
        )
    fix = f"run `pip install {package}=={version}`"
    # Imported here: the host provider never pays for it.
    from importlib import metadata

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise MissingRuntimeError(
            f"the nvshmem provider is unavailable: NVSHMEM is not installed (the symmem "
            f"wheel's NVSHMEM shim needs {NVSHMEM_HOST} from the pip package {package} "
            f"{version}); {fix}"
        ) from None
    found = dist.version
    if found != version:
        raise MissingRuntimeError(
            f"the nvshmem provider is unavailable: {package} {found} is installed, but the "
            f"symmem wheel's NVSHMEM shim was built against {version}; {fix} (or install a "
            f"symmem wheel built for NVSHMEM {found})"
        )
    library = str(dist.locate_file(_NVSHMEM_HOST_IN_PACKAGE))
    if not os.path.isfile(library):
        raise MissingRuntimeError(
            f"the nvshmem provider is unavailable: {package} {found} is installed but has no "
            f"{library}; run `pip install --force-reinstall {package}=={version}`"
        )
    try:
        _preloaded[NVSHMEM_HOST] = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        raise UnavailableError(
            f"the nvshmem provider is unavailable: loading {library} failed ({e}); reinstall "
            f"it: `pip install --force-reinstall {package}=={version}`"
        ) from e
