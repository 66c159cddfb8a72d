"""Full reductions over arrays dense in memory: a "flat" task (cuda_plan.TaskSchedule) whose arrays
the kernel finds laid out as one run each over the reduced range walks that range as one flat run
of 16-byte vectors, several a thread in flight, into several copies of its accumulators; any other
layout takes the element walk of cuda_grid.GridWriter.walk_nest.

The plan (dense_nest) is decided from the Kernel IR; the writer (DenseWriter, a mixin of
cuda_grid.GridWriter) writes the kernel's test of the layout and the walk. The copies of the
accumulators meet in a fixed tree, and the launch fixes every thread's elements, so a launch's
result is the same from run to run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from braze import config
from braze.codegen.cuda_plan import (
    LANE_COMBINES,
    VectorAccesses,
    exprs_of,
    nest_vector_accesses,
    perfect_nest,
    sub_exprs,
    substituted,
    vector_alignment,
    vector_component,
    vector_type,
)
from braze.codegen.cuda_rows import c_type
from braze.kir import nodes as k

# A reduction over arrays dense in memory (DenseWriter.walk_dense): the bytes each thread
# loads per step, all arrays together, as up to DENSE_VECTORS vectors of each array. One 4-byte load a
# thread keeps too few bytes in flight (an H200 wants some 40 KB an SM); 64 bytes a thread is 96 KB an
# SM at DENSE_THREADS_PER_SM. The step's vectors fold into up to DENSE_SLOTS copies of the
# accumulators (independent chains), as many as DENSE_SLOT_BYTES of them take: a variance's three
# (two of them float64) keep one copy, where four spilled registers inside the loop.
DENSE_BYTES_IN_FLIGHT = 64
DENSE_VECTORS = 4
DENSE_SLOTS = 4
DENSE_SLOT_BYTES = 16
# The threads an SM keeps of such a reduction (three quarters of the 2048 of sm_80 and sm_90): 96 KB
# in flight an SM, and room for ptxas to keep a step's loads in flight (DenseWriter.launch_bounds).
DENSE_THREADS_PER_SM = 1536


@dataclass(frozen=True)
class DenseNest:
    """The loads of a full reduction's nest that may be read as one contiguous run of each array
    (DenseWriter.walk_dense), `vector.width` elements at a time, `vectors` of each a thread
    per step, vector u folded into copy u % `slots` of the accumulators."""

    vector: VectorAccesses
    vectors: int
    slots: int


def dense_nest(nest: list[k.For], accumulators: tuple[tuple[k.Var, str], ...]) -> DenseNest | None:
    """How a full reduction's perfect nest may walk its arrays as flat runs, or None. Besides what
    nest_vector_accesses asks, the innermost body holds only definitions and the accumulators' folds
    (each combine one the lanes know, so the slots' accumulators can meet), and the nest's indices are
    read only inside the indices of its vector loads: with every array dense over the nest (the
    kernel checks), each load at flat index f of the nest is then the load at the nest's first
    element plus f, whatever the digits of f."""
    vector = nest_vector_accesses(nest)
    body = nest[-1].body
    if vector is None or vector.stores or any(combine not in LANE_COMBINES for _, combine in accumulators):
        return None
    if not all(isinstance(s, (k.Let, k.Assign)) for s in body):
        return None
    indices = {level.var for level in nest}
    loads = set(vector.loads)
    if any(_reads_outside(e, indices, loads) for s in body for e in exprs_of(s)):
        return None
    if any(not indices <= _variables(load.indices) for load in loads):
        return None  # a load repeated along some index (a broadcast) is dense only where that extent is 1
    vector_bytes = vector.width * sum(load.param.dtype.itemsize for load in loads)
    vectors = max(1, min(DENSE_VECTORS, DENSE_BYTES_IN_FLIGHT // vector_bytes))
    slot_bytes = sum(acc.dtype.itemsize for acc, _ in accumulators)
    return DenseNest(vector, vectors, max(1, min(vectors, DENSE_SLOTS, DENSE_SLOT_BYTES // max(slot_bytes, 1))))


def _reads_outside(e: k.Expr, variables: set[k.Var], loads: set[k.Load]) -> bool:
    """Whether `e` reads one of `variables` other than inside the indices of one of `loads`."""
    if e in loads:
        return False
    if isinstance(e, k.Var):
        return e in variables
    children = (getattr(e, name) for name in getattr(e, "__dataclass_fields__", {}))
    return any(_reads_outside(c, variables, loads) for child in children
               for c in (child if isinstance(child, tuple) else (child,)) if isinstance(c, k.Expr))


def with_accumulators(stmts: tuple[k.Stmt, ...], names: dict[k.Var, k.Var]) -> tuple[k.Stmt, ...]:
    """Definitions and folds (dense_nest's bodies) with each accumulator of `names` renamed."""
    return tuple(dataclasses.replace(s, var=names.get(s.var, s.var) if isinstance(s, k.Assign) else s.var,
                                     value=substituted(s.value, names)) for s in stmts)


def _variables(indices: tuple[k.Expr, ...]) -> set[k.Var]:
    return {v for i in indices for v in sub_exprs(i) if isinstance(v, k.Var)}


class DenseWriter:
    """The dense walk of a "flat" task's writer (see the module docstring)."""

    @property
    def flat(self) -> str:
        """The C type of flat indices into a nest (its total, chunks, the walk's index): unsigned
        32-bit where every index fits an int (the kernel's sizes include every tensor the nest
        walks), so a block's setup divides in a few instructions, not the ~70 of a 64-bit division.
        (A short row's digits, which walk_flat divides per block, gained from it; a split's chunks,
        divided once a block, took the same time either way on an H200.)"""
        return "unsigned" if self.index == "int" else "long long"

    def flat_dense(self) -> DenseNest | None:
        """How a "flat" task walks its arrays where they are dense (walk_dense), or None."""
        if self.schedule.kind != "flat" or config.disabled("dense_reductions"):
            return None
        return dense_nest(perfect_nest(next(s for s in self.task.body if isinstance(s, k.For))),
                          self.schedule.accumulators)

    def launch_bounds(self) -> str:
        """The function's `__launch_bounds__`: the block size, and for a dense full reduction the
        blocks an SM must hold (DENSE_THREADS_PER_SM threads), which lets ptxas keep every load of a
        step in flight: asked for nothing, it kept two of four 16-byte loads at 38 registers, and
        all four at 40 when asked for 6 blocks of 256."""
        if self.flat_dense() is None:
            return str(self.block_size)
        return f"{self.block_size}, {max(1, DENSE_THREADS_PER_SM // self.block_size)}"

    def dense_condition(self, nest: list[k.For], vector: VectorAccesses) -> str:
        """Whether each load of `vector` is aligned to its vector type at the nest's first element
        and moves, with one step of each outer index, by the product of the inner extents (the
        innermost moves by one: nest_vector_accesses): then the nest reads each array as one run.
        It reads only the arrays' addresses and extents: every thread of the launch takes one path."""
        starts = {level.var: level.begin for level in nest}
        terms = []
        for load in vector.loads:
            first = self.offset(load.param, tuple(substituted(i, starts) for i in load.indices))
            mask = vector_alignment(load.param.dtype, vector.width) - 1
            address = f"reinterpret_cast<unsigned long long>(&{self.pointer(load.param)}[{first}])"
            terms.append(f"(({address} & {mask}) == 0)")
            for n, level in enumerate(nest[:-1]):
                step = {**starts, level.var: k.Binary("add", level.begin, k.Const(1, level.begin.dtype),
                                                       level.begin.dtype)}
                moved = self.offset(load.param, tuple(substituted(i, step) for i in load.indices))
                inner = " * ".join(f"(long long)bz_n{m}" for m in range(n + 1, len(nest)))
                terms.append(f"(bz_n{n} <= 1 || (long long)({moved}) - (long long)({first}) == {inner})")
        return " && ".join(dict.fromkeys(terms))

    def walk_dense(self, nest: list[k.For], dense: DenseNest, part: str, parts: str) -> None:
        """The nest as one flat range [0, bz_total) whose element f each array holds f elements past
        the nest's first (dense_condition), part `part` of `parts` chunks of it (multiples of a
        vector a thread, so every vector starts aligned): the block takes `vectors` vectors a
        thread per step, all loads issued before any is used, vector u folded into copy u % `slots`
        of the accumulators (independent chains), then the chunk's last whole vectors and its last
        elements. The copies meet in a fixed tree: a launch's result is the same from run to run."""
        width, slots, inner = dense.vector.width, dense.slots, nest[-1]
        starts = {level.var: level.begin for level in nest}
        pointers = {}
        for n, load in enumerate(dense.vector.loads):  # each load's element at the nest's first index
            pointers[load] = f"bz_p{n}"
            first = self.offset(load.param, tuple(substituted(i, starts) for i in load.indices))
            self.line(f"const {c_type(load.param.dtype)}* const bz_p{n} = &{self.pointer(load.param)}[{first}];")
        fl = self.flat
        self.line(f"const {fl} bz_run = ({fl}){width} * blockDim.x, bz_tile = {dense.vectors} * bz_run;")
        self.line(f"const {fl} bz_chunk = ((bz_total + ({fl})({parts}) - 1) / ({fl})({parts}) + bz_run - 1) / bz_run "
                  "* bz_run;")
        self.line(f"const {fl} bz_lo = ({fl})({part}) * bz_chunk, bz_hi = bz_minimum(bz_total, bz_lo + bz_chunk);")
        names = [{acc: k.Var(f"{acc.name}_s{u}", acc.dtype) for acc, _ in self.schedule.accumulators} if u else {}
                 for u in range(slots)]
        bodies = [with_accumulators(inner.body, renamed) for renamed in names]
        for renamed in names[1:]:
            for acc, name in renamed.items():
                self.line(f"{c_type(acc.dtype)} {name.name} = {self.expr(self.initial[acc])};")
        self.line(f"const {fl} bz_thread = ({fl}){width} * threadIdx.x;")
        self.line(f"{fl} bz_b = bz_lo;")
        self.line("#pragma unroll 1")
        self.line("for (; bz_b + bz_tile <= bz_hi; bz_b += bz_tile) {")
        self.dense_vectors(dense.vector, pointers, [bodies[u % slots] for u in range(dense.vectors)],
                           [f"bz_b + {u} * bz_run + bz_thread" if u else "bz_b + bz_thread"
                            for u in range(dense.vectors)])
        self.line("}")
        self.line("#pragma unroll 1")
        self.line(f"for ({fl} bz_v = bz_b + bz_thread; bz_v + {width} <= bz_hi; bz_v += bz_run) {{")
        self.dense_vectors(dense.vector, pointers, bodies[:1], ["bz_v"])
        self.line("}")
        self.line(f"for ({fl} bz_e = bz_maximum(bz_lo, bz_hi - bz_hi % {width}) + threadIdx.x; bz_e < bz_hi; "
                  "bz_e += blockDim.x) {")
        self.depth += 1
        self.substitutions.update({load: f"{pointer}[bz_e]" for load, pointer in pointers.items()})
        self.loop_depth += 1
        self.block(inner.body)
        self.loop_depth -= 1
        self.substitutions.clear()
        self.depth -= 1
        self.line("}")
        self.meet_slots(names)

    def dense_vectors(self, vector: VectorAccesses, pointers: dict[k.Load, str], bodies: list[tuple[k.Stmt, ...]],
                      firsts: list[str]) -> None:
        """One vector of each load at each flat index of `firsts` (multiples of the width), all
        loaded first, then each vector's elements folded by its body (the slot's accumulators)."""
        width = vector.width
        self.depth += 1
        for u, first in enumerate(firsts):
            for n, load in enumerate(vector.loads):
                ty = vector_type(load.param.dtype, width)
                self.line(f"const {ty} bz_v{n}_{u} = *reinterpret_cast<const {ty}*>({pointers[load]} + ({first}));")
        self.loop_depth += 1
        scoped = any(isinstance(s, k.Let) for s in bodies[0])  # an element's definitions: a scope each
        for u, body in enumerate(bodies):
            for part in range(width):
                self.substitutions.update({load: f"bz_v{n}_{u}.{vector_component(width, part)}"
                                           for n, load in enumerate(vector.loads)})
                if scoped:
                    self.line("{")
                self.depth += scoped
                self.block(body)
                self.depth -= scoped
                if scoped:
                    self.line("}")
        self.substitutions.clear()
        self.loop_depth -= 1
        self.depth -= 1

    def meet_slots(self, names: list[dict[k.Var, k.Var]]) -> None:
        """Each accumulator combined with its other slots' in a fixed pairwise tree (slot 0 is the
        accumulator itself)."""
        for acc, combine in self.schedule.accumulators:
            level = [acc.name] + [renamed[acc].name for renamed in names[1:]]
            while len(level) > 1:
                pairs = [(level[n], level[n + 1]) for n in range(0, len(level) - 1, 2)]
                for a, b in pairs:
                    self.line(f"{a} = {LANE_COMBINES[combine]}()({a}, {b});")
                level = [a for a, _ in pairs] + level[len(pairs) * 2:]
