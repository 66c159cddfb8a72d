"""The value of a fusion tensor at an index, as Kernel IR: the heart of the lowering.

`ValueEmitter.value(tv, idx)` returns an expression for element `idx` of `tv` (one index per
visible dimension). Elementwise ops and index-remapping views become expressions; reductions
become loops, emitted at the outermost scope their index allows, so a row reduction of a
normalization runs once per row. A reduction that would run once per *element* of an output
raises `NeedsCut`: the segmenter then materializes it as an intermediate tensor.
"""

from __future__ import annotations

from collections.abc import Callable

from braze import dtypes as dt
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.lower import radix
from braze.lower.exprs import RowAxes, cast, index_op
from braze.lower.reductions import emit_reduction
from braze.lower.scope import ScopeStack
from braze.ops.elementwise import compute_type, operand_type
from braze.ops.table import lookup

INDEX = dt.int64  # the index type of loop kernels, and of fusions too large for int32 (engine.index_type)
# How many times one task may emit the branches of one pad or cat before it gets a task of its own. A
# branch's statements are not shared with its siblings', so a stencil over a cat read at shifted
# indices (Jacobi sweeps in a Python loop, each writing `un[1:-1, 1:-1]`) re-emits the cats it reads
# once per read: code exponential in the number of sweeps. Materialized, each is a load.
SELECTS_PER_TENSOR = 16
# How many times one kernel may emit the loops of one reduction, each at an index of its own, before
# the reduction gets a task of its own. A reduction read through shifted views (a lattice Boltzmann
# step's density and velocity, summed over the directions, then read by each direction's np.roll)
# is otherwise reduced again at every shift of every view: as many loop nests, which LLVM takes
# minutes to compile and each element runs. Materialized, each read is a load.
REDUCTIONS_PER_TENSOR = 8
# How many times one task may compute one elementwise tensor, each at an index (or in a branch) of its
# own, before the tensor gets a task of its own. A tensor read through shifted views (a stencil's
# np.roll or slices) is computed again at each shift, and a chain of stencils (the steps of a heat
# equation under @bz.jit) multiplies the shifts of one step by those of the next: the task grew
# exponentially with the steps (four steps compiled in 7.6 s, each one more doubling it). Materialized,
# each read is a load. (Inductor realizes a buffer read more than 4 times.)
ELEMENTWISE_PER_TENSOR = 8


class NeedsCut(Exception):
    """Raised when `tv` (a reduction) must be computed by a kernel of its own."""

    def __init__(self, tv: TensorView) -> None:
        super().__init__(tv.name)
        self.tv = tv


_SCALAR_OPS = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "remainder", "min": "minimum",
               "max": "maximum"}


class ValueEmitter:
    """Emits values of one segment's tensors into a stack of scopes."""

    def __init__(self, scopes: ScopeStack, params, cpu: bool = False) -> None:
        self.scopes = scopes
        # For the CPU's code generator, which vectorizes folds (`acc = op(acc, x)`) and not an
        # update under an `if`: argmax and argmin then take two folds (reductions.py).
        self.cpu = cpu
        self.params = params  # braze.kir.params.KernelParams
        self.index = params.index  # the type of every index expression the emitter builds
        self.zero, self.one = k.Const(0, self.index), k.Const(1, self.index)
        self.strips = None  # braze.lower.strips.StripLanes while a column-strip task is lowered
        # Flat indices and the indices reshapes split them into, both ways (_linear, _delinear): an
        # index split by a reshape and flattened again over the same shape (group_norm's reshape
        # into groups and back) is the flat index it came from, with no division per element.
        # Both directions hold for indices in range, as every index a reshape builds is.
        self.flat_of: dict[tuple, k.Expr] = {}
        self.split_of: dict[tuple, tuple[k.Expr, ...]] = {}
        # While a task whose rows span several axes is lowered (fusion_kernel._row_task): the indices
        # of those axes (outer first), each decomposed from the row position, that position, and the
        # extents of those axes.
        self.row: RowAxes | None = None
        # (reduced extents, how many trailing axes merged) -> whether those loops merged (reductions.py)
        self.merged_loops: dict[tuple, bool] = {}
        self.selects: dict[int, int] = {}  # id of a pad or cat -> how many times its branches were emitted
        self.reductions: dict[int, int] = {}  # id of a reduction -> how many times its loops were emitted
        self.elementwise: dict[int, int] = {}  # id of an elementwise tensor -> how many times it was computed
        # While a reduction lifted out of a branch is emitted (in_range): 1, or 0 where the reduced
        # tensor is empty, so that its loops run no iteration at an index it does not have.
        self.reduction_trips: k.Expr | None = None

    def row_index(self, tv: TensorView, idx: tuple[k.Expr, ...], row_major: bool | None = None) -> tuple[k.Expr, ...]:
        """`idx` with the row's axes read at the row position: (..., 0, j) for (..., i_h, i_w) when
        `tv`'s trailing indices are exactly the row's, over the same extents (a slice's input is wider),
        and it is laid out row-major (`row_major`; by default what the parameters say of a tensor
        read), so its element (..., h, w) sits at (..., 0, h * W + w) = (..., 0, j). Else `idx`
        unchanged, which is exact too."""
        rest = tv.ndim - len(self.row.positions) if self.row is not None else -1
        if rest < 0 or not self.row.spans(idx[rest:], self.shape(tv)[rest:]):
            return idx
        if not (self._row_major(tv) if row_major is None else row_major):
            return idx
        # The position goes to the innermost axis that varies: an axis of extent 1 (a broadcast) is
        # indexed at 0 whatever its stride (an input's may be 0), so (h, w) over [H, 1] is (h, 0), not (0, h).
        varying = [n for n, d in enumerate(tv.visible[rest:]) if not d.is_broadcast]
        if not varying:
            return idx
        return idx[:rest] + tuple(self.row.position if n == varying[-1] else self.zero
                                  for n in range(len(self.row.positions)))

    def _row_major(self, tv: TensorView) -> bool:
        """Whether a tensor read sits row-major: written by an earlier task in its default allocation, or
        an input dense at this signature whose last stride is 1."""
        source = self.params.readable(tv)
        if not isinstance(source, k.ArrayParam):
            return False
        if id(tv) in self.params.written:
            return tv.has_default_allocation
        return id(tv) in self.params.dense and source.static_stride(tv.ndim - 1) == 1

    def const(self, value: int) -> k.Const:
        """An index constant."""
        return k.Const(value, self.index)

    # --- symbolic extents -------------------------------------------------------------------------
    def extent(self, s: Scalar) -> k.Expr:
        if s.is_const:
            return self.const(s.value)
        if s.is_symbol:
            return k.ScalarRef(self.params.symbol(s.name))
        a, b = (self.extent(x) for x in s.args)
        if s.op == "ceildiv":
            return index_op("floordiv", index_op("sub", index_op("add", a, b), self.one), b)
        return index_op(_SCALAR_OPS[s.op], a, b)

    def shape(self, tv: TensorView) -> list[k.Expr]:
        return [self.extent(d.extent) for d in tv.visible]

    # --- values ---------------------------------------------------------------------------------
    def value(self, tv: TensorView, idx: tuple[k.Expr, ...]) -> k.Expr:
        idx = tuple(self.zero if d.is_broadcast else i for d, i in zip(tv.visible, idx))
        key = (id(tv), idx)
        found = self.scopes.lookup(key)
        if found is not None:
            return found
        result = self._compute(tv, idx)
        # Remember it where everything it reads is defined, so sibling loops can reuse it.
        self.scopes.scopes[self.scopes.home_of((result,))].memo[key] = result
        return result

    def _compute(self, tv: TensorView, idx: tuple[k.Expr, ...]) -> k.Expr:
        if tv.is_constant:  # a Python literal keeps its exact value until an op casts it
            dtype = dt.as_dtype(type(tv.value)) if tv.scalar == "literal" else tv.dtype
            if dtype == dt.int64 and tv.value >= 2**63:  # a Python int only uint64 holds
                dtype = dt.uint64
            return k.Const(tv.value, dtype) if dtype.name != "bfloat16" else cast(
                k.Const(float(tv.value), dt.float32), dtype)
        if tv.scalar == "extent":  # an extent used as a value: computed from the extent parameters
            return cast(self.extent(tv.value), tv.dtype)
        source = self.params.readable(tv)
        if source is not None:
            return k.ScalarRef(source) if isinstance(source, k.ScalarParam) else k.Load(source, self.row_index(tv, idx))
        expr = tv.definition
        category = lookup(expr.op).category
        if category == "elementwise":
            self.elementwise[id(tv)] = self.elementwise.get(id(tv), 0) + 1
            if self.elementwise[id(tv)] > ELEMENTWISE_PER_TENSOR:
                raise NeedsCut(tv)
            return self._elementwise(tv, idx)
        if category == "reduction":
            return self.reduction(tv, idx)
        if category == "scan":  # computed by a task of its own (lower/scans.py), read back here
            raise NeedsCut(tv)
        return _RULES[expr.op](self, tv, idx)

    def _elementwise(self, tv: TensorView, idx: tuple[k.Expr, ...]) -> k.Expr:
        expr = tv.definition
        first_value = 1 if expr.op == "where" else 0
        values = expr.inputs[first_value:]
        promoted = operand_type(values)
        compute = compute_type(promoted, tv.dtype)
        operands = [self.value(inp, idx if inp.ndim else ()) for inp in expr.inputs]
        # Python literals round to the promoted type first (float16 x == 0.1 means float16(0.1)).
        operands = [cast(o, promoted) if inp.weak == 2 else o for o, inp in zip(operands, expr.inputs)]
        # where's condition becomes a bool (its truth, NaN true); the value operands take the compute type.
        conditions = [cast(o, dt.bool_) for o in operands[:first_value]]
        operands = conditions + [cast(o, compute) for o in operands[first_value:]]
        result_dtype = dt.bool_ if tv.dtype.is_bool else compute
        node = {1: lambda: k.Unary(expr.op, operands[0], result_dtype, tuple(expr.attrs.items())),
                2: lambda: k.Binary(expr.op, *operands, result_dtype),
                3: lambda: k.Ternary(expr.op, *operands, result_dtype)}[len(operands)]()
        return cast(node, tv.dtype)

    def reduction(self, tv: TensorView, idx: tuple[k.Expr, ...]) -> k.Expr:
        if self.strips is not None:
            hoisted = self.strips.hoist(self, tv, idx)
            if hoisted is not None:
                return hoisted
        home = self.scopes.home_of(idx)
        if self.scopes.recomputed(idx, home):
            raise NeedsCut(tv)
        self.count_reduction(tv)
        leaves_branch = self.scopes.leaves_branch(home)
        saved, trips = self.scopes.scopes, self.reduction_trips
        self.scopes.scopes, self.reduction_trips = saved[: home + 1], None
        try:
            if leaves_branch:
                idx, self.reduction_trips = self.in_range(tv, idx)
            return emit_reduction(self, tv, idx)
        finally:
            self.scopes.scopes, self.reduction_trips = saved, trips

    def count_reduction(self, tv: TensorView) -> None:
        """Counts one more emission of reduction `tv`'s loops; past REDUCTIONS_PER_TENSOR, `NeedsCut`."""
        self.reductions[id(tv)] = self.reductions.get(id(tv), 0) + 1
        if self.reductions[id(tv)] > REDUCTIONS_PER_TENSOR:
            raise NeedsCut(tv)

    def in_range(self, tv: TensorView, idx: tuple[k.Expr, ...]) -> tuple[tuple[k.Expr, ...], k.Expr | None]:
        """`idx` clamped into `tv`'s extents, and what the reduced loops' trip count is multiplied by:
        0 where `tv` is empty (else 1; None where no extent can be 0).

        For a reduction lifted out of a branch (ScopeStack.leaves_branch): emitted at its home scope,
        it runs for every index of that scope, also where the branch it was asked from (a pad's, a
        cat's: slice_scatter's `logits[:, :-1]` padded back to the full sequence) would not run; there
        `idx` may lie past `tv`'s end, and the reduction's loads past its input's. Clamped, they read
        elements that exist, and where `idx` is in range, the only place any consumer uses the value,
        clamping changes nothing. Clamping the index rather than putting the loops under the branch's
        condition keeps them top-level loops of the row, which the code generators split and vectorize.
        """
        clamped, trips = [], None
        for i, n in zip(idx, self.shape(tv)):
            clamped.append(index_op("minimum", index_op("maximum", i, self.zero), index_op("sub", n, self.one)))
            if not (isinstance(n, k.Const) and n.value > 0):  # an extent that may be 0 at run time
                trips = index_op("minimum", self.one if trips is None else trips, n)
        return tuple(clamped), trips

    # --- conditional values (pad, cat): statements, so no out-of-bounds load is ever executed -------
    def select_value(self, tv: TensorView, cases: list[tuple[k.Expr | None, Callable[[], k.Expr]]]) -> k.Expr:
        """`if cond0: v0 elif cond1: v1 ... else: v_last` into a fresh variable."""
        self.selects[id(tv)] = self.selects.get(id(tv), 0) + 1
        if self.selects[id(tv)] > SELECTS_PER_TENSOR:
            raise NeedsCut(tv)
        result = self.scopes.fresh("sel", tv.dtype)
        self.scopes.emit(k.Let(result, k.Const(0, tv.dtype) if tv.dtype.name != "bfloat16" else
                                 cast(k.Const(0.0, dt.float32), tv.dtype)))
        self._emit_cases(result, cases)
        return result

    def _emit_cases(self, result: k.Var, cases) -> None:
        (cond, make), rest = cases[0], cases[1:]
        branch = self._branch(lambda: self.scopes.emit(k.Assign(result, cast(make(), result.dtype))), cond)
        if cond is None:
            self.scopes.current.stmts.extend(branch)
            return
        otherwise = k.Unary("logical_not", cond, dt.bool_)
        orelse = self._branch(lambda: self._emit_cases(result, rest), otherwise) if rest else []
        self.scopes.emit(k.If(cond, tuple(branch), tuple(orelse)))

    def _branch(self, body: Callable[[], None], condition: k.Expr | None) -> list[k.Stmt]:
        self.scopes.push("branch", condition=condition)
        body()
        return self.scopes.pop().stmts


def _linear(em: ValueEmitter, idx: tuple[k.Expr, ...], shape: list[k.Expr]) -> k.Expr:
    found = em.flat_of.get((idx, tuple(shape)))
    if found is not None:
        return found
    flat, axis = em.zero, 0
    span = len(em.row.positions) if em.row is not None else 0
    while axis < len(idx):
        if span and em.row.spans(idx[axis: axis + span], shape[axis: axis + span]):
            # The row's indices, decomposed from the row position: their flat index is the position.
            for n in shape[axis: axis + span]:
                flat = index_op("mul", flat, n)
            flat, axis = index_op("add", flat, em.row.position), axis + span
            continue
        flat, axis = index_op("add", index_op("mul", flat, shape[axis]), idx[axis]), axis + 1
    em.split_of[(flat, tuple(shape))] = idx
    return flat


def _delinear(em: ValueEmitter, flat: k.Expr, shape: list[k.Expr]) -> tuple[k.Expr, ...]:
    found = em.split_of.get((flat, tuple(shape)))
    if found is not None:
        return found
    whole, out = flat, []
    for n in reversed(shape):
        out.append(index_op("remainder", flat, n))
        flat = index_op("floordiv", flat, n)
    split = tuple(reversed(out))
    em.flat_of[(split, tuple(shape))] = whole
    return split


def _broadcast(em: ValueEmitter, tv, idx):
    kept = tuple(i for i, new in zip(idx, tv.definition.attrs["is_new"]) if not new)
    return em.value(tv.definition.inputs[0], kept)


def _permute(em: ValueEmitter, tv, idx):
    dims = tv.definition.attrs["dims"]
    source = [None] * len(dims)
    for out_axis, in_axis in enumerate(dims):
        source[in_axis] = idx[out_axis]
    return em.value(tv.definition.inputs[0], tuple(source))


def _squeeze(em: ValueEmitter, tv, idx):
    inp = tv.definition.inputs[0]
    rest = iter(idx)
    return em.value(inp, tuple(em.zero if a in tv.definition.attrs["axes"] else next(rest) for a in range(inp.ndim)))


def _reshape(em: ValueEmitter, tv, idx):
    inp = tv.definition.inputs[0]
    flat = _linear(em, idx, em.shape(tv))
    source = em.params.readable(inp)
    if id(inp) in em.params.dense and isinstance(source, k.ArrayParam) and source.static_stride(inp.ndim - 1) == 1:
        # A dense input whose last stride is 1: the element sits at its flat index.
        return k.Load(source, (em.zero,) * (inp.ndim - 1) + (flat,))
    return em.value(inp, _reshape_source(em, tv, idx, flat))


def _reshape_source(em: ValueEmitter, tv, idx, flat: k.Expr) -> tuple[k.Expr, ...]:
    """The input index of reshape `tv` at output index `idx` (flat index `flat`): split digit by digit
    where the extents line up (radix.py), else by dividing the flat index."""
    inp = tv.definition.inputs[0]
    shape = tuple(em.shape(inp))
    found = em.split_of.get((flat, shape))
    if found is not None:
        return found
    split = radix.split(idx, [d.extent for d in tv.visible], [d.extent for d in inp.visible],
                        lambda m: _monomial_expr(em, m), em.zero)
    if split is None:
        return _delinear(em, flat, list(shape))
    em.split_of[(flat, shape)] = split
    em.flat_of[(split, shape)] = flat
    return split


def _monomial_expr(em: ValueEmitter, m: radix.Monomial) -> k.Expr:
    total = em.const(m.coef)
    for factor, power in sorted(m.factors, key=str):
        for _ in range(power):
            total = index_op("mul", total, em.extent(factor))
    return total


def _slice(em: ValueEmitter, tv, idx):
    from braze.ops.views import _slice_extent, is_whole

    inp = tv.definition.inputs[0]
    source = []
    for i, d, bounds in zip(idx, inp.visible, tv.definition.attrs["slices"]):
        first = em.zero if is_whole(bounds) else em.extent(_slice_extent(d.extent, *bounds)[0])
        source.append(index_op("add", first, index_op("mul", em.const(bounds[2]), i)))
    return em.value(inp, tuple(source))


def _flip(em: ValueEmitter, tv, idx):
    inp = tv.definition.inputs[0]
    shape = em.shape(inp)
    axes = tv.definition.attrs["axes"]
    return em.value(inp, tuple(index_op("sub", index_op("sub", shape[a], em.one), i) if a in axes else i
                               for a, i in enumerate(idx)))


def _in_range(i: k.Expr, n: k.Expr) -> k.Expr:
    zero = k.Const(0, i.dtype)
    return k.Binary("logical_and", k.Binary("ge", i, zero, dt.bool_), k.Binary("lt", i, n, dt.bool_), dt.bool_)


def _pad(em: ValueEmitter, tv, idx):
    inp, fill = tv.definition.inputs
    shape = em.shape(inp)
    source = tuple(index_op("sub", i, em.const(lo)) for i, (lo, _) in zip(idx, tv.definition.attrs["widths"]))
    inside = None
    for axis, ((lo, hi), i) in enumerate(zip(tv.definition.attrs["widths"], source)):
        if lo or hi:
            test = _in_range(i, shape[axis])
            inside = test if inside is None else k.Binary("logical_and", inside, test, dt.bool_)
    if inside is None:
        return em.value(inp, source)
    return em.select_value(tv, [(inside, lambda: em.value(inp, source)), (None, lambda: em.value(fill, ()))])


def _cat(em: ValueEmitter, tv, idx):
    axis = tv.definition.attrs["axis"]
    cases, offset = [], em.zero
    for position, inp in enumerate(tv.definition.inputs):
        start = offset
        offset = index_op("add", offset, em.shape(inp)[axis])
        source = tuple(index_op("sub", i, start) if a == axis else i for a, i in enumerate(idx))
        last = position == len(tv.definition.inputs) - 1
        cond = None if last else k.Binary("lt", idx[axis], offset, dt.bool_)
        cases.append((cond, lambda inp=inp, source=source: em.value(inp, source)))
    return em.select_value(tv, cases)


def _expand(em: ValueEmitter, tv, idx):
    return em.value(tv.definition.inputs[0], idx)


def _full(em: ValueEmitter, tv, idx):
    return cast(em.value(tv.definition.inputs[0], ()), tv.dtype)


def _arange(em: ValueEmitter, tv, idx):
    attrs = tv.definition.attrs
    # In int64 whatever the index type: start + step * i may pass 2**31 though i does not.
    start, step = k.Const(attrs["start"], dt.int64), k.Const(attrs["step"], dt.int64)
    value = index_op("add", start, index_op("mul", step, cast(idx[0], dt.int64)))
    return cast(value, tv.dtype)


def _cast(em: ValueEmitter, tv, idx):
    return cast(em.value(tv.definition.inputs[0], idx), tv.dtype)


_RULES: dict[str, Callable[[ValueEmitter, TensorView, tuple], k.Expr]] = {
    "cast": _cast, "broadcast": _broadcast, "permute": _permute, "squeeze": _squeeze, "reshape": _reshape,
    "slice": _slice, "flip": _flip, "pad": _pad, "cat": _cat, "expand": _expand, "full": _full, "arange": _arange,
}


def register_view_rule(op: str, rule: Callable) -> None:
    _RULES[op] = rule
