"""Ties the pipeline together: picks the backend for an execution and runs it.

Today the reference backend (NumPy, op by op) is the only one; the compiled backends plug in
behind the same `execute`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np

from braze import config
from braze.errors import UnsupportedError
from braze.ir.fusion import Fusion
from braze.runtime import reference
from braze.runtime.arrays import to_kind
from braze.runtime.inputs import BoundInputs, bind_inputs

Backend = Callable[[Fusion, BoundInputs], list[np.ndarray]]
BACKENDS: dict[str, Backend] = {"reference": reference.run}
DEFAULT_BACKEND = "reference"
_dumped: weakref.WeakSet = weakref.WeakSet()  # fusions whose IR was dumped


def _pick_backend(backend: str | None, device: str | None) -> Backend:
    if device not in (None, "cpu"):
        raise UnsupportedError(f"device: expected None or 'cpu', got {device!r}; the CUDA backend is not available "
                               "in this build yet")
    name = backend or DEFAULT_BACKEND
    if name not in BACKENDS:
        raise UnsupportedError(f"backend: expected one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name]


def execute(fusion: Fusion, inputs: Sequence[object], backend: str | None = None,
            device: str | None = None) -> list:
    """Runs `fusion` on `inputs`; returns the non-hidden outputs as the inputs' kind of array."""
    run = _pick_backend(backend, device)
    if config.dumping("fusion_ir") and fusion not in _dumped:
        _dumped.add(fusion)
        config.dump("fusion_ir", str(fusion))
    bound = bind_inputs(fusion, inputs)
    results = run(fusion, bound)
    return [to_kind(r, bound.kind) for r, out in zip(results, fusion.outputs) if not out.hidden]
