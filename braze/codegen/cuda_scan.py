"""A scan's row over the lanes of its row (braze/lower/scans.py writes the task).

The lowering gives a scan one task index a row walking it serially:
`acc = init; for j in row: acc = combine(acc, x(j)); out[j] = f(acc)`. On a GPU one thread a row
leaves most of the GPU idle (8 rows of a 32000-long vocabulary are 8 threads) and reads memory with
a row's stride between neighbouring threads. Here the row's lanes take it a tile at a time, lane i
element `tile + i`: a scan of the tile over the lanes (bz_lane_scan: shuffles up to a warp, a block
a row through shared memory), the running `acc` of the tiles before combined in first and set to
the tile's total. The combine is associative (add, mul, maximum, minimum, or, and); floating-point
sums come out in a tree order, not the serial one (as NumPy's pairwise sums do).
"""

from __future__ import annotations

from braze import config
from braze.codegen.cuda_plan import LanePlan
from braze.codegen.cuda_rows import c_type
from braze.kir import nodes as k
from braze.passes.simplify import _reads_any

# The scans' combines (braze/lower/scans.py) and their identities are the task's own `acc = init`.
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
    """The lane plan the runtime reads for a scan task: lanes help (lanes_for picks them by the row's
    length), no accumulator combines over them after the loop."""
    return LanePlan({id(loop): ()}, True)


class ScanWriter:
    """The scan loop's CUDA (a mixin of codegen/cuda.py's TaskWriter)."""

    def emit_scan_loop(self, loop: k.For) -> None:
        """Tiles of `lanes32` elements, each lane one: the body's values at its element (clamped to
        the row's last, where the tile runs past it, so every lane reaches the shuffles and
        barriers), the tile's scan, the stores of lanes inside the row."""
        *lets, update, store = loop.body
        acc, ty, var = update.var, c_type(update.var.dtype), loop.var
        end = self.expr(loop.end)
        ix = c_type(var.dtype)
        self.line(f"for ({ix} bz_tile = {self.expr(loop.begin)}; bz_tile < {end}; bz_tile += lanes32) {{")
        self.depth += 1
        self.loop_depth += 1  # statements of a lane's element: each lane stores its own
        self.line(f"const bool bz_in_row = bz_tile + lane < {end};")
        self.line(f"const {ix} {var.name} = bz_in_row ? bz_tile + lane : {end} - 1;")
        self.block(tuple(lets))
        a, b = k.Var("bz_a", acc.dtype), k.Var("bz_b", acc.dtype)
        combine = self.expr(k.Binary(update.value.op, a, b, acc.dtype))
        element = self.expr(update.value.b)
        # Lanes past the row (the tile's last ones) feed only lanes past it and the final total.
        self.line(f"const {ty} bz_scanned = bz_lane_scan(({ty})({element}), {acc.name}, lanes32, "
                  f"[](const {ty} bz_a, const {ty} bz_b) {{ return {combine}; }});")
        self.line("if (bz_in_row) {")
        self.depth += 1
        scanned = k.Var("bz_scanned", acc.dtype)
        self.block((k.Store(store.param, store.indices, k.substitute(store.value, acc, scanned)),))
        self.depth -= 1
        self.line("}")
        self.loop_depth -= 1
        self.depth -= 1
        self.line("}")
