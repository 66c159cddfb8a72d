"""Layers of tests/torch_backend/sweep_models.py through `torch.compile(backend="braze")` on CPU tensors against
eager PyTorch, forward and backward, and the ops among them braze must fuse rather than leave to PyTorch:
chunk's `as_strided` views, float ranges, `index_select` (torch.roll), `torch.max(x, dim)` and advanced
indexing (F.interpolate, reflect padding), embeddings, and `Tensor.unfold`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from real_models import STRICT, check_against_eager, normal  # noqa: E402  (beside this file)
from sweep_models import (  # noqa: E402
    BertEmbeddings,
    PatchesAndFrames,
    PointNetMaxPool,
    ShiftedWindows,
    TimestepEmbedding,
    UnrolledLSTM,
    UpsampleAndPad,
    bert_embedding_inputs,
    patch_inputs,
    point_inputs,
    shifted_window_inputs,
    timestep_inputs,
    upsample_inputs,
)

import braze as bz  # noqa: E402


def _inputs(make, *seeds: int) -> list[tuple]:
    return [make(torch.Generator().manual_seed(seed)) for seed in seeds]


def _left_to_pytorch(model, inputs: tuple) -> set[str]:
    """The ops of the inference graph left to PyTorch (the forward's ops: the models' checks cover the backward)."""
    torch._dynamo.reset()
    with torch.no_grad():
        explanation = bz.torch.explain(model, *inputs, options=STRICT)
    torch._dynamo.reset()
    return {op for g in explanation.graphs for op, _ in g.torch_ops}


MODELS = {
    "unrolled_lstm": (UnrolledLSTM, lambda: _inputs(normal(3, 4, 6), 1)),
    "timestep_embedding": (TimestepEmbedding, lambda: _inputs(timestep_inputs, 1)),
    "shifted_windows": (ShiftedWindows, lambda: _inputs(shifted_window_inputs, 1)),
    "pointnet_max_pool": (PointNetMaxPool, lambda: _inputs(point_inputs, 1)),
    "upsample_and_pad": (UpsampleAndPad, lambda: _inputs(upsample_inputs, 1)),
    "bert_embeddings": (BertEmbeddings, lambda: _inputs(bert_embedding_inputs, 1)),
    "patches_and_frames": (PatchesAndFrames, lambda: _inputs(patch_inputs, 1)),
}


@pytest.mark.parametrize("name", MODELS)
def test_a_layer_matches_eager_forward_and_backward(name: str) -> None:
    make_model, make_inputs = MODELS[name]
    check_against_eager(make_model, make_inputs())


def test_the_gates_chunk_splits_fuse_with_their_activations() -> None:
    """AOTAutograd replays `chunk` and `split` as `as_strided` of the projection; each is a slice, which
    braze fuses, so each time step is one region instead of one cut at every gate."""
    torch.manual_seed(0)
    assert "aten.as_strided.default" not in _left_to_pytorch(UnrolledLSTM(), _inputs(normal(3, 4, 6), 1)[0])


def test_a_float_range_and_a_roll_run_in_braze() -> None:
    torch.manual_seed(0)
    left = _left_to_pytorch(TimestepEmbedding(), _inputs(timestep_inputs, 1)[0])
    assert "aten.arange.start_step" not in left, left
    left = _left_to_pytorch(ShiftedWindows(), _inputs(shifted_window_inputs, 1)[0])
    assert "aten.index_select.default" not in left, left


def test_shifted_windows_match_eager_over_sizes_under_dynamic_true() -> None:
    check_against_eager(ShiftedWindows, [shifted_window_inputs(torch.Generator().manual_seed(s), b, side)
                                         for s, (b, side) in enumerate(((2, 6), (3, 5)))], dynamic=True)


def test_max_and_min_over_a_dim_with_their_indices_run_in_braze() -> None:
    """`torch.max(x, dim)` gives values and indices, two results no region could take: it ran in PyTorch."""
    torch.manual_seed(0)
    left = _left_to_pytorch(PointNetMaxPool(), _inputs(point_inputs, 1)[0])
    assert not {"aten.max.dim", "aten.min.dim"} & left, left


def test_upsampling_padding_picking_by_index_tensors_and_unfold_run_in_braze() -> None:
    """F.interpolate, reflect and replicate padding and `x[arange, index]` index by tensors, and `Tensor.unfold`
    had no rule: they ran in PyTorch."""
    torch.manual_seed(0)
    left = _left_to_pytorch(UpsampleAndPad(), _inputs(upsample_inputs, 1)[0])
    assert not {"aten.index.Tensor", "aten._unsafe_index.Tensor"} & left, left
    left = _left_to_pytorch(PatchesAndFrames(), _inputs(patch_inputs, 1)[0])
    assert "aten.unfold.default" not in left, left


@pytest.mark.parametrize("index", [(slice(None), [[0, 2], [1, -1]], [1, 4]), ([1, 0], slice(None), [4, -5]),
                                   ([[1], [0]], [0, 2, 1]), (1, slice(None), [2, 0])], ids=str)
def test_advanced_indexing_puts_the_index_dims_where_numpy_does(index: tuple) -> None:
    """Adjacent index tensors replace their dimensions; separated ones lead; a number among them indexes too."""
    index = tuple(torch.tensor(i) if isinstance(i, list) else i for i in index)
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    def pick(x):
        return x[index] * 2

    torch.testing.assert_close(torch.compile(pick, backend="braze", options=STRICT)(x), pick(x), rtol=0, atol=0)
    assert "aten.index.Tensor" not in _left_to_pytorch(pick, (x,))


def test_embeddings_and_their_layer_norm_make_one_region() -> None:
    """`aten.embedding` ran in PyTorch, cutting BERT's embeddings from their sum and LayerNorm."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    with torch.no_grad():
        explanation = bz.torch.explain(BertEmbeddings(), *_inputs(bert_embedding_inputs, 1)[0], options=STRICT)
    forward = explanation.graphs[0]
    assert not forward.torch_ops and len(forward.regions) == 1, explanation
