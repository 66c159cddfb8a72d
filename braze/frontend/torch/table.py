"""Every ATen rule braze has: the pointwise ones (rules.py), then those of views, reductions and
creation (rules_shapes.py) and of reads and writes by index (rules_indexing.py), which register into the
same table."""

from __future__ import annotations

from braze.frontend.torch import (
    rules_indexing,  # noqa: F401  (fills RULES with gathers, scatters, indexing)
    rules_shapes,  # noqa: F401  (fills RULES with views, reductions, creation)
)
from braze.frontend.torch.rules import RULES

__all__ = ["RULES"]
