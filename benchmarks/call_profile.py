"""Where one call of a suite fusion spends its time on the GPU: the device time of the whole call
(CUDA events, as benchmarks/suite.py measures it), the sum of its kernels' times (each timed alone),
the host time to enqueue a call, and whether repeated calls take the prepared path (no new
executor entries or prepared calls after the first). A call whose device time is far above its
kernels' sum is waiting on the host.

    python benchmarks/call_profile.py --cases batch_norm,group_norm [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

import braze as bz
from braze import config
from braze.cli.bench.cases import selected
from braze.cli.bench.check import Prepared
from braze.cli.bench.suite import torch_inputs
from braze.cli.bench.timing import device_ms


def profile(case, mode: str, checked: bool) -> str:
    import torch

    p = Prepared(case, mode)
    inputs = torch_inputs(torch, p.inputs)
    call = lambda: p.fusion.execute(list(inputs))  # noqa: E731
    if checked:  # as the suite does: a first call with poisoned outputs, checked against the reference
        with config.scope(enable="poison_outputs"):
            call()
    device = device_ms(call, 20)
    with bz.record(profile=True) as rec:
        call()
    kernels = sum(launch.device_ms for launch in rec.launches)
    torch.cuda.synchronize()
    with bz.record() as steady:
        start = time.perf_counter()
        for _ in range(50):
            call()
        enqueue_us = (time.perf_counter() - start) / 50 * 1e6
    torch.cuda.synchronize()
    return (f"{case.name:<28} call {device:8.3f} ms   kernels {kernels:8.3f} ms ({len(rec.launches)})   "
            f"host {enqueue_us:7.1f} us/call   new entries in 50 calls: {len(steady.entries)} "
            f"compiles: {len(steady.compiles)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="comma list of case names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small, odd shapes")
    parser.add_argument("--checked", action="store_true", help="first call with poisoned outputs, as the suite")
    args = parser.parse_args()
    for case in selected(args.cases):
        print(profile(case, "quick" if args.quick else "gpu", args.checked), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
