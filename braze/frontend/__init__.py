"""Frontends: the Fusion builder, `@jit` tracing and the `@kernel` loop language."""

from braze.frontend.fusion import Fusion
from braze.frontend.jit import JitFunction, jit
from braze.frontend.kernel import KernelFunction, kernel
from braze.frontend.kernel_lang import (
    Array,
    atomic_add,
    atomic_max,
    atomic_min,
    atomic_sub,
    func,
    local,
    math,
    ndrange,
    serial,
    static,
)
from braze.frontend.kernel_random import random
from braze.frontend.kernel_vectors import (
    cross,
    determinant,
    diag,
    dot,
    inverse,
    length,
    length_sq,
    mat22,
    mat22d,
    mat33,
    mat33d,
    mat44,
    mat44d,
    norm,
    normalize,
    outer,
    skew,
    trace,
    transpose,
    vec2,
    vec2d,
    vec3,
    vec3d,
    vec4,
    vec4d,
)

VECTOR_NAMES = ["vec2", "vec3", "vec4", "vec2d", "vec3d", "vec4d", "mat22", "mat33", "mat44", "mat22d", "mat33d",
                "mat44d", "dot", "cross", "length", "norm", "length_sq", "normalize", "outer", "transpose",
                "determinant", "inverse", "trace", "diag", "skew"]
__all__ = ["Array", "Fusion", "JitFunction", "KernelFunction", "atomic_add", "atomic_max", "atomic_min", "atomic_sub",
           "func", "jit", "kernel", "local", "math", "ndrange", "random", "serial", "static",
           *VECTOR_NAMES]
