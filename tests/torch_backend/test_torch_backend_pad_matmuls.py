"""Padding of matrix multiplies whose extents break 16-byte alignment (braze/frontend/torch/pad_matmuls.py):
the pass on small ATen graphs (which products it pads, how, and that results do not change), its
size rule on fake GPU tensors, and a tied-embedding language model with an odd vocabulary through the
braze backend on CPU tensors, against eager PyTorch."""

from __future__ import annotations

import copy
from unittest import mock

import pytest

torch = pytest.importorskip("torch")

import torch_zoo  # noqa: E402  (tests/torch_backend, beside this file)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kir_bounds import out_of_bounds_reads  # noqa: E402  (tests/, on pytest's path)
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from braze import config, engine  # noqa: E402
from braze.errors import InputError  # noqa: E402
from braze.frontend.torch import parse_options  # noqa: E402
from braze.frontend.torch.backend import _pad_mode  # noqa: E402
from braze.frontend.torch.pad_matmuls import ALIGNMENT, Padding, pad_matmuls, pays_to_pad, plan  # noqa: E402

aten = torch.ops.aten
MATMULS = (aten.mm.default, aten.addmm.default, aten.bmm.default)


def _traced(fn, *examples: torch.Tensor) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*examples)


def _nodes(gm: torch.fx.GraphModule, *targets: object) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]


def _operand_shapes(gm: torch.fx.GraphModule) -> list[list[tuple[int, ...]]]:
    return [[tuple(a.meta["val"].shape) for a in n.all_input_nodes] for n in _nodes(gm, *MATMULS)]


def _padded_and_checked(fn, *inputs: torch.Tensor, count: int = 1) -> torch.fx.GraphModule:
    """`fn` traced and padded (always); its result on `inputs` the same as unpadded, every matmul aligned."""
    gm = _traced(fn, *inputs)
    assert pad_matmuls(gm, "always") == count
    expected, actual = fn(*inputs), gm(*inputs)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    alignment = ALIGNMENT[inputs[0].dtype]
    for node in _nodes(gm, *MATMULS):
        mat1, mat2 = (a.meta["val"] for a in node.args[-2:])
        assert all(e % alignment == 0 or e == 1 for e in (*mat1.shape[-2:], mat2.shape[-1])), node.format_node()
    return gm


def _rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), dtype=dtype)


# --- the pass on small graphs --------------------------------------------------------------------------------
def test_an_odd_k_is_padded_with_zeros_on_both_operands_and_nothing_is_sliced() -> None:
    gm = _padded_and_checked(torch.mm, _rand(8, 5), _rand(5, 4))
    assert _operand_shapes(gm) == [[(8, 8), (8, 4)]]
    assert not _nodes(gm, aten.slice.Tensor)


def test_an_odd_n_pads_the_second_operand_and_slices_the_result_back() -> None:
    gm = _padded_and_checked(torch.mm, _rand(4, 8), _rand(8, 7))
    assert _operand_shapes(gm) == [[(4, 8), (8, 8)]]
    (cut,) = _nodes(gm, aten.slice.Tensor)
    assert cut.args[1:] == (1, 0, 7)


def test_an_odd_m_pads_the_first_operand_and_slices_the_result_back() -> None:
    gm = _padded_and_checked(torch.mm, _rand(9, 4), _rand(4, 4))
    assert _operand_shapes(gm) == [[(12, 4), (4, 4)]]
    assert _nodes(gm, aten.slice.Tensor)[0].args[1:] == (0, 0, 9)


def test_a_batched_product_pads_its_matrices_not_its_batch() -> None:
    gm = _padded_and_checked(torch.bmm, _rand(3, 5, 6), _rand(3, 6, 7))
    assert _operand_shapes(gm) == [[(3, 8, 8), (3, 8, 8)]]


@pytest.mark.parametrize("bias_shape", [(7,), (1, 7), (5, 7), (5, 1)])
def test_addmm_pads_its_bias_where_it_is_not_broadcast(bias_shape: tuple[int, ...]) -> None:
    gm = _padded_and_checked(lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0),
                             _rand(*bias_shape), _rand(5, 3), _rand(3, 7))
    (bias, _, _), = _operand_shapes(gm)
    assert bias == tuple(8 if e != 1 else 1 for e in bias_shape)


def test_a_transposed_operand_is_padded_under_its_transpose_once_for_every_product() -> None:
    # The tied head: w.t() in one product, w in another: one pad of w serves both.
    gm = _padded_and_checked(lambda x, w, g: (x @ w.t()).sum() + (g @ w).sum(),
                             _rand(4, 8), _rand(37, 8), _rand(4, 37), count=2)
    w = list(gm.graph.nodes)[1]
    (pad,) = [n for n in _nodes(gm, aten.constant_pad_nd.default) if n.args[0] is w]
    assert tuple(pad.meta["val"].shape) == (40, 8)
    assert len(_nodes(gm, aten.constant_pad_nd.default)) == 2  # w and g


def test_aligned_products_and_other_dtypes_are_left_alone() -> None:
    for fn, inputs in [(torch.mm, (_rand(8, 16), _rand(16, 4))),                      # float32: multiples of 4
                       (torch.mm, (_rand(3, 5, dtype=torch.float64), _rand(5, 7, dtype=torch.float64))),
                       (torch.mm, (_rand(1, 16), _rand(16, 1)))]:                      # extents of 1
        gm = _traced(fn, *inputs)
        before = gm.code
        assert pad_matmuls(gm, "always") == 0 and gm.code == before


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 19), k=st.integers(1, 19), n=st.integers(1, 19), batch=st.sampled_from([0, 2]),
       flip1=st.booleans(), flip2=st.booleans(), bias=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_any_product_padded_gives_the_same_result(m, k, n, batch, flip1, flip2, bias, dtype) -> None:
    """Random extents, batched or not, operands stored transposed or not, with a bias or not."""
    lead = (batch,) if batch else ()
    a = _rand(*lead, k, m, dtype=dtype).transpose(-1, -2) if flip1 else _rand(*lead, m, k, dtype=dtype)
    b = _rand(*lead, n, k, dtype=dtype).transpose(-1, -2) if flip2 else _rand(*lead, k, n, dtype=dtype)
    c = _rand(n, dtype=dtype)

    def product(a, b, c):
        if batch:
            return torch.bmm(a, b) + (c if bias else 0)
        return torch.addmm(c, a, b) if bias else torch.mm(a, b)

    gm = _traced(product, a, b, c)
    pad_matmuls(gm, "always")
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(gm(a, b, c), product(a, b, c), **tolerance)
    alignment = ALIGNMENT[dtype]
    for shapes in _operand_shapes(gm):
        assert all(e % alignment == 0 or e == 1 for shape in shapes[-2:] for e in shape[-2:]), shapes


# --- when padding pays: fake GPU tensors ---------------------------------------------------------------------
def _fake_cuda_mm(m: int, k: int, n: int) -> torch.fx.GraphModule:
    with FakeTensorMode():
        a = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(k, n, dtype=torch.bfloat16, device="cuda")
    return _traced(torch.mm, a, b)


def test_on_a_gpu_the_gpt2_head_is_padded_and_small_or_memory_bound_products_are_not() -> None:
    (head,) = _nodes(_fake_cuda_mm(8192, 768, 50257), aten.mm.default)
    assert plan(head) == Padding(0, 0, 7)
    for m, k, n in [(64, 64, 65), (8, 768, 50257), (511, 511, 511)]:
        (node,) = _nodes(_fake_cuda_mm(m, k, n), aten.mm.default)
        assert plan(node) is None and plan(node, always=True) is not None, (m, k, n)
    assert pays_to_pad(1024, 1024, 1025) and not pays_to_pad(0, 1024, 1025)


def test_on_the_cpu_padding_is_only_done_when_asked_always() -> None:
    a, b = _rand(8192, 7, dtype=torch.bfloat16), _rand(7, 8, dtype=torch.bfloat16)
    (node,) = _nodes(_traced(torch.mm, a, b), aten.mm.default)
    assert plan(node) is None and plan(node, always=True) == Padding(0, 1, 0)


def test_the_option_and_the_feature_choose_the_mode() -> None:
    assert _pad_mode(parse_options(None)) == "auto"
    assert _pad_mode(parse_options({"pad_mm": "always"})) == "always"
    assert _pad_mode(parse_options({"pad_mm": False})) == "off"
    with config.scope(disable="pad_mm"):
        assert _pad_mode(parse_options({"pad_mm": "always"})) == "off"
    for bad in ("yes", 1, None):
        with pytest.raises(InputError, match=r"options\['pad_mm'\]: expected True, False or 'always'"):
            parse_options({"pad_mm": bad})


# --- a model through the backend -----------------------------------------------------------------------------
def test_a_matmul_call_knows_an_unaligned_leading_dimension() -> None:
    logits = ((16, 37), (37, 1))
    assert not torch_zoo.MatmulCall("mm", (((16, 8), (8, 1)), ((8, 37), (1, 8)), logits), 2).aligned()
    assert torch_zoo.MatmulCall("mm", (((16, 8), (8, 1)), ((8, 40), (1, 8)), ((16, 40), (40, 1))), 2).aligned()
    assert not torch_zoo.MatmulCall("mm", (((37, 16), (1, 37)), ((16, 8), (8, 1)), ((37, 8), (8, 1))), 2).aligned()


def test_a_tied_lm_with_an_odd_vocabulary_matches_eager_and_its_head_runs_aligned() -> None:
    torch.manual_seed(0)
    vocab = 37
    model = torch_zoo.TiedLM(vocab=vocab)
    reference = copy.deepcopy(model)
    tokens = torch.randint(0, vocab, (2, 9), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend="braze", options={"pad_mm": "always", "fallback": "error"})
    with torch_zoo.recording_matmuls() as calls, torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(tokens)
        loss.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = reference(tokens)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-2, atol=1e-2)
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        scale = max(p_ref.grad.abs().max().item(), 1.0)
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=3e-2, atol=3e-2 * scale,
                                   msg=lambda m, name=name: f"{name}: {m}")
    head = [call for call in calls if call.touches(vocab) or call.touches(40)]
    assert len(head) == 3, calls  # logits, and the gradients of the hidden state and of the weight
    assert all(call.aligned() for call in head), head


def test_a_tied_lms_shifted_cross_entropy_backward_reads_no_row_past_its_inputs() -> None:
    """The backward of `cross_entropy(logits[:, :-1])` slice_scatters the shifted rows' gradient into the
    full sequence and pads the vocabulary: its row sums ran for the scattered rows too, the last batch's
    one row past the input (braze/lower/values.py, ValueEmitter.in_range). Every fusion the model runs,
    checked on the inputs it ran with (tests/kir_bounds.py)."""
    torch.manual_seed(0)
    model = torch_zoo.TiedLM(vocab=37)
    tokens = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend="braze", options={"pad_mm": "always", "fallback": "error"})
    ran, bind = [], engine.bind_inputs

    def recorded(fusion, inputs):
        ran.append((fusion, [t.detach() if isinstance(t, torch.Tensor) else t for t in inputs]))
        return bind(fusion, inputs)

    with mock.patch.object(engine, "bind_inputs", recorded):
        compiled(tokens).backward()
    assert any("bwd" in fusion.name for fusion, _ in ran), [fusion.name for fusion, _ in ran]
    for fusion, inputs in ran:
        assert out_of_bounds_reads(fusion, inputs) == [], fusion
