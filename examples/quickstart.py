import numpy as np

import braze as bz

# A fusion: bias add then GELU, one kernel, checked against NumPy.
with bz.Fusion() as f:
    x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
    b = f.define_tensor(shape=(-1,), dtype=bz.float32)
    f.add_output(bz.ops.gelu(x + b, approximate="tanh"))

rng = np.random.default_rng(0)
x_np = rng.standard_normal((1024, 512), dtype=np.float32)
b_np = rng.standard_normal(512, dtype=np.float32)
(y,) = f.execute([x_np, b_np])

t = x_np + b_np
expected = 0.5 * t * (1 + np.tanh(np.sqrt(2 / np.pi) * (t + 0.044715 * t**3)))
print(f"gelu(x + b): shape {y.shape}, max error {np.abs(y - expected).max():.1e}")
