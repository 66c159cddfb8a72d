"""GPU time of the fused particle steps alone: 100 steps captured in a CUDA graph and replayed (on a GPU,
with torch): `python benchmarks/step_gpu_time.py`."""
import statistics

import numpy as np
import torch

from braze.cli.particles import SIX_LOOPS, TWELVE_LOOPS

for case in (SIX_LOOPS, TWELVE_LOOPS):
    for n in (8192, 65536):
        arrays = [torch.from_numpy(a.copy()).cuda() for a in case.arrays(n)]
        dt = np.float32(1e-3)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(3):
                case.fused(*arrays, dt)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(100):
                case.fused(*arrays, dt)
        samples = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) * 10)  # ms per 100 steps -> us per step
        print(f"{case.name} n={n}: {statistics.median(samples):.2f} us per fused step on the GPU (graph replay)")
