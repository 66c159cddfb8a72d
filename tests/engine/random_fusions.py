"""Random fusion programs from Hypothesis draws (tests/engine/test_fuzz_fusions.py runs them on every
backend against the reference): inputs of every dtype, layout and extent, then random ops over every kind
of the op table, and several outputs. tests/engine/fuzz_values.py says how each node's error is bounded."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fuzz_values import (
    ALL,
    APPROX_ULPS,
    EXP_OPS,
    FLOAT_LITERALS,
    INT_LITERALS,
    LARGE_EXTENTS,
    LIMIT,
    MAX_BF16_CHAIN,
    MAX_EXP_NESTING,
    MAX_NUMEL,
    MAX_RANK,
    ODD_EXTENTS,
    WRAPPING_OPS,
    InputRecipe,
    Node,
    Operand,
    _bound,
    _err,
    _slice_text,
    _text,
    _value,
    bf16_chain,
    broadcast_shape,
    compute_ulp,
    exp_nesting,
    literals_fit,
    promoted_kind,
    ulp,
)
from hypothesis import reject
from hypothesis import strategies as st
from random_model_views import MODEL_VIEWS, model_view

import braze as bz
from braze import dtypes as dt
from braze.ir.tensor import TensorView
from braze.ops.elementwise import BINARY, TERNARY, UNARY
from braze.ops.table import OPS


def accumulation(d: dt.DType) -> dt.DType:
    """The type a sum or product of d accumulates in (braze/ops/reductions.py)."""
    return d if d.is_floating else dt.uint64 if d.is_unsigned else dt.int64


@dataclass
class RandomFusion:
    """Builds a random fusion from Hypothesis draws, tracking bounds and error bounds per node."""

    data: st.DataObject
    f: bz.Fusion
    dtypes: list[dt.DType]
    nodes: list[Node] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    recipes: list[InputRecipe] = field(default_factory=list)
    outputs: list[Node] = field(default_factory=list)
    nesting: dict[int, int] = field(default_factory=dict)  # exp_nesting's memo
    chains: dict[int, int] = field(default_factory=dict)  # bf16_chain's memo
    # A GPU's plan compiled for the CPU (the gpu_plan backend) meets the same vectorizer blowup in a row
    # loop of static extent 1 (log_softmax(abs(x) + 0.5) of a bfloat16 (1,) took 7 s): False keeps them out.
    static_bf16_ones: bool = True

    # --- drawing ---------------------------------------------------------------------------------
    def draw(self, strategy):
        return self.data.draw(strategy)

    def choice(self, options):
        return self.draw(st.sampled_from(list(options)))

    def coin(self, p: float = 0.5) -> bool:
        """True with about probability p; shrinks to False."""
        return self.draw(st.integers(0, 99)) >= 100 * (1 - p)

    def pick(self, ok=lambda n: True) -> Node | None:
        """A node satisfying `ok`, the latest ones first (shrinks towards short programs)."""
        candidates = [n for n in self.nodes if ok(n) and bf16_chain(n.tv, self.chains) < MAX_BF16_CHAIN]
        if not candidates:
            return None
        return candidates[-1 - self.draw(st.integers(0, len(candidates) - 1))]

    def partner(self, a: Node, ok=lambda n: True) -> Operand:
        """A second operand for `a`: a node that broadcasts with it, or a weak Python scalar."""
        if not self.coin(0.3):
            other = self.pick(lambda n: ok(n) and broadcast_shape([a, n]) is not None)
            if other is not None:
                return other
        kind = self.choice("bif" if self.coin(0.3) else a.kind)
        ints = [n for n in INT_LITERALS if n >= 0 or not a.unsigned]  # -2 fits no unsigned type
        return {"b": lambda: self.coin(), "i": lambda: self.choice(ints),
                "f": lambda: self.choice(FLOAT_LITERALS)}[kind]()

    def exp_nesting(self, n: Node) -> int:
        return exp_nesting(n.tv, self.nesting)

    # --- recording -------------------------------------------------------------------------------
    def add(self, tv: TensorView, shape, bound: float, err: float, text: str) -> Node | None:
        """Records a new node; one that could overflow its dtype stays out of the pool (dead code)."""
        name = f"t{len(self.nodes)}"
        shape = tuple(shape)
        bound = 1 if tv.dtype.is_bool else bound
        if tv.dtype.is_floating and err > 0:
            err += ulp(tv.dtype) * bound  # the result is rounded to its dtype
        if bound > LIMIT[tv.dtype.name] or math.prod(shape) > MAX_NUMEL:
            self.lines.append(f"# dropped: {text} (bound {bound:.3g})")
            return None
        assert tv.ndim == len(shape), (text, tv, shape)
        if not tv.dtype.is_floating:
            assert err == 0, f"{text}: an integer or bool result from inexact operands"
        node = Node(tv, shape, bound, err, name)
        self.nodes.append(node)
        self.lines.append(f"{name} = {text}  # {tv.dtype.name}{list(shape)} bound={bound:.3g} err={err:.3g}")
        return node

    def ew(self, op: str, operands: list[Operand], bound: float, err: float, approx: bool = False,
           **attrs) -> Node | None:
        """An elementwise op: `err` is the propagated error; `approx` when the backends' results may differ
        for equal operands (a few ulps of the compute type)."""
        shape = broadcast_shape(operands)
        assert shape is not None
        if any(isinstance(x, Node) and bf16_chain(x.tv, self.chains) >= MAX_BF16_CHAIN for x in operands):
            return None
        if not literals_fit(operands[1:] if op == "where" else operands):
            return None
        tv = getattr(bz.ops, op)(*[_value(x) for x in operands], **attrs)
        if tv.dtype.is_unsigned and op in WRAPPING_OPS:
            bound = LIMIT[tv.dtype.name]
        if approx and tv.dtype.is_floating:
            err += APPROX_ULPS * compute_ulp(tv.dtype) * bound
        extra = "".join(f", {k}={v!r}" for k, v in attrs.items())
        return self.add(tv, shape, bound, err, f"bz.ops.{op}({', '.join(_text(x) for x in operands)}{extra})")

    # --- inputs ----------------------------------------------------------------------------------
    def add_inputs(self) -> None:
        rank = self.choice((2, 3, 1))  # the first shrinks best and is drawn most
        universe = self.fit([self.extent() for _ in range(rank)])
        for _ in range(self.draw(st.integers(1, 3))):
            r = self.draw(st.integers(1, rank))
            extents = universe[rank - r:]
            dtype = self.choice(self.dtypes)
            # No static extents > 1 for bfloat16: the same loop-vectorizer blowup as MAX_BF16_CHAIN's, after
            # full unrolling (var(log_softmax(x)) of a bfloat16 (6,) takes 12 s to compile, (-1,) 0.2 s).
            # Static extents stay small: a large one is what full unrolling would take.
            symbolic = (-1, -1, 1) if dtype != dt.bfloat16 or self.static_bf16_ones else (-1, -1)
            declared = [self.choice((-1, -1, n, 1) if dtype != dt.bfloat16 and 1 < n <= 8 else symbolic)
                        for n in extents]
            shape = tuple(1 if e == 1 else n for e, n in zip(declared, extents))
            recipe = InputRecipe(
                dtype, shape,
                perm=tuple(self.draw(st.permutations(range(r)))) if self.coin(0.4) else tuple(range(r)),
                steps=tuple(self.choice((1, 1, 2, 3)) for _ in range(r)),
                flips=tuple(self.coin(0.25) for _ in range(r)),
                repeat=tuple(e == -1 and n > 1 and self.coin(0.15) for e, n in zip(declared, extents)),
                grid=self.coin(0.4),
                zero_unit_strides=self.coin(0.3),
                wide=dtype.is_unsigned and self.coin(0.3),
            )
            tv = self.f.define_tensor(shape=declared, dtype=dtype)
            bound = LIMIT[dtype.name] if recipe.wide else {"b": 1, "i": 8, "f": 2}[dtype.category]
            self.recipes.append(recipe)
            self.add(tv, shape, bound, 0.0, f"f.define_tensor(shape={tuple(declared)}, dtype=bz.{dtype.name})")
        if self.coin(0.15):
            dtype = self.choice([d for d in (dt.bool_, dt.int32, dt.float32, dt.float64, dt.uint32)])
            tv = self.f.define_scalar(dtype=dtype)
            self.recipes.append(InputRecipe(dtype, (), (), (), (), (), grid=False, scalar=True))
            value = self.recipes[-1].make(None)
            self.add(tv, (), abs(float(value)), 0.0, f"f.define_scalar(dtype=bz.{dtype.name})")

    @staticmethod
    def fit(universe: list[int]) -> list[int]:
        """The extents with at most MAX_NUMEL elements: the largest kept, the others cut to 2, then 1."""
        largest = universe.index(max(universe))
        for cap in (2, 1):
            for axis in range(len(universe)):
                if math.prod(universe) > MAX_NUMEL and axis != largest:
                    universe[axis] = min(universe[axis], cap)
        return universe

    def extent(self) -> int:
        """Mostly 1-6 (what shrinks best), sometimes 0, odd ones past a vector's width, or large ones
        past a block of threads."""
        kind = self.draw(st.integers(0, 99))
        if kind < 70:
            return self.draw(st.integers(1, 6))
        if kind < 78:
            return 0
        if kind < 90:
            return self.choice(ODD_EXTENTS)
        return self.choice(LARGE_EXTENTS)

    # --- op kinds --------------------------------------------------------------------------------
    def positive(self, x: Node) -> Node | None:
        """abs(x) + 0.5 (x + 0.5 for bools): a domain where log, 1/x and pow are well conditioned."""
        if x.kind == "b":
            return self.ew("add", [x, 0.5], 1.5, x.err)
        a = self.ew("abs", [x], x.bound, x.err)
        return a and self.ew("add", [a, 0.5], a.bound + 0.5, a.err)

    def tame(self, x: Node, limit: float) -> Node | None:
        """x clamped to [-limit, limit] where its bound is larger."""
        if x.bound <= limit:
            return x
        lo, hi = (-limit, limit) if x.kind == "f" else (0 if x.unsigned else -int(limit), int(limit))
        return self.ew("clamp", [x, lo, hi], limit, x.err)

    def unary(self) -> Node | None:
        name = self.choice(["exp"] + [n for n in UNARY if n not in ("set", "exp")] + ["set", "gelu_tanh"])
        op = "gelu" if name == "gelu_tanh" else name
        kinds = UNARY[op][0]
        steps = ("floor", "ceil", "round", "trunc", "sign", "logical_not")  # discontinuous
        x = self.pick(lambda n: n.kind in kinds and (n.exact or n.kind != "f" or op not in steps)
                      and (op not in EXP_OPS or self.exp_nesting(n) < MAX_EXP_NESTING))
        if x is None:
            return None
        b, e = x.bound, x.err
        if op in ("set", "neg", "abs", "relu", "floor", "ceil", "round", "trunc"):
            return self.ew(op, [x], b + (op in ("floor", "ceil", "round")), e)  # floor(-1.5) = -2
        if op in ("sign", "isnan", "isinf", "isfinite", "logical_not"):
            return self.ew(op, [x], 1, e if op == "sign" else 0.0)
        if op == "bitwise_not":
            return self.ew(op, [x], b + 1, 0.0)
        if op in ("sin", "cos", "tanh", "erf", "erfc", "sigmoid"):
            slope = {"erf": 2 / math.sqrt(math.pi), "erfc": 2 / math.sqrt(math.pi), "sigmoid": 0.25}.get(op, 1.0)
            return self.ew(op, [x], 2.0 if op == "erfc" else 1.0, slope * e, approx=True)
        if op in ("gelu", "silu"):
            attrs = {"approximate": "tanh"} if name == "gelu_tanh" else {}
            return self.ew(op, [x], b, 1.2 * e, approx=True, **attrs)
        if op in ("exp", "exp2", "expm1", "tan"):
            limit = {"exp": 4.0, "exp2": 5.0, "expm1": 4.0, "tan": 1.125}[op]  # exact in every float type
            x = self.tame(x, limit)
            if x is None:
                return None
            b, e = x.bound, x.err
            value = {"exp": math.exp(b), "exp2": 2**b, "expm1": math.exp(b), "tan": math.tan(b)}[op]
            slope = {"exp": value, "exp2": math.log(2) * value, "expm1": value, "tan": 1 + value**2}[op]
            return self.ew(op, [x], value, slope * e, approx=True)
        if op == "log1p":
            a = self.ew("abs", [x], b, e) if x.kind != "b" else x
            return a and self.ew(op, [a], math.log1p(b), e, approx=True)
        p = self.positive(x)  # log, log2, sqrt, rsqrt, reciprocal
        if p is None:
            return None
        b, e = p.bound, p.err
        if op == "sqrt":
            return self.ew(op, [p], math.sqrt(b), 0.71 * e)
        if op == "rsqrt":
            return self.ew(op, [p], 1.42, 1.42 * e)
        if op == "reciprocal":
            return self.ew(op, [p], 2.0, 4 * e)
        scale = 1 / math.log(2) if op == "log2" else 1.0
        return self.ew(op, [p], scale * max(math.log(b), math.log(2)), 2 * scale * e, approx=True)

    def binary(self) -> Node | None:
        name = self.choice(BINARY)
        kinds = BINARY[name][0]
        needs_exact = name in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                               "floordiv", "remainder")
        ok = lambda n: n.kind in kinds and (n.exact or not needs_exact)
        a = self.pick(ok)
        if a is None:
            return None
        if name in ("floordiv", "remainder") and a.kind == "i":
            return self.int_division(name, a)
        if name in ("truediv", "atan2", "floordiv", "remainder"):
            return self.division(name, a)
        if name == "pow":
            return self.power(a)
        if name in ("left_shift", "right_shift"):
            return self.shift(name, a)
        if name == "copysign":  # the sign comes from b: an exact b, so no rounding flips it
            b = self.partner(a, lambda n: ok(n) and n.exact)
            return self.ew(name, [a, b], a.bound, a.err) if promoted_kind(kinds, [a, b]) else None
        b = self.partner(a, ok)
        if promoted_kind(kinds, [a, b]) is None:
            return None
        ba, bb, ea, eb = a.bound, _bound(b), a.err, _err(b)
        if name in ("add", "sub"):
            return self.ew(name, [a, b], ba + bb, ea + eb)
        if name == "mul":
            return self.ew(name, [a, b], ba * bb, bb * ea + ba * eb + ea * eb)
        if name in ("maximum", "minimum"):
            return self.ew(name, [a, b], max(ba, bb), max(ea, eb))
        if name.startswith("bitwise"):
            return self.ew(name, [a, b], 2 ** math.ceil(math.log2(max(ba, bb) + 1)), 0.0)
        return self.ew(name, [a, b], 1, 0.0)  # comparisons and logical ops

    def int_division(self, name: str, a: Node) -> Node:
        """Integer floordiv and remainder by anything: division by 0 gives 0, by -1 cannot trap."""
        b = self.partner(a, lambda n: n.kind == "i")
        # uint64 with a signed type is float64 (discontinuous, and 1 / 0 is inf): a literal instead
        if not (isinstance(b, Node) or type(b) is int) or promoted_kind("i", [a, b]) is None:
            b = self.choice((3, 1, 0, 7) if a.unsigned else (3, -2, 1, -1, 0, 7))
        return self.ew(name, [a, b], a.bound if name == "floordiv" else _bound(b), 0.0)

    def division(self, name: str, a: Node) -> Node | None:
        """truediv and atan2 by abs(b) + 0.5 or a literal; float floordiv and remainder the same, of
        exact operands only (both jump)."""
        if self.coin(0.3):
            b = self.choice([2.0, -1.5, 0.75, 3.0] if name != "atan2" else [2.0, 0.75])
            divisor, slope_b = abs(b), 0.0
        else:
            other = self.pick(lambda n: n.kind in "bif" and broadcast_shape([a, n]) is not None
                              and (n.exact or name in ("truediv", "atan2")))
            b = other and self.positive(other)
            if b is None:
                return None
            divisor, slope_b = 0.5, 1.0
        if promoted_kind(BINARY[name][0], [a, b]) is None:
            return None
        ba, ea, eb = a.bound, a.err, _err(b)
        if name == "truediv":
            return self.ew(name, [a, b], ba / divisor, ea / divisor + slope_b * ba / divisor**2 * eb)
        if name == "atan2":
            return self.ew(name, [a, b], math.pi / 2, ea / divisor + eb, approx=True)
        if name == "floordiv":
            return self.ew(name, [a, b], ba / divisor + 1, 0.0)
        return self.ew(name, [a, b], max(_bound(b), divisor), 0.0)

    def power(self, a: Node) -> Node | None:
        if a.kind == "i" and self.coin(0.5):  # integer powers, negative exponents included
            exponent = self.partner(a, lambda n: n.kind == "i" and n.bound <= 3)
            # an integer power: uint64 with a signed type would be a float64 one
            if isinstance(exponent, float) or _bound(exponent) > 3 or promoted_kind("i", [a, exponent]) is None:
                exponent = self.choice((0, 1, 2, 3))
            return self.ew("pow", [a, exponent], max(a.bound, 1) ** max(_bound(exponent), 1), 0.0)
        base = self.positive(a)
        if base is None:
            return None
        exponent = self.choice((2.0, 0.5, -1.0, 1.5, 3.0, 2))
        lo, hi = 0.5, base.bound
        value = max(lo**exponent, hi**exponent)
        slope = abs(exponent) * max(lo ** (exponent - 1), hi ** (exponent - 1))
        return self.ew("pow", [base, exponent], value, slope * base.err, approx=True)

    def shift(self, name: str, a: Node) -> Node | None:
        if name == "left_shift" or self.coin(0.5):
            amount = self.choice((0, 1, 2, 3))
        else:  # any amount: negative and past the bit width are defined too
            amount = self.partner(a, lambda n: n.kind == "i")
            if promoted_kind("i", [a, amount]) is None:
                return None
        bound = a.bound * 2 ** amount if name == "left_shift" else a.bound
        return self.ew(name, [a, amount], bound, 0.0)

    def ternary(self) -> Node | None:
        name = self.choice(TERNARY)
        kinds = TERNARY[name][0]
        if name == "where":
            c = self.pick(lambda n: n.exact)
            if c is None:
                return None
            a = self.partner(c)
            b = self.partner(a if isinstance(a, Node) else c)
            if broadcast_shape([c, a, b]) is None:
                return None
            return self.ew(name, [c, a, b], max(_bound(a), _bound(b)), max(_err(a), _err(b)))
        x = self.pick(lambda n: n.kind in kinds)
        if x is None:
            return None
        if name == "clamp":
            if self.coin(0.6):
                lo, hi = self.choice([(-1.0, 1.5), (0, 3), (-2, 0.5)] if x.kind == "f" else
                                     [(1, 3), (0, 2), (5, 5)] if x.unsigned else
                                     [(-1, 3), (0, 2), (-5, 5)] if x.kind == "i" else [(False, True)])
            else:
                lo, hi = self.partner(x), self.partner(x)
            operands = [x, lo, hi]
        else:
            operands = [x, self.partner(x), self.partner(x)]
        if broadcast_shape(operands) is None or promoted_kind(kinds, operands) is None:
            return None
        (bx, b1, b2), (ex, e1, e2) = [_bound(o) for o in operands], [_err(o) for o in operands]
        if name == "clamp":
            return self.ew(name, operands, max(bx, b1, b2), max(ex, e1, e2))
        if name == "fma":
            return self.ew(name, operands, bx * b1 + b2, b1 * ex + bx * e1 + e2)
        if b2 > 2:  # lerp's weight
            return None
        return self.ew(name, operands, bx + b2 * (bx + b1), ex * (1 + b2) + e1 * b2 + e2 * (bx + b1))

    def cast(self) -> Node | None:
        target = self.choice(ALL)
        x = self.pick(lambda n: n.exact or n.kind != "f" or target.is_floating)
        if x is None:
            return None
        bound, err = x.bound, x.err
        if target.is_integer and x.kind == "f":
            bound = math.floor(x.bound)  # truncates toward zero (a negative float to an unsigned type saturates at 0)
        if target.is_unsigned and x.kind == "i" and (not x.unsigned or bound > LIMIT[target.name]):
            bound = LIMIT[target.name]  # wraps: int8 -1 is uint8 255
        elif target.is_integer and x.kind == "i" and bound > LIMIT[target.name]:
            bound = 2 ** (8 * target.itemsize - 1)  # wraps
        if target.is_floating and x.kind == "i" and bound > 2 ** (3 if target.name == "bfloat16" else 11):
            err = ulp(target) * bound  # rounds, maybe differently through float32
        tv = bz.ops.cast(x.tv, target)
        return self.add(tv, x.shape, bound, err,
                        f"bz.ops.cast({x.name}, bz.{target.name})")

    # --- reductions and composites --------------------------------------------------------------
    def axes(self, x: Node) -> tuple[list[int] | None, bool, int, tuple[int, ...]]:
        """Random axes (None: all), keepdim, the number of elements reduced, and the result shape."""
        if self.coin(0.2):
            axes = None
        else:
            axes = sorted(self.draw(st.sets(st.integers(0, x.tv.ndim - 1), min_size=1)))
        return self.reduced(x, axes, self.coin())

    @staticmethod
    def reduced(x: Node, axes: list[int] | None, keepdim: bool) -> tuple[list[int] | None, bool, int, tuple]:
        reduced = range(x.tv.ndim) if axes is None else axes
        n = math.prod(x.shape[a] for a in reduced)
        shape = tuple(1 if a in reduced else e for a, e in enumerate(x.shape) if keepdim or a not in reduced)
        return axes, keepdim, n, shape

    def reduction(self) -> Node | None:
        name = self.choice(["sum", "prod", "max", "min", "mean", "var", "any", "all", "argmax", "argmin", "std",
                            "var_mean"])
        x = self.pick(lambda n: n.tv.ndim > 0 and (n.exact or name not in ("any", "all", "argmax", "argmin")))
        if x is None:
            return None
        return self.reduce(name, x, *self.axes(x))

    def reduce(self, name: str, x: Node, axes, keepdim: bool, n: int, shape: tuple) -> Node | None:
        """x reduced by `name` over `axes` (n elements each), its result `shape`, with its bounds."""
        if n == 0 and name in ("mean", "var", "std", "var_mean"):  # NaN: 0 / 0
            return None
        b, e = x.bound, x.err
        exact = x.exact and (x.kind != "f" or n == 1)
        acc = compute_ulp(x.dtype) if x.kind == "f" else ulp(dt.float32)
        attrs, text = {}, f"axes={axes}, keepdim={keepdim}"
        if name in ("max", "min"):
            bound, err = b, e
        elif name in ("any", "all"):
            bound, err = 1, 0.0
        elif name in ("argmax", "argmin"):
            bound, err = n, 0.0
        elif name == "sum":
            bound = n * b
            err = 0.0 if exact else n * e + 2 * n * acc * bound
        elif name == "mean":
            bound = b
            exact = x.exact and (n == 1 or x.kind != "f" and n * b < 2**24)  # integer sums in float32 are exact
            err = 0.0 if exact else e + 2 * (n + 1) * acc * b
        elif name == "prod":
            if n > 24 or max(b, 1) ** n > LIMIT[accumulation(x.dtype).name]:
                return None
            bound = max(b, 1) ** n
            err = 0.0 if exact else n * max(b, 1) ** (n - 1) * e + 2 * n * acc * bound
        else:  # var, std, and var_mean's var or mean
            correction = self.choice((0, 1)) if n > 1 else 0
            attrs["correction"] = correction
            text += f", correction={correction}"
            factor = n / (n - correction)
            bound = 4 * b * b * factor
            err = 0.0 if x.exact and n == 1 else 8 * b * e * factor + 4 * n * acc * bound
            if name == "std":  # |sqrt(a) - sqrt(b)| <= sqrt(|a - b|): steep near a variance of 0
                bound, err = math.sqrt(bound), math.sqrt(err)
        tv = getattr(bz.ops, name)(x.tv, axes=axes, keepdim=keepdim, **attrs)
        if name == "var_mean":
            which = self.choice((0, 1))
            tv, text = tv[which], f"{text})[{which}"
            if which:
                bound, err = b, (0.0 if x.exact and n == 1 else e + 2 * (n + 1) * acc * b)
        node = self.add(tv, shape, bound, err, f"bz.ops.{name}({x.name}, {text})")
        if node is None or not keepdim or x.kind != "f" or node.kind != "f" or not self.coin(0.4):
            return node
        # Broadcast back over what was reduced, as a normalization does: rows kept on chip, several
        # reductions of related values in one kernel.
        return self.ew("sub", [x, node], x.bound + node.bound, x.err + node.err)

    def moments(self) -> Node | None:
        """A norm backward's dx: g - mean(g) - x * mean(g * x) over random axes, g = x * y: two
        reductions of related values broadcast back into one output."""
        x = self.pick(lambda n: n.kind == "f" and n.tv.ndim > 0 and n.numel > 0)
        if x is None:
            return None
        y = self.pick(lambda n: n.kind == "f" and n is not x and broadcast_shape([x, n]) == x.shape) or x
        axes = sorted(self.draw(st.sets(st.integers(0, x.tv.ndim - 1), min_size=1)))
        g = self.ew("mul", [x, y], x.bound * y.bound, y.bound * x.err + x.bound * y.err + x.err * y.err)
        gx = g and self.ew("mul", [g, x], g.bound * x.bound, x.bound * g.err + g.bound * x.err + g.err * x.err)
        m1 = gx and self.reduce("mean", g, *self.reduced(g, axes, True))
        m2 = m1 and self.reduce("mean", gx, *self.reduced(gx, axes, True))
        centered = m2 and self.ew("sub", [g, m1], g.bound + m1.bound, g.err + m1.err)
        scaled = centered and self.ew("mul", [x, m2], x.bound * m2.bound,
                                      m2.bound * x.err + x.bound * m2.err + x.err * m2.err)
        return scaled and self.ew("sub", [centered, scaled], centered.bound + scaled.bound,
                                  centered.err + scaled.err)

    def composite(self) -> Node | None:
        if self.coin(0.4):
            return self.moments()
        if self.coin(0.2):
            return self.take_along()
        name = self.choice(["softmax", "log_softmax", "layer_norm", "rms_norm"])
        # Integers past int64's LIMIT (a wrapped uint64) would square past float32's range in a norm.
        x = self.pick(lambda n: n.tv.ndim > 0 and n.kind != "b" and (n.exact or "norm" not in name)
                      and ("norm" in name or self.exp_nesting(n) < MAX_EXP_NESTING) and n.bound <= LIMIT["int64"])
        if x is None:
            return None
        result = x.dtype if x.kind == "f" else dt.float32
        u = compute_ulp(result)
        b, e = x.bound, x.err
        if "softmax" in name:
            axis = self.draw(st.integers(-x.tv.ndim, x.tv.ndim - 1))
            n = x.shape[axis]
            tv = getattr(bz.ops, name)(x.tv, axis=axis)
            text = f"bz.ops.{name}({x.name}, axis={axis})"
            bound = 1.0 if name == "softmax" else 2 * b + math.log(max(n, 1))
            err = 2 * e + (2 * n + 16) * u * max(bound, 1)
        else:
            axes = sorted(self.draw(st.sets(st.integers(0, x.tv.ndim - 1), min_size=1)))
            n = math.prod(x.shape[a] for a in axes)
            tv = getattr(bz.ops, name)(x.tv, axes=axes)
            text = f"bz.ops.{name}({x.name}, axes={axes})"
            bound = math.sqrt(n)
            if name == "layer_norm":  # (x - mean) * rsqrt(var + 1e-5): the means differ by ~n ulp
                r = 1 / math.sqrt(1e-5)
                delta = 2 * n * u * b
                err = r * delta + 0.5 * bound * r * r * delta * delta + 4 * n * bound * u
            else:
                err = (2 * n + 8) * u * bound
        return self.add(tv, x.shape, bound, err, text)

    def take_along(self) -> Node | None:
        """x picked along an axis where an exact node of x's shape has its argmax (the argmax-gather of
        greedy decoding), or where an index counted back from the end points: exact picks."""
        x = self.pick(lambda n: n.tv.ndim > 0 and 0 not in n.shape)
        if x is None:
            return None
        axis = self.draw(st.integers(0, x.tv.ndim - 1))
        by = self.pick(lambda n: n.exact and n.shape == x.shape and n.tv.dtype.kind in "bif")
        if by is not None and self.coin(0.7):
            indices = bz.ops.argmax(by.tv, axes=axis, keepdim=True)
            text = f"bz.ops.argmax({by.name}, axes={axis}, keepdim=True)"
        else:
            back = self.draw(st.integers(1, x.shape[axis]))
            indices = bz.ops.full([1] * x.tv.ndim, -back, dtype=dt.int64)
            text = f"bz.ops.full({[1] * x.tv.ndim}, {-back}, dtype=bz.int64)"
        tv = bz.ops.take_along_axis(x.tv, indices, axis)
        shape = tuple(1 if a == axis else e for a, e in enumerate(x.shape))
        return self.add(tv, shape, x.bound, x.err, f"bz.ops.take_along_axis({x.name}, {text}, {axis})")

    # --- views -----------------------------------------------------------------------------------
    def view(self) -> Node | None:
        for _ in range(3):  # not every view applies to every node
            x = self.pick(lambda n: n.tv.ndim > 0)
            if x is None:
                return None
            node = self.view_of(x)
            if node is not None:
                return node
        return None

    def view_of(self, x: Node) -> Node | None:
        name = self.choice(["permute", "transpose", "slice", "getitem", "flip", "reshape", "squeeze", "unsqueeze",
                            "pad", "cat", "expand", "broadcast_in_dim", "nvfuser_slice", *MODEL_VIEWS])
        if name in MODEL_VIEWS:
            return model_view(self, name, x)
        rank, shape = x.tv.ndim, list(x.shape)
        if name in ("permute", "transpose") and rank > 1:
            dims = tuple(self.draw(st.permutations(range(rank))))
            if name == "transpose":
                d0, d1 = self.draw(st.integers(0, rank - 1)), self.draw(st.integers(0, rank - 1))
                dims = list(range(rank))
                dims[d0], dims[d1] = dims[d1], dims[d0]
                return self.same(x, bz.ops.transpose(x.tv, d0, d1), [shape[d] for d in dims],
                                 f"bz.ops.transpose({x.name}, {d0}, {d1})")
            return self.same(x, bz.ops.permute(x.tv, dims), [shape[d] for d in dims],
                             f"bz.ops.permute({x.name}, {dims})")
        if name in ("slice", "getitem"):
            slices = []
            for n in shape:
                s = self.choice([slice(None), slice(None, None, 2), slice(1, None), slice(None, None, -1),
                                 slice(None, -1), slice(-2, None, -2), slice(1, 5, 3)])
                slices.append(s if len(range(n)[s]) > 0 else slice(None))
            new = [len(range(n)[s]) for n, s in zip(shape, slices)]
            tv = x.tv[tuple(slices)] if name == "getitem" else bz.ops.slice(x.tv, slices)
            return self.same(x, tv, new, f"{x.name}[{', '.join(_slice_text(s) for s in slices)}]")
        if name == "nvfuser_slice":
            return self.nvfuser_slice(x)
        if name == "flip":
            axes = sorted(self.draw(st.sets(st.integers(0, rank - 1), min_size=1)))
            return self.same(x, bz.ops.flip(x.tv, axes), shape, f"bz.ops.flip({x.name}, {axes})")
        if name == "reshape" and x.numel > 0:  # reshape(-1) of nothing is ambiguous
            new = self.factorization(x.numel)
            arg = list(new)
            if self.coin(0.6):
                arg[self.draw(st.integers(0, len(new) - 1))] = -1
            return self.same(x, bz.ops.reshape(x.tv, arg), new, f"bz.ops.reshape({x.name}, {arg})")
        if name == "squeeze" and 1 in shape:
            axis = self.choice([a for a, n in enumerate(shape) if n == 1])
            return self.same(x, bz.ops.squeeze(x.tv, [axis]), shape[:axis] + shape[axis + 1:],
                             f"bz.ops.squeeze({x.name}, [{axis}])")
        if name == "unsqueeze" and rank < MAX_RANK:
            axis = self.draw(st.integers(0, rank))
            return self.same(x, bz.ops.unsqueeze(x.tv, axis), shape[:axis] + [1] + shape[axis:],
                             f"bz.ops.unsqueeze({x.name}, {axis})")
        if name == "pad":
            widths = [(self.choice((0, 0, 1, 2)), self.choice((0, 1))) for _ in shape]
            value = {"b": True, "i": 3 if x.unsigned else -3, "f": 1.5}[x.kind]
            new = [n + lo + hi for n, (lo, hi) in zip(shape, widths)]
            return self.same(x, bz.ops.pad(x.tv, widths, value), new, f"bz.ops.pad({x.name}, {widths}, {value!r})",
                             bound=max(x.bound, abs(value)))
        if name == "cat":
            axis = self.draw(st.integers(0, rank - 1))
            other = self.pick(lambda n: n.tv.ndim == rank and all(
                a == axis or n.shape[a] == shape[a] for a in range(rank)))
            new = shape[:axis] + [shape[axis] + other.shape[axis]] + shape[axis + 1:]
            return self.same(x, bz.ops.cat([x.tv, other.tv], axis), new,
                             f"bz.ops.cat([{x.name}, {other.name}], {axis})", bound=max(x.bound, other.bound),
                             err=max(x.err, other.err))
        if name == "expand" and any(x.bcast):
            axis = self.choice([a for a in range(rank) if x.bcast[a]])
            extent = self.draw(st.integers(1, 5))
            arg = [extent if a == axis else -1 for a in range(rank)]
            return self.same(x, bz.ops.expand(x.tv, arg), shape[:axis] + [extent] + shape[axis + 1:],
                             f"bz.ops.expand({x.name}, {arg})")
        if name == "broadcast_in_dim" and rank < MAX_RANK:
            axis, extent = self.draw(st.integers(0, rank)), self.draw(st.integers(1, 4))
            out = list(x.tv.shape[:axis]) + [extent] + list(x.tv.shape[axis:])
            dims = [a for a in range(rank + 1) if a != axis]
            return self.same(x, bz.ops.broadcast_in_dim(x.tv, out, dims), shape[:axis] + [extent] + shape[axis:],
                             f"bz.ops.broadcast_in_dim({x.name}, <{x.name}.shape with {extent} at {axis}>, {dims})")
        return None

    def nvfuser_slice(self, x: Node) -> Node | None:
        """nvFuser's slice(x, start_indices, end_indices, strides): ends a constant or an extent expression
        of x (`x.shape[a] - 1`), which clamps to [0, extent] at run time."""
        starts, ends, strides, texts, new = [], [], [], [], []
        for axis, n in enumerate(x.shape):
            start, stride = self.choice((0, 1, 2)), self.choice((1, 1, 2, 3))
            end, end_text, end_at = {
                "extent": (x.tv.shape[axis], f"{x.name}.shape[{axis}]", n),
                "extent - 2": (x.tv.shape[axis] - 2, f"{x.name}.shape[{axis}] - 2", n - 2),
                "constant": (5, "5", 5)}[self.choice(("extent", "extent - 2", "constant"))]
            starts.append(start), ends.append(end), strides.append(stride), texts.append(end_text)
            new.append(len(range(min(start, n), min(max(end_at, 0), n), stride)))
        tv = bz.ops.slice(x.tv, starts, ends, strides)
        return self.same(x, tv, new, f"bz.ops.slice({x.name}, {starts}, [{', '.join(texts)}], {strides})")

    def scan(self) -> Node | None:
        """A cumulative op along one axis (negative half the time), with the bounds of the reduction of
        the same name over that axis: every prefix is such a reduction."""
        name = self.choice(["cumsum", "cumprod", "cummax", "cummin"])
        x = self.pick(lambda n: n.tv.ndim > 0)
        if x is None:
            return None
        axis = self.draw(st.integers(0, x.tv.ndim - 1))
        n, b, e = x.shape[axis], x.bound, x.err
        exact = x.exact and (x.kind != "f" or n <= 1)
        acc = compute_ulp(x.dtype) if x.kind == "f" else ulp(dt.float32)
        if name in ("cummax", "cummin"):
            bound, err = b, e
        elif name == "cumsum":  # a serial sum: (n - 1) roundings of at most the running magnitude
            bound = max(n, 1) * b
            err = 0.0 if exact else n * e + 2 * n * acc * bound
        else:
            if n > 24 or max(b, 1) ** n > LIMIT[accumulation(x.dtype).name]:
                return None
            bound = max(b, 1) ** max(n, 1)
            err = 0.0 if exact else n * max(b, 1) ** max(n - 1, 0) * e + 2 * n * acc * bound
        written = axis - x.tv.ndim if self.coin() else axis
        tv = getattr(bz.ops, name)(x.tv, written)
        return self.add(tv, x.shape, bound, err, f"bz.ops.{name}({x.name}, {written})")

    def same(self, x: Node, tv: TensorView, shape, text: str, bound=None, err=None) -> Node | None:
        """A view or layout op: the values of x, moved."""
        return self.add(tv, shape, x.bound if bound is None else bound, x.err if err is None else err, text)

    def factorization(self, numel: int) -> list[int]:
        parts, left = [], numel
        for _ in range(self.draw(st.integers(0, 2))):
            divisors = [d for d in range(1, left + 1) if left % d == 0]
            parts.append(self.choice(divisors))
            left //= parts[-1]
        return parts + [left]

    # --- the whole program ------------------------------------------------------------------------
    def build(self, steps: int, max_reductions: int, reduction_odds: float = 0.12) -> None:
        self.add_inputs()
        reductions = 0
        for _ in range(steps):
            if reductions < max_reductions and self.coin(reduction_odds):
                reductions += 1
                kind = "composite" if self.coin(0.3) else "reduction"
            else:
                kind = self.choice(["unary"] * 4 + ["binary"] * 5 + ["ternary", "cast", "scan"] + ["view"] * 5)
            getattr(self, kind)()
        computed = [n for n in self.nodes if n.tv.definition is not None]
        if not computed:
            if not self.nodes:  # every input was too large to keep (MAX_NUMEL): nothing to compute from
                reject()
            x = self.nodes[-1]
            computed = [self.ew("set", [x], x.bound, x.err)]
        # The last node, and more of the nodes nothing else reads (or, rarely, any computed node).
        read = {id(tv) for e in self.f.exprs for tv in e.inputs}
        self.outputs = [computed[-1]]
        for _ in range(self.draw(st.integers(0, 3))):
            sink = self.coin(0.8)
            node = self.pick(lambda n, sink=sink: n.tv.definition is not None and n not in self.outputs
                             and (id(n.tv) not in read or not sink))
            if node is not None:
                self.outputs.append(node)
        for node in self.outputs:
            order = tuple(self.draw(st.permutations(range(node.tv.ndim)))) if node.tv.ndim > 1 and self.coin(
                0.2) else None
            self.f.add_output(node.tv, stride_order=order)
            self.lines.append(f"f.add_output({node.name}{f', stride_order={order}' if order else ''})")

    def reductions_feeding_outputs(self) -> int:
        seen, stack, count = set(), [n.tv for n in self.outputs], 0
        while stack:
            tv = stack.pop()
            if id(tv) in seen or tv.definition is None:
                continue
            seen.add(id(tv))
            count += OPS[tv.definition.op].category in ("reduction", "scan")  # a scan is a task of its own
            stack.extend(tv.definition.inputs)
        return count
