"""Float32 results only a bfloat16 or float16 keeps, computed with the GPU's approximate exp and
division (cuda_rules, "narrow"), against NumPy in float64 over extreme inputs, outputs poisoned first
(tests/narrow_math_cases.py). Every test needs an NVIDIA GPU (`make gpu-test`); without one they are
skipped."""

from __future__ import annotations

import narrow_math_cases
import pytest

from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("out", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", narrow_math_cases.FUNCTIONS)
def test_narrow_results_match_numpy_on_the_gpu(name, out):
    x = narrow_math_cases.inputs()
    with config.scope(enable="poison_outputs"):
        (got,) = narrow_math_cases.fusion(name, out).execute([torch.from_numpy(x).cuda()])
    narrow_math_cases.check(name, out, x, got.float().cpu().numpy())
