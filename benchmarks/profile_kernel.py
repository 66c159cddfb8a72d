"""Runs one GPU benchmark workload a few times, for a profiler to look at:

    ncu -k regex:fusion -c 1 --section SpeedOfLight python benchmarks/profile_kernel.py softmax
"""

from __future__ import annotations

import sys

import torch
from gpu import workloads

if __name__ == "__main__":
    wanted = sys.argv[1] if len(sys.argv) > 1 else "softmax"
    for name, fusion, inputs, _peer, _nbytes in workloads():
        if name.startswith(wanted):
            for _ in range(3):
                fusion.execute(inputs)
            torch.cuda.synchronize()
            print("ran", name)
