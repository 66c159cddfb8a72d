"""nvFuser's op names that braze spells otherwise or has no op for. `bz.ops.<name>` raises an error
saying what to write instead, rather than an AttributeError that reads like a typo."""

from __future__ import annotations

from braze.errors import UnsupportedError


class MissingOpError(UnsupportedError, AttributeError):
    """An nvFuser op braze has no function of that name for; an AttributeError too, so `hasattr` and
    `getattr(bz.ops, name, default)` keep working."""


_INDEXING = ("indexing by a tensor (a gather or scatter) is not supported: do it in the array library before "
             "or after the fusion")
_MATRIX = "matrix products are not supported: braze fuses the elementwise work around them"
_SORTING = "sorting and selection are not supported: compute them outside the fusion and pass the result in"

SPELLED_OTHERWISE = {
    "bitwise_left_shift": "write bz.ops.left_shift (x << n)",
    "bitwise_right_shift": "write bz.ops.right_shift (x >> n)",
    "div": "write bz.ops.truediv (a / b) or bz.ops.floordiv (a // b)",
    "iota": "write bz.ops.arange(start, stop, step, dtype=...)",
    "rand_like": "write bz.ops.rand(x.shape, x.dtype)",
    "randn_like": "write bz.ops.randn(x.shape, x.dtype)",
    "segment_set": "write bz.ops.set (braze cuts fusions into segments itself)",
    "welford": "write bz.ops.var_mean",
    "size": "write x.size(dim) (or x.shape[dim]): an extent that reshape, broadcast_in_dim and slice take",
    "shape": "write x.shape, a tuple of extents", "tensor_sizes": "write x.shape, a tuple of extents",
    "at": "write x.shape[i]",
    "stride_order": "write f.add_output(t, stride_order=...) for an output's layout",
    **dict.fromkeys(("digamma", "gcd", "nextafter", "real", "imag"),
                    "braze has no op for it: compute it outside the fusion and pass the result in"),
    "gather": "write bz.ops.take_along_axis(x, index, dim) (a bz.Fusion's f.ops.gather takes nvFuser's arguments)",
    "index_select": "write bz.ops.take(x, index, dim) (a bz.Fusion's f.ops.index_select takes nvFuser's arguments)",
    **dict.fromkeys(("index_put_accumulate", "scatter", "select_index"), _INDEXING),
    **dict.fromkeys(("matmul", "linear", "sdpfa_fwd", "sdpfa_bwd", "grouped_mm"), _MATRIX),
    **dict.fromkeys(("topk", "argsort", "sort"), _SORTING),
}


def missing_op(name: str) -> MissingOpError | None:
    """The error for nvFuser's op `name`, or None for a name nvFuser does not have either."""
    why = SPELLED_OTHERWISE.get(name)
    return None if why is None else MissingOpError(f"bz.ops.{name}: braze has no op of this name (nvFuser's): {why}")
