"""Timing shared by the benchmark scripts: braze.bench.timing's medians after a warm-up."""

from braze.bench.timing import median_ms

__all__ = ["median_ms"]
