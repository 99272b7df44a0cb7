#!/usr/bin/env bash
# The Python face, end to end on the host provider: a venv with maturin, pytest, numpy, torch
# (CPU use: gloo process groups, spawn, torchrun) and Triton (CPU interpreter only: it runs the
# GPU test's kernels) from PyPI, the abi3 wheel built and installed, symmem-run built, then
# pytest (ranks started by symmem-run, torch.multiprocessing.spawn or torchrun) and torchrun
# --nnodes 2 across two emulated nodes (crates/symmem-cluster/tests/torchrun.rs; as root, with
# the cluster's tools). Needs python3 (3.9+), cargo and PyPI; run from anywhere, extra
# arguments go to pytest:
#   bash crates/symmem-py/ci.sh   (PROFILE=release: optimised wheel; TRITON=0: no Triton or torch;
#                                  KEEP_VENV=0: remove the venv at the end, pass or fail)
# Leaves the venv in target/py-ci/venv (in ~/.cache/symmem/ when target/ is under /tmp, /run or
# /dev/shm, out of the emulated nodes' sight) and the wheel in target/py-ci/wheels.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work="$target/py-ci"
venv="$work/venv"
case "$venv" in
  # The emulated nodes of the torchrun test have their own /tmp, /run and /dev/shm: a venv
  # there is out of their sight, so it goes to this user's cache instead (one per checkout).
  /tmp/* | /run/* | /dev/shm/*)
    venv="${XDG_CACHE_HOME:-$HOME/.cache}/symmem/py-ci-venv-$(printf %s "$target" | sha256sum | cut -c1-12)" ;;
esac
profile=${PROFILE:-debug}
# With torch's CUDA wheels (PyPI's torch is the CUDA build) the venv is about 5 GB.
[ "${KEEP_VENV:-1}" = 0 ] && trap 'rm -rf "$venv"' EXIT

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# maturin's range and the GPU machine's Triton (so the kernels are checked with the version that
# will compile them) are pins.toml's [python] table.
packages=("maturin$(scripts/pin python.maturin)" "pytest>=7" "numpy>=1.22")
[ "${TRITON:-1}" = 0 ] || packages+=("triton==$(scripts/pin python.triton)" "torch==$(scripts/pin python.torch)")
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"

release=()
[ "$profile" = release ] && release=(--release)
rm -rf "$work/wheels"
"$venv/bin/maturin" build "${release[@]}" --locked --interpreter "$venv/bin/python" \
  -m crates/symmem-py/Cargo.toml --out "$work/wheels"
wheels=("$work"/wheels/symmem-*-cp39-abi3-*.whl)
wheel=${wheels[0]}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
  --no-deps "$wheel"

cargo build --locked -p symmem-launch --bin symmem-run
export SYMMEM_RUN="$target/debug/symmem-run"
# Run from the tests folder, so `import symmem` is the installed wheel, not the source tree.
(cd crates/symmem-py/tests && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@")

if [ "${TRITON:-1}" != 0 ] && [ $# = 0 ]; then
  SYMMEM_TEST_PYTHON="$venv/bin/python" cargo test --locked -p symmem-cluster --test torchrun \
    -- --ignored --nocapture
fi
