"""The options of the braze backend: `torch.compile(model, backend="braze", options={...})`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from braze.errors import InputError

FALLBACKS = ("torch", "error")
RANDOM = ("braze", "torch")
PARTITIONS = ("min_cut", "default")


@dataclass(frozen=True)
class Options:
    """What the backend does with a model's graphs.

    - `fallback`: `"torch"` runs a region braze cannot compile in PyTorch (with a warning, and
      `explain` says why); `"error"` raises instead.
    - `exclude_ops`: ATen ops left to PyTorch, by name (`"aten.gelu"` or `"aten.gelu.default"`).
    - `min_region_ops`: the fewest fused ops (views not counted) a region needs to become a braze
      fusion; smaller ones stay in PyTorch.
    - `random`: `"braze"` draws random tensors (dropout and bernoulli masks) inside the fused kernels,
      from braze's Philox stream keyed by a seed drawn from torch's default generator at every run of
      a graph; the backward draws a mask again from that seed instead of saving it. After the same
      `torch.manual_seed` a compiled model repeats itself exactly, but it drops other elements than
      eager PyTorch does (as under Inductor): the stream is braze's, not torch's
      (braze/frontend/torch/rng.py). `"torch"` leaves random ops to PyTorch's generator, and the
      masks are saved for the backward as in eager PyTorch.
    - `pad_mm`: `True` pads matrix multiplies on a GPU whose extents break 16-byte alignment (an odd
      vocabulary) when they are large enough for it to pay, so cuBLAS runs its fast kernels
      (braze/frontend/torch/pad_matmuls.py); `"always"` pads every unaligned float one, on any device
      and of any size; `False` pads none (as does `BRAZE_DISABLE=pad_mm`).
    - `partition`: how AOTAutograd splits the joint graph into forward and backward. `"min_cut"`
      (PyTorch's `min_cut_rematerialization_partition`, as Inductor uses) saves the fewest bytes and
      recomputes cheap pointwise values in the backward: a language model's loss saves its logits
      and each row's logsumexp, not the float32 log-probabilities of every token. `"default"` is
      AOTAutograd's default partition: it saves whatever the backward reads.
    """

    fallback: str = "torch"
    exclude_ops: frozenset[str] = field(default_factory=frozenset)
    min_region_ops: int = 1
    random: str = "braze"
    pad_mm: bool | str = True
    partition: str = "min_cut"


def _choice(name: str, allowed: tuple[str, ...]):
    def check(value: object) -> str:
        if value not in allowed:
            raise InputError(f"options[{name!r}]: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value

    return check


def _op_names(value: object) -> frozenset[str]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in _iterable(value)):
        raise InputError(f"options['exclude_ops']: expected a list of ATen op names like 'aten.gelu', got {value!r}")
    return frozenset(value)


def _iterable(value: object) -> list:
    try:
        return list(value)
    except TypeError:
        raise InputError(f"options['exclude_ops']: expected a list of ATen op names, got {value!r}") from None


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"options['min_region_ops']: expected an int >= 1, got {value!r}")
    return value


def _pad_mm(value: object) -> bool | str:
    if not (isinstance(value, bool) or value == "always"):
        raise InputError(f"options['pad_mm']: expected True, False or 'always', got {value!r}")
    return value


_CHECKS = {
    "fallback": _choice("fallback", FALLBACKS),
    "exclude_ops": _op_names,
    "min_region_ops": _count,
    "random": _choice("random", RANDOM),
    "pad_mm": _pad_mm,
    "partition": _choice("partition", PARTITIONS),
}


def parse_options(options: Mapping[str, object] | None, mode: str | None = None) -> Options:
    """Checks `torch.compile`'s `options` (and `mode`) for the braze backend, naming any it does not know."""
    if mode not in (None, "default"):
        raise InputError(f"mode: the braze backend has no modes; expected None or 'default', got {mode!r}")
    if options is None:
        return Options()
    if not isinstance(options, Mapping):
        raise InputError(f"options: expected a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(_CHECKS), key=str)
    if unknown:
        raise InputError(f"options: unknown option {unknown[0]!r} for the braze backend; expected any of "
                         f"{', '.join(map(repr, _CHECKS))}")
    return Options(**{name: _CHECKS[name](value) for name, value in options.items()})
