#!/usr/bin/env bash
# Creates (or completes) the venv that scripts/ascend_check.py runs in: CPU torch and triton-ascend, which installs as
# the `triton` module and so can never share a venv with NVIDIA's Triton.
#
#   scripts/ascend_venv.sh [VENV_DIR]        default: .venv-ascend in the repo root
#
# Environment:
#   PYTHON            interpreter to build the venv from (default python3.11: triton-ascend 3.2.0 ships cp311 only)
#   TORCH_WHEEL_DIR   a directory holding a torch 2.13.0 CPU wheel (default /opt/wheels where it exists); without
#                     one, torch comes from PyTorch's CPU index
# Safe to re-run: an existing venv is reused and pip skips what is already installed at the pinned versions.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-ascend}"
PYTHON="${PYTHON:-python3.11}"
TORCH_VERSION=2.13.0
TRITON_ASCEND_VERSION=3.2.0
TORCH_WHEEL_DIR="${TORCH_WHEEL_DIR:-/opt/wheels}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# torch pinned, CPU build: a bare `torch` would pull the CUDA build (gigabytes, and not what the check needs)
if ls "$TORCH_WHEEL_DIR"/torch-"$TORCH_VERSION"*cpu*.whl >/dev/null 2>&1; then
    "${PIP[@]}" --find-links "$TORCH_WHEEL_DIR" "torch==$TORCH_VERSION"
else
    "${PIP[@]}" --extra-index-url https://download.pytorch.org/whl/cpu "torch==$TORCH_VERSION"
fi
# numpy: torch imports it when present and warns when not; pybind11: triton-ascend builds its launcher helpers
# with it (unused by the stub driver, but the package expects it)
"${PIP[@]}" "triton-ascend==$TRITON_ASCEND_VERSION" pybind11 numpy

"$VENV/bin/python" - <<'PY'
from triton.backends import backends
assert "ascend" in backends, f"triton in this venv is not triton-ascend: backends {sorted(backends)}"
import torch, triton
print(f"ok: torch {torch.__version__}, triton-ascend {triton.__version__}")
PY
echo "run: $VENV/bin/python $ROOT/scripts/ascend_check.py"
