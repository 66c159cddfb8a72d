"""A scan's row over the lanes of its row (braze/lower/scans.py writes the task).

The lowering gives a scan one task index a row walking it serially:
`acc = init; for j in row: acc = combine(acc, x(j)); out[j] = f(acc)`. On a GPU one thread a row
leaves most of the GPU idle (8 rows of a 32000-long vocabulary are 8 threads) and reads memory with
a row's stride between neighbouring threads. Here the row's lanes take it a tile at a time, lane i
the run of RUN elements from `tile + RUN * i`: each lane combines its run, the runs' totals are
scanned over the lanes (bz_lane_scan: shuffles up to a warp, a row's warps through shared memory),
the running `acc` of the tiles before combined in first and set to the tile's total. The combine is
associative (add, mul, maximum, minimum, or, and); floating-point sums come out in a tree order, not
the serial one (as NumPy's pairwise sums do).
"""

from __future__ import annotations

from braze import config
from braze.codegen.cuda_plan import VECTOR_TYPES, LanePlan, distinct_exprs, vector_component
from braze.codegen.cuda_rows import c_type
from braze.kir import nodes as k
from braze.passes.simplify import _reads_any

# The scans' combines (braze/lower/scans.py) and their identities are the task's own `acc = init`.
# The consecutive elements each lane takes of a tile (ScanWriter.emit_scan_loop): RUN, or VECTOR_RUN
# where its elements load and store as 16-byte vectors of 4-byte elements (two vectors a lane: a
# tile's barriers shared by twice the elements, twice the bytes in flight).
RUN = 4
VECTOR_RUN = 8
SCAN_COMBINES = frozenset({"add", "mul", "maximum", "minimum", "logical_or", "logical_and"})


def scan_loop(task: k.Task) -> k.For | None:
    """The task's scan loop, where the task is one: a single top-level loop whose body defines values,
    then folds one of them into an accumulator defined before it (`acc = combine(acc, x)`, x not
    reading acc), then stores from the accumulator; nothing reads the accumulator after the loop."""
    loops = [s for s in task.body if isinstance(s, k.For)]
    if len(loops) != 1 or config.disabled("lane_scans"):
        return None
    loop = loops[0]
    *lets, update, store = loop.body if len(loop.body) >= 2 else (None, None)
    if not (isinstance(update, k.Assign) and isinstance(store, k.Store) and isinstance(update.value, k.Binary)
            and update.value.op in SCAN_COMBINES and update.value.a == update.var and loop.step == 1):
        return None
    acc = frozenset({update.var})
    if _reads_any(update.value.b, acc) or any(not isinstance(s, k.Let) or _reads_any(s.value, acc) for s in lets):
        return None
    after = task.body[task.body.index(loop) + 1:]
    defined = any(isinstance(s, k.Let) and s.var == update.var for s in task.body[:task.body.index(loop)])
    if not defined or any(isinstance(s, k.For) for s in after) or _reads_after(after, acc):
        return None
    return loop


def _reads_after(stmts: tuple[k.Stmt, ...], acc: frozenset[k.Var]) -> bool:
    return any(_reads_any(e, acc) for s in stmts for name in ("value", "cond", "indices")
               for e in _as_tuple(getattr(s, name, ())))


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def scan_lanes(loop: k.For) -> LanePlan:
    """The lane plan the launch planner reads for a scan task: lanes help (lanes_for picks them by the row's
    length), no accumulator combines over them after the loop."""
    return LanePlan({id(loop): ()}, True)


class ScanWriter:
    """The scan loop's CUDA (a mixin of codegen/cuda.py's TaskWriter)."""

    def emit_scan_loop(self, loop: k.For) -> None:
        """Tiles of `lanes32` runs of `RUN` consecutive elements, a run a lane: each lane combines its
        run's elements serially (the body's values at each element, clamped to the row's last where
        the tile runs past it, so every lane reaches the shuffles and barriers), the lanes scan their
        runs' totals (bz_lane_scan), and each lane stores its run's elements inside the row
        combined with what comes before the run. A lane's elements in flight together, and a tile's
        shuffles and barriers shared by RUN elements, keep the loads coming where one element a lane
        waited on the tile's scan between loads (a cumsum over a 32000-long vocabulary moved 45% of
        the bytes a copy does)."""
        *lets, update, store = loop.body
        acc, ty, var = update.var, c_type(update.var.dtype), loop.var
        defined = frozenset(s.var for s in lets)
        run = 1 if any(_reads_any(e, defined) for e in (*store.indices, store.value)) else RUN
        if run == RUN and self._vector_load(loop, lets, update, VECTOR_RUN) is not None \
                and self._vector_store(loop, store, VECTOR_RUN):
            run = VECTOR_RUN
        end, ix = self.expr(loop.end), c_type(var.dtype)
        a, b = k.Var("bz_a", acc.dtype), k.Var("bz_b", acc.dtype)
        combine = self.expr(k.Binary(update.value.op, a, b, acc.dtype))
        # A store reading the body's values needs them at its own element: no loads ahead then.
        ahead = run > 1 and not config.disabled("scan_prefetch")
        self.line(f"const auto bz_op = [](const {ty} bz_a, const {ty} bz_b) {{ return {combine}; }};")
        if ahead:  # (a row of no elements has no first tile to load)
            self.line(f"{ty} bz_next[{run}];")
            self.line(f"if ({self.expr(loop.begin)} < {end}) {{")
            self.depth += 1
            self._load_elements(loop, lets, update, run, self.expr(loop.begin), "bz_next")
            self.depth -= 1
            self.line("}")
        self.line(f"for ({ix} bz_tile = {self.expr(loop.begin)}; bz_tile < {end}; bz_tile += {run} * lanes32) {{")
        self.depth += 1
        self.loop_depth += 1  # statements of a lane's element: each lane stores its own
        self.line(f"{ty} bz_run[{run}];")
        if ahead:
            # The next tile's loads go out before this tile's scan waits at its barriers: a tile's
            # loads in flight during the scan, not after it.
            self.line("#pragma unroll")
            self.line(f"for (int bz_u = 0; bz_u < {run}; ++bz_u) "
                      "bz_run[bz_u] = bz_u == 0 ? bz_next[0] : bz_op(bz_run[bz_u - 1], bz_next[bz_u]);")
            self.line(f"if (bz_tile + {run} * lanes32 < {end}) {{")
            self.depth += 1
            self._load_elements(loop, lets, update, run, f"bz_tile + {run} * lanes32", "bz_next")
            self.depth -= 1
            self.line("}")
        else:
            self.line(f"{ty} bz_element[{run}];")
            self._load_elements(loop, lets, update, run, "bz_tile", "bz_element")
            self.line("#pragma unroll")
            self.line(f"for (int bz_u = 0; bz_u < {run}; ++bz_u) "
                      "bz_run[bz_u] = bz_u == 0 ? bz_element[0] : bz_op(bz_run[bz_u - 1], bz_element[bz_u]);")
        # Lanes past the row (the tile's last ones) feed only lanes past it and the final total.
        self.line(f"const {ty} bz_before = bz_lane_scan(bz_run[{run} - 1], {acc.name}, lanes32, bz_op);")
        if self._vector_store(loop, store, run):
            self._store_vectors(loop, store, acc, run)
        else:
            self._store_elements(loop, lets, store, acc, run)
        self.loop_depth -= 1
        self.depth -= 1
        self.line("}")

    def _load_elements(self, loop: k.For, lets: list[k.Stmt], update: k.Assign, run: int, tile: str,
                       into: str) -> None:
        """`into[u]`: the combined value of each of a lane's `run` elements of the tile at `tile`, at
        the row's last element where the tile runs past it (so every lane reaches the shuffles and
        barriers). A run that is one aligned 16-byte vector of the row is read as one
        (`_vector_load`)."""
        ty, ix, end = c_type(update.var.dtype), c_type(loop.var.dtype), self.expr(loop.end)
        load = self._vector_load(loop, lets, update, run)
        if load is not None:
            base = k.Var("bz_base", loop.var.dtype)
            address = f"&{self.expr(k.substitute(load, loop.var, base))}"
            vector = VECTOR_TYPES[4][load.param.dtype.name]
            aligned = f"(reinterpret_cast<unsigned long long>({address}) & 15) == 0"
            self.line(f"const {ix} bz_base = {tile} + {run} * lane;")
            self.line(f"if (bz_base + {run} <= {end} && {aligned}) {{")
            self.depth += 1
            for v in range(run // 4):
                self.line(f"const {vector} bz_vector{v} = *reinterpret_cast<const {vector}*>({address} + {4 * v});")
            element = k.Var("bz_v", load.dtype)
            for u in range(run):  # each element's value from its component, at its own index
                at = k.Binary("add", base, k.Const(u, loop.var.dtype), loop.var.dtype)
                value = k.substitute(k.substitute(update.value.b, load, element), loop.var, at)
                self.line(f"{{ const {c_type(load.dtype)} bz_v = bz_vector{u // 4}.{vector_component(4, u % 4)}; "
                          f"{into}[{u}] = ({ty})({self.expr(value)}); }}")
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
        self._run_loop(run, f"const {ix} {loop.var.name} = {tile} + {run} * lane + bz_u < {end} ? "
                            f"{tile} + {run} * lane + bz_u : {end} - 1;")
        self.block(tuple(lets))
        self.line(f"{into}[bz_u] = ({ty})({self.expr(update.value.b)});")
        self._end_run_loop()
        if load is not None:
            self.depth -= 1
            self.line("}")

    def _vector_load(self, loop: k.For, lets: list[k.Stmt], update: k.Assign, run: int) -> k.Load | None:
        """The one load along the scanned axis of the element's value, where a lane's run may read it
        as one 16-byte vector: 4-byte elements laid out with stride 1, four to a run, the value
        computed from that load and values the row does not change, with no Lets. The scans models
        run (cumsum of probabilities, of a mask, of x * 2) are such; one vector load a run keeps
        four times the bytes in flight of a scalar one (`BRAZE_DISABLE=scan_vectors`)."""
        if lets or run % 4 or config.disabled("scan_vectors"):
            return None
        index = frozenset({loop.var})
        along = {e for e in distinct_exprs(update.value.b) if isinstance(e, k.Load) and _reads_any(e, index)}
        if len(along) != 1:
            return None
        (load,) = along
        param = load.param
        if param.dtype.itemsize != 4 or param.dtype.name not in VECTOR_TYPES[4] or param.static_strides[-1] != 1:
            return None
        *outer, last = load.indices
        if last != loop.var or any(_reads_any(i, index) for i in outer):
            return None
        return load

    def _vector_store(self, loop: k.For, store: k.Store, run: int) -> bool:
        """Whether a lane's run of scanned elements may be stored as 16-byte vectors: 4-byte elements
        laid out with stride 1 along the scanned axis, in runs of whole vectors."""
        param = store.param
        *outer, last = store.indices
        return (run % 4 == 0 and not config.disabled("scan_vectors") and param.dtype.itemsize == 4
                and param.dtype.name in VECTOR_TYPES[4] and param.static_strides[-1] == 1 and last == loop.var
                and not any(_reads_any(i, frozenset({loop.var})) for i in outer))

    def _scanned_values(self, loop: k.For, store: k.Store, acc: k.Var, run: int, into: str) -> None:
        """`into[u]`: the value stored at each of the lane's elements, from the scan before them."""
        ix, ty = c_type(loop.var.dtype), c_type(acc.dtype)
        self._run_loop(run, f"const {ix} {loop.var.name} = bz_tile + {run} * lane + bz_u;")
        self.line(f"const {ty} bz_scanned = bz_op(bz_before, bz_run[bz_u]);")
        value = k.substitute(store.value, acc, k.Var("bz_scanned", acc.dtype))
        self.line(f"{into}[bz_u] = ({c_type(store.param.dtype)})({self.expr(value)});")
        self._end_run_loop()

    def _store_vectors(self, loop: k.For, store: k.Store, acc: k.Var, run: int) -> None:
        """The lane's run stored as 16-byte vectors where it lies whole in the row and aligned, else
        element by element (a row's last tile, a misaligned row)."""
        ix, end = c_type(loop.var.dtype), self.expr(loop.end)
        self.line(f"{c_type(store.param.dtype)} bz_out[{run}];")
        self._scanned_values(loop, store, acc, run, "bz_out")
        base = k.Var("bz_store_base", loop.var.dtype)
        address = f"&{self.expr(k.substitute(k.Load(store.param, store.indices), loop.var, base))}"
        vector = VECTOR_TYPES[4][store.param.dtype.name]
        self.line(f"const {ix} bz_store_base = bz_tile + {run} * lane;")
        aligned = f"(reinterpret_cast<unsigned long long>({address}) & 15) == 0"
        self.line(f"if (active && bz_store_base + {run} <= {end} && {aligned}) {{")
        self.depth += 1
        for v in range(run // 4):
            parts = ", ".join(f"bz_out[{4 * v + u}]" for u in range(4))
            self.line(f"*reinterpret_cast<{vector}*>({address} + {4 * v}) = {vector}{{{parts}}};")
        self.depth -= 1
        self.line("} else {")
        self.depth += 1
        self._run_loop(run, f"const {ix} {loop.var.name} = bz_store_base + bz_u;")
        out = k.Var("bz_out_u", store.param.dtype)
        self.line(f"if ({loop.var.name} < {end}) {{")
        self.depth += 1
        self.line(f"const {c_type(store.param.dtype)} bz_out_u = bz_out[bz_u];")
        self.block((k.Store(store.param, store.indices, out),))
        self.depth -= 1
        self.line("}")
        self._end_run_loop()
        self.depth -= 1
        self.line("}")

    def _store_elements(self, loop: k.For, lets: list[k.Stmt], store: k.Store, acc: k.Var, run: int) -> None:
        """Each of the lane's elements in the row stored on its own, from the scan before it."""
        ix, ty, var, end = c_type(loop.var.dtype), c_type(acc.dtype), loop.var, self.expr(loop.end)
        self._run_loop(run, f"const {ix} {var.name} = bz_tile + {run} * lane + bz_u;")
        self.line(f"if ({var.name} < {end}) {{")
        self.depth += 1
        if run == 1:
            self.block(tuple(lets))
        self.line(f"const {ty} bz_scanned = bz_op(bz_before, bz_run[bz_u]);")
        scanned = k.Var("bz_scanned", acc.dtype)
        self.block((k.Store(store.param, store.indices, k.substitute(store.value, acc, scanned)),))
        self.depth -= 1
        self.line("}")
        self._end_run_loop()

    def _run_loop(self, run: int, first: str) -> None:
        self.line("#pragma unroll")
        self.line(f"for (int bz_u = 0; bz_u < {run}; ++bz_u) {{")
        self.depth += 1
        self.line(first)

    def _end_run_loop(self) -> None:
        self.depth -= 1
        self.line("}")
