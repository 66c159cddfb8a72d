"""Timing shared by the benchmark scripts: braze.cli.bench.timing's medians after a warm-up."""

from braze.cli.bench.timing import median_ms

__all__ = ["median_ms"]
