"""The vector paths of a CUDA row loop, among them rows whose start is off a vector's alignment: a
head of single elements peeled off, then the vectors, then a tail of single elements.

A mixin of `cuda.TaskWriter` (with cuda_rows.RowLoopWriter, which writes the vector loops). A row
loop's vector path needs every vectorized access aligned to its vector at the row's start
(RowLoopWriter.vector_condition). Rows of an odd length start misaligned three rows in four: GPT-2's
vocabulary of 50257 float32 logits, ViT's rows of 197. Where every vector access of the loop is
misaligned by as much at the row's start (log_softmax's input and output: the same row stride, the
same dtype), the row takes `h` elements one a lane first, `h` (less than a vector) bringing the
first access to its alignment, then vectors from there, then the elements after the last whole
vector one a lane: the vectors are the common path whatever the row's start. Tested row by row
(the rows' starts differ), after the test for rows the vectors cover whole, whose path is as before.

Only rows not kept in a row cache peel: a cache's row starts at a multiple of the row's length in
shared memory, so the vectors of a peeled row would meet it misaligned. Loops sharing row caches
peel where the rows were too long for shared memory (`cached_row == 0`: log_softmax and
cross_entropy over a vocabulary); rows that fit keep their plain loops. So do an inner-outer task's
loops (its partial columns start at multiples of the row's length too). `BRAZE_DISABLE=row_peel`
turns the peel off: such rows then take the vectors only where aligned, with a tail
(`vector_tails`), else the plain loop.
"""

from __future__ import annotations

from braze import config
from braze.codegen.cuda_plan import VectorAccesses, replace_var_in_access, vector_alignment
from braze.kir import nodes as k


class PeelWriter:
    """The vector paths of a task writer's row loops (see the module docstring)."""

    def open_vector_paths(self, loop: k.For, vector: VectorAccesses, var: str, end: str) -> int:
        """The loop's vector paths, up to the `else` under which the caller writes its plain loop:
        rows the vectors cover whole, then the others the vectors can take (peeled, or aligned with
        a tail). Returns the blocks left open, for close_vector_paths."""
        self.line(f"if ({self.vector_condition(loop)}) {{")
        self.depth += 1
        self.emit_unswitched_vector_loop(loop, vector)
        self.depth -= 1
        opened = 1
        if self.peels(loop):
            self.line("} else {")
            self.depth += 1
            self.emit_peeled_vectors(loop, vector, var, end)
            opened = 2
        elif self.takes_vector_tail(loop):  # rows the width does not divide: the whole vectors, then the rest
            self.line(f"}} else if ({self.vector_condition(loop, whole_vectors=False)}) {{")
            self.depth += 1
            self.emit_unswitched_vector_loop(loop, vector, whole_vectors=False)
            self.emit_lane_loop(loop, var, self.vector_tail_start(loop, vector.width), end)
            self.depth -= 1
        self.line("} else {")
        self.depth += 1
        return opened

    def close_vector_paths(self, opened: int) -> None:
        """The blocks open_vector_paths left open, closed after the plain loop."""
        for _ in range(opened):
            self.depth -= 1
            self.line("}")

    def peels(self, loop: k.For) -> bool:
        """Whether the loop's vector path takes rows of any start and length: a head peeled off, a
        tail after the vectors (see the module docstring). Loops sharing row caches do where the
        rows are not cached (emit_peeled_vectors tests it)."""
        if config.disabled("row_peel") or config.disabled("vector_tails"):
            return False
        whole = isinstance(loop.begin, k.Const) and isinstance(loop.end, k.Const) \
            and (loop.end.value - loop.begin.value) % self.vectors[id(loop)].width == 0
        return self.schedule.kind in ("rows", "grid_rows") and self.inner_outer is None and not whole

    def shares_row_caches(self, loop: k.For) -> bool:
        return any(id(loop) in cache.loops for cache in self.caches)

    def emit_peeled_vectors(self, loop: k.For, vector: VectorAccesses, var: str, end: str) -> None:
        """Rows whose vector accesses share one misalignment at the row's start: the head up to the
        first access's alignment one element a lane, the vectors from there (the loop's uncached
        copy, where it shares row caches: the rows are not cached), then the tail."""
        ix, width = self.index, vector.width
        head = k.Var(f"bz_head_{loop.var.name}", loop.var.dtype)
        self.line(f"const {ix} {head.name} = bz_minimum(({ix})({self.head_elements(loop, vector)}), "
                  f"({ix})({self.trip_count(loop)}));")
        first = f"{self.from_begin(loop)}{head.name}"
        start = head if self.from_begin(loop) == "" else k.Binary("add", loop.begin, head, loop.begin.dtype)
        terms = ["(cached_row == 0)"] if self.shares_row_caches(loop) else []
        terms += self.alignment_terms(loop, start)
        self.line(f"if ({' && '.join(dict.fromkeys(terms))}) {{")
        self.depth += 1
        self.emit_lane_loop(loop, var, self.expr(loop.begin), first)
        cached = self.cached
        self.cached = "false" if self.shares_row_caches(loop) else cached
        self.emit_vector_loop(loop, vector, whole_vectors=False, start=first)
        self.cached = cached
        self.emit_lane_loop(loop, var, f"{first} + (({self.trip_count(loop)}) - {head.name}) / {width} * {width}", end)
        self.depth -= 1

    def head_elements(self, loop: k.For, vector: VectorAccesses) -> str:
        """The elements from the loop's start to the first vector access's alignment (less than a
        vector: the bytes to the alignment over the element size). The other accesses are tested
        aligned there (alignment_terms); so is this one, which fails for an element misaligned."""
        lead = (*vector.loads, *vector.stores)[0]
        start = tuple(self.inlined(i) for i in replace_var_in_access(lead, loop.var, loop.begin))
        address = f"reinterpret_cast<unsigned long long>(&{self.pointer(lead.param)}[{self.offset(lead.param, start)}])"
        mask = vector_alignment(lead.param.dtype, vector.width) - 1
        return f"((0ULL - {address}) & {mask}) / {lead.param.dtype.itemsize}"
