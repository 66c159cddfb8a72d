"""A fusion's definition is final: at the end of its `with` block, or at its first execute when it
was built without one. Compiled code and cached calls are made from it, so a later change would
return results of the old definition."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz

FINAL = r"expected a fusion still being defined, got 'f', final since"


def _doubling() -> tuple[bz.Fusion, bz.TensorView, bz.TensorView]:
    with bz.Fusion("f") as f:
        x = f.define_tensor((-1,), name="x")
        y = x * 2.0
        f.add_output(y)
    return f, x, y


@pytest.mark.parametrize("change, what", [
    (lambda f, x, y: f.add_output(x + 1.0), "add"),
    (lambda f, x, y: f.add_output(y, hidden=True), "add_output"),
    (lambda f, x, y: f.define_tensor((-1,)), "define_tensor"),
    (lambda f, x, y: f.define_scalar(dtype=bz.float32), "define_scalar"),
    (lambda f, x, y: x * 3.0, "mul"),
    (lambda f, x, y: bz.ops.sum(y, axes=[0]), "sum"),
    (lambda f, x, y: bz.ops.exp(x), "exp"),
    (lambda f, x, y: y.split(0, 4), "split of T"),
    (lambda f, x, y: bz.ops.expand(bz.ops.broadcast(x, [True, False]), (3, -1)), "broadcast"),
])
@pytest.mark.parametrize("executed", [False, True])
def test_changing_a_fusion_after_its_with_block_raises_naming_the_change(change, what: str, executed: bool) -> None:
    f, x, y = _doubling()
    a = np.arange(4, dtype=np.float32)
    if executed:
        f.execute([a])
    with pytest.raises(bz.FusionDefinitionError, match=rf"^{what}.*: {FINAL} the end of its `with` block"):
        change(f, x, y)
    (out,) = f.execute([a])  # the definition is unchanged, on every backend
    (reference,) = f.execute([a], backend="reference")
    np.testing.assert_array_equal(out, a * 2)
    np.testing.assert_array_equal(reference, a * 2)
    assert len(f.outputs) == 1 and len(f.inputs) == 1


def test_a_fusion_built_without_a_with_block_is_final_from_its_first_execute() -> None:
    f = bz.Fusion("f")
    x = f.define_tensor((-1,))
    f.add_output(bz.ops.abs(x))  # ops on tensors need no `with` block
    y = x + 1.0
    f.add_output(y)  # still being defined: no execute yet
    a = np.array([-1.0, 2.0], np.float32)
    assert [o.tolist() for o in f.execute([a])] == [[1.0, 2.0], [0.0, 3.0]]
    with pytest.raises(bz.FusionDefinitionError, match=rf"^add_output: {FINAL} its first execute"):
        f.add_output(y)
    with pytest.raises(bz.FusionDefinitionError, match=rf"^set_allocation_domain of T\d+: {FINAL}"):
        x.set_allocation_domain(x.logical)
    assert len(f.execute([a])) == 2


def test_a_failed_change_leaves_nothing_behind() -> None:
    with bz.Fusion("f") as f:
        a, b = f.define_tensor((-1, -1), name="a"), f.define_tensor((-1, -1), name="b")
        f.add_output(a * b)
    checks, exprs, values = list(f.extent_checks), list(f.exprs), list(f._vals)
    with bz.Fusion("g") as g:
        z = g.define_tensor((-1, -1), name="z")
        with pytest.raises(bz.FusionDefinitionError, match="belongs to another fusion"):
            z + a  # noqa: B018
    with pytest.raises(bz.FusionDefinitionError, match=rf"^cat.*{FINAL}"):
        bz.ops.cat([a, b], axis=0)  # would record that their dimension 1 must match
    with pytest.raises(bz.FusionDefinitionError, match=rf"^add: {FINAL}"):
        a + 1.0  # noqa: B018  (the literal would be a new value of the fusion)
    assert (f.extent_checks, f.exprs, f._vals) == (checks, exprs, values)


def test_jit_traces_still_define_their_fusions() -> None:
    @bz.jit
    def scaled(x, y):
        return bz.ops.exp(x) * y + 1.0, bz.ops.sum(x * y, axes=[0])

    x, y = np.linspace(0, 1, 5, dtype=np.float32), np.full(5, 0.5, np.float32)
    a, s = scaled(x, y)
    np.testing.assert_allclose(a, np.exp(x.astype(np.float64)) * 0.5 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(s, (x.astype(np.float64) * 0.5).sum(), rtol=1e-6)
    ((trace,),) = scaled.fusions.values()  # one signature, one trace
    fusion = trace.fusion
    assert fusion.frozen_at == "the end of its `with` block"
