"""Tile tasks on a GPU (cuda_plan.TaskSchedule "tiles"): a pointwise task that reads a tensor
transposed (`x + y.T`; braze/schedule/transpose.py decides), one block a tile of TILE x TILE.

Row by row, a warp writing 32 neighbouring output elements would read `y[j, i]` down a column of
y: 32 sectors of 32 bytes for 128 useful bytes. In a tile, the block first reads such a tensor along
its own contiguous axis (the tile's rows), neighbouring threads on neighbouring elements, into
shared memory; after a barrier each thread takes its elements along the tile's columns, reading
the staged values back transposed and everything else straight from memory, coalesced. The staged
tile has a padded row so that reading a column back hits 32 different banks (`pad`).

Each thread takes TILE / (block / TILE) elements of the tile, in unrolled steps of block / TILE rows.
Before the barrier it issues every load it can: the staged reads, and the straight reads of its
own elements into registers (`preloaded`), so a thread has both tensors' bytes in flight at once,
not one tensor's before the barrier and the other's after it.

A mixin of `cuda.TaskWriter` (`line`, `expr`, `block`, `substitutions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from braze.codegen.cuda_plan import sub_exprs, tile_loops, unconditional_loads, walk
from braze.codegen.cuda_rows import c_type
from braze.errors import UnsupportedError
from braze.kir import nodes as k

# Shared memory of a block's staged tiles: 26 KiB keeps 8 blocks of 256 threads on an H100 SM (228 KiB,
# 1 KiB of it reserved a block): 6 float32 tensors of 32 x 33, or 3 bfloat16 ones of 64 x 66. A tensor
# past that is read straight from memory.
TILE_SHARED_BYTES = 26 * 1024
# Registers of a thread's preloaded reads: 32 (128 bytes), as the register rows of cuda_rows allow.
PRELOAD_BYTES = 128


def pad(itemsize: int) -> int:
    """Elements added to each row of a staged tile so that its rows start 4 * odd bytes apart: a warp
    reading a column back (one element a row) then touches 32 different banks."""
    return max(1, 4 // itemsize)


@dataclass(frozen=True)
class TilePlan:
    """What a tile task's block does (see the module docstring)."""

    rows: k.For  # the loop over the tile's rows (task.body[-1])
    columns: k.For  # the loop over its columns (rows.body[-1])
    staged: tuple[k.Load, ...]  # read along the tile's rows into shared memory
    preloaded: tuple[k.Load, ...]  # read along the columns into registers before the barrier
    staged_lets: tuple[k.Let, ...]  # the element's values the staged reads' indices need, in order
    preloaded_lets: tuple[k.Let, ...]  # and the preloaded ones'
    tile: int
    steps: int  # elements of the tile a thread takes in each phase
    step_rows: int  # rows of the tile the block covers a step


class _Indices:
    """What the indices of a tile element's loads read, through the values the element defines (the
    rows' statements and the columns' body)."""

    def __init__(self, rows: k.For, columns: k.For) -> None:
        body = (*rows.body[:-1], *columns.body)
        self.lets = {s.var: s for s in body if isinstance(s, k.Let)}
        self.order = [s for s in body if isinstance(s, k.Let)]
        # Values assigned somewhere (a pad's or cat's selected value) are not known before the element runs.
        self.memo: dict[k.Var, frozenset[k.Var] | None] = {s.var: None for s in walk(body) if isinstance(s, k.Assign)}

    def reads(self, e: k.Expr) -> frozenset[k.Var] | None:
        """The loop indices, task values and element `Let`s `e` reads; None when it reads a value
        assigned by the element or a `Let` that loads (known only as the element runs)."""
        found: set[k.Var] = set()
        for v in (v for v in sub_exprs(e) if isinstance(v, k.Var)):
            if v not in self.memo:
                let = self.lets.get(v)
                if let is None:
                    self.memo[v] = frozenset((v,))
                elif any(isinstance(x, (k.Load, k.LoadLocal)) for x in sub_exprs(let.value)):
                    self.memo[v] = None
                else:
                    inner = self.reads(let.value)
                    self.memo[v] = None if inner is None else inner | {v}
            if self.memo[v] is None:
                return None
            found |= self.memo[v]
        return frozenset(found)

    def lets_for(self, needed: set[k.Var]) -> tuple[k.Let, ...]:
        return tuple(s for s in self.order if s.var in needed)


def plan_tiles(task: k.Task, block_size: int) -> TilePlan:
    """The plan of a tile task (cuda_plan.tile_loops found its loops) for blocks of `block_size`:
    which reads are staged (budget TILE_SHARED_BYTES) and preloaded (PRELOAD_BYTES)."""
    rows, columns = tile_loops(task)
    tile = task.tile
    if block_size % tile or tile * tile % block_size:
        raise UnsupportedError(f"kernel {task.name}: tiles of {tile} need a block size that {tile} divides "
                               f"and that divides {tile * tile}, got {block_size}")
    i, j, steps = rows.var, columns.var, tile * tile // block_size
    indices = _Indices(rows, columns)
    staged, preloaded, shared, registers = [], [], 0, 0
    needs: dict[bool, set[k.Var]] = {True: set(), False: set()}
    for load in dict.fromkeys(unconditional_loads(columns.body, j)):
        reads = [indices.reads(index) for index in load.indices]
        if any(r is None for r in reads) or not any(j in r for r in reads):
            continue  # an index known only as the element runs (a gather), or the same all along a row
        size = load.param.dtype.itemsize
        along_rows = _read_along_rows(load, reads, i, j)
        if along_rows and shared + tile * (tile + pad(size)) * size <= TILE_SHARED_BYTES:
            shared += tile * (tile + pad(size)) * size
            staged.append(load)
        elif not along_rows and registers + steps * size <= PRELOAD_BYTES:
            registers += steps * size
            preloaded.append(load)
        else:
            continue
        needs[along_rows] |= frozenset().union(*reads)
    return TilePlan(rows, columns, tuple(staged), tuple(preloaded), indices.lets_for(needs[True]),
                    indices.lets_for(needs[False]), tile, steps, block_size // tile)


def _read_along_rows(load: k.Load, reads: list[frozenset[k.Var]], i: k.Var, j: k.Var) -> bool:
    """Whether the load's unit-stride axis follows the tile's rows (reads `i`, not `j`)."""
    return any(load.param.static_stride(axis) == 1 and i in r and j not in r for axis, r in enumerate(reads))


class TileWriter:
    """Tile tasks of a task writer (see the module docstring)."""

    def write_tiles(self) -> None:
        plan = plan_tiles(self.task, self.block_size)
        t, ix, tile = self.task, self.index, plan.tile
        self.line(f"const {ix} task_begin = {self.expr(t.begin)}, task_end = {self.expr(t.end)};")
        for n, load in enumerate(plan.staged):
            ty, size = c_type(load.param.dtype), load.param.dtype.itemsize
            self.line(f"__shared__ {ty} bz_tile{n}[{tile}][{tile + pad(size)}];")
        self.line(f"const int tile_x = threadIdx.x % {tile}, tile_y = threadIdx.x / {tile};")
        self.line(f"for ({ix} bz_t = task_begin + ({ix})blockIdx.x; bz_t < task_end; bz_t += ({ix})gridDim.x) {{")
        self.depth += 1
        self.line(f"const {c_type(t.var.dtype)} {t.var.name} = bz_t;")
        self.block(t.body[:-1])
        rows, columns = plan.rows, plan.columns
        self.line(f"const {ix} bz_row0 = {self.expr(rows.begin)}, bz_rows = {self.expr(rows.end)};")
        self.line(f"const {ix} bz_col0 = {self.expr(columns.begin)}, bz_cols = {self.expr(columns.end)};")
        for n, load in enumerate(plan.preloaded):
            self.line(f"{c_type(load.param.dtype)} bz_pre{n}[{plan.steps}];")
        if plan.staged or plan.preloaded:
            self.write_tile_loads(plan)
        self.write_tile_elements(plan)
        self.line("__syncthreads();  // before the next tile overwrites the staged ones")
        self.depth -= 1
        self.line("}")
        self.lines.append("}")

    def declare_tile_element(self, plan: TilePlan, along_rows: bool, clamped: bool) -> None:
        """The loop indices of step `bz_n`'s element: neighbouring threads on neighbouring rows of the
        tile when `along_rows`, else on neighbouring columns; `clamped` to the tile's last row and
        column (an element past them reads that one's values, and stores nothing)."""
        i, j = plan.rows.var, plan.columns.var
        step = f"tile_y + bz_n * {plan.step_rows}"
        for var, first, end, offset in ((i, "bz_row0", "bz_rows", "tile_x" if along_rows else step),
                                        (j, "bz_col0", "bz_cols", step if along_rows else "tile_x")):
            value = f"bz_minimum({first} + {offset}, {end} - 1)" if clamped else f"{first} + {offset}"
            self.line(f"const {c_type(var.dtype)} {var.name} = {value};")

    def write_tile_loads(self, plan: TilePlan) -> None:
        """Every step's staged and preloaded reads, then the barrier. Their indices are clamped to the
        tile, so every read is made, without a branch: the compiler issues them all before the first
        store to shared memory."""
        self.line("#pragma unroll")
        self.line(f"for (int bz_n = 0; bz_n < {plan.steps}; ++bz_n) {{")
        self.depth += 1
        for along_rows, loads in ((True, plan.staged), (False, plan.preloaded)):
            if not loads:
                continue
            self.line("{")
            self.depth += 1
            self.declare_tile_element(plan, along_rows, clamped=True)
            self.block(plan.staged_lets if along_rows else plan.preloaded_lets)
            for n, load in enumerate(loads):
                target = f"bz_tile{n}[tile_y + bz_n * {plan.step_rows}][tile_x]" if along_rows else f"bz_pre{n}[bz_n]"
                self.line(f"{target} = {self.expr(load)};")
            self.depth -= 1
            self.line("}")
        self.depth -= 1
        self.line("}")
        self.line("__syncthreads();")

    def write_tile_elements(self, plan: TilePlan) -> None:
        """Every step's elements along the columns: the rows' statements and the columns' body, with
        the staged and preloaded reads taken from where the first phase put them."""
        self.line("#pragma unroll")
        self.line(f"for (int bz_n = 0; bz_n < {plan.steps}; ++bz_n) {{")
        self.depth += 1
        self.declare_tile_element(plan, along_rows=False, clamped=False)
        i, j = plan.rows.var.name, plan.columns.var.name
        self.line(f"if ({i} < bz_rows && {j} < bz_cols) {{")
        self.depth += 1
        step = f"tile_y + bz_n * {plan.step_rows}"
        self.substitutions.update({load: f"bz_tile{n}[tile_x][{step}]" for n, load in enumerate(plan.staged)})
        self.substitutions.update({load: f"bz_pre{n}[bz_n]" for n, load in enumerate(plan.preloaded)})
        self.loop_depth += 1
        self.block(plan.rows.body[:-1] + plan.columns.body)
        self.loop_depth -= 1
        self.substitutions.clear()
        self.depth -= 1
        self.line("}")
        self.depth -= 1
        self.line("}")
