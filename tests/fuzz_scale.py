"""How many programs a generative (Hypothesis) test draws: its CI count times `BRAZE_FUZZ_SCALE`.

CI runs each generative test with a few examples, so the whole suite stays within its time. A longer
hunt off CI scales them all at once: `BRAZE_FUZZ_SCALE=100 pytest tests/frontend/test_fuzz_jit_programs.py`
draws 100 times as many programs in every test that reads this knob (a fraction, `0.1`, gives a quick
look; each test still draws at least one). Without the knob every count is the CI count. The counts a
test has a knob of its own for (`BRAZE_FUZZ_EXAMPLES` in tests/engine/test_fuzz_fusions.py,
`BRAZE_FUZZ_LOOP_EXAMPLES` for the loop programs) are scaled too where that knob is unset.
"""

from __future__ import annotations

import os


def _scale() -> float:
    text = os.environ.get("BRAZE_FUZZ_SCALE", "1")
    try:
        scale = float(text)
    except ValueError:
        scale = -1.0
    if not scale > 0:
        raise ValueError(f"BRAZE_FUZZ_SCALE: expected a positive number, got {text!r}")
    return scale


SCALE = _scale()


def examples(ci: int) -> int:
    """The number of examples for a test that draws `ci` of them in CI."""
    return max(1, round(ci * SCALE))
