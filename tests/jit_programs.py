"""Random `@bz.jit` programs written in NumPy's and torch's own vocabulary, from Hypothesis draws
(tests/frontend/test_fuzz_jit_programs.py runs them through `bz.jit` and through NumPy or torch eager).

A program is a list of steps over a pool of values: the inputs first, then one value per step. A step
names an operation (`add`, `var`, `pad`, ...) and the values it reads; `numpy_program` and
`torch_program` spell each operation with that library's functions, so one draw gives the same
program in both vocabularies. The generator tracks each value's shape, kind (float, int) and a bound
on its magnitude, so it only draws steps that are valid and well conditioned:

- a float32 chain is compared with the same program in float64, within a tolerance relative to the
  bound: a value whose bound grows past `SQUASH` goes through tanh first, `exp` only takes values
  below `MAX_EXP_ARGUMENT`, and `sqrt` takes `abs(x) + 1` (near 0 a float32 rounding of x would
  become an error of its square root, which no tolerance relative to the bound allows);
- masks compare an input (exact in both precisions) with a literal, and integers are `floor` of an
  input times 4, so neither flips between float32 and float64 on a rounding;
- integers meet only integers: NumPy promotes int32 with float32 to float64, where braze follows the
  array API standard, which leaves mixed kinds to the library (braze/dtypes.py); an integer becomes a
  float by an explicit cast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import strategies as st

EXTENTS = (0, 1, 2, 3, 5, 7)  # empty, broadcasting, even and odd
MAX_RANK = 3
SQUASH = 100.0
MAX_EXP_ARGUMENT = 4.0
LAYOUTS = ("contiguous", "transposed", "strided")
FLOAT_UNARY = ("tanh", "exp", "log1p_abs", "sqrt_abs1", "neg", "abs", "silu", "relu")
FLOAT_BINARY = ("add", "sub", "mul", "maximum", "minimum")
DERIVING = ("slice", "pad", "concatenate", "merge_last", "flatten")  # extents computed from others
REDUCTIONS = ("sum", "mean", "max", "min", "var", "std")


@dataclass(frozen=True)
class Value:
    shape: tuple[int, ...]
    kind: str  # "float" or "int"
    bound: float  # |value| <= bound wherever it is finite
    precise: bool = False  # float64 in the program itself: no float32 rounding on its way
    derived: bool = False  # an extent was computed (a slice, pad, concatenate, reshape): see _broadcast
    holes: bool = False  # NaN in places: read only by the NaN-aware steps of tests/jit_library_steps.py


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[int, ...]
    params: tuple = ()

    def __repr__(self) -> str:
        params = ", ".join(f"{p!r}" for p in self.params)
        return f"{self.op}({', '.join(f'v{a}' for a in self.args)}{', ' if params else ''}{params})"


@dataclass
class Program:
    inputs: list[tuple[tuple[int, ...], str]]  # (shape, layout) of each float32 input
    steps: list[Step] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    outputs: tuple[int, ...] = ()

    def __repr__(self) -> str:
        lines = [f"v{i} = input{shape} {layout}" for i, (shape, layout) in enumerate(self.inputs)]
        lines += [f"v{len(self.inputs) + i} = {step!r}" for i, step in enumerate(self.steps)]
        return "\n".join(lines + [f"return {', '.join(f'v{o}' for o in self.outputs)}"])


# --- drawing --------------------------------------------------------------------------------------------
def _broadcast(*values: Value) -> tuple[int, ...] | None:
    """The broadcast shape, where braze can know it when it traces. A trace knows which extents of its
    inputs are 1 (they key its signature), and what a reduction with keepdims or expand_dims made 1;
    an extent computed from others (`x[1::2]` of 3 elements) is symbolic, and where it is 1 at run
    time braze raises InputError "must match" where NumPy would broadcast it."""
    try:
        shape = tuple(np.broadcast_shapes(*(v.shape for v in values)))
    except ValueError:
        return None
    for v in values:
        ones = [e == 1 and f != 1 for e, f in zip(v.shape, shape[len(shape) - len(v.shape):], strict=True)]
        if v.derived and any(ones):
            return None
    return shape


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None, keepdims: bool) -> tuple[int, ...]:
    axes = tuple(range(len(shape))) if axes is None else axes
    return tuple(1 if i in axes else e for i, e in enumerate(shape) if keepdims or i not in axes)


class _Draw:
    def __init__(self, data: st.DataObject, program: Program) -> None:
        self.data, self.program = data, program

    def __call__(self, strategy: st.SearchStrategy, label: str) -> object:
        return self.data.draw(strategy, label=label)

    def add(self, op: str, args: tuple[int, ...], value: Value, *params: object) -> int:
        derived = value.derived or op in DERIVING or any(self.program.values[a].derived for a in args)
        value = replace(value, derived=derived)
        self.program.steps.append(Step(op, args, params))
        self.program.values.append(value)
        return len(self.program.values) - 1

    def pick(self, label: str, kind: str = "float") -> int | None:
        """A value of the pool of that kind, squashed when its bound has grown too large."""
        pool = [i for i, v in enumerate(self.program.values) if v.kind == kind and not v.holes]
        if not pool:
            return None
        index = self(st.sampled_from(pool), label)
        value = self.program.values[index]
        if kind == "float" and not value.bound <= SQUASH:
            return self.add("tanh", (index,), Value(value.shape, "float", 1.0, value.precise))
        return index

    def value(self, index: int) -> Value:
        return self.program.values[index]


def _float_unary(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    op = draw(st.sampled_from(FLOAT_UNARY), "unary")
    if op == "exp" and v.bound > MAX_EXP_ARGUMENT:
        op = "tanh"
    bound = {"tanh": 1.0, "exp": math.exp(v.bound), "log1p_abs": math.log1p(v.bound),
             "sqrt_abs1": math.sqrt(v.bound + 1)}.get(op, v.bound)
    draw.add(op, (x,), Value(v.shape, "float", bound, v.precise))


def _float_binary(draw: _Draw) -> None:
    x, y = draw.pick("left"), draw.pick("right")
    a, b = draw.value(x), draw.value(y)
    shape = _broadcast(a, b)
    if shape is None:
        return
    op = draw(st.sampled_from(FLOAT_BINARY), "binary")
    bound = a.bound * b.bound if op == "mul" else a.bound + b.bound
    draw.add(op, (x, y), Value(shape, "float", bound, a.precise and b.precise))


def _scalar_arithmetic(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    op = draw(st.sampled_from(("add_scalar", "mul_scalar")), "scalar op")
    c = draw(st.sampled_from((-1.5, 0.5, 2.0, 3)), "literal")
    bound = v.bound * abs(c) if op == "mul_scalar" else v.bound + abs(c)
    draw.add(op, (x,), Value(v.shape, "float", bound, v.precise), c)


def _where(draw: _Draw) -> None:
    """np.where(input > c, x, y): the mask compares an input, which float32 and float64 hold alike."""
    inputs = len(draw.program.inputs)
    m = draw(st.integers(0, inputs - 1), "mask input")
    x, y = draw.pick("where x"), draw.pick("where y")
    shape = _broadcast(draw.value(m), draw.value(x), draw.value(y))
    if shape is None:
        return
    c = draw(st.sampled_from((0.0, -0.5, 1.0)), "threshold")
    a, b = draw.value(x), draw.value(y)
    draw.add("where", (m, x, y), Value(shape, "float", max(a.bound, b.bound), a.precise and b.precise), c)


def _mask_as_float(draw: _Draw) -> None:
    m = draw(st.integers(0, len(draw.program.inputs) - 1), "mask input")
    draw.add("mask_float", (m,), Value(draw.value(m).shape, "float", 1.0), draw(st.sampled_from((0.0, 0.5)), "c"))


def _integers(draw: _Draw) -> None:
    """floor(input * 4) as int32, int32 + int32, a sum of them (int64), and back to float."""
    op = draw(st.sampled_from(("floor_int", "int_add", "int_sum", "int_float")), "integer op")
    if op == "floor_int" or draw.pick("int", "int") is None:
        m = draw(st.integers(0, len(draw.program.inputs) - 1), "input")
        draw.add("floor_int", (m,), Value(draw.value(m).shape, "int", 64.0))
        return
    x = draw.pick("int operand", "int")
    v = draw.value(x)
    if op == "int_add":
        y = draw.pick("int right", "int")
        shape = _broadcast(v, draw.value(y))
        if shape is not None:
            draw.add("int_add", (x, y), Value(shape, "int", v.bound + draw.value(y).bound))
    elif op == "int_sum":
        axis = draw(st.sampled_from([None, *range(len(v.shape))]), "axis")
        axes = None if axis is None else (axis,)
        count = math.prod(v.shape) if axis is None else v.shape[axis]
        draw.add("int_sum", (x,), Value(_reduced_shape(v.shape, axes, False), "int", v.bound * max(count, 1)), axis)
    else:
        dtype = draw(st.sampled_from(("float32", "float64")), "dtype")
        draw.add("int_float", (x,), Value(v.shape, "float", v.bound, dtype == "float64"), dtype)


def _cast(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    dtype = draw(st.sampled_from(("float32", "float64")), "dtype")
    draw.add("cast", (x,), Value(v.shape, "float", v.bound, v.precise and dtype == "float64"), dtype)


def _reduction(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    rank = len(v.shape)
    op = draw(st.sampled_from(REDUCTIONS), "reduction")
    axes = draw(st.none() | st.lists(st.integers(0, max(rank - 1, 0)), min_size=1, max_size=rank, unique=True)
                .map(lambda a: tuple(sorted(a))) if rank else st.none(), "axes")
    keepdims = draw(st.booleans(), "keepdims")
    ddof = draw(st.sampled_from((0, 1)), "ddof") if op in ("var", "std") else 0
    count = math.prod(v.shape[a] for a in (range(rank) if axes is None else axes))
    if count == 0 and op in ("max", "min"):
        # NumPy raises at once; braze raises InputError only where an output reads the max of nothing
        # (braze/ops/reductions.py), and this one may be read by none
        return
    bound = {"sum": v.bound * max(count, 1), "var": 4 * v.bound ** 2, "std": 2 * v.bound}.get(op, v.bound)
    draw.add(op, (x,), Value(_reduced_shape(v.shape, axes, keepdims), "float", bound, v.precise), axes, keepdims,
             ddof)


def _cumsum(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    draw.add("cumsum", (x,), Value(v.shape, "float", v.bound * max(v.shape[axis], 1), v.precise), axis)


def _normalization(draw: _Draw) -> None:
    """softmax and layer_norm over the last axis (a NumPy program writes them out)."""
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape or not v.shape[-1]:  # NumPy's max of the written-out softmax has nothing to take
        return
    op = draw(st.sampled_from(("softmax", "layer_norm")), "normalization")
    # layer_norm divides by sqrt(var + eps): a row of one element (or equal ones) is 0 / sqrt(eps) and
    # a rounding of float32 in it is scaled by 1 / sqrt(eps), so its bound is that scale
    bound = 1.0 if op == "softmax" else v.bound / math.sqrt(1e-5) * 2
    draw.add(op, (x,), Value(v.shape, "float", bound, v.precise))


def _transpose(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    perm = tuple(draw(st.permutations(range(len(v.shape))), "permutation"))
    draw.add("transpose", (x,), Value(tuple(v.shape[p] for p in perm), "float", v.bound, v.precise), perm)


def _reshape(draw: _Draw) -> None:
    """Flattened, or the last two axes merged through the traced extents (x.shape[-2] * x.shape[-1])."""
    x = draw.pick("operand")
    v = draw.value(x)
    if len(v.shape) >= 2 and draw(st.booleans(), "merge last two"):
        draw.add("merge_last", (x,), Value(v.shape[:-2] + (v.shape[-2] * v.shape[-1],), "float", v.bound, v.precise))
    else:
        draw.add("flatten", (x,), Value((math.prod(v.shape),), "float", v.bound, v.precise))


def _expand_dims(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    if len(v.shape) >= MAX_RANK:
        return
    axis = draw(st.integers(0, len(v.shape)), "axis")
    draw.add("expand_dims", (x,), Value(v.shape[:axis] + (1,) + v.shape[axis:], "float", v.bound, v.precise), axis)


def _concatenate(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    fits = [i for i, w in enumerate(draw.program.values) if w.kind == "float" and not w.holes
            and len(w.shape) == len(v.shape)
            and all(e == f for a, (e, f) in enumerate(zip(v.shape, w.shape, strict=True)) if a != axis)]
    y = draw(st.sampled_from(fits), "other")
    w = draw.value(y)
    shape = v.shape[:axis] + (v.shape[axis] + w.shape[axis],) + v.shape[axis + 1:]
    draw.add("concatenate", (x, y), Value(shape, "float", max(v.bound, w.bound), v.precise and w.precise), axis)


def _pad(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    widths = tuple(tuple(draw(st.tuples(st.integers(0, 2), st.integers(0, 2)), "widths")) for _ in v.shape)
    c = draw(st.sampled_from((0.0, 1.5)), "constant")
    shape = tuple(e + a + b for e, (a, b) in zip(v.shape, widths, strict=True))
    draw.add("pad", (x,), Value(shape, "float", max(v.bound, c), v.precise), widths, c)


def _slice(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    start, stop, step = draw(st.tuples(st.sampled_from((None, 0, 1)), st.sampled_from((None, -1, 4)),
                                       st.sampled_from((None, 1, 2, 3))), "slice")
    extent = len(range(*slice(start, stop, step).indices(v.shape[axis])))
    shape = v.shape[:axis] + (extent,) + v.shape[axis + 1:]
    draw.add("slice", (x,), Value(shape, "float", v.bound, v.precise), axis, start, stop, step)


STEPS = (_float_unary, _float_binary, _scalar_arithmetic, _where, _mask_as_float, _integers, _cast, _reduction,
         _cumsum, _normalization, _transpose, _reshape, _expand_dims, _concatenate, _pad, _slice)


def _input_shape(draw: _Draw, base: tuple[int, ...]) -> tuple[int, ...]:
    """A suffix of the base shape with some extents 1, so every input broadcasts against the others."""
    rank = draw(st.integers(0 if len(draw.program.inputs) else 1, len(base)), "rank")
    suffix = base[len(base) - rank:]
    ones = draw(st.lists(st.booleans(), min_size=rank, max_size=rank), "ones")
    return tuple(1 if one else e for e, one in zip(suffix, ones, strict=True))


@st.composite
def programs(draw_fn, max_steps: int = 6, library: str | None = None) -> Program:
    """A random program; `library` ("numpy", "torch") adds the steps of tests/jit_library_steps.py that
    its vocabulary has (None: only the steps both spell alike, as NumPy and torch functions)."""
    from jit_library_steps import library_steps  # it builds on this module's values

    steps = STEPS + library_steps(library)
    data = draw_fn(st.data())
    base = tuple(data.draw(st.lists(st.sampled_from(EXTENTS), min_size=1, max_size=MAX_RANK), label="base shape"))
    program = Program(inputs=[])
    draw = _Draw(data, program)
    for _ in range(draw(st.integers(1, 3), "inputs")):
        shape = _input_shape(draw, base)
        program.inputs.append((shape, draw(st.sampled_from(LAYOUTS), "layout")))
        program.values.append(Value(shape, "float", 3.0))
    for _ in range(draw(st.integers(1, max_steps), "steps")):
        draw(st.sampled_from(steps), "step")(draw)
    made = list(range(len(program.inputs), len(program.values)))
    if not made:  # every drawn step was invalid for its operands
        made = [draw.add("neg", (0,), program.values[0])]
    extra = draw(st.lists(st.sampled_from(made), max_size=2, unique=True), "outputs")
    program.outputs = tuple(dict.fromkeys([made[-1], *extra]))
    return program


def input_arrays(program: Program, seed: int) -> list[np.ndarray]:
    """float32 inputs in (-3, 3), each laid out as its recipe says: contiguous, a transposed buffer,
    or every other element of a wider one."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, layout in program.inputs:
        if layout == "transposed" and len(shape) >= 2:
            array = rng.uniform(-3, 3, shape[::-1]).astype(np.float32).T
        elif layout == "strided" and shape:
            array = rng.uniform(-3, 3, shape[:-1] + (2 * shape[-1],)).astype(np.float32)[..., ::2]
        else:
            array = rng.uniform(-3, 3, shape).astype(np.float32)
        arrays.append(array)
    return arrays


def tolerance(program: Program, output: int) -> float:
    """The absolute error allowed for an output of float32 arithmetic against float64."""
    value = program.values[output]
    return 0.0 if value.kind == "int" else 2e-5 * (1 + value.bound) * (1 + len(program.steps))


# --- the two vocabularies -------------------------------------------------------------------------------
def _slice_key(rank: int, axis: int, start, stop, step) -> tuple:
    return (slice(None),) * axis + (slice(start, stop, step),) + (slice(None),) * (rank - axis - 1)


def numpy_program(program: Program, float32: type = np.float32):
    """The program as a function of NumPy arrays; `float32` is the dtype its float32 casts give (float64
    for the reference run)."""
    f32 = float32

    def run(op: str, xs: list, params: tuple):
        x = xs[0]
        match op:
            case "tanh" | "exp" | "abs" | "maximum" | "minimum" | "add":
                return getattr(np, op)(*xs)
            case "sub":
                return np.subtract(*xs)
            case "mul":
                return np.multiply(*xs)
            case "neg":
                return np.negative(x)
            case "log1p_abs":
                return np.log1p(np.abs(x))
            case "sqrt_abs1":
                return np.sqrt(np.abs(x) + 1)
            case "silu":
                return x / (1 + np.exp(-x))
            case "relu":
                return np.maximum(x, 0)
            case "add_scalar":
                return x + params[0]
            case "mul_scalar":
                return x * params[0]
            case "where":
                return np.where(x > params[0], xs[1], xs[2])
            case "mask_float":
                return np.greater(x, params[0]).astype(f32)
            case "floor_int":
                return np.floor(x * 4).astype(np.int32)
            case "int_add":
                return np.add(*xs)
            case "int_sum":
                return np.sum(x, axis=params[0])
            case "int_float" | "cast":
                return x.astype(f32 if params[0] == "float32" else np.float64)
            case "sum" | "mean" | "max" | "min":
                return getattr(np, op)(x, axis=params[0], keepdims=params[1])
            case "var" | "std":
                return getattr(np, op)(x, axis=params[0], keepdims=params[1], ddof=params[2])
            case "cumsum":
                return np.cumsum(x, axis=params[0])
            case "softmax":
                e = np.exp(x - np.max(x, axis=-1, keepdims=True))
                return e / np.sum(e, axis=-1, keepdims=True)
            case "layer_norm":
                return (x - np.mean(x, axis=-1, keepdims=True)) / np.sqrt(np.var(x, axis=-1, keepdims=True) + 1e-5)
            case "transpose":
                return np.transpose(x, params[0])
            case "merge_last":
                return np.reshape(x, x.shape[:-2] + (x.shape[-2] * x.shape[-1],))
            case "flatten":
                return np.reshape(x, (-1,))
            case "expand_dims":
                return np.expand_dims(x, params[0])
            case "concatenate":
                return np.concatenate([x, xs[1]], axis=params[0])
            case "pad":
                return np.pad(x, params[0], constant_values=params[1])
            case "slice":
                return x[_slice_key(x.ndim, *params)]
        return numpy_spelling(op, xs, params, f32)

    from jit_library_steps import numpy_spelling

    return _interpreter(program, run)


def torch_program(program: Program, float32=None):
    """The program as a function of torch tensors, in torch's functions and torch.nn.functional."""
    import torch
    import torch.nn.functional as F  # noqa: N812  (torch's own spelling)

    f32 = torch.float32 if float32 is None else float32

    def run(op: str, xs: list, params: tuple):
        x = xs[0]
        match op:
            case "tanh" | "exp" | "abs" | "maximum" | "minimum" | "add" | "sub" | "mul" | "neg":
                return getattr(torch, op)(*xs)
            case "log1p_abs":
                return torch.log1p(torch.abs(x))
            case "sqrt_abs1":
                return torch.sqrt(torch.abs(x) + 1)
            case "silu" | "relu":
                return getattr(F, op)(x)
            case "add_scalar":
                return torch.add(x, params[0])
            case "mul_scalar":
                return torch.mul(x, params[0])
            case "where":
                return torch.where(x > params[0], xs[1], xs[2])
            case "mask_float":
                return torch.gt(x, params[0]).to(f32)
            case "floor_int":
                return torch.floor(x * 4).to(torch.int32)
            case "int_add":
                return torch.add(*xs)
            case "int_sum":
                return torch.sum(x) if params[0] is None else torch.sum(x, dim=params[0])
            case "int_float" | "cast":
                return x.to(f32 if params[0] == "float32" else torch.float64)
            case "sum" | "mean" | "max" | "min":
                fn = {"max": torch.amax, "min": torch.amin}.get(op) or getattr(torch, op)
                dims = tuple(range(x.ndim)) if params[0] is None else params[0]
                return fn(x, dim=dims, keepdim=params[1])
            case "var" | "std":
                return getattr(torch, op)(x, dim=params[0], keepdim=params[1], correction=params[2])
            case "cumsum":
                return torch.cumsum(x, dim=params[0])
            case "softmax":
                return F.softmax(x, dim=-1)
            case "layer_norm":
                return F.layer_norm(x, (x.shape[-1],), eps=1e-5)
            case "transpose":
                return torch.permute(x, params[0])
            case "merge_last":
                return torch.reshape(x, tuple(x.shape[:-2]) + (x.shape[-2] * x.shape[-1],))
            case "flatten":
                return torch.reshape(x, (-1,))
            case "expand_dims":
                return torch.unsqueeze(x, params[0])
            case "concatenate":
                return torch.cat([x, xs[1]], dim=params[0])
            case "pad":
                return F.pad(x, [w for pair in reversed(params[0]) for w in pair], value=params[1])
            case "slice":
                return x[_slice_key(x.ndim, *params)]
        return torch_spelling(op, xs, params, f32)

    from jit_library_steps import torch_spelling

    return _interpreter(program, run)


def _interpreter(program: Program, run):
    """A function of one named parameter per input (`@bz.jit` binds arguments by name)."""
    def steps(inputs):
        values = list(inputs)
        for step in program.steps:
            values.append(run(step.op, [values[a] for a in step.args], step.params))
        outs = tuple(values[o] for o in program.outputs)
        return outs if len(outs) > 1 else outs[0]

    names = ", ".join(f"v{i}" for i in range(len(program.inputs)))
    scope = {"steps": steps}
    exec(f"def program({names}):\n    return steps(({names},))", scope)  # noqa: S102
    return scope["program"]
