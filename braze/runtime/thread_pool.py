"""The CPU runtime's parallel-for: a task range split across the cores.

Task functions are called through ctypes, which releases the GIL during the call, so the
worker threads run the native code truly in parallel.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

from braze.compile.compiled_kernel import worker_count


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=worker_count(), thread_name_prefix="braze-cpu")


# A forked child (a data loader's worker) inherits the pool but none of its threads: a chunk handed
# to it would wait forever. The child makes a pool of its own at its first parallel launch.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.cache_clear)


# Elements of work a chunk needs before handing it to another thread pays: waking a pool thread
# and waiting for its future costs tens of microseconds. On the 2-core machine a 256x512 rms_norm
# took 112 us split in two and 21 us on one thread; at 1M elements splitting still wins (496 us
# against 770).
MIN_CHUNK_WORK = 1 << 19


def parallel_for(fn, begin: int, end: int, args: int, work_per_index: int, min_work: int = MIN_CHUNK_WORK) -> int:
    """Runs fn(lo, hi, args) over [begin, end) in chunks, one per worker, when there is enough work.

    Returns the number of chunks (1 when the range ran on the calling thread).
    """
    total = end - begin
    workers = min(worker_count(), total, max(1, total * work_per_index // min_work))
    if workers <= 1:
        if total > 0:
            fn(begin, end, args)
        return 1
    step = -(-total // workers)
    bounds = [(lo, min(lo + step, end)) for lo in range(begin, end, step)]
    futures = [_pool().submit(fn, lo, hi, args) for lo, hi in bounds[1:]]
    fn(bounds[0][0], bounds[0][1], args)  # the calling thread takes the first chunk
    for future in futures:
        future.result()
    return len(bounds)
