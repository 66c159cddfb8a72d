"""Arguments of `@bz.jit` that hold arrays in lists, tuples and dicts (a model's parameters by name, a
list of optimizer states), as JAX's pytrees: each array, and each number beside them, is an input of
its own, named after its place (`params["w"]` -> `params_w`), and the function gets the containers back
as it was called with them. The containers' structure keys the trace: a new key or length traces again.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator

# A container's structure: (its type, its keys or None, its items' structures); None for a leaf.
Structure = tuple | None


def is_tree(value: object) -> bool:
    """A dict holding arrays or numbers, or a list or tuple holding arrays, somewhere inside. A tuple of
    numbers (`axes=(1, 2)`) stays an option, baked in, and a list of numbers is refused where an array
    is wanted, as before: NumPy would read it as one array, JAX as several numbers."""
    if isinstance(value, dict):
        return any(is_tree(v) or _is_data(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(is_tree(v) or _is_array(v) for v in value)
    return False


def _is_array(value: object) -> bool:
    return any(hasattr(value, name) for name in ("__array_interface__", "__cuda_array_interface__", "__dlpack__"))


def _is_data(value: object) -> bool:
    return _is_array(value) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def flatten(value: object, name: str, leaves: list, names: list[str]) -> Structure:
    """Appends value's leaves (arrays, numbers, options) to `leaves` and a parameter name for each to
    `names`; returns the structure that `unflatten` rebuilds it from."""
    if isinstance(value, dict) and is_tree(value):
        keys = tuple(value)
        return dict, keys, tuple(flatten(value[k], f"{name}_{k}", leaves, names) for k in keys)
    if isinstance(value, (list, tuple)) and is_tree(value):
        return type(value), None, tuple(flatten(v, f"{name}_{i}", leaves, names) for i, v in enumerate(value))
    leaves.append(value)
    names.append(_parameter_name(name, names))
    return None


def unflatten(structure: Structure, leaves: Iterator) -> object:
    """The value `flatten` took apart, from its structure and its leaves in order."""
    if structure is None:
        return next(leaves)
    kind, keys, items = structure
    values = [unflatten(item, leaves) for item in items]
    if kind is dict:
        return dict(zip(keys, values))
    return kind(*values) if hasattr(kind, "_fields") else kind(values)  # a namedtuple takes its fields


def _parameter_name(name: str, taken: list[str]) -> str:
    """`name` made a Python identifier no other leaf has (dict keys may be any hashable)."""
    name = re.sub(r"\W", "_", name)
    if not name.isidentifier() or keyword.iskeyword(name):
        name = f"arg_{name}"
    unique, n = name, 1
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    return unique
