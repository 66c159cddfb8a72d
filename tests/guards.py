"""A prepared call's torch guard (runtime/fast_call.py) as a function, for tests: its condition
run as the guarded call runs it, where a TypeError or IndexError is a no."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from braze.runtime.fast_call import Guard


def matcher(guard: Guard) -> Callable[[Sequence[object]], bool]:
    names: dict = {}
    source = (f"def matches(inputs):\n    try:\n        return bool({guard.condition(names)})\n"
              "    except (TypeError, IndexError):\n        return False\n")
    exec(source, names)
    return names["matches"]
