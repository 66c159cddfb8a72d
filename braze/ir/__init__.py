"""Fusion IR: symbolic extents, iteration domains, tensors, expressions and the FusionGraph container."""

from braze.ir.domain import IterDomain, IterType, Merge, ParallelType, Reorder, Split
from braze.ir.fusion import AliasKind, Expr, ExtentCheck, FusionGraph, Output, active_fusion, defining
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView, Val, normalize_axis

__all__ = [
    "AliasKind", "Expr", "ExtentCheck", "FusionGraph", "IterDomain", "IterType", "Merge", "Output",
    "ParallelType", "Reorder", "Scalar", "Split", "TensorView", "Val", "active_fusion", "defining",
    "normalize_axis",
]
