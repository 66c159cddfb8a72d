"""braze: a Python JIT compiler that fuses tensor programs and parallel loops into few kernels."""

from braze import ops
from braze.dtypes import (
    DataType,
    DType,
    bfloat16,
    bool_,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from braze.errors import (
    CompileError,
    CudaError,
    Error,
    FusionDefinitionError,
    InputError,
    KernelAssertionError,
    KernelError,
    KernelSyntaxError,
    KernelTypeError,
    OutOfMemoryError,
    SerialLoopWarning,
    TracerBoolConversionError,
    UnsupportedError,
)
from braze.frontend import VECTOR_NAMES as _VECTOR_NAMES
from braze.frontend import (
    Array,
    Fusion,
    atomic_add,
    atomic_max,
    atomic_min,
    atomic_sub,
    cast,
    func,
    grouped,
    jit,
    kernel,
    local,
    math,
    ndrange,
    random,
    serial,
    static,
)
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
from braze.ir.tensor import TensorView
from braze.record import record
from braze.runtime.backends.cuda import RtcKernel
from braze.runtime.device_arrays import DeviceArray
from braze.runtime.graph import Graph, graph
from braze.runtime.rng import manual_seed

__version__ = "0.1.0"

# `bz.bool`, as NumPy 2 has `np.bool` and torch `torch.bool` (nothing in this module calls the builtin).
bool = bool_


def __getattr__(name: str) -> object:
    # `braze.torch` (the torch.compile backend and `explain`) imports torch, so only when asked for.
    if name == "torch":
        import importlib

        return importlib.import_module("braze.torch")
    raise AttributeError(f"module 'braze' has no attribute {name!r}")

__all__ = [
    "Array", "CompileError", "CudaError", "DataType", "DType", "DeviceArray", "Error", "Fusion",
    "FusionDefinitionError",
    "Graph", "InputError", "KernelAssertionError", "KernelError", "KernelSyntaxError", "KernelTypeError",
    "OutOfMemoryError", "RtcKernel", "SerialLoopWarning", "TensorView", "TracerBoolConversionError", "UnsupportedError",
    "atomic_add", "atomic_max", "atomic_min", "atomic_sub", "bfloat16", "bool", "bool_", "cast",
    "finfo", "float16", "float32", "float64", "func", "graph", "grouped", "iinfo", "int8", "int16", "int32", "int64",
    "jit", "kernel",
    "local",
    "manual_seed", "math",
    "ndrange", "ops", "random", "record", "serial", "static", "uint8", "uint16", "uint32", "uint64",
    *_VECTOR_NAMES,
]
