"""`cuda_source()` returns a `str` that prints as code, with the generator's results as attributes."""

from __future__ import annotations

import numpy as np

import braze as bz
from braze import engine


@bz.kernel
def scale(x: bz.Array[bz.float32, 1], a: bz.float32):
    for i in range(x.shape[0]):
        x[i] *= a


def test_a_loop_kernels_source_is_a_str_of_its_code(capsys) -> None:
    source = scale.cuda_source(np.zeros(4, np.float32), 2.0)
    assert isinstance(source, str) and source == source.body
    print(source)
    printed = capsys.readouterr().out
    assert "__global__" in printed and "\\n" not in printed  # real newlines, no repr
    assert source.text.endswith(source.body) and len(source.text) > len(source)
    assert len(source.functions) == 1 and source.functions[0] in source


def test_a_fusions_source_is_a_str_with_its_plans() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(bz.ops.softmax(x, axis=-1))
    source = engine.cuda_source(f, [np.zeros((4, 8), np.float32)])
    assert isinstance(source, str) and "__global__" in source and source.text.endswith(str(source))
    assert len(source.lane_plans) == len(source.warp_functions) == len(source.row_caches) == 1
    # task 0's, then its warp functions
    assert source.functions == (*source.functions[:1], *source.warp_functions, *source.narrow_warp_functions)
