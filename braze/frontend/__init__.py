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
    cast,
    func,
    grouped,
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
    ivec2,
    ivec3,
    ivec4,
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
    vec2b,
    vec2d,
    vec2i,
    vec2l,
    vec3,
    vec3b,
    vec3d,
    vec3i,
    vec3l,
    vec4,
    vec4b,
    vec4d,
    vec4i,
    vec4l,
)

VECTOR_NAMES = ["vec2", "vec3", "vec4", "vec2d", "vec3d", "vec4d", "vec2i", "vec3i", "vec4i", "ivec2", "ivec3", "ivec4",
                "vec2l", "vec3l", "vec4l", "vec2b", "vec3b", "vec4b", "mat22", "mat33", "mat44", "mat22d", "mat33d",
                "mat44d", "dot", "cross", "length", "norm", "length_sq", "normalize", "outer", "transpose",
                "determinant", "inverse", "trace", "diag", "skew"]
__all__ = ["Array", "Fusion", "JitFunction", "KernelFunction", "atomic_add", "atomic_max", "atomic_min", "atomic_sub",
           "cast", "func", "grouped", "jit", "kernel", "local", "math", "ndrange", "random", "serial", "static",
           *VECTOR_NAMES]
