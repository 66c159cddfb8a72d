"""The launch of each task of a compiled CUDA kernel for the extents of a call: its grid, the lanes a
row takes, the row length its caches keep, dynamic shared memory, a wider block, rows split over
blocks, column strips and inner-outer pairs. Scheduling knowledge, beside the task schedules and row
plans of codegen/cuda_plan.py it reads, so it sits below the runtime: runtime/backends/cuda.py's
executor compiles, loads and launches, and asks a LaunchPlanner what to launch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from braze import config
from braze.codegen.cuda import DEFAULT_BLOCK_SIZE
from braze.codegen.cuda_plan import NARROW_BLOCK, WARP, TaskSchedule, nest_of, schedule_bounds
from braze.errors import UnsupportedError
from braze.kir import nodes as k
from braze.kir.python import python_function, scalar_by_name

BLOCKS_PER_SM = 8  # resident blocks of 256 threads an SM holds; grids beyond that loop instead
ROW_CACHE_BYTES = 96 * 1024  # the most shared memory a block's row caches may take (2 blocks an SM fit)
MAX_GRID = 2**31 - 1  # blocks of a launch (grid x)
# Elements a thread of a pointwise task takes once the problem outgrows the resident blocks: a grid
# of that many blocks keeps more loads in flight than resident blocks looping over the problem
# (relu(x*y+z) on 64M float32 on an H100: 2971 GB/s at 4 a thread, 2949 at 1, 2859 resident;
# benchmarks/pointwise_grid.py). A task whose threads move vectors of 4 or 8 takes one vector a thread.
POINTWISE_ELEMENTS_PER_THREAD = 4
# Elements a thread of a row task computed element by element takes at least, over as many rows as
# that needs, where it sets up fast divisors before its first row (LaunchPlanner._rows_a_thread).
DIVIDED_ELEMENTS_PER_THREAD = 64
# Outer reductions: neighbouring columns a block owns (a warp's loads of a row: 128 bytes of float32).
COLUMNS_PER_BLOCK = 32
MIN_COLUMNS_PER_BLOCK = 8
# Elements a thread folds at least before a reduction is spread over more blocks: fewer would spend
# more on the blocks' combine than on reading.
REDUCTION_ELEMENTS_PER_THREAD = 16
# Inner-outer tasks (cuda_inner_outer): resident blocks an SM they take at most, as many as fit up to
# this (the row task is compiled for 3 blocks of 256: cuda_plan.INNER_OUTER_THREADS_PER_SM). Every block
# writes a row of partial column results that the fold reads back: for rms_norm backward [8192, 4096]
# bfloat16 three blocks an SM (396 on an H100) add 7% to the bytes that cross memory, where two left
# the row task latency-bound (31% of DRAM bandwidth on an H200). `BRAZE_DISABLE=inner_outer_occupancy`:
# at most INNER_OUTER_BLOCKS_PER_SM_BEFORE.
INNER_OUTER_BLOCKS_PER_SM = 3
INNER_OUTER_BLOCKS_PER_SM_BEFORE = 2
# The fold of an inner-outer task's partial results: blocks an SM it aims for (a few MB to read, in
# as many loads in flight as fill the GPU), and the fewest bytes of a row of them a block reads (two
# 32-byte sectors).
FOLD_BLOCKS_PER_SM = 2
FOLD_SEGMENT_BYTES = 64
# Blocks wider than a kernel's own that a row task's launch may take (LaunchPlanner._row_block), from
# a recompile of the kernel for them made the first time one is planned (compile/cuda_kernel.py,
# CudaCompiledKernel.for_block).
WIDE_BLOCKS = (512, 1024)
# Narrow blocks (cuda_plan.NARROW_BLOCK) only for at least this many rows an SM: fewer leave SMs with
# too few rows in flight to hide a row's latency.
NARROW_MIN_ROWS_PER_SM = 8


# The fewest elements of a row each of its lanes walks where lanes combine values (shared_block_lanes).
COMBINED_ROW_ELEMENTS = 12


def lanes_for(row_length: int, block: int, warp_row: int = 0, per_lane: int = 4) -> int:
    """Threads per row: enough that each does a few elements, a power of two up to a warp; for long
    rows the whole block, or one warp while the task's warp function holds the row in registers
    (`warp_row`: the longest it holds; cuda_plan.WARP_ROW_BYTES). A warp a row needs no barrier,
    keeps a whole row's loads in flight in each lane and 8 rows a block; the block is for rows
    longer than a warp holds (each of its threads then holds at least a vector).

    `per_lane`: the elements a lane moves at once (a vector of the row's loops: 4, or 8 of 2-byte
    types). A row of 64 bfloat16 takes 8 lanes of one vector each: with 16, half of them would idle
    in every vectorized loop while the other half did the row."""
    if row_length >= 1024:
        return WARP if WARP < block and row_length <= warp_row else block
    lanes = 1
    while lanes < 32 and lanes * per_lane < row_length:
        lanes *= 2
    return lanes


def balanced_lanes(row_length: int, per_lane: int, block: int) -> int:
    """Lanes for a long row whose lanes combine nothing (a pointwise task's rows): the most, down to
    a warp, that leave at most 1/16 of the last step's lanes idle. A batch_norm's rows of 56 x 56
    float32 are 784 vectors: a block a row takes 4 steps with 16 of 256 lanes busy in the last
    (30% idle); 64 lanes take 13 steps of which the last is a quarter busy (6%)."""
    vectors = -(-row_length // per_lane)
    lanes = block
    while lanes > WARP and -(-vectors // lanes) * lanes * 16 > vectors * 17:
        lanes //= 2
    return lanes


def shared_block_lanes(row_length: int, per_lane: int, block: int) -> int:
    """Lanes for a long row whose lanes combine values and keep nothing in registers: enough that
    each walks at least COMBINED_ROW_ELEMENTS of it (or a vector's worth, `per_lane`, if more), down
    to a warp; rows of fewer lanes than the block share it, each combining over its own warps
    (prelude.cuh, bz_lane_reduce). What a row costs once (its setup, the combine of its lanes, the
    results) is then paid by fewer threads: batch_norm's channels of 32 x 7 x 7 (1568 elements)
    took 8 warps a channel, 6 elements a lane."""
    lanes = block
    while lanes > WARP and lanes * max(COMBINED_ROW_ELEMENTS, per_lane) > row_length:
        lanes //= 2
    return lanes


@dataclasses.dataclass
class TaskLaunch:
    """What the planner knows of one task of a compiled kernel (task_launches): its loaded function,
    its bounds as a function of the call's scalars, and what its generated code decided (lanes, row
    caches, registers, vectors, schedule)."""

    name: str
    function: object
    bounds: object  # scalars -> (begin, end, extent of each top-level loop...)
    lane_loops: bool  # its loops may spread over the lanes of a row (cuda_plan.LanePlan)
    coalesces: bool  # and the lanes then touch neighbouring elements
    cache_itemsizes: tuple[int, ...]  # per row cache of the task
    cache_loops: tuple[int, ...]  # per row cache: the top-level loop whose extent is its length
    schedule: TaskSchedule  # how the task maps onto blocks (cuda_plan.TaskSchedule)
    register_row: int = 0  # the longest row kept in registers when lanes == block (0: none; see below)
    # The task's function for launches of one warp a row (None: it has none), and the longest row
    # that function keeps in registers.
    warp_function: object = None
    warp_name: str = ""
    warp_register_row: int = 0
    # Its narrow warp function (cuda.narrow_warp: half the room in registers), the same three.
    narrow_warp_function: object = None
    narrow_warp_name: str = ""
    narrow_warp_register_row: int = 0
    lane_width: int = 0  # the most elements a lane moves at once in the row's loops (0: no vectors)
    # Indices a thread moves at a time where the arrays are aligned (codegen/cuda_rows.py,
    # write_thread_vectors); 1 for a task of one index a thread.
    vector_width: int = 1
    nest_levels: int = 0  # splittable rows: the loops of the nest the split path walks (schedule_bounds)
    lane_combines: bool = True  # some loop's lanes combine their values (a reduction's): cuda_plan.LanePlan
    thread_divisors: int = 0  # fast divisors each thread sets up once (cuda_invariants.plan_divisors)
    # A column task's columns a thread owns where this divides their count (codegen/cuda_column_vectors.py).
    column_width: int = 1
    # Its function for rows split across blocks (cuda.split_function; None: its own function has
    # that path), and that function's name.
    split_function: object = None
    split_name: str = ""

    def shared_bytes(self, rows_per_block: int, row: int) -> int:
        """Dynamic shared memory for the row caches (each region rounded to 16 bytes)."""
        return sum(-(-rows_per_block * row * size // 16) * 16 for size in self.cache_itemsizes)


@dataclasses.dataclass(frozen=True)
class PlannedLaunch:
    """One task's launch for given extents: its index range, grid, dynamic shared memory and the
    four launch scalars (lanes and cached row length; or, for a grid reduction, the block size and
    the workspace's two pointers)."""

    task: TaskLaunch
    begin: int
    end: int
    grid: int
    shared: int
    scalars: tuple[int, int, int, int]
    warp: bool = False  # launches the task's warp function (one warp a row)
    block: int = 0  # threads a block, where wider than the planner's own (LaunchPlanner._row_block)
    narrow: bool = False  # with `warp`, its narrow warp function
    split: bool = False  # launches the task's function for rows split across blocks

    @property
    def function(self) -> object:
        if self.warp:
            return self.task.narrow_warp_function if self.narrow else self.task.warp_function
        return self.task.split_function if self.split else self.task.function

    @property
    def function_name(self) -> str:
        if self.warp:
            return self.task.narrow_warp_name if self.narrow else self.task.warp_name
        return self.task.split_name if self.split else self.task.name


def _scalar_function(exprs: list[k.Expr]) -> Callable[[dict[str, int]], tuple[int, ...]]:
    """`exprs` over the kernel's scalar parameters as one Python function of their values by name
    (kir/python.py: a division by zero gives 0, as in the kernels)."""
    return python_function(exprs, "s", scalar_by_name)


def _splits_rows(schedule: TaskSchedule) -> bool:
    return schedule.kind == "rows" and schedule.splittable


def _bounds(task: k.Task, schedule: TaskSchedule) -> list[k.Expr]:
    return schedule_bounds(task, schedule.kind, _splits_rows(schedule))


def launch_text(planned: PlannedLaunch, block: int) -> str:
    """One line for BRAZE_DUMP=launch_params: the task, its schedule and its launch."""
    lanes, cached, *_ = planned.scalars
    return (f"{planned.function_name}: {planned.task.schedule.kind} range=[{planned.begin}, {planned.end}) "
            f"grid={planned.grid} block={block} shared={planned.shared} lanes={lanes} cached_row={cached}")


def task_launches(kernel: k.Kernel, generated, functions: dict) -> list[TaskLaunch]:
    """What the planner needs of each task of `kernel` to plan its launches: from its generated
    source (a cuda.CudaSource) and its loaded `functions`, by name."""
    narrows = zip(generated.narrow_warp_functions or ("",) * len(kernel.tasks),
                  generated.narrow_warp_register_rows or (0,) * len(kernel.tasks), strict=True)
    launches = [TaskLaunch(t.name, functions[t.name], _scalar_function(_bounds(t, schedule)), bool(plan.loops),
                       plan.coalesces, tuple(c.dtype.itemsize for c in caches), tuple(c.position for c in caches),
                       schedule, registers, functions[warp] if warp else None, warp, warp_registers,
                       functions[narrow] if narrow else None, narrow, narrow_registers, width,
                       thread_width, len(nest_of(t)) if _splits_rows(schedule) else 0,
                       any(plan.loops.values()), divisors, columns)
            for t, plan, caches, schedule, registers, warp, warp_registers, width, thread_width, divisors, columns,
            (narrow, narrow_registers)
            in zip(kernel.tasks, generated.lane_plans, generated.row_caches, generated.schedules,
                   generated.register_rows, generated.warp_functions, generated.warp_register_rows,
                   generated.lane_widths, generated.thread_vector_widths, generated.thread_divisors,
                   generated.column_widths, narrows, strict=True)]
    for launch, split in zip(launches, generated.split_functions or ("",) * len(kernel.tasks), strict=True):
        if split:
            launch.split_function, launch.split_name = functions[split], split
    return launches


class LaunchPlanner:
    """The launches of every task of one kernel compiled for blocks of `block` threads, on a GPU of
    `sm_count` SMs. `resident_blocks(function name, block, dynamic shared bytes)` answers the blocks
    of a function an SM holds at once (the loaded module's occupancy); `wider(block)` the planner of
    the kernel recompiled for a wider block (_row_block), made by whoever compiles (None: this
    planner's launches keep its own block, as a wider kernel's own planner does). The planner never
    compiles or launches."""

    def __init__(self, tasks: list[TaskLaunch], block: int, sm_count: int,
                 resident_blocks: Callable[[str, int, int], int],
                 wider: Callable[[int], LaunchPlanner] | None = None) -> None:
        self.tasks, self.block, self.sm_count = tasks, block, sm_count
        self.resident_blocks, self.wider = resident_blocks, wider
        self.occupancy: dict[tuple[str, int], int] = {}
        self.max_grid = sm_count * BLOCKS_PER_SM
        accumulators = max((len(t.schedule.accumulators) for t in tasks), default=0)
        # Partial results: a slot per accumulator and block, or per accumulator, split and column of
        # an outer reduction (splits * strips <= max_grid, a strip's columns at most COLUMNS_PER_BLOCK
        # vectors of the task's column width).
        widest = max((t.column_width for t in tasks), default=1)
        self.partial_bytes = 8 * accumulators * self.max_grid * COLUMNS_PER_BLOCK * widest
        self.inner_outer_blocks = INNER_OUTER_BLOCKS_PER_SM_BEFORE if config.disabled("inner_outer_occupancy") \
            else INNER_OUTER_BLOCKS_PER_SM

    def inner_outer_bytes(self, scalars: dict[str, int]) -> int:
        """Room for the inner-outer tasks' partial results (_plan_inner_outer): a slot per accumulator,
        column and block, at most `inner_outer_blocks` an SM (one row group each where
        they live in the workspace); a power of two, so growing columns grow it seldom."""
        most = 0
        for n, task in enumerate(self.tasks):
            if task.schedule.kind == "inner_outer" and scalars:
                begin, end, *_ = self.tasks[n + 1].bounds(scalars)
                sizes = [acc.dtype.itemsize for acc, _ in task.schedule.accumulators]
                blocks = self.sm_count * self.inner_outer_blocks
                most = max(most, max(sizes) * len(sizes) * blocks * max(end - begin, 0))
        return 1 << (most - 1).bit_length() if most else 0

    def plan(self, scalars: dict[str, int], pointers: tuple[int, int] = (0, 0), pair_pointer: int = 0
             ) -> list[PlannedLaunch]:
        """Each task's launch for the extents in `scalars` (tasks over nothing are left out), grid
        reductions into the workspace at `pointers` (partial results, finished-block counters: the
        workspace of the stream they go to), inner-outer partial results at `pair_pointer`; an
        inner-outer task's and then its column task's fold."""
        planned = []
        for n, task in enumerate(self.tasks):
            if task.schedule.kind == "inner_outer":
                planned += self._plan_inner_outer(task, self.tasks[n + 1], scalars, pair_pointer)
            elif task.schedule.kind != "column_fold":  # planned with the task carrying it
                planned += [p for p in (self._plan_own_or_wide(n, task, scalars, pointers),) if p is not None]
        if config.dumping("launch_params"):
            config.dump("launch_params", "\n".join(launch_text(p, p.block or self.block) for p in planned))
        return planned

    def _plan_own_or_wide(self, n: int, task: TaskLaunch, scalars: dict[str, int], pointers: tuple[int, int]
                          ) -> PlannedLaunch | None:
        """Task `n`'s launch: in blocks of this planner's size, or of a wider one (_row_block), from
        the kernel recompiled for it (`wider`'s planner)."""
        block = self._row_block(task, scalars)
        if block == self.block:
            return self._plan_task(task, scalars, pointers)
        wide = self.wider(block)
        planned = wide._plan_task(wide.tasks[n], scalars, pointers)
        return None if planned is None else dataclasses.replace(planned, block=block)

    def _row_block(self, task: TaskLaunch, scalars: dict[str, int]) -> int:
        """The threads a block of a row task's launch takes: this planner's, NARROW_BLOCK for many
        rows of 2-byte elements its block holds in registers (_narrow_rows), or the fewest of
        WIDE_BLOCKS that serve its rows better (measured on an H100: wide-blocks-h100.md in
        benchmarks/results):
        - rows read twice (through a row cache) that registers hold at a wider block and not at this
          one: log_softmax over 32000 float32 reads each row once with 1024 threads (2041 -> 2635
          GB/s), where 256 read it twice from DRAM (the rows in flight overflow the L2);
        - rows a block each too few to fill the GPU: argmax over 512 rows of 128256 float32 with
          512 threads (2545 -> 2843 GB/s)."""
        if task.schedule.kind != "rows" or not task.lane_loops or self.wider is None:
            return self.block
        begin, end, *extents = task.bounds(scalars)
        if task.nest_levels:
            # Rows this planner may split across blocks (few rows; rows the row path would read
            # twice) stay on its block; others, in a function of their own, may take a wider one.
            if task.split_function is None or task.schedule.split_reads_once or \
                    self._plan_split_rows(task, begin, end, extents[:task.nest_levels], (0, 0)) is not None:
                return self.block
            extents = extents[task.nest_levels:]
        rows, row = end - begin, max(extents, default=0)
        if rows <= 0 or lanes_for(row, self.block) < self.block:
            return self.block
        if self._narrow_rows(task, rows, row):
            return NARROW_BLOCK
        if task.cache_itemsizes and task.register_row and rows >= self.sm_count:
            fits = [b for b in WIDE_BLOCKS if task.register_row < row <= task.register_row * b // self.block]
            if fits:
                return fits[0]
        block, threads = self.block, self.sm_count * BLOCKS_PER_SM * DEFAULT_BLOCK_SIZE
        while block < WIDE_BLOCKS[-1] and 2 * rows * block <= threads:
            block *= 2
        return block

    def _narrow_rows(self, task: TaskLaunch, rows: int, row: int) -> bool:
        """Whether rows of `row` 2-byte elements run on blocks of NARROW_BLOCK threads (see
        cuda_plan.NARROW_BLOCK): rows this planner's default block keeps in registers, so the narrow
        block's twice the bytes a thread keep them too, and enough rows that the narrow blocks still
        fill every SM several times over."""
        return (self.block == DEFAULT_BLOCK_SIZE and bool(task.cache_itemsizes) and max(task.cache_itemsizes) == 2
                and 0 < row <= task.register_row and rows >= NARROW_MIN_ROWS_PER_SM * self.sm_count
                and not config.disabled("narrow_blocks"))

    def _plan_task(self, task: TaskLaunch, scalars: dict[str, int], pointers: tuple[int, int]
                   ) -> PlannedLaunch | None:
        begin, end, *extents = task.bounds(scalars)
        if end <= begin:
            return None
        kind = task.schedule.kind
        if kind in ("grid", "flat"):
            return self._plan_grid_reduction(task, extents, pointers)
        if kind == "columns":
            return self._plan_columns(task, begin, end, extents, pointers)
        if kind == "tiles":  # a block a tile (codegen/cuda_tiles.py), each block's loop over tiles runs once
            return PlannedLaunch(task, begin, end, min(end - begin, MAX_GRID), 0, (0, 0, 0, 0))
        nest: list[int] = []
        if task.nest_levels:  # splittable rows: the split path's nest, then the row path's loops
            nest, extents = extents[:task.nest_levels], extents[task.nest_levels:]
            split = self._plan_split_rows(task, begin, end, nest, pointers)
            if split is not None:
                return split
        if kind == "grid_rows":
            levels = task.schedule.row_levels
            rows = int(np.prod([max(n, 0) for n in extents[:levels]]))
            extents = extents[levels:]
        lanes = self._lanes(task, rows if kind == "grid_rows" else end - begin, max(extents, default=1))
        cached = max((extents[n] for n in task.cache_loops), default=0)
        shared = task.shared_bytes(self.block // lanes, cached)
        if shared > ROW_CACHE_BYTES:
            shared = 0  # the rows do not fit: the loops read memory again
        if kind == "grid_rows":
            blocks = max(1, -(-rows * lanes // self.block))
            grid = min(blocks, self.sm_count * self._resident(task, shared))
            return PlannedLaunch(task, begin, end, grid, shared,
                                 (lanes, cached if shared else 0, *pointers))
        if task.schedule.split_reads_once and not self._keeps_rows(task, lanes, cached, shared):
            # The row path would read each row twice: the split path's single pass instead.
            split = self._plan_split_rows(task, begin, end, nest, pointers, whole_rows=True)
            if split is not None:
                return split
        if task.register_row:
            return self._plan_register_task(task, begin, end, lanes, cached, shared)
        # No more blocks than run at once: a second, partial wave would idle most SMs. A task whose
        # threads move vectors counts vectors, so no thread of a small launch is left without one.
        units = -(-(end - begin) // task.vector_width)  # rows, or a vector task's vectors
        blocks = -(-units * lanes // self.block)
        grid = min(blocks, self.sm_count * self._resident(task, shared))
        if not extents:  # pointwise (no loop in a row): a few elements a thread over as many blocks as that takes
            per_thread = max(1, POINTWISE_ELEMENTS_PER_THREAD // task.vector_width)
            grid = min(max(grid, -(-blocks // per_thread)), MAX_GRID)
        elif not task.lane_combines and not task.cache_itemsizes:
            # Rows computed element by element (bias + GELU, RoPE's halves): a block for each of its
            # groups of rows, each new block starting as one ends, keeps more loads in flight than
            # resident blocks looping over the rows (on an H100, bias + tanh-GELU over [16384, 8192]
            # bfloat16 2512 -> 2900 GB/s, RoPE 2519 -> 2800).
            grid = min(-(-blocks // self._rows_a_thread(task, lanes, extents)), MAX_GRID)
            # Never fewer blocks than the GPU holds at once, where the rows give that many: RoPE over
            # [8, 1024, 16, 64] bfloat16 took 512 blocks of 8 rows a thread, half the threads an
            # H200 runs (42% of its warps active; 12.1 us against Inductor's 10.2).
            grid = max(grid, min(blocks, self.sm_count * self._resident(task, shared), MAX_GRID))
        return PlannedLaunch(task, begin, end, grid, shared, (lanes, cached if shared else 0, 0, 0))

    @staticmethod
    def _rows_a_thread(task: TaskLaunch, lanes: int, extents: list[int]) -> int:
        """Rows each thread of a row task computed element by element walks: one, or, where its
        threads each set up fast divisors first (about 30 instructions each), enough rows that the
        setup is spread over DIVIDED_ELEMENTS_PER_THREAD elements. RoPE over [16, 2048, 32, 128]
        bfloat16 (rows of 128 on 8 lanes: 16 elements a thread a row, two divisors) ran at 3.44 TB/s
        on an H200 with a row a thread, 3.72 with 2, 3.87 with 4, 3.76 with 8
        (benchmarks/results/rows-a-thread-h200.md); rows without divisors gain nothing.
        `BRAZE_DISABLE=divisor_rows`: a row a thread."""
        if not task.thread_divisors or config.disabled("divisor_rows"):
            return 1
        per_row = max(1, -(-sum(max(n, 0) for n in extents) // lanes))
        return max(1, DIVIDED_ELEMENTS_PER_THREAD // per_row)

    def _lanes(self, task: TaskLaunch, rows: int, row_length: int) -> int:
        """Threads a row: lanes_for's, where the lanes coalesce or the rows are too few to give
        every thread the GPU holds one of its own (a reduction over axes apart, like a channel's
        statistics over batch and pixels); else one (neighbouring threads on neighbouring rows)."""
        if not task.lane_loops or (not task.coalesces and rows >= self.max_grid * self.block):
            return 1
        per_lane = max(4, task.lane_width)
        lanes = lanes_for(row_length, self.block, task.warp_register_row, per_lane)
        if lanes == self.block and not task.lane_combines and not task.cache_itemsizes and not task.register_row \
                and not config.disabled("balanced_lanes"):
            return balanced_lanes(row_length, per_lane, self.block)
        if lanes == self.block and task.lane_combines and not task.register_row \
                and not config.disabled("shared_blocks"):
            return shared_block_lanes(row_length, per_lane, self.block)
        return lanes

    def _plan_grid_reduction(self, task: TaskLaunch, extents: list[int], pointers: tuple[int, int]
                             ) -> PlannedLaunch:
        """A reduction to one value: enough blocks that each thread folds a few elements (a "grid"
        task grid-strides its loop's extents[0] iterations; "flat" the product of its nest's), no
        more than run at once."""
        total = 1
        for n in extents if task.schedule.kind == "flat" else extents[:1]:
            total *= max(n, 0)
        per_block = self.block * (REDUCTION_ELEMENTS_PER_THREAD if task.schedule.kind == "flat" else 1)
        grid = max(1, min(-(-total // per_block), self.sm_count * self._resident(task, 0)))
        return PlannedLaunch(task, 0, 1, grid, 0, (self.block, 0, *pointers))

    def _plan_split_rows(self, task: TaskLaunch, begin: int, end: int, extents: list[int],
                         pointers: tuple[int, int], whole_rows: bool = False) -> PlannedLaunch | None:
        """Rows that are one loop nest each, too few for the row path to fill the GPU (or read a
        lane a row): `splits` blocks a row, each walking a contiguous part of the row's nest, at
        least REDUCTION_ELEMENTS_PER_THREAD elements a thread (None: the row path instead). Rows
        then meet in the workspace, so `rows * splits` stays within the resident blocks.
        `whole_rows`: rows the row path would read twice (TaskSchedule.split_reads_once) take this
        path however many they are, a block a row (or more for few rows)."""
        rows, total = end - begin, int(np.prod([max(n, 0) for n in extents]))
        lanes = self._lanes(task, rows, max(total, 1))
        target = self.sm_count * self._resident(task, 0, task.split_name or task.name)
        per_block = self.block * REDUCTION_ELEMENTS_PER_THREAD
        if rows > MAX_GRID or not whole_rows and (-(-rows * lanes // self.block) >= target // 2 or total < per_block):
            return None
        splits = max(1, min(target // rows, total // per_block))
        return PlannedLaunch(task, begin, end, rows * splits, 0, (0, splits, *pointers),
                             split=task.split_function is not None)

    def _keeps_rows(self, task: TaskLaunch, lanes: int, cached: int, shared: int) -> bool:
        """Whether the row path keeps its rows on chip between their passes: in shared memory, or
        in registers (a block a row, short enough)."""
        in_registers = task.register_row and lanes == self.block and cached <= task.register_row
        return bool(shared) or bool(in_registers)

    def _plan_columns(self, task: TaskLaunch, begin: int, end: int, extents: list[int],
                      pointers: tuple[int, int]) -> PlannedLaunch:
        """An outer reduction: COLUMNS_PER_BLOCK neighbouring columns a block (fewer for narrow
        outputs, leaving more row groups; down to MIN_COLUMNS_PER_BLOCK while the strips leave SMs
        idle and the rows cannot be split), and, when the task allows and the strips leave SMs idle,
        the rows split across up to that many more blocks, each split at least
        REDUCTION_ELEMENTS_PER_THREAD rows a row group. Where the task's threads own several
        neighbouring columns and their width divides the column count (its kernel then takes its
        vector path: cuda_column_vectors), the columns are counted in vectors. `lanes` passes the
        columns (or vectors) a block, `cached_row` the splits."""
        width = task.column_width if (end - begin) % task.column_width == 0 else 1
        columns = (end - begin) // width
        cols = 1
        while cols < COLUMNS_PER_BLOCK and cols < columns:
            cols *= 2
        target = self.sm_count * self._resident(task, 0)
        # Narrower strips while they leave SMs idle and the rows cannot be split: 8 float32 columns
        # are still one 32-byte sector a row, the least DRAM moves.
        while not task.schedule.splittable and cols > MIN_COLUMNS_PER_BLOCK and -(-columns // cols) < target:
            cols //= 2
        strips = -(-columns // cols)
        splits = 1
        if task.schedule.splittable and strips < target:
            rows = max(extents[0], 0)
            row_groups = self.block // cols
            splits = max(1, min(target // strips, rows // (row_groups * REDUCTION_ELEMENTS_PER_THREAD)))
        if strips * splits > MAX_GRID:
            raise UnsupportedError(f"kernel {task.name}: {end - begin} columns need {strips} blocks, "
                                   f"more than {MAX_GRID}")
        return PlannedLaunch(task, begin, end, strips * splits, 0, (cols, splits, *pointers))

    def _plan_inner_outer(self, task: TaskLaunch, fold: TaskLaunch, scalars: dict[str, int],
                          partials: int) -> list[PlannedLaunch]:
        """An inner-outer task (cuda_inner_outer): its rows over a grid of as many blocks an SM as
        fit, at most `inner_outer_blocks`, each block leaving a row of partial column results
        at `partials` (a row per row group where they live in the workspace: one, since the whole
        block then takes each row; `_inner_outer_bytes` sizes the workspace so), then the fold of
        those rows (_plan_fold). With no rows the fold alone stores the
        accumulators' starts; with no columns there is nothing to fold."""
        begin, end, *extents = task.bounds(scalars)
        columns_begin, columns_end, *_ = fold.bounds(scalars)
        rows, columns = max(end - begin, 0), max(columns_end - columns_begin, 0)
        sizes = [acc.dtype.itemsize for acc, _ in task.schedule.accumulators]
        launches, partial_rows = [], 0
        if rows:
            lanes, cached, shared, in_memory = self._inner_outer_memory(task, rows, columns, extents, sizes)
            groups = self.block // lanes
            resident = min(self.inner_outer_blocks, self._resident(task, shared))
            grid = min(-(-rows // groups), self.sm_count * resident)
            partial_rows = grid * groups if in_memory else grid
            launches.append(PlannedLaunch(task, begin, end, grid, shared, (lanes, cached, partials, int(in_memory))))
        if columns:
            launches.append(self._plan_fold(fold, columns_begin, columns_end, partial_rows, partials))
        return launches

    def _plan_fold(self, fold: TaskLaunch, begin: int, end: int, partial_rows: int, partials: int) -> PlannedLaunch:
        """The fold of `partial_rows` rows of partial results (cuda_inner_outer.write_column_fold):
        `lanes` passes the threads a block gives the columns, the last scalar the columns a thread
        takes (4 where the schedule's fold_width allows and the columns are a multiple of 4). Up to
        COLUMNS_PER_BLOCK threads on the columns, fewer (down to FOLD_SEGMENT_BYTES of a row) while
        that leaves fewer than FOLD_BLOCKS_PER_SM blocks an SM: each of a block's row groups then
        walks fewer rows, more of them in flight at once. `BRAZE_DISABLE=inner_outer_fold`: one
        column a thread, COLUMNS_PER_BLOCK a block."""
        columns, width = end - begin, fold.schedule.fold_width
        width = width if width and columns % width == 0 else min(width, 1)
        units = -(-columns // max(width, 1))
        cols = 1
        while cols < COLUMNS_PER_BLOCK and cols < units:
            cols *= 2
        if width:
            slot = max(acc.dtype.itemsize for acc, _ in fold.schedule.accumulators)
            least = max(1, FOLD_SEGMENT_BYTES // (slot * width))
            while cols > least and -(-units // cols) < self.sm_count * FOLD_BLOCKS_PER_SM:
                cols //= 2
        return PlannedLaunch(fold, begin, end, -(-units // cols), 0, (cols, partial_rows, partials, width))

    def _inner_outer_memory(self, task: TaskLaunch, rows: int, columns: int, extents: list[int],
                            sizes: list[int]) -> tuple[int, int, int, bool]:
        """(lanes, cached row, dynamic shared bytes, whether the partial results live in the
        workspace) of an inner-outer task: the row caches (unless the row fits in registers) and
        every row group's partial results in shared memory where they fit; else the whole block
        on each row, which needs one row group's; else the partial results alone there, the rows
        reading memory again; else the row caches alone, the partial results in the workspace."""
        cached = max((extents[n] for n in task.cache_loops), default=0)

        def layout(lanes: int) -> tuple[int, int, int]:  # (cached row, its bytes, the partial results' bytes)
            groups = self.block // lanes
            in_registers = bool(task.register_row) and lanes == self.block and cached <= task.register_row
            row = 0 if in_registers else cached
            return row, task.shared_bytes(groups, row), sum(-(-groups * columns * size // 16) * 16 for size in sizes)

        for lanes in dict.fromkeys((self._lanes(task, rows, max(extents, default=1)), self.block)):
            row, row_bytes, column_bytes = layout(lanes)
            if row_bytes + column_bytes <= ROW_CACHE_BYTES:
                return lanes, row, row_bytes + column_bytes, False
        row, row_bytes, column_bytes = layout(self.block)
        if column_bytes <= ROW_CACHE_BYTES:
            return self.block, 0, column_bytes, False
        if row_bytes <= ROW_CACHE_BYTES:
            return self.block, row, row_bytes, True
        return self.block, 0, 0, True

    def _plan_register_task(self, task: TaskLaunch, begin: int, end: int, lanes: int, cached: int,
                            shared: int) -> PlannedLaunch:
        """A task that can hold its rows in registers has no grid-stride loop (see
        cuda.TaskWriter.write): one block per group of rows. A new block starts on an SM as soon as
        one finishes, which keeps its loads in flight better than a persistent grid (97% of copy
        bandwidth against 90% for hand-written softmax kernels on an H100). Rows of one block held
        in registers need no shared memory (rows that turn out misaligned then read memory again).
        One warp a row runs the task's warp function where it holds the rows; its rows that turn
        out misaligned take plain loops over the row in shared memory (a few KB a block of 8 rows,
        where registers already limit the blocks an SM)."""
        grid = -(-(end - begin) * lanes // self.block)
        if grid > MAX_GRID:
            raise UnsupportedError(f"kernel {task.name}: {end - begin} rows need {grid} blocks, more than {MAX_GRID}")
        warp = lanes == WARP and task.warp_function is not None and cached <= task.warp_register_row
        narrow = warp and task.narrow_warp_function is not None and cached <= task.narrow_warp_register_row
        if lanes == self.block and cached <= task.register_row:
            shared = 0
        return PlannedLaunch(task, begin, end, grid, shared, (lanes, cached if shared else 0, 0, 0), warp,
                             narrow=narrow)

    def _resident(self, task: TaskLaunch, shared: int, function: str = "") -> int:
        """Blocks of the task's function (or of `function`, one of its others) an SM holds at once."""
        key = (function or task.name, shared)
        if key not in self.occupancy:
            self.occupancy[key] = max(1, min(BLOCKS_PER_SM, self.resident_blocks(key[0], self.block, shared)))
        return self.occupancy[key]

