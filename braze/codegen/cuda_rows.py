"""The row loops of a CUDA task: vector loops (4 or 8 elements a lane at a time), row caches in
shared memory or registers.

A mixin of `cuda.TaskWriter` (which supplies `line`, `expr`, `offset`, the kernel and the plans):
the part of the writer that turns a task's top-level loops over a row into vectorized loads and
stores, keeps a row that several loops read in a row cache, and, for rows on a whole block or on
one warp, a fully unrolled copy of those loops holding the row in registers.
"""

from __future__ import annotations

import dataclasses
import re

from braze import config
from braze.codegen.cuda_plan import (
    REGISTER_PRELOAD_BYTES,
    RowCache,
    VectorAccesses,
    exprs_of,
    occurrences,
    replace_var_in_access,
    row_cache_key,
    sub_exprs,
    thread_vectors,
    unconditional_loads,
    vector_accesses,
    vector_alignment,
    vector_component,
    vector_type,
    vector_width,
    walk,
)
from braze.codegen.cuda_random import philox_runs
from braze.codegen.cuda_row_values import plan_row_values
from braze.dtypes import DType
from braze.kir import nodes as k
from braze.passes.simplify import map_children

C_TYPE = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
          "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned", "uint64": "unsigned long long",
          "float16": "__half",
          "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}


def c_type(dtype: DType) -> str:
    """The C++ type of a braze dtype."""
    return C_TYPE[dtype.name]

# Prelude helpers that may reach __syncthreads, a barrier every thread of the block must reach: a copy
# of a row's statements that calls one must be taken by all of a block's threads or by none
# (tests/codegen/test_cuda_rows.py holds the list to the prelude).
BLOCK_BARRIERS = ("__syncthreads", "bz_lane_reduce", "bz_pair_lane_reduce", "bz_column_reduce", "bz_last_of",
                  "bz_last_block", "bz_lane_scan")


def barriers_in(lines: list[str]) -> list[str]:
    """The block barriers (BLOCK_BARRIERS) that these lines of CUDA call."""
    text = "\n".join(lines)
    return [name for name in BLOCK_BARRIERS if re.search(rf"\b{name}\s*[<(]", text)]


def joins_lane_reductions(accumulators: list) -> bool:
    """Whether these accumulators of a row combine over its lanes together (joint_lane_reduce)."""
    return len(accumulators) >= 2 and not config.disabled("joint_lane_reduce")


def joint_lane_reduce(accumulators: list[tuple[str, str]], lanes: str) -> list[str]:
    """CUDA combining each (name, combine functor) accumulator of a row over its `lanes` (a power of
    two; over a warp, whole warps of the block) between one pair of barriers: bz_lane_put and bz_lane_take of
    the prelude. One bz_lane_reduce each costs two barriers apiece; var_mean's row and a norm
    backward's hold two to four accumulators."""
    lines = [f"{{ unsigned long long* const bz_slots = bz_lane_slots<{len(accumulators)}>();",
             f"  if ({lanes} > 32) __syncthreads();  // earlier readers of the slots are done"]
    lines += [f"  bz_lane_put({name}, {lanes}, {functor}(), bz_slots, {n});"
              for n, (name, functor) in enumerate(accumulators)]
    lines.append(f"  if ({lanes} > 32) {{")
    lines.append("    __syncthreads();  // every warp's values are in their slots")
    lines += [f"    bz_lane_take({name}, {lanes}, {functor}(), bz_slots, {n});"
              for n, (name, functor) in enumerate(accumulators)]
    lines += ["  }", "}"]
    return lines


BYTES_IN_FLIGHT = 32  # per thread and iteration of a vector loop: two 16-byte loads


def vector_unroll(vector: VectorAccesses) -> int:
    """How far to unroll a vector loop so each thread has ~BYTES_IN_FLIGHT of loads in flight:
    on an H100 one 16-byte load a thread keeps too few bytes moving (unrolling 4-wide loops by 2
    for float32 and 4 for bfloat16 took softmax, layer_norm and rms_norm from 72-81% to 80-88% of
    copy bandwidth; more unrolling spilled registers and lost). 8-wide loops of bfloat16 move 16
    bytes a load, so 2."""
    widest = max((load.param.dtype.itemsize for load in vector.loads), default=4)
    return max(1, BYTES_IN_FLIGHT // (vector.width * widest))


def _shorter_than(loop: k.For, width: int) -> bool:
    """Whether the loop's range is constant and shorter than `width`."""
    constant = isinstance(loop.begin, k.Const) and isinstance(loop.end, k.Const)
    return constant and loop.end.value - loop.begin.value < width


class RowLoopWriter:
    """Row loops of a task writer (see the module docstring)."""

    def declare_row_caches(self) -> None:
        """Pointers to this row's part of each cache in dynamic shared memory. The runtime passes
        `cached_row` (the row length) when the caches fit, else 0 and the loops read memory."""
        if not self.caches:
            return
        self.line("extern __shared__ __align__(16) unsigned char bz_shared[];")
        self.line("unsigned char* bz_region = bz_shared;")
        for n, cache in enumerate(self.caches):
            ty = c_type(cache.dtype)
            self.line(f"{ty}* const row_cache{n} = ({ty}*)bz_region + row_in_block * cached_row;")
            self.line(f"bz_region += (rows_per_block * cached_row * sizeof({ty}) + 15) & ~15LL;")

    # --- vector accesses: each lane takes 4 or 8 neighbouring elements of a row at a time --------
    def plan_vectors(self) -> dict[int, VectorAccesses]:
        """The lane loops that may move several elements at a time, each with its width. The loops
        sharing row caches take the same path or none does, and share one width: a lane reads back
        only the cache elements it wrote itself."""
        body = self.row_task.body
        loops = [s for s in body if isinstance(s, k.For) and id(s) in self.lanes.loops]
        vectors = {id(loop): vector_accesses(loop) for loop in loops}
        shared = {id_ for cache in self.caches for id_ in cache.loops}
        if any(vectors.get(id_) is None for id_ in shared):
            vectors = {id_: None if id_ in shared else v for id_, v in vectors.items()}
        self.loops_by_id = {id(loop): loop for loop in loops}
        vectors = {id_: v for id_, v in vectors.items() if v is not None}
        # A loop drawing Philox words takes them four at a time (one block: philox_words), so four wide.
        widths = {id_: 4 if philox_runs(self.loops_by_id[id_], set()) else vector_width([v])
                  for id_, v in vectors.items()}
        shared_width = min((widths[id_] for id_ in vectors if id_ in shared), default=4)
        widths = {id_: shared_width if id_ in shared else width for id_, width in widths.items()}
        # A loop shorter than its width, by constants (a row of one: a norm's saved statistic kept as
        # [batch, tokens, 1]), never takes a vector: its vector paths would only be code for NVRTC to
        # throw away (50 of them in a GPT-2 forward's grouped outputs).
        short = {id_ for id_ in vectors if _shorter_than(self.loops_by_id[id_], widths[id_])}
        if short & shared:
            short |= shared
        return {id_: dataclasses.replace(v, width=widths[id_]) for id_, v in vectors.items() if id_ not in short}

    def vector_condition(self, loop: k.For, whole_vectors: bool = True) -> str:
        """True for rows where the vector path is valid: lengths that the width divides (unless the
        path ends in a tail of single elements: `whole_vectors` false), every vectorized row start
        aligned to the vector (checked per row: it depends on the strides). Loops sharing row caches
        check each other's accesses too, so they agree."""
        together = [loop]
        if any(id(loop) in c.loops for c in self.caches):
            together = [self.loops_by_id[i] for i in self.vectors if any(i in c.loops for c in self.caches)]
        width = self.vectors[id(loop)].width
        terms = [f"(cached_row % {width} == 0)"] if len(together) > 1 or together[0] is not loop else []
        return " && ".join(dict.fromkeys(terms + self.vector_terms(together, whole_vectors))) or "true"

    def vector_terms(self, together: list[k.For], whole_vectors: bool = True) -> list[str]:
        """The vector conditions of these loops: lengths that the width divides, aligned row starts."""
        terms = []
        for other in together:
            if whole_vectors:
                terms.append(f"(({self.trip_count(other)}) % {self.vectors[id(other)].width} == 0)")
            terms += self.with_aligned_rows(other, self.alignment_terms(other))
        return terms

    def alignment_terms(self, loop: k.For, first: k.Expr | None = None) -> list[str]:
        """Every vector access of the loop aligned to its vector at the loop's first index (or at
        `first`, where its vectors start after a head: cuda_peel)."""
        vector, terms = self.vectors[id(loop)], []
        for access in (*vector.loads, *vector.stores):
            at = loop.begin if first is None else first
            start = tuple(self.inlined(i) for i in replace_var_in_access(access, loop.var, at))
            address = f"&{self.pointer(access.param)}[{self.offset(access.param, start)}]"
            mask = vector_alignment(access.param.dtype, vector.width) - 1
            terms.append(f"((reinterpret_cast<unsigned long long>({address}) & {mask}) == 0)")
        return terms

    def trip_count(self, loop: k.For) -> str:
        """The loop's `end - begin` (its end, when it starts at 0)."""
        end = self.expr(loop.end)
        return end if self.from_begin(loop) == "" else f"{end} - {self.expr(loop.begin)}"

    def from_begin(self, loop: k.For) -> str:
        """`begin + ` for a loop split from a longer one, that starts elsewhere than at 0 (see
        braze/passes/split_loops.py): its vectors start there."""
        return "" if loop.begin == k.Const(0, loop.begin.dtype) else f"{self.expr(loop.begin)} + "

    def inlined(self, e: k.Expr) -> k.Expr:
        """`e` with the task's row-level constants (a `Let` never assigned again, such as a flipped
        row's index) not yet declared replaced by their values: a condition tested before the loops
        may read a value the task declares only between them. Those declared are read as they are
        (a row's indices, not their divisions again)."""
        if "row_constants" not in self.__dict__:
            assigned = {s.var for s in walk(self.task.body) if isinstance(s, k.Assign)}
            self.row_constants = {s.var: s.value for s in self.task.body
                                  if isinstance(s, k.Let) and s.var not in assigned}
        if isinstance(e, k.Var) and e in self.row_constants and e not in self.declared:
            return self.inlined(self.row_constants[e])
        return map_children(e, self.inlined)

    # --- rows held in registers ------------------------------------------------------------------
    def cache_loops(self) -> list[int]:
        return [i for i in self.vectors if any(i in c.loops for c in self.caches)]

    def body_with_register_row(self, body: tuple[k.Stmt, ...]) -> None:
        """The row's statements, from the first loop of the row caches on in two copies: one with
        the caches in registers, for rows that allow it, and the general one. Registers need
        `register_lanes` threads on the row (the whole block; in a warp function, one warp), so
        every address is the row start plus a constant, rows of at most register_vectors vectors a
        thread, and every cache loop's vector conditions. Each loop then runs a fixed count of
        iterations, fully unrolled (a register array needs constant indices), and the first one
        issues all its loads before using any: the whole row in flight is what reaches copy
        bandwidth, where one or two 16-byte loads a thread at a time did not. Two copies, not a
        test per loop, so the registers of one are not held across the other.

        The copy is chosen row by row (lengths and alignments differ), so one that calls a block
        barrier must be taken by the whole block or none: only where a row is the whole block."""
        loops = self.cache_loops()
        first = next(n for n, s in enumerate(body) if id(s) in loops)
        self.block(body[:first])
        width = self.vectors[loops[0]].width
        capacity = width * self.register_vectors * self.register_lanes
        together = [self.loops_by_id[i] for i in loops]
        one_row_a_block = f"(lanes32 == {self.block_size})"
        terms = [] if self.warp else [one_row_a_block]
        terms += [f"(({self.expr(loop.end)}) <= {capacity})" for loop in together]
        self.line(f"if ({' && '.join(dict.fromkeys(terms + self.vector_terms(together)))}) {{")
        copy_start, declared = len(self.lines), set(self.declared)
        self.depth += 1
        for n, cache in enumerate(self.caches):
            self.line(f"{vector_type(cache.dtype, width)} bz_rc{n}[{self.register_vectors}];")
        self.row_values = plan_row_values(self.row_task, together, self.caches, width * self.register_vectors)
        for n, _ in enumerate(self.row_values):
            self.line(f"float bz_rv{n}[{width * self.register_vectors}];")
        self.in_registers = True
        self.block(body[first:])
        self.in_registers = False
        self.row_values = ()
        self.depth -= 1
        self.check_barriers(self.lines[copy_start:], uniform=one_row_a_block in terms)
        self.line("} else {")
        self.declared = declared  # the register copy's locals are out of scope in the other
        self.depth += 1
        self.block(body[first:])
        self.depth -= 1
        self.line("}")

    def check_barriers(self, lines: list[str], uniform: bool) -> None:
        """Raises when `lines`, a copy of a row's statements that rows of one block may choose
        differently (not `uniform`), call a block barrier: the block would hang at it."""
        called = barriers_in(lines)
        if called and not uniform:
            raise AssertionError(f"CUDA codegen, task {self.task.name}: a copy of its rows chosen row by row "
                                 f"calls {', '.join(called)}, which every thread of the block must reach")

    def open_register_loop(self, loop: k.For, base: k.Var) -> None:
        """`for` over this thread's vectors of a register row, `base` its first element; vectors
        past the row's end are skipped."""
        counter, width = self.register_index, self.vectors[id(loop)].width
        self.line("#pragma unroll")
        self.line(f"for (int {counter} = 0; {counter} < {self.register_vectors}; ++{counter}) {{")
        self.line(f"  const {self.index} {base.name} = {self.index_literal(width)} * lane + "
                  f"{counter} * {self.index_literal(width * self.register_lanes)};")
        self.line(f"  if ({base.name} >= {self.expr(loop.end)}) break;")

    def preload_register_row(self, loop: k.For, vector: VectorAccesses, base: k.Var, read: list[k.Load]) -> None:
        """The loads that fill register caches, all issued before the loop uses any of them; and, in
        the loop that stores a row the later loops read back, that loop's own loads where they fit
        (register_preloads), in arrays `bz_pl...` the loop then reads."""
        fills = [(n, load) for n, cache in enumerate(self.caches) if cache.loops[0] == id(loop)
                 and cache.role(id(loop)) == "load" for load in vector.loads if row_cache_key(load, loop) == cache.key]
        preloads = self.register_preloads(loop, read)
        if not fills and not preloads:
            return
        self.preloaded = {load: f"bz_pl{m}_{loop.var.name}" for m, load in enumerate(preloads)}
        for load, name in self.preloaded.items():
            self.line(f"{vector_type(load.param.dtype, self.vectors[id(loop)].width)} {name}[{self.register_vectors}];")
        self.open_register_loop(loop, base)
        targets = [(f"bz_rc{n}", load) for n, load in dict(fills).items()] + \
            [(name, load) for load, name in self.preloaded.items()]
        for target, load in targets:
            ty = vector_type(load.param.dtype, vector.width)
            offset = self.offset(load.param, replace_var_in_access(load, loop.var, base))
            self.line(f"  {target}[{self.register_index}] = "
                      f"*reinterpret_cast<const {ty}*>(&{self.pointer(load.param)}[{offset}]);")
        self.line("}")

    def register_preloads(self, loop: k.For, read: list[k.Load]) -> list[k.Load]:
        """The loads of a register row's loop that stores a row read back later (RowCache.stored) to
        issue all at once, before the loop: those no cache serves, when they and the caches take at
        most REGISTER_PRELOAD_BYTES a thread."""
        if not any(cache.stored and cache.loops[0] == id(loop) for cache in self.caches):
            return []
        loads = [load for load in read if not any(id(loop) in cache.loops and row_cache_key(load, loop) == cache.key
                                                  for cache in self.caches)]
        row_bytes = sum(c.dtype.itemsize for c in self.caches) + sum(load.param.dtype.itemsize for load in loads)
        held = self.vectors[id(loop)].width * self.register_vectors * row_bytes
        return loads if held <= REGISTER_PRELOAD_BYTES else []

    def launder_register_row(self, loop: k.For, read: list[k.Load]) -> None:
        """In a loop after the first over a register row of 1- and 2-byte elements: the row's
        registers marked as changed (bz_launder), so the compiler keeps the packed row live across
        loops and widens it again, not each element widened to float32 by an earlier loop (twice the
        registers: NVRTC gave a masked softmax's warp function 99 registers, 74 laundered)."""
        if any(cache.dtype.itemsize >= 4 for cache in self.caches):
            return
        for n, cache in enumerate(self.caches):
            if id(loop) in cache.loops and cache.loops[0] != id(loop) \
                    and any(row_cache_key(load, loop) == cache.key for load in read):
                self.line(f"  bz_launder<{self.cache_loops().index(id(loop))}>(bz_rc{n}[{self.register_index}]);")

    def cache_slot(self, n: int, ty: str, base: k.Var) -> str:
        """Where the current vector of row cache `n` is: a register, or shared memory."""
        if self.cached == "registers":
            return f"bz_rc{n}[{self.register_index}]"
        return f"*reinterpret_cast<{ty}*>(&row_cache{n}[{base.name}])"

    def emit_unswitched_vector_loop(self, loop: k.For, vector: VectorAccesses, whole_vectors: bool = True) -> None:
        """The vector loop, in two copies when it uses row caches: one for cached rows, one for rows
        read from memory, so no element tests which."""
        if not any(id(loop) in cache.loops for cache in self.caches):
            self.emit_vector_loop(loop, vector, whole_vectors)
            return
        for cached, header in (("true", "if (cached_row) {"), ("false", "} else {")):
            self.line(header)
            self.depth += 1
            self.cached = cached
            self.emit_vector_loop(loop, vector, whole_vectors)
            self.depth -= 1
        self.cached = "cached_row"
        self.line("}")

    def cached_line(self, statement: str) -> None:
        """`statement`, for cached rows only."""
        if self.cached != "false":
            self.line(f"if (cached_row) {statement}" if self.cached == "cached_row" else statement)

    def read_loads(self, loop: k.For, vector: VectorAccesses) -> list[k.Load]:
        """The loop's 16-byte loads it reads outside the values a row cache holds for it."""
        values = dict.fromkeys(expression for _, _, expression in self.cache_updates(loop, "value"))
        values.update(dict.fromkeys(expression for _, expression, _ in self.row_value_uses(loop, "read")))
        covered = {e for expression in values for e in sub_exprs(expression)}
        uncovered = self.uncovered_exprs(loop, values)
        return [load for load in vector.loads
                if load not in covered or any(load in set(sub_exprs(x)) for x in uncovered)]

    def emit_vector_loop(self, loop: k.For, vector: VectorAccesses, whole_vectors: bool = True,
                         start: str = "") -> None:
        """The row's vectors, each lane on every lanes32-th; without `whole_vectors`, only those that
        end inside the row (the caller walks the rest an element at a time). They start at the loop's
        begin, or at `start` (after a head the caller walks: cuda_peel)."""
        v, width = loop.var.name, vector.width
        base = k.Var(f"{v}_{width}", loop.var.dtype)
        step = self.index_literal(width)
        read = self.read_loads(loop, vector)
        if self.cached == "registers":
            self.register_index = f"{v}_k"
            self.preload_register_row(loop, vector, base, read)
            self.open_register_loop(loop, base)
            self.launder_register_row(loop, read)
        else:
            unroll = vector_unroll(vector)
            if unroll > 1:
                self.line(f"#pragma unroll {unroll}")
            end = self.expr(loop.end) if whole_vectors else f"({self.expr(loop.end)}) - {width - 1}"
            first = f"{start} + " if start else self.from_begin(loop)
            self.line(f"for ({self.index} {base.name} = {first}{step} * lane; "
                      f"{base.name} < {end}; "
                      f"{base.name} += {step} * lanes32) {{")
        self.depth += 1
        self.emit_vector_step(loop, vector, base, read)
        self.depth -= 1
        self.line("}")

    def emit_vector_step(self, loop: k.For, vector: VectorAccesses, base: k.Var, read: list[k.Load]) -> None:
        """One iteration of a vector loop: the `width` elements from `base` on, as one vector load
        per array read (`read`), each element's statements, one vector store per array written."""
        v, width = loop.var.name, vector.width
        self.loop_depth += 1
        values = self.vector_values(loop, base)
        names = {}
        for n, load in enumerate(vector.loads):
            if load not in read:
                continue  # read only inside a value the row cache holds
            names[load] = f"v{n}_{v}"
            ty = vector_type(load.param.dtype, width)
            self.line(f"const {ty} {names[load]} = {self.vector_load(load, loop, base)};")
        words = self.philox_words(loop, base, set(values))  # after the loads: their latency hides the rounds
        updates = self.cache_updates(loop, "update")
        for n, cache, _ in updates:
            self.line(f"{vector_type(cache.dtype, width)} u{n}_{v};")
        stores = {}
        for n, store in enumerate(vector.stores):
            stores[id(store)] = f"w{n}_{v}"
            self.line(f"{vector_type(store.param.dtype, width)} {stores[id(store)]};")
        columns = self.vector_column_partials(loop, base, width)  # an inner-outer task's column partial results
        for lane_part in range(width):
            component = vector_component(width, lane_part)
            self.line("{")
            self.depth += 1
            self.line(f"const {self.index} {v} = {base.name} + {lane_part};")
            self.substitutions.update({load: f"{name}.{component}" for load, name in names.items()})
            self.substitutions.update({expression: f"{name}.{component}" for expression, name in values.items()})
            self.substitutions.update({node: f"((long long){name}.{component})" for node, name in words.items()})
            for n, _cache, expression in updates:
                self.substitutions.pop(expression, None)  # the previous component's value
                self.line(f"u{n}_{v}.{component} = {self.expr(expression)};")
                self.substitutions[expression] = f"u{n}_{v}.{component}"
            self.use_row_values(loop, lane_part, width)
            self.vector_stores = {key: f"{name}.{component}" for key, name in stores.items()}
            self.vector_column_component(loop, columns, lane_part, width)
            self.block(loop.body)
            self.depth -= 1
            self.line("}")
        self.substitutions.clear()
        self.vector_stores = {}
        self.preloaded = {}
        self.store_vector_columns(columns, base, width)
        for n, cache, _ in updates:
            self.cached_line(f"{self.cache_slot(n, vector_type(cache.dtype, width), base)} = u{n}_{v};")
        streams = self.streams_stores(loop)
        for store in vector.stores:
            target = self.offset(store.param, replace_var_in_access(store, loop.var, base))
            ty = vector_type(store.param.dtype, width)
            address = f"reinterpret_cast<{ty}*>(&{self.pointer(store.param)}[{target}])"
            self.line(f"if (active) bz_store_last({address}, {stores[id(store)]});" if streams else
                      f"if (active) *{address} = {stores[id(store)]};")
            for n in self.stored_caches(loop, store):
                self.cached_line(f"{self.cache_slot(n, ty, base)} = {stores[id(store)]};")
        self.loop_depth -= 1

    # --- tasks one index a thread, `width` neighbouring indices at a time ------------------------
    def plan_thread_vector(self) -> k.For | None:
        """The task's body as a loop whose vectors each thread moves (cuda_plan.thread_vectors), its
        accesses entered in `vectors`; None for a task that keeps one index a thread."""
        if self.warp or self.inner_outer or self.fold_of or self.schedule.kind != "rows" \
                or not self.one_thread_per_row():
            return None
        found = thread_vectors(self.task)
        if found is None or self.task.var.dtype != self.kernel.index_type:
            return None
        loop, vector = found
        self.vectors[id(loop)] = vector
        return loop

    def write_thread_vectors(self) -> str:
        """A task run one index a thread whose body moves vectors (cuda_plan.thread_vectors): each
        thread takes `width` neighbouring indices at a time, one 16-byte load per array it reads
        (four floats in flight per array, not one), where every array it moves along the index is
        aligned to a vector at the task's first index: tested once, since every vector then starts
        a multiple of `width` indices on. Returns the first index left for the loop of one index a
        thread (cuda.TaskWriter.write_thread_rows): those after the last whole vector, or all of
        them where an array is misaligned. The grid stride counts vectors: a thread's last step
        past the end stays within the index type however long the task."""
        loop, ix = self.thread_vector, self.index
        vector = self.vectors[id(loop)]
        width = vector.width
        aligned = list(dict.fromkeys(self.alignment_terms(loop)))
        self.line(f"const bool bz_aligned = {aligned[0]}")
        for term in aligned[1:]:
            self.line(f"    && {term}")
        self.lines[-1] += ";"
        self.line(f"const {ix} bz_vectors = bz_aligned ? (task_end - task_begin) / {width} : 0;")
        self.line(f"for ({ix} bz_vector = ({ix})blockIdx.x * blockDim.x + threadIdx.x; bz_vector < bz_vectors;")
        self.line(f"     bz_vector += ({ix})gridDim.x * blockDim.x) {{")
        self.depth += 1
        base = k.Var(f"{loop.var.name}_{width}", loop.var.dtype)
        self.line(f"const {ix} {base.name} = task_begin + {self.index_literal(width)} * bz_vector;")
        self.line("const bool active = true;")
        self.emit_vector_step(loop, vector, base, self.read_loads(loop, vector))
        self.depth -= 1
        self.line("}")
        self.line(f"const {ix} bz_rest = task_begin + {self.index_literal(width)} * bz_vectors;")
        return "bz_rest"

    def philox_words(self, loop: k.For, base: k.Var, skip: set[k.Expr]) -> dict[k.Philox, str]:
        """Each run of four random words the iteration draws (cuda_random), computed once: the Philox
        word -> the `uint4` its four elements take their words from."""
        names: dict[tuple, str] = {}
        words = {}
        for node, run in philox_runs(loop, skip).items():
            key = (run.seed, run.offset, run.counter)
            if key not in names:
                names[key] = f"ph{len(names)}_{loop.var.name}"
                first = self.expr(k.substitute(run.counter, loop.var, base))
                self.line(f"const uint4 {names[key]} = bz_philox_run({self.expr(run.seed)}, {self.expr(run.offset)}, "
                          f"{first});")
            words[node] = names[key]
        return words

    def vector_load(self, load: k.Load, loop: k.For, base: k.Var) -> str:
        """A vector of elements from memory, or from the row cache where an earlier loop kept them (or from
        the registers preload_register_row filled)."""
        if self.cached == "registers" and load in self.preloaded:
            return f"{self.preloaded[load]}[{self.register_index}]"
        ty = vector_type(load.param.dtype, self.vectors[id(loop)].width)
        offset = self.offset(load.param, replace_var_in_access(load, loop.var, base))
        address = f"reinterpret_cast<const {ty}*>(&{self.pointer(load.param)}[{offset}])"
        from_memory = f"*{address}"
        for n, cache in enumerate(self.caches):
            if id(loop) in cache.loops and row_cache_key(load, loop) == cache.key:
                from_memory = self.hinted_load(cache, loop, address, from_memory)
                slot = self.cache_slot(n, ty, base)
                if cache.loops[0] != id(loop):
                    return {"true": slot, "registers": slot, "false": from_memory}.get(
                        self.cached, f"cached_row ? {slot} : {from_memory}")
                if cache.role(id(loop)) == "load" and self.cached == "registers":
                    return slot  # filled by preload_register_row
                if cache.role(id(loop)) == "load":  # the first loop fills the cache as it reads
                    self.line(f"const {ty} m{n}_{loop.var.name} = {from_memory};")
                    self.cached_line(f"{slot} = m{n}_{loop.var.name};")
                    return f"m{n}_{loop.var.name}"
        return from_memory

    def hinted_load(self, cache, loop: k.For, address: str, plain: str) -> str:
        """A row cache's load where the rows were too long for shared memory (the uncached copy of an
        unswitched loop): the first loop's read keeps its lines in L2 for the later loops, the last
        loop's read lets them go (prelude's bz_load_keep and bz_load_last)."""
        if self.cached != "false" or config.disabled("l2_hints"):
            return plain
        if cache.loops[0] == id(loop):
            return f"bz_load_keep({address})"
        return f"bz_load_last({address})" if cache.loops[-1] == id(loop) else plain

    def streams_stores(self, loop: k.For) -> bool:
        """Whether the loop's stores leave L2 first: it reads rows too long for shared memory for the
        last time, so L2 is better kept for the rows other blocks will read again (see hinted_load)."""
        return self.cached == "false" and not config.disabled("l2_hints") and any(
            len(cache.loops) > 1 and cache.loops[-1] == id(loop) for cache in self.caches)

    def vector_values(self, loop: k.For, base: k.Var) -> dict[k.Expr, str]:
        """In a loop reading updated caches: a vector of values from the cache, or computed from
        memory when the rows did not fit in shared memory."""
        values = {}
        for n, cache, expression in self.cache_updates(loop, "value"):
            name, ty = f"e{n}_{loop.var.name}", vector_type(cache.dtype, self.vectors[id(loop)].width)
            values[expression] = name
            self.line(f"{ty} {name};")
            self.cached_line(f"{name} = {self.cache_slot(n, ty, base)};")
            if self.cached in ("true", "registers"):
                continue
            self.line("else {" if self.cached == "cached_row" else "{")
            self.depth += 1
            self.compute_vector_value(expression, name, loop, base, f"g{n}")
            self.depth -= 1
            self.line("}")
        return values

    def compute_vector_value(self, expression: k.Expr, name: str, loop: k.For, base: k.Var, prefix: str) -> None:
        """`name` (a vector) = `expression` read from memory: every row load it makes is one vector
        load of its own (`{prefix}_{m}_...`), then each element's value is computed once. An
        expression of several row loads (a residual add under a norm) needs them all at once."""
        v, width = loop.var.name, self.vectors[id(loop)].width
        row_loads = [e for e in sub_exprs(expression) if isinstance(e, k.Load) and loop.var in set(sub_exprs(e))]
        vectors = {}
        for m, load in enumerate(dict.fromkeys(row_loads)):
            offset = self.offset(load.param, replace_var_in_access(load, loop.var, base))
            memory_ty = vector_type(load.param.dtype, width)
            vectors[load] = f"{prefix}_{m}_{v}"
            self.line(f"const {memory_ty} {vectors[load]} = "
                      f"*reinterpret_cast<const {memory_ty}*>(&{self.pointer(load.param)}[{offset}]);")
        for lane_part in range(width):
            component = vector_component(width, lane_part)
            self.substitutions.update({load: f"{vector}.{component}" for load, vector in vectors.items()})
            self.line(f"{{ const {self.index} {v} = {base.name} + {lane_part}; "
                      f"{name}.{component} = {self.expr(expression)}; }}")
        for load in vectors:
            self.substitutions.pop(load)

    def uncovered_exprs(self, loop: k.For, values: dict[k.Expr, str]) -> list[k.Expr]:
        """The loop's expressions with the cached values cut out (what still reads memory)."""
        def cut(e: k.Expr) -> list[k.Expr]:
            if e in values:
                return []
            children = [c for name in getattr(e, "__dataclass_fields__", {}) for c in
                        ((getattr(e, name),) if isinstance(getattr(e, name), k.Expr) else
                         getattr(e, name) if isinstance(getattr(e, name), tuple) else ()) if isinstance(c, k.Expr)]
            return [e] if isinstance(e, k.Load) else [x for c in children for x in cut(c)]
        return [x for st in walk(loop.body) for root in exprs_of(st) for x in cut(root)]

    def cache_updates(self, loop: k.For, role: str) -> list[tuple[int, RowCache, k.Expr]]:
        """(cache number, cache, the updating expression as this loop writes it) for the caches
        this loop updates (`role` "update") or reads the updated values of ("value")."""
        found = []
        for n, cache in enumerate(self.caches):
            if cache.update is not None and id(loop) in cache.loops and cache.role(id(loop)) == role:
                found.append((n, cache, occurrences(loop, cache.update)[0]))
        return found

    def row_value_uses(self, loop: k.For, role: str) -> list[tuple[int, k.Expr, str]]:
        """(value number, its expression as this loop writes it, the register array) for the values
        kept in registers (cuda_row_values) that this loop computes (`role` "write") or reads back
        ("read"); none outside the register copy of a row."""
        if self.cached != "registers":
            return []
        return [(n, occurrences(loop, value.key)[0], f"bz_rv{n}") for n, value in enumerate(self.row_values)
                if (value.writer == id(loop) if role == "write" else id(loop) in value.readers)]

    def row_value_is_narrow(self, n: int) -> bool:
        """Whether every loop that computes or reads kept value `n` uses it as a narrow result
        (cuda_narrow.py): only then may the loop that keeps it compute it approximately."""
        value = self.row_values[n]
        loops = [self.loops_by_id[i] for i in (value.writer, *value.readers)]
        return all(e in self.narrow_expressions for loop in loops for e in occurrences(loop, value.key))

    def use_row_values(self, loop: k.For, lane_part: int, width: int) -> None:
        """In one element of a register row's loop: each value it keeps computed into its register,
        each value it reads back taken from there."""
        for n, expression, array in self.row_value_uses(loop, "write"):
            slot = f"{array}[{self.register_index} * {width} + {lane_part}]"
            self.substitutions.pop(expression, None)  # the previous element's
            self.line(f"{slot} = {self.narrowed(self.row_value_is_narrow(n), self.expr, expression)};")
            self.substitutions[expression] = slot
        for _, expression, array in self.row_value_uses(loop, "read"):
            self.substitutions[expression] = f"{array}[{self.register_index} * {width} + {lane_part}]"

    def stored_caches(self, loop: k.For, store: k.Store) -> list[int]:
        """The row caches (by number) that keep what `store` stores in its loop (RowCache.stored)."""
        return [n for n, cache in enumerate(self.caches) if cache.stored and cache.loops[0] == id(loop)
                and row_cache_key(store, loop) == cache.key]

    def emit_cached_loads(self, loop: k.For) -> None:
        """At the top of a lane loop: each cached load, stored on its first loop, read back after;
        a stored row's cache is filled by its store instead (emit_store, through `cache_stores`)."""
        begin = self.expr(loop.begin)
        for n, cache in enumerate(self.caches):
            if id(loop) not in cache.loops:
                continue
            slot = f"row_cache{n}[{loop.var.name} - {begin}]"
            role = cache.role(id(loop))
            if role == "store":
                store = next(s for s in loop.body if isinstance(s, k.Store) and row_cache_key(s, loop) == cache.key)
                self.cache_stores.setdefault(id(store), []).append(slot)
                continue
            # A stored row is read back at the loop's own index wherever the loop reads it: in bounds.
            loads = (e for s in walk(loop.body) for x in exprs_of(s) for e in sub_exprs(x) if isinstance(e, k.Load)) \
                if cache.stored else unconditional_loads(loop.body, loop.var)
            load = next(ld for ld in loads if row_cache_key(ld, loop) == cache.key)
            name, ty = f"cached{n}_{loop.var.name}", c_type(cache.dtype)
            if role == "value":  # the cache holds the updated value: the load itself is not needed
                expression = occurrences(loop, cache.update)[0]
                self.line(f"const {ty} {name} = cached_row ? {slot} : {self.expr(expression)};")
                self.substitutions[expression] = name
                continue
            if cache.loops[0] == id(loop):
                self.line(f"const {ty} {name} = {self.expr(load)};")
                if role == "load":
                    self.line(f"if (cached_row) {slot} = {name};")
            else:
                self.line(f"const {ty} {name} = cached_row ? {slot} : {self.expr(load)};")
            self.substitutions[load] = name
            if role == "update":
                expression = occurrences(loop, cache.update)[0]
                self.line(f"const {ty} updated{n}_{loop.var.name} = {self.expr(expression)};")
                self.line(f"if (cached_row) {slot} = updated{n}_{loop.var.name};")
                self.substitutions[expression] = f"updated{n}_{loop.var.name}"
