"""The `torch.compile` backend: PyTorch models, forward and backward, through braze's fusions.

    model = torch.compile(model, backend="braze")             # registered as an entry point
    report = braze.torch.explain(model, x)                    # the regions and their kernels (str(report))

Importing this package imports torch; `import braze` does not.
"""

from braze.frontend.torch.backend import DECOMPOSITIONS, GraphReport, backend, make_backend
from braze.frontend.torch.explain import Explanation, explain
from braze.frontend.torch.options import Options, parse_options
from braze.frontend.torch.region import BrazeRegion, RegionReport

__all__ = ["DECOMPOSITIONS", "BrazeRegion", "Explanation", "GraphReport", "Options", "RegionReport", "backend",
           "explain", "make_backend", "parse_options"]
