"""Ties the pipeline together (docs/architecture.md, "The pipeline").

On a cache miss it runs segment + schedule, lower, codegen and compile; on a hit it calls the
runtime. The `FusionCache` of each fusion maps an input signature to its `FusionRuntime`.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from braze import config, schedule
from braze import dtypes as dt
from braze.codegen import cuda_rules  # noqa: F401  (the CUDA op rules, filled at import, not on a first call)
from braze.codegen.cuda import inner_outer_pairs
from braze.codegen.cuda_inner_outer import column_tasks_after_rows
from braze.codegen.cuda_plan import plan_lanes, schedule_kind, task_schedule
from braze.codegen.cuda_variance import one_pass_task
from braze.codegen.source_text import CudaSourceText
from braze.compile import cuda_driver
from braze.compile.compiled_kernel import CompiledKernel, host_params
from braze.compile.compiled_kernel import compile_ahead as start_compile
from braze.compile.cuda_kernel import CudaCompiledKernel, default_params
from braze.dtypes import DType
from braze.errors import InputError, UnsupportedError
from braze.host.shapes import infer_layout
from braze.ir.fusion import AliasKind, FusionGraph
from braze.ir.scalar import Scalar, as_scalar
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.kir.params import KernelParams
from braze.lower.fusion_kernel import lower
from braze.lower.values import NeedsCut
from braze.passes.fold_rows import fold_row_producers
from braze.passes.fuse_tasks import (
    Decision,
    forward_stores,
    fuse_sibling_loops,
    fuse_tasks,
    grouped_by_range,
    loop_ranges,
    merged_task,
    remembered_walks,
    writes_apart,
)
from braze.passes.one_hot import gather_one_hot_sums
from braze.passes.output_cache import cache_rows_in_outputs
from braze.passes.simplify import reuse_reductions, simplify
from braze.passes.split_loops import split_loops
from braze.record import note_entry, note_segments
from braze.runtime import reference
from braze.runtime.arrays import to_kind
from braze.runtime.backends.cpu import KernelExecutor, KernelLauncher
from braze.runtime.backends.cuda import CudaDevice, CudaExecutor
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.inputs import BoundInputs, TensorSpec, bind_inputs

if TYPE_CHECKING:
    from braze.runtime.backends.cuda_loop_kernels import CudaKernelLauncher

Backend = Callable[[FusionGraph, BoundInputs], list[np.ndarray]]
DEFAULT_BACKEND = "llvm"
CACHE_ENTRIES = 64  # signatures kept per fusion
_dumped: weakref.WeakSet = weakref.WeakSet()  # fusions whose IR was dumped
# (device, Kernel IR text, params) -> compiled kernel, shared by all fusions and loop kernels while any
# runtime, launcher or prepared call holds it: it goes with the last of them.
_kernels: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_kernels_lock = threading.Lock()  # guards the table; each kernel compiles and loads under its own lock


# A kernel indexes in int32 when every index of a call stays below this: a margin under 2**31, because
# loop counters step past their end (by up to a grid's stride of rows on a GPU) before the exit test.
INT32_INDEX_LIMIT = 2**31 - 2**24


def reach(array) -> int:
    """The farthest element of `array` from its first, as an element offset: the sum over dimensions
    of (extent - 1) * |stride|. A broadcast or a strided view of a big buffer reaches past its size."""
    if array.size == 0:
        return 0
    return sum((n - 1) * abs(s) for n, s in zip(array.shape, array.strides)) // array.itemsize


def _tensor_sizes(fusion: FusionGraph) -> tuple[Scalar, ...]:
    """The element counts (distinct, symbolic) of every tensor of the fusion: inputs, intermediates
    and outputs, with the padding of an allocation domain where there is one. Kept on the fusion."""
    cached = fusion.__dict__.get("_tensor_sizes")
    if cached is not None and cached[0] == len(fusion.exprs):
        return cached[1]
    tensors = {id(tv): tv for e in fusion.exprs for tv in (*e.inputs, *e.outputs)}
    tensors.update({id(tv): tv for tv in fusion.inputs})
    sizes: dict[Scalar, None] = {}
    for tv in tensors.values():
        if tv.scalar is not None:
            continue
        numel = as_scalar(1)
        for extent in tv.shape:
            numel = numel * extent
        sizes[numel] = None
        if not tv.has_default_allocation:
            try:
                sizes[infer_layout(tv).numel] = None
            except UnsupportedError:  # never allocated as such: its logical size bounds its indices
                pass
    found = tuple(size for size in sizes if not (size.is_const and size.value < INT32_INDEX_LIMIT))
    fusion.__dict__["_tensor_sizes"] = (len(fusion.exprs), found)
    return found


def index_type(fusion: FusionGraph, bound: BoundInputs) -> DType:
    """int32 when every index of the kernel fits in it for these inputs: every tensor's size (inputs,
    intermediates, outputs; braze allocates the latter dense) and every input's reach; else int64.
    A new shape past the limit is another signature, so it gets the int64 kernel."""
    for tv, array in zip(fusion.inputs, bound.arrays):
        if tv.scalar is None and (array.size >= INT32_INDEX_LIMIT or reach(array) >= INT32_INDEX_LIMIT):
            return dt.int64
    for size in _tensor_sizes(fusion):
        try:
            if size.evaluate(bound.bindings) >= INT32_INDEX_LIMIT:
                return dt.int64
        except ZeroDivisionError:  # the shape function reports it, naming the extents
            continue
    return dt.int32


def signature(fusion: FusionGraph, bound: BoundInputs) -> tuple:
    """The part of the inputs that changes the generated code: which strides are 1, the index type,
    which inputs are dense (see `_dense`), and whether a reduction over several axes apart takes a
    task a channel (`channel_rows_fit`).

    Ranks and dtypes are fixed by the definition (the inputs were checked against it); extents
    stay symbolic, so new shapes reuse the compiled kernel while they keep the index type.
    """
    units, dense = [], []
    for tv, array in zip(fusion.inputs, bound.arrays):
        if tv.scalar is None:
            broadcast = TensorSpec.of(tv).broadcast
            units.append(tuple(s == array.itemsize and not b for s, b in zip(array.strides, broadcast)))
            dense.append(_dense(array.shape, array.strides, array.itemsize, broadcast))
    return tuple(units), index_type(fusion, bound).name, tuple(dense), channel_rows_fit(fusion, bound)


def channel_rows_fit(fusion: FusionGraph, bound: BoundInputs) -> bool | None:
    """Whether every reduction over several axes apart (batch_norm's) holds at most
    schedule.CHANNEL_ROW_LIMIT elements a row for these inputs; None where the fusion has none."""
    sizes = schedule.channel_row_sizes(fusion)
    if not sizes:
        return None
    try:
        return all(size.evaluate(bound.bindings) <= schedule.CHANNEL_ROW_LIMIT for size in sizes)
    except ZeroDivisionError:  # the shape function reports it, naming the extents
        return True


def _dense(shape, strides, itemsize: int, broadcast) -> bool:
    """Whether the elements lie in row-major order with no gaps (axes of extent 1 aside): element
    (i0, i1, ...) then sits at its flat index, so a reshape of the input reads it by that index
    with no division (lower/values.py)."""
    expected = itemsize
    for n, stride, b in reversed(list(zip(shape, strides, broadcast))):
        if n == 1:
            continue
        if b or stride != expected:
            return False
        expected *= n
    return True


def _dense_inputs(fusion: FusionGraph, key: tuple) -> frozenset[int]:
    """The inputs (ids) the signature says are dense; none for a key without that part."""
    tensors = [tv for tv in fusion.inputs if tv.scalar is None]
    return frozenset(id(tv) for tv, dense in zip(tensors, key[2] if len(key) > 2 else ()) if dense)


def _input_strides(fusion: FusionGraph, key: tuple, plan: schedule.Plan) -> dict[int, tuple[int | None, ...]]:
    """The strides the signature fixes at 1, for the inputs the kernel reads: an input only viewed on
    the host keeps every stride a parameter, so its layout leaves the Kernel IR (and the runtime,
    see FusionCache) unchanged."""
    read = schedule.kernel_tensors(plan.writes)
    tensors = [tv for tv in fusion.inputs if tv.scalar is None]
    return {id(tv): tuple(1 if unit else None for unit in units) for tv, units in zip(tensors, key[0])
            if id(tv) in read}


def _unit_axes(fusion: FusionGraph, key: tuple) -> dict[int, int | None]:
    """The axis each input is contiguous along at this signature (by id): its last axis when that has
    unit stride, else the last that has (a transposed view), else None. The transpose scheduler reads
    it (schedule/transpose.py)."""
    tensors = [tv for tv in fusion.inputs if tv.scalar is None]
    found = {}
    for tv, units in zip(tensors, key[0]):
        unit = [axis for axis, is_unit in enumerate(units) if is_unit]
        found[id(tv)] = (tv.ndim - 1 if units[-1] else unit[-1]) if unit else None
    return found


def plan_kernel(fusion: FusionGraph, key: tuple, views_on_host: bool = True, gpu: bool = False,
                cpu: bool | None = None) -> tuple[schedule.Plan, k.Kernel, KernelParams]:
    """Plans and lowers `fusion` for one signature, cutting where the lowering asks to: scheduled
    for a GPU with `gpu`; `cpu` (by default: where views are made on the host, as the CPU backend
    does, and not for a GPU) picks the CPU's schedules."""
    cuts: set[int] = set()
    cpu = views_on_host and not gpu if cpu is None else cpu
    while True:
        plan = schedule.plan(fusion, cuts, views_on_host, gpu, cpu, _unit_axes(fusion, key), _dense_inputs(fusion, key),
                             channel_rows=len(key) > 3 and key[3] is True)
        try:
            kernel, params = lower(fusion, plan.writes, plan.scheduled, _input_strides(fusion, key, plan),
                                   getattr(fusion, "name", "fusion"), dt.as_dtype(key[1]), _dense_inputs(fusion, key),
                                   cpu)
            kernel = simplify(kernel)
            break
        except NeedsCut as cut:
            cuts.add(id(cut.tv))
    if not config.disabled("fold_rows"):
        kernel = fold_row_producers(kernel, _written_in_place(fusion, plan, params) if cpu else frozenset())
    if gpu:
        kernel = _merged_row_tasks(kernel)
    kernel = split_loops(kernel)  # after the merges: loops over one range split once, together
    if config.dumping("scheduler_params"):
        config.dump("scheduler_params", plan.text())
    if config.dumping("segments"):
        folds = [f"{producer} folded into {consumer} (passes/fold_rows.py)"
                 for producer, consumer in kernel.meta.get("fold_rows", ())]
        pairs = inner_outer_pairs(kernel) if gpu else []
        carried = [f"{row} carries {column}: inner_outer (each block adds its rows to partial column results; "
                   "the column task folds them in block order)" for row, column in pairs]
        config.dump("segments", "\n".join([f"{tv.name}: {h}" for tv, h in zip(plan.writes, plan.heuristics)] + folds
                                          + carried))
    note_segments([tv.name for tv in plan.writes])
    return plan, kernel, params


def _written_in_place(fusion: FusionGraph, plan: schedule.Plan, params: KernelParams) -> frozenset[str]:
    """The arrays the CPU kernel may write straight into an input (schedule.in_place_outputs)."""
    return frozenset(params.writes[tv_id].name for tv_id in schedule.in_place_outputs(fusion, plan))


def forget_compiled_kernels() -> None:
    """Drops the kernels held in memory, as a new process starts: the next miss of any fusion
    loads its kernel from the disk cache (or compiles it). For benchmarks of the first call."""
    _kernels.clear()


def shared_kernel(key: tuple, make: Callable[[], object]):
    """The compiled kernel filed under `key`, made by `make()` the first time, compiled. Threads
    racing on a first call get one and the same kernel, compiled once."""
    return _filed_kernel(key, make).compile()


def _filed_kernel(key: tuple, make: Callable[[], object]):
    """The kernel filed under `key`, made by `make()` the first time; compiled or not yet."""
    with _kernels_lock:
        compiled = _kernels.get(key)
        if compiled is None:
            compiled = _kernels[key] = make()
    return compiled


def code_key(kernel: k.Kernel) -> str:
    """What compiled code depends on: the Kernel IR but for its name. Fusions alike but for their
    names (a model's layers, each a region of its own) then share one compiled kernel, which keeps
    the first one's name (in dumps and profiles) and code."""
    tasks = tuple(replace(task, name=task.name.replace(kernel.name, "k")) for task in kernel.tasks)
    return kernel_text(replace(kernel, name="k", tasks=tasks))


def cuda_code_key(kernel: k.Kernel, arch: str) -> tuple:
    """What a fusion's CUDA code depends on. The kernel's text does not say which features
    (BRAZE_DISABLE) were off when the code was written (the inner-outer schedule's, narrow_math):
    the key does, so runs with and without one compare in one process."""
    return "cuda", arch, code_key(kernel), tuple(sorted(config.current.disable))


def cpu_kernel(kernel: k.Kernel) -> CompiledKernel:
    """The compiled CPU code of `kernel`, shared by every fusion and loop kernel with the same Kernel
    IR (the task bounds live there, not in the code) and the same compile params: a kernel first
    compiled without the fast-math knob is not reused with it."""
    return _cpu_kernel(kernel).compile()


def _cpu_kernel(kernel: k.Kernel) -> CompiledKernel:
    params = host_params()
    return _filed_kernel((code_key(kernel), params), lambda: CompiledKernel(kernel, params))


def _cuda_kernel(kernel: k.Kernel, device_index: int) -> CudaCompiledKernel:
    """A fusion's CUDA kernel for GPU `device_index`, shared by fusions alike (`cuda_code_key`); compiled
    or not yet."""
    device = cuda_driver.device(device_index)
    return _filed_kernel(cuda_code_key(kernel, device.arch),
                         lambda: CudaCompiledKernel(kernel, default_params(device), restrict=True))


@dataclass(frozen=True)
class Lowered:
    """A fusion planned and lowered for one signature, before anything is compiled."""

    plan: schedule.Plan
    kernel: k.Kernel
    params: KernelParams
    in_place: frozenset[int]  # reuse_buffer outputs written straight into their input (CPU only)

    @property
    def reuse_key(self) -> tuple:
        """Two signatures lowered to the same key run the same runtime: the Kernel IR holds the
        heuristics' every decision (loop order, cuts, index type, the strides fixed at 1)."""
        return kernel_text(self.kernel), self.in_place, tuple(id(tv) for tv in self.plan.writes)


def lower_fusion(fusion: FusionGraph, key: tuple, device_index: int | None = None) -> Lowered:
    """Plans and lowers `fusion` for one signature, for the CPU or (with `device_index`) a GPU."""
    if device_index is not None:
        plan, kernel, params = plan_kernel(fusion, key, views_on_host=False, gpu=True)
        return Lowered(plan, kernel, params, frozenset())
    plan, kernel, params = plan_kernel(fusion, key, cpu=True)
    # A sum of where(r == t, v(r), 0) over a row reads its one term on the CPU too (a cross-entropy's
    # picked log-probability: one element a row, not the row).
    kernel = cache_rows_in_outputs(gather_one_hot_sums(kernel))
    return Lowered(plan, kernel, params, schedule.in_place_outputs(fusion, plan))


def compile_fusion(fusion: FusionGraph, key: tuple, lowered: Lowered | None = None) -> FusionRuntime:
    """The CPU runtime of `fusion` for one signature (`lowered`, when the caller lowered it already)."""
    lowered = lowered or lower_fusion(fusion, key)
    compiled = cpu_kernel(lowered.kernel)
    return FusionRuntime(fusion, KernelExecutor(compiled), lowered.plan.writes, lowered.params, lowered.in_place)


def compile_fusion_cuda(fusion: FusionGraph, key: tuple, device_index: int, lowered: Lowered | None = None
                        ) -> FusionRuntime:
    """The runtime of `fusion` on GPU `device_index` for one signature."""
    device = cuda_driver.device(device_index)
    lowered = lowered or lower_fusion(fusion, key, device_index)
    compiled = _cuda_kernel(lowered.kernel, device_index).compile()
    return FusionRuntime(fusion, CudaExecutor(compiled, device), lowered.plan.writes, lowered.params,
                         device=CudaDevice())


def _merged_row_tasks(kernel: k.Kernel) -> k.Kernel:
    """On a GPU, adjacent tasks over the same range run as one launch where the merged task keeps
    each thread on the elements it had: elementwise tasks with no loop (one element a thread: the
    Adam update's three outputs, the later reading what the earlier wrote at its own index), and
    row or column tasks that share no written array (var and mean of the same rows, the weight and
    bias gradients' column sums). Their loops over the same range then become one pass. Tasks over
    one range are first brought together where nothing between them is in the way."""
    def elementwise(task: k.Task) -> bool:
        return not any(isinstance(s, (k.For, k.While, k.If)) for s in task.body) and schedule_kind(task) == "rows"

    def serial(task: k.Task) -> bool:  # loops no lanes can share (a scan's running value): a thread a row
        return any(isinstance(s, k.For) for s in task.body) and not plan_lanes(task).loops

    def same_kind(a: k.Task, b: k.Task) -> bool:
        kind = schedule_kind(a)
        return (kind == schedule_kind(b) in ("rows", "columns") and (kind == "rows" or _stays_splittable(a, b))
                and serial(a) == serial(b))  # a softmax merged with a scan would lose its lanes

    with remembered_walks():  # the same loops are asked about for every pair of tasks tried
        kernel = grouped_by_range(kernel, lambda task: (schedule_kind(task), loop_ranges(task)))
        kernel = _merged_full_reductions(kernel)
        kernel, _ = fuse_tasks(kernel, fits=lambda a, b: elementwise(a) and elementwise(b))
        kernel, _ = fuse_tasks(kernel, raw=False, fits=same_kind)
        kernel = replace(kernel, tasks=tuple(forward_stores(t) if elementwise(t)
                                             else reuse_reductions(fuse_sibling_loops(t)) for t in kernel.tasks))
    return column_tasks_after_rows(kernel)  # where a row task can carry them (cuda_inner_outer)


def _stays_splittable(a: k.Task, b: k.Task) -> bool:
    """Whether column tasks `a` and `b` merged (their loops made one where they walk the rows alike:
    fuse_sibling_loops) can still be split across blocks where either could. A merged task that
    cannot runs its columns on a few blocks, each walking every row: column sums over 768 columns
    of 8192 rows (a model's weight gradients) would run on 24 blocks."""
    return _splittable(fuse_sibling_loops(merged_task(a, b))) or not (_splittable(a) or _splittable(b))


def _merged_full_reductions(kernel: k.Kernel) -> k.Kernel:
    """Adjacent full reductions (one task each, "flat") as one task where they walk their nest as one
    pass (_one_flat_pass): a sum and a sum of squares of one tensor then read it once, in one launch,
    where each read it in a launch of its own. fuse_tasks leaves them apart: each is a serial task
    (its loop spans the grid), which that pass never merges."""
    tasks: list[k.Task] = []
    for task in kernel.tasks:
        merged = _one_flat_pass(tasks[-1], task) if tasks else None
        if merged is not None:
            tasks[-1] = merged
        else:
            tasks.append(task)
    return replace(kernel, tasks=tuple(tasks))


def _one_flat_pass(a: k.Task, b: k.Task) -> k.Task | None:
    """Full reductions `a` then `b` as one task walking one nest in one loop (fuse_sibling_loops), a
    full reduction still, where neither touches an array the other writes; else None."""
    if not (schedule_kind(a) == schedule_kind(b) == "flat" and (a.begin, a.end) == (b.begin, b.end)):
        return None
    if not writes_apart(a, b):
        return None
    merged = fuse_sibling_loops(merged_task(a, b))
    one_loop = sum(isinstance(s, k.For) for s in merged.body) == 1
    return merged if one_loop and schedule_kind(merged) == "flat" else None


def _splittable(task: k.Task) -> bool:
    """Whether a task's schedule may split its loops across blocks as written, or with its variances
    in one pass (cuda_variance); kept on the task, which is asked once for each neighbour it is tried with."""
    return k.kept(task, "_gpu_splittable", lambda task: any(
        task_schedule(t).splittable for t in (task, one_pass_task(task)) if t is not None))


def cuda_source(fusion: FusionGraph, inputs: Sequence[object]) -> CudaSourceText:
    """The CUDA C++ braze generates for `fusion` on inputs like `inputs` (host arrays will do): a
    `str` of the kernels, with the generator's other results as attributes (`.text`: with the prelude)."""
    from braze.codegen import cuda as cuda_codegen

    bound = bind_inputs(fusion, inputs)
    _, kernel, _ = plan_kernel(fusion, signature(fusion, bound), views_on_host=False, gpu=True)
    return CudaSourceText(cuda_codegen.generate(kernel, restrict=True))


class FusionCache:
    """Input signature -> FusionRuntime for one fusion, least recently used dropped first.

    A new signature that lowers to the Kernel IR of a runtime already held (its strides differ only
    where the kernel does not read, say) shares that runtime: nothing is compiled or built again.
    `BRAZE_DISABLE=kernel_reuse` builds a runtime per signature.
    """

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple, FusionRuntime] = OrderedDict()
        self.by_kernel: dict[tuple, FusionRuntime] = {}  # (device, knobs, Lowered.reuse_key) -> runtime
        # (signature, device, knobs) -> what `compile_ahead` lowered, and its kernel (held while it compiles)
        self.ahead: dict[tuple, tuple[Lowered, object]] = {}
        self.lock = threading.RLock()  # a miss builds the runtime once, whichever threads race on it

    def runtime(self, fusion: FusionGraph, bound: BoundInputs) -> FusionRuntime:
        key = signature(fusion, bound)
        # The same signature on another device, or under other knobs (config.scope), is another entry.
        place = (key, bound.device, config.code_knobs())
        with self.lock:
            entry = self.entries.get(place)
            if entry is None:
                entry = self.entries[place] = self._new_runtime(fusion, key, place)
                if len(self.entries) > CACHE_ENTRIES:
                    self.entries.popitem(last=False)
                    held = {id(r) for r in self.entries.values()}
                    self.by_kernel = {k: r for k, r in self.by_kernel.items() if id(r) in held}
            else:
                self.entries.move_to_end(place)
        return entry

    def compile_ahead(self, fusion: FusionGraph, bound: BoundInputs) -> None:
        """Lowers `fusion` for the signature of `bound` and starts compiling its kernel on a worker
        thread (compile/compiled_kernel.py); the first call of that signature takes both."""
        key = signature(fusion, bound)
        place = (key, bound.device, config.code_knobs())
        with self.lock:
            if place in self.entries or place in self.ahead:
                return
            lowered = lower_fusion(fusion, key, bound.device)
            kernel = (_cpu_kernel(lowered.kernel) if bound.device is None
                      else _cuda_kernel(lowered.kernel, bound.device))
            self.ahead[place] = lowered, kernel
        start_compile(kernel)

    def _new_runtime(self, fusion: FusionGraph, key: tuple, place: tuple) -> FusionRuntime:
        _, device, knobs = place
        ahead = self.ahead.pop(place, None)
        lowered = ahead[0] if ahead is not None else lower_fusion(fusion, key, device)
        reuse_key = (device, knobs, lowered.reuse_key)
        runtime = None if config.disabled("kernel_reuse") else self.by_kernel.get(reuse_key)
        if runtime is None:
            note_entry(f"runtime {getattr(fusion, 'name', 'fusion')}")
            runtime = (compile_fusion(fusion, key, lowered) if device is None
                       else compile_fusion_cuda(fusion, key, device, lowered))
            self.by_kernel[reuse_key] = runtime
        return runtime


def _cache_of(fusion: FusionGraph) -> FusionCache:
    # Kept on the fusion, not in a table keyed by it: its runtimes refer to the fusion, so a table
    # would hold every fusion (and its compiled kernels) for the life of the process.
    cache = fusion.__dict__.get("_fusion_cache")
    if cache is None:
        with _kernels_lock:
            cache = fusion.__dict__.get("_fusion_cache")
            if cache is None:
                cache = fusion.__dict__["_fusion_cache"] = FusionCache()
    return cache


def compile_ahead(fusion: FusionGraph, inputs: Sequence[object]) -> None:
    """Plans `fusion` for inputs like `inputs` and starts compiling its kernel on a worker thread, so
    that the kernels of many fusions compile at once; the first `execute` on such inputs takes the
    plan and waits for the kernel only if it is not done. `inputs` need only describe the arrays:
    shapes, strides, dtypes and device (runtime/device_arrays.py's DeviceView with no memory will do)."""
    fusion.freeze("a compile ahead of its first execute")
    _cache_of(fusion).compile_ahead(fusion, bind_inputs(fusion, inputs))


def _run_compiled(fusion: FusionGraph, bound: BoundInputs) -> list[np.ndarray]:
    return _cache_of(fusion).runtime(fusion, bound).run(bound)


def _run_cuda(fusion: FusionGraph, bound: BoundInputs) -> list:
    if bound.device is None:
        raise UnsupportedError("backend 'cuda': expected GPU arrays (torch, CuPy, DeviceArray), got host arrays; "
                               "pass device='cuda' to copy host arrays in and out")
    return _run_compiled(fusion, bound)


BACKENDS: dict[str, Backend] = {"reference": reference.run, "llvm": _run_compiled, "cuda": _run_cuda}


def _device_index(device: str | None) -> int | None:
    """None for the host, else the GPU index of "cuda" / "cuda:N"."""
    if device in (None, "cpu"):
        return None
    if isinstance(device, str) and (device == "cuda" or device.startswith("cuda:") and device[5:].isdigit()):
        return int(device[5:] or 0)
    raise InputError(f"device: expected None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _pick_backend(backend: str | None, bound: BoundInputs) -> Backend:
    name = backend or ("cuda" if bound.device is not None else DEFAULT_BACKEND)
    if name not in BACKENDS:
        raise UnsupportedError(f"backend: expected one of {sorted(BACKENDS)}, got {name!r}")
    if bound.device is not None and name != "cuda":
        raise InputError(f"backend {name!r} runs on the host: expected host arrays, got arrays on cuda:{bound.device}")
    return BACKENDS[name]


def execute(fusion: FusionGraph, inputs: Sequence[object], backend: str | None = None,
            device: str | None = None, stream: object = None) -> list:
    """Runs `fusion` on `inputs`; returns the non-hidden outputs as the inputs' kind of array.

    GPU inputs (torch, CuPy, DeviceArray) run on their GPU. `device="cuda"` (or "cuda:N") runs
    host inputs on a GPU: they are copied in, and the outputs copied back.
    """
    if backend is None and device is None and stream is None:
        fast = fusion.__dict__.get("_fast_calls")
        outputs = fast.run(inputs) if fast is not None else None
        if outputs is not None:
            return outputs
    fusion.freeze("its first execute")  # built without a `with` block: its runs are made from it as it is now
    if config.dumping("fusion_ir") and fusion not in _dumped:
        _dumped.add(fusion)
        config.dump("fusion_ir", str(fusion))
    target = _device_index(device)
    bound = bind_inputs(fusion, inputs)
    if stream is not None:
        bound.stream = stream_handle(stream)
    with _made_current(bound.device if bound.device is not None else target):
        return _execute_bound(fusion, bound, inputs, backend, target, stream)


def _made_current(device: int | None) -> AbstractContextManager:
    """GPU `device`'s context current for a call's host program (its copies, allocations and
    launches on stream 0 act in the current context), the user's own current again after."""
    return nullcontext() if device is None else cuda_driver.device(device).current()


def _execute_bound(fusion: FusionGraph, bound: BoundInputs, inputs: Sequence[object], backend: str | None,
                   target: int | None, stream: object) -> list:
    if target is not None and bound.device is None:
        return _execute_copied(fusion, bound, target)
    if target is not None and bound.device != target:
        raise InputError(f"device: expected inputs on cuda:{target}, got inputs on cuda:{bound.device}")
    run = _pick_backend(backend, bound)
    if stream is None and (run is _run_cuda and bound.device is not None or run is _run_compiled
                           and bound.kind == "numpy"):
        results = _run_and_prepare(fusion, bound, inputs)
    else:
        results = run(fusion, bound)
    return [to_kind(r, bound.kind) for r, out in zip(results, fusion.outputs) if not out.hidden]


def _run_and_prepare(fusion: FusionGraph, bound: BoundInputs, inputs: Sequence[object]) -> list:
    """Runs the inputs through the host program and keeps the cached call it prepares, which later
    calls with inputs of the same description take (`execute`'s first lines)."""
    from braze.runtime.fast_call import FastCalls

    runtime = _cache_of(fusion).runtime(fusion, bound)
    if config.disabled("fast_call") or fusion.sizing_scalars:
        # A prepared call keys on the inputs' types, not on the values that size these shapes.
        return runtime.run(bound)
    fast = fusion.__dict__.get("_fast_calls")
    if fast is None:
        scalars = frozenset(n for n, tv in enumerate(fusion.inputs) if tv.scalar is not None)
        fast = fusion.__dict__["_fast_calls"] = FastCalls(len(fusion.inputs), scalars)
    elif fast.known(inputs):  # prepared but not taken (profiling, a busy call), or declined
        return runtime.run(bound)
    results, prepared = runtime.run_and_prepare(bound, inputs)
    fast.learn(inputs, prepared)
    return results


def stream_handle(stream: object) -> int:
    """The CUstream of a torch or CuPy stream, or of an int handle."""
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if isinstance(stream, int):
        return stream
    raise InputError(f"stream: expected a torch or CuPy stream or a CUstream handle, got {type(stream).__name__}")


def _execute_copied(fusion: FusionGraph, bound: BoundInputs, device: int) -> list:
    """Runs host inputs on GPU `device`: copy in, run, copy the outputs back as NumPy arrays."""
    from braze.runtime.device_arrays import DeviceArray, as_device_view

    moved = [a if tv.scalar is not None else as_device_view(DeviceArray.from_numpy(a, device), f"input {i}")
             for i, (tv, a) in enumerate(zip(fusion.inputs, bound.arrays))]
    on_device = BoundInputs(moved, bound.bindings, "cuda", device, bound.stream)
    results = _run_compiled(fusion, on_device)
    host = [r.owner.numpy() for r, out in zip(results, fusion.outputs) if not out.hidden]
    for tv, original, copy in zip(fusion.inputs, bound.arrays, moved):  # in-place outputs land in the inputs
        if tv.scalar is None and any(o.aliased_input is tv and o.alias is AliasKind.REUSE_BUFFER
                                     for o in fusion.outputs):
            np.copyto(original, copy.owner.numpy())
    return [to_kind(h, bound.kind) for h in host]


def _fused(kernel: k.Kernel, fuse: bool) -> tuple[k.Kernel, list[Decision]]:
    """Task fusion over a loop kernel; `BRAZE_DUMP=fusion_decisions` writes each pair's decision."""
    fused, decisions = fuse_tasks(kernel, enabled=fuse)
    if config.dumping("fusion_decisions"):
        config.dump("fusion_decisions", "\n".join(
            f"{d.first} + {d.second}: {'fused' if d.fused else 'kept apart'} ({d.reason}; {d.detail})"
            for d in decisions) or f"{kernel.name}: one loop, nothing to fuse")
    return fused, decisions


@dataclass
class KernelEntry:
    """One compiled signature of a `@bz.kernel`: its launcher, what task fusion decided, and which
    array arguments it writes (a call refuses read-only arrays there)."""

    launcher: KernelLauncher | CudaKernelLauncher
    decisions: list[Decision]
    written: tuple[int, ...]  # positions among the array arguments


def loop_kernel_entry(kernel: k.Kernel, arrays: Sequence[k.ArrayParam], scalars: Sequence[k.ScalarParam],
                      fuse: bool = True, device_index: int | None = None, restrict: bool = False) -> KernelEntry:
    """A `@bz.kernel` signature's Kernel IR and argument binding (arrays and scalars in parameter
    order) made runnable, as a fusion's signature is: task fusion, the shared compiled kernel, and
    its launcher on the host or (with `device_index`) that GPU. `restrict`: no two arrays share memory."""
    names = _written_arrays(kernel)
    written = tuple(i for i, p in enumerate(arrays) if p.name in names)
    if device_index is None:
        compiled, decisions = compile_loop_kernel(kernel, fuse=fuse)
        return KernelEntry(KernelLauncher(compiled, arrays, scalars), decisions, written)
    from braze.runtime.backends.cuda_loop_kernels import CudaKernelLauncher

    compiled, decisions = compile_loop_kernel_cuda(kernel, device_index, fuse=fuse, restrict=restrict)
    return KernelEntry(CudaKernelLauncher(compiled, cuda_driver.device(device_index), arrays, scalars), decisions,
                       written)


def _written_arrays(kernel: k.Kernel) -> set[str]:
    """The array parameters some statement of the kernel stores into."""
    written: set[str] = set()

    def visit(statements: Sequence[k.Stmt]) -> None:
        for s in statements:
            if isinstance(s, (k.Store, k.AtomicRMW)):
                written.add(s.param.name)
            for part in ("body", "then", "orelse"):
                visit(getattr(s, part, ()))

    for task in kernel.tasks:
        visit(task.body)
    return written


def compile_loop_kernel(kernel: k.Kernel, fuse: bool = True) -> tuple[CompiledKernel, list[Decision]]:
    """Runs the Kernel IR passes (task fusion) on a `@bz.kernel` and compiles it; kernels with the same
    Kernel IR after the passes share one compiled kernel."""
    fused, decisions = _fused(kernel, fuse)
    return cpu_kernel(fused), decisions


def compile_loop_kernel_cuda(kernel: k.Kernel, device_index: int, fuse: bool = True, restrict: bool = False):
    """Task fusion, then CUDA for one GPU: (a compiled CudaLoopKernel, the fusion decisions). `restrict`:
    no two array arguments share memory. Kernels with the same Kernel IR after the passes share one."""
    from braze.compile.cuda_kernel import CudaLoopKernel

    device = cuda_driver.device(device_index)
    fused, decisions = _fused(kernel, fuse)
    compiled = shared_kernel(("cuda-loop", device.arch, restrict, code_key(fused)),
                             lambda: CudaLoopKernel(fused, default_params(device), restrict=restrict))
    return compiled, decisions


def loop_kernel_cuda_source(kernel: k.Kernel, fuse: bool = True, restrict: bool = False) -> CudaSourceText:
    """The CUDA C++ of a loop kernel after task fusion, as a `str` (`.text`: with the prelude); needs no GPU."""
    from braze.codegen import cuda_loops

    fused, _ = fuse_tasks(kernel, enabled=fuse)
    return CudaSourceText(cuda_loops.generate(fused, restrict=restrict))
