"""`braze.torch`: braze's door for PyTorch models (importing it imports torch; `import braze` does not).

    compiled = torch.compile(model, backend="braze")
    report = braze.torch.explain(model, x)  # the regions and their kernels (str(report))
"""

from braze.frontend.torch import Explanation, Options, backend, explain

__all__ = ["Explanation", "Options", "backend", "explain"]
