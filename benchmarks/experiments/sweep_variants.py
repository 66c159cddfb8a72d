"""Suite cases (braze alone, models shapes unless told) under one variant of how the CUDA code generator writes a
loop or how the launch planner sizes a launch, each variant a process of its own: forms measured and
not kept (benchmarks/results/split-walks-h200-2026-11-27.md), and the form before a kept change.

    python benchmarks/experiments/sweep_variants.py layer_norm,var_mean warp_block=128
    python benchmarks/experiments/sweep_variants.py group_norm,argmax split_walk=uncounted

Variants (several may be given; none: the tree as it is):
    warp_block=B        a warp-a-row task's launches in blocks of B threads (not the kernel's own)
    rows_a_thread=R     rows each thread walks in a row task computed element by element with divisors
    split_walk=uncounted  a split row's flat walk tests its end each step, as before bz_trips took it
    vector_unroll=U     the unroll of every 16-byte flat walk
    stores=value_first  a lane loop's guarded store computes its value before the guard
    lane_loops=counted  a row's lane loops count their steps up front (bz_trips)
    shapes=gpu          the suite's LLM-sized shapes instead of the models' (not a variant)

A feature of braze/config.py is switched off as anywhere else: `BRAZE_DISABLE=split_functions python ...`.

Each case's outputs are checked against the float64 reference before it is timed (the suite's own
check), so a variant that computes wrongly shows as an error, not as a time.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from braze.codegen import cuda, cuda_grid, cuda_launch


def warp_block(threads: int) -> None:
    planned_by_default = cuda_launch.LaunchPlanner._plan_register_task

    def plan(self, task, begin, end, lanes, cached, shared):
        planned = planned_by_default(self, task, begin, end, lanes, cached, shared)
        if planned.warp and threads != self.block:
            return dataclasses.replace(planned, grid=-(-(end - begin) * cuda_launch.WARP // threads), block=threads)
        return planned
    cuda_launch.LaunchPlanner._plan_register_task = plan


def rows_a_thread(rows: int) -> None:
    cuda_launch.LaunchPlanner._rows_a_thread = staticmethod(
        lambda task, lanes, extents: rows if task.thread_divisors else 1)


def split_walk(form: str) -> None:
    if form != "uncounted":
        raise SystemExit(f"split_walk: 'uncounted', not {form!r}")
    walk_by_default = cuda_grid.GridWriter.walk_flat

    def walk_flat(self, nest, tag, first, stride, end, vector=None, step=None, counted=False):
        # walk_nest_chunks' walks are the untagged ones; the lane nests keep their counted form.
        return walk_by_default(self, nest, tag, first, stride, end, vector, step, counted and tag != "")
    cuda_grid.GridWriter.walk_flat = walk_flat


def vector_unroll(copies: int) -> None:
    cuda_grid.vector_unroll = lambda vector: copies


def stores(form: str) -> None:
    if form != "value_first":
        raise SystemExit(f"stores: 'value_first', not {form!r}")
    store_by_default = cuda.TaskWriter.emit_store

    def emit_store(self, s):
        if id(s) in self.vector_stores or id(s) in self.cache_stores or self.store_guard() != "if (active) ":
            return store_by_default(self, s)
        value = f"{s.param.name}_v{self.depth}"
        self.line(f"const {cuda.c_type(s.param.dtype)} {value} = {self.expr(s.value)};")
        self.line(f"if (active) {self.pointer(s.param)}[{self.offset(s.param, s.indices)}] = {value};")
    cuda.TaskWriter.emit_store = emit_store


def lane_loops(form: str) -> None:
    if form != "counted":
        raise SystemExit(f"lane_loops: 'counted', not {form!r}")
    loop_by_default = cuda.TaskWriter.emit_lane_loop

    def emit_lane_loop(self, s, var, begin, end):
        v, write = s.var.name, self.line
        header = f"for ({var} = {begin} + lane; {v} < {end}; {v} += lanes32) {{"

        def line(text):  # the loop's header counted, the rest as the default writes it
            write(text if text != header else f"for ({var} = {begin} + lane, {v}_left = bz_trips({v}, {end}, "
                  f"lanes32); {v}_left > 0; --{v}_left, {v} += lanes32) {{")
        self.line = line
        try:
            loop_by_default(self, s, var, begin, end)
        finally:
            del self.line
    cuda.TaskWriter.emit_lane_loop = emit_lane_loop


VARIANTS = {"warp_block": lambda v: warp_block(int(v)), "rows_a_thread": lambda v: rows_a_thread(int(v)),
            "split_walk": split_walk, "vector_unroll": lambda v: vector_unroll(int(v)), "stores": stores,
            "lane_loops": lane_loops}


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    cases, settings = argv[0], [s for s in argv[1:] if not s.startswith("shapes=")]
    shapes = next((s.partition("=")[2] for s in argv[1:] if s.startswith("shapes=")), "models")
    for setting in settings:
        name, _, value = setting.partition("=")
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: one of {', '.join(VARIANTS)}")
        VARIANTS[name](value)
    from braze.cli.bench.cases import selected
    from braze.cli.bench.suite import run_gpu
    label = " ".join(settings) or ("BRAZE_DISABLE=" + os.environ["BRAZE_DISABLE"] if os.environ.get("BRAZE_DISABLE")
                                   else "as is")
    for row in run_gpu(selected(cases, shapes), shapes, 10, None, peers=False)["rows"]:
        braze = row["braze"]
        print(f"{row['case']:<28} {label:<24} {braze.get('ms', float('nan')) * 1000:8.2f} us  "
              f"{braze.get('error', '')[:80]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
