"""The reference backend: evaluates a fusion op by op with each op's NumPy reference rule.

It is the oracle the compiled backends are tested against, so it favours clarity over speed.
"""

from __future__ import annotations

import numpy as np

from braze.host.shapes import infer_layout
from braze.ir.fusion import AliasKind, FusionGraph, Output
from braze.ir.tensor import TensorView
from braze.ops.reductions import check_empty_reductions, reductions_without_identity
from braze.ops.table import RefContext, lookup
from braze.runtime.inputs import BoundInputs
from braze.runtime.rng import next_seed_offset


def _constant(tv: TensorView, bindings: dict[str, int]) -> np.ndarray:
    # A Python literal keeps its exact value (as float64 or int64) until an op casts it.
    if tv.scalar == "extent":  # an extent used as a value
        return np.asarray(tv.value.evaluate(bindings), dtype=tv.dtype.numpy)
    return np.asarray(tv.value) if tv.scalar == "literal" else np.asarray(tv.value, dtype=tv.dtype.numpy)


def evaluate(fusion: FusionGraph, bound: BoundInputs) -> dict[int, np.ndarray]:
    """The value of every tensor of the fusion, keyed by id(tensor)."""
    ctx = RefContext(bound.bindings, next_seed_offset)
    empty = [e for e in reductions_without_identity(fusion)
             if any(ctx.extent(e.inputs[0].visible[a].extent) == 0 for a in e.attrs["axes"])]
    check_empty_reductions(fusion, empty, bound.bindings)  # as the compiled backends do, before any op
    values: dict[int, np.ndarray] = {id(tv): a for tv, a in zip(fusion.inputs, bound.arrays)}
    for expr in fusion.exprs:
        args = [values[id(tv)] if id(tv) in values else _constant(tv, bound.bindings) for tv in expr.inputs]
        (out,) = expr.outputs
        result = lookup(expr.op).reference(ctx, args, out, expr.attrs)
        expected = ctx.shape(out.logical)
        assert result.shape == expected, f"{expr.op} reference gave {result.shape}, expected {expected}"
        values[id(out)] = result
    return values


def _in_layout(array: np.ndarray, tv: TensorView, bindings: dict[str, int]) -> np.ndarray:
    """A fresh array holding `array`, laid out as the output's allocation domain says (as the
    compiled backends lay it out)."""
    layout = infer_layout(tv)
    strides = [s.evaluate(bindings) * array.itemsize for s in layout.strides]
    storage = np.empty(layout.numel.evaluate(bindings), array.dtype)
    view = np.ndarray(array.shape, array.dtype, storage, 0, strides)
    view[...] = array
    return view


def _materialize(output: Output, value: np.ndarray, fusion: FusionGraph, bound: BoundInputs) -> np.ndarray:
    if output.alias is AliasKind.REUSE_BUFFER:
        target = bound.arrays[[id(t) for t in fusion.inputs].index(id(output.aliased_input))]
        np.copyto(target, value)
        return target
    if output.alias is AliasKind.EVALUATE:
        return value  # the reference rules of view ops return NumPy views of the input
    return _in_layout(value, output.tv, bound.bindings)


def run(fusion: FusionGraph, bound: BoundInputs) -> list[np.ndarray]:
    """Every output's array (hidden ones included), in add_output order.

    Outputs written in place are written last, from copies, so no output sees an input that
    another in-place output already overwrote.
    """
    values = evaluate(fusion, bound)
    in_place = [o.alias is AliasKind.REUSE_BUFFER for o in fusion.outputs]
    results: list[np.ndarray | None] = []
    for output, written in zip(fusion.outputs, in_place):
        value = values[id(output.tv)] if id(output.tv) in values else _constant(output.tv, bound.bindings)
        value = np.array(value) if written else value  # `evaluate` views keep aliasing: they see the update
        results.append(None if written else _materialize(output, value, fusion, bound))
        values[id(output.tv)] = value
    for i, (output, written) in enumerate(zip(fusion.outputs, in_place)):
        if written:
            results[i] = _materialize(output, values[id(output.tv)], fusion, bound)
    return results
