"""`torch._foreach_*` ops (a multi-tensor optimizer step, an EMA of the weights with `_foreach_lerp_`,
`clip_grad_norm_(foreach=True)`) as the same op on each tensor of the list, so braze fuses them.

PyTorch has no decomposition of these ops (Inductor lowers them itself), and an ATen graph keeps
them whole: braze has no rule for a list of tensors, so a foreach optimizer, PyTorch's default on a
GPU, ran all in PyTorch. `_foreach_add.List(xs, ys, alpha=a)` becomes `add(x, y, alpha=a)` for each
pair, which eager PyTorch's foreach kernels compute alike. The functional overloads are enough:
AOTAutograd functionalizes `_foreach_add_` into `_foreach_add` and copies before it decomposes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

aten = torch.ops.aten
_PREFIX = "aten::_foreach_"
# A foreach argument the single op takes by another name, by keyword only: addcmul's and addcdiv's
# `scalars` (one per list entry) are their `value`.
_KEYWORD = {"scalars": "value"}


def foreach_decompositions() -> dict[object, Callable]:
    """`aten._foreach_<op>.<overload>` -> a function applying `aten.<op>` to each tensor of its lists,
    for every functional foreach overload whose op exists on one tensor."""
    table = {}
    for schema in torch._C._jit_get_all_schemas():
        if not _decomposable(schema):
            continue
        packet = getattr(aten, schema.name.removeprefix("aten::"))
        table[getattr(packet, schema.overload_name or "default")] = _per_tensor(schema)
    return table


def _decomposable(schema: torch._C.FunctionSchema) -> bool:
    if not schema.name.startswith(_PREFIX) or schema.name.endswith("_") or schema.overload_name.endswith("out"):
        return False
    # `scalars` as a 1-D tensor (addcmul.Tensor) is one number per list entry read from a tensor:
    # left to PyTorch, as are ops with no single-tensor form (`_foreach_powsum`).
    if any(a.name == "scalars" and str(a.type) == "Tensor" for a in schema.arguments):
        return False
    return hasattr(aten, schema.name.removeprefix(_PREFIX))


def _per_tensor(schema: torch._C.FunctionSchema) -> Callable:
    op = getattr(aten, schema.name.removeprefix(_PREFIX))
    arguments = list(schema.arguments)
    lists = [str(a.type) in ("List[Tensor]", "Tensor[]", "List[number]", "Scalar[]") for a in arguments]
    # An argument the single op takes by keyword only (`_foreach_norm`'s dtype, `linalg_vector_norm`'s
    # `*, dtype`) goes by its name; the others by position, as their names differ (lerp's weights).
    by_name = {a.name for s in op._schemas.values() for a in s.arguments if a.kwarg_only}

    def decomposition(*args: object, **kwargs: object) -> list[torch.Tensor]:
        values = dict(zip([a.name for a in arguments], args)) | kwargs
        length = next(len(values[a.name]) for a, is_list in zip(arguments, lists) if is_list)
        results = []
        for i in range(length):
            positional, named = [], {}
            for a, is_list in zip(arguments, lists):
                if a.name not in values:
                    continue
                value = values[a.name][i] if is_list else values[a.name]
                keyword = _KEYWORD.get(a.name, a.name)
                if a.kwarg_only or keyword in by_name:
                    named[keyword] = value
                else:
                    positional.append(value)
            results.append(op(*positional, **named))
        return results

    return decomposition
