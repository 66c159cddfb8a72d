"""`np.einsum` on traced tensors, as a broadcast product and a sum: each operand's axes are lined up by
their letters (kept ones first, summed ones last, so the sum is over the innermost axes), multiplied, and
the summed letters reduced. That serves the reduction forms NumPy code writes ('ij,ij->i', 'ij->j',
'bi,bi->b', 'ij->ji', '...i,...i->...', 'ii->' of a diagonal) and small contractions ('bi,ij->bj' over a
short i), where `@` and `np.dot` are refused (braze/ops/methods.py): braze has no matrix-product op.
"""

from __future__ import annotations

import string

from braze.errors import UnsupportedError
from braze.ir.tensor import TensorView
from braze.ops import creation, views
from braze.ops import reductions as red
from braze.ops.elementwise import cast, elementwise

# The ellipsis's axes take labels no subscript uses, numbered from the right as they broadcast.
_ELLIPSIS_LABELS = string.digits


def einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe", optimize=False) -> TensorView:
    """NumPy's einsum of the subscripts form; `optimize=` is ignored (one fused product and sum)."""
    if not isinstance(subscripts, str):
        raise UnsupportedError("np.einsum: operands with lists of axis numbers: braze takes the subscripts form, "
                               "np.einsum('ij,ij->i', a, b)")
    if out is not None:
        raise UnsupportedError("np.einsum: out=: a fusion's values are not buffers; use the result")
    inputs, output = _parse(subscripts, operands)
    if dtype is not None:
        operands = tuple(cast(x, dtype) for x in operands)
    operands, inputs = zip(*(_off_diagonal_zeroed(x, labels) for x, labels in zip(operands, inputs, strict=True)))
    summed = sorted({letter for labels in inputs for letter in labels} - set(output))
    order_of_axes = list(output) + summed
    product = None
    for labels, x in zip(inputs, operands, strict=True):
        lined_up = _line_up(x, labels, order_of_axes)
        product = lined_up if product is None else elementwise("mul", product, lined_up)
    result_dtype = product.dtype
    if summed:
        product = cast(red.sum(product, list(range(len(output), len(order_of_axes))), False), result_dtype)
    return product


def _parse(subscripts: str, operands: tuple) -> tuple[list[str], str]:
    """Each operand's labels, one per axis (its ellipsis's axes as digits), and the output's."""
    spec = subscripts.replace(" ", "")
    given, arrow, output = spec.partition("->")
    terms = given.split(",")
    if len(terms) != len(operands):
        raise UnsupportedError(f"np.einsum: {subscripts!r} names {len(terms)} operands, got {len(operands)}")
    for x in operands:
        if not isinstance(x, TensorView):
            raise UnsupportedError(f"np.einsum: operand {x!r}: expected a traced array, got {type(x).__name__}")
    inputs = [_labels(subscripts, term, x) for term, x in zip(terms, operands, strict=True)]
    ellipsis = max((sum(label in _ELLIPSIS_LABELS for label in labels) for labels in inputs), default=0)
    broadcast = _ELLIPSIS_LABELS[:ellipsis]
    if not arrow:  # NumPy's implicit output: the ellipsis's axes, then each letter used once, sorted
        letters = [letter for labels in inputs for letter in labels if letter not in _ELLIPSIS_LABELS]
        return inputs, broadcast + "".join(sorted(letter for letter in set(letters) if letters.count(letter) == 1))
    if "..." not in output and any(label in _ELLIPSIS_LABELS for labels in inputs for label in labels):
        raise UnsupportedError(f"np.einsum: {subscripts!r}: the output drops the ellipsis's axes: expected '...' "
                               "in the output too (sum them with np.sum afterwards)")
    output = output.replace("...", broadcast)
    for letter in output:
        if output.count(letter) > 1 or not any(letter in labels for labels in inputs):
            raise UnsupportedError(f"np.einsum: {subscripts!r}: output letter {letter!r}: expected once, and in an "
                                   "operand")
    return inputs, output


def _labels(subscripts: str, term: str, x: TensorView) -> str:
    """One label per axis of x: its letters, and digits for the axes its ellipsis stands for."""
    letters = term.replace("...", "")
    if not all(letter in string.ascii_letters for letter in letters) or term.count("...") > 1:
        raise UnsupportedError(f"np.einsum: {subscripts!r}: term {term!r}: expected letters and at most one '...'")
    extra = x.ndim - len(letters)
    if extra < 0 or (extra > 0 and "..." not in term):
        raise UnsupportedError(f"np.einsum: {subscripts!r}: term {term!r} names {len(letters)} axes of "
                               f"{x.describe()}, which has {x.ndim}")
    if extra > len(_ELLIPSIS_LABELS):
        raise UnsupportedError(f"np.einsum: {subscripts!r}: '...' over {extra} axes: braze takes at most "
                               f"{len(_ELLIPSIS_LABELS)}")
    before, _, after = term.partition("...")
    return before + _ELLIPSIS_LABELS[:extra] + after if "..." in term else term


def _off_diagonal_zeroed(x: TensorView, labels: str) -> tuple[TensorView, str]:
    """A letter repeated within one operand ('ii->i', 'ii->') takes its diagonal: the elements off it are
    zeroed, and each repeat gets a label of its own that is summed. The mask's axes both have the first
    axis's extent, so a call whose two extents differ is refused, as NumPy refuses it."""
    for position, label in enumerate(labels):
        first = labels.index(label)
        if first == position:
            continue
        fresh = chr(0x100 + position)  # a label no subscript spells
        labels = labels[:position] + fresh + labels[position + 1:]
        on_diagonal = elementwise("eq", _iota_along(x, first, first), _iota_along(x, first, position))
        x = elementwise("where", on_diagonal, x, 0)
    return x, labels


def _iota_along(x: TensorView, extent_of: int, axis: int) -> TensorView:
    """0, 1, ... up to x's extent along `extent_of`, laid along `axis` of a tensor of x's rank."""
    iota = creation.arange(x.shape[extent_of])
    for position in range(x.ndim):
        if position != axis:
            iota = views.unsqueeze(iota, position)
    return iota


def _line_up(x: TensorView, labels: str, order_of_axes: list[str]) -> TensorView:
    """x with its axes in `order_of_axes`, and an axis of extent 1 for each label it lacks. An ellipsis's
    labels are right-aligned, so that operands with fewer of its axes broadcast as NumPy's do."""
    ellipsis = sum(label in _ELLIPSIS_LABELS for label in labels)
    total = sum(label in _ELLIPSIS_LABELS for label in order_of_axes)
    renamed = [_ELLIPSIS_LABELS[total - ellipsis + _ELLIPSIS_LABELS.index(label)] if label in _ELLIPSIS_LABELS
               else label for label in labels]
    present = [label for label in order_of_axes if label in renamed]
    x = views.permute(x, tuple(renamed.index(label) for label in present)) if present != renamed else x
    for position, label in enumerate(order_of_axes):
        if label not in renamed:
            x = views.unsqueeze(x, position)
    return x


def matrix_product_error(name: str, a: object, b: object) -> UnsupportedError:
    """The error for `a @ b`, np.dot, np.matmul, ...: braze has no matrix-product op; it says which einsum
    writes the same product as a broadcast and a sum, for the operands' ranks."""
    ranks = [getattr(v, "ndim", 0) for v in (a, b)]
    if 0 in ranks:  # NumPy's and torch's matmul refuse a scalar too
        return UnsupportedError(f"{name}: a matrix product takes operands of rank 1 or more, got ranks "
                                f"{ranks[0]} and {ranks[1]}; a product with a scalar is a * b")
    left, right = {1: "j", 2: "ij"}.get(ranks[0], "...ij"), {1: "j", 2: "jk"}.get(ranks[1], "...jk")
    kept = ("..." if "..." in left + right else "") + (left + right).replace(".", "").replace("j", "")
    return UnsupportedError(
        f"{name}: braze has no matrix-product op (it fuses the elementwise work around one): compute the product "
        f"outside braze (with torch or NumPy) and pass it in, or, over a short inner axis, write it as a broadcast "
        f"and a sum, which braze fuses: np.einsum('{left},{right}->{kept}', a, b)")
