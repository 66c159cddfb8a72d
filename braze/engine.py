"""Ties the pipeline together (DESIGN section 2).

On a cache miss it runs segment + schedule, lower, codegen and compile; on a hit it calls the
runtime. The `FusionCache` of each fusion maps an input signature to its `FusionRuntime`.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from braze import config, schedule
from braze.errors import UnsupportedError
from braze.ir.fusion import Fusion
from braze.kir import kernel_text
from braze.lower.kernel import lower
from braze.lower.values import NeedsCut
from braze.runtime import reference
from braze.runtime.arrays import to_kind
from braze.runtime.compiled_kernel import CompiledKernel
from braze.runtime.executor import KernelExecutor
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.inputs import BoundInputs, bind_inputs
from braze.runtime.record import note_segments

Backend = Callable[[Fusion, BoundInputs], list[np.ndarray]]
DEFAULT_BACKEND = "llvm"
CACHE_ENTRIES = 64  # signatures kept per fusion
_dumped: weakref.WeakSet = weakref.WeakSet()  # fusions whose IR was dumped
_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # fusion -> FusionCache
_kernels: dict[str, CompiledKernel] = {}  # Kernel IR text -> compiled kernel, shared by all fusions


def signature(fusion: Fusion, bound: BoundInputs) -> tuple:
    """The part of the inputs that changes the generated code: which strides are 1, index width.

    Ranks and dtypes are fixed by the definition (the inputs were checked against it); extents
    stay symbolic, so new shapes reuse the compiled kernel.
    """
    parts = []
    for tv, array in zip(fusion.inputs, bound.arrays):
        if tv.scalar is None:
            unit = tuple(s == array.itemsize and not d.is_broadcast for s, d in zip(array.strides, tv.visible))
            parts.append((unit, array.size >= 2**31))
    return tuple(parts)


def _input_strides(fusion: Fusion, key: tuple) -> dict[int, tuple[int | None, ...]]:
    tensors = [tv for tv in fusion.inputs if tv.scalar is None]
    return {id(tv): tuple(1 if unit else None for unit in units) for tv, (units, _) in zip(tensors, key)}


def compile_fusion(fusion: Fusion, key: tuple) -> FusionRuntime:
    """Plans, lowers and compiles `fusion` for one signature, cutting where the lowering asks to."""
    cuts: set[int] = set()
    while True:
        plan = schedule.plan(fusion, cuts)
        try:
            kernel, params = lower(fusion, plan.writes, plan.loop_orders, _input_strides(fusion, key), "fusion")
            break
        except NeedsCut as cut:
            cuts.add(id(cut.tv))
    if config.dumping("segments"):
        config.dump("segments", "\n".join(f"{tv.name}: {h}" for tv, h in zip(plan.writes, plan.heuristics)))
    note_segments([tv.name for tv in plan.writes])
    # Kernels are shared when their Kernel IR is the same (the task bounds live there, not in the code).
    text = kernel_text(kernel)
    if text not in _kernels:
        _kernels[text] = CompiledKernel(kernel)
    compiled = _kernels[text].compile()
    return FusionRuntime(fusion, KernelExecutor(compiled), plan.writes, params)


class FusionCache:
    """Input signature -> FusionRuntime for one fusion, least recently used dropped first."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple, FusionRuntime] = OrderedDict()

    def runtime(self, fusion: Fusion, bound: BoundInputs) -> FusionRuntime:
        key = signature(fusion, bound)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = compile_fusion(fusion, key)
            if len(self.entries) > CACHE_ENTRIES:
                self.entries.popitem(last=False)
        else:
            self.entries.move_to_end(key)
        return entry


def _run_compiled(fusion: Fusion, bound: BoundInputs) -> list[np.ndarray]:
    cache = _caches.get(fusion)
    if cache is None:
        cache = _caches[fusion] = FusionCache()
    return cache.runtime(fusion, bound).run(bound)


BACKENDS: dict[str, Backend] = {"reference": reference.run, "llvm": _run_compiled}


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
