"""Every op of the op table and every public name of `bz.ops` is checked by one of the op test
modules: an op added without a test (or an oracle entry) fails here."""

from __future__ import annotations

import test_activations
import test_composites
import test_creation
import test_elementwise
import test_math_functions
import test_reductions
import test_scans
import test_view_composites
import test_views

import braze as bz
from braze.ops.table import OPS

TABLE_OPS_COVERED = (test_elementwise.OPS_COVERED | test_reductions.OPS_COVERED | test_views.OPS_COVERED
                     | test_creation.OPS_COVERED | test_scans.OPS_COVERED)
# Public functions that are no table entry of their own: each is tested where named.
HELPERS_COVERED = {
    "gelu": "test_elementwise (table entry, plus the tanh form)",
    "std": "test_reductions (var + sqrt)", "var_mean": "test_reductions (var and mean)",
    "transpose": "test_views", "unsqueeze": "test_views", "slice": "test_views (the 'slice' entry)",
    "broadcast_in_dim": "test_views", "zeros": "test_creation", "ones": "test_creation",
    "OPS": "this module", "OpDef": "this module",
    "fmod": "test_tensor_methods (against torch)", "select": "test_tensor_methods (against torch)",
    "diff": "test_tensor_methods (against torch)",
    "uniform": "test_creation (rand scaled)", "normal": "test_creation (randn scaled)",
}


def test_every_table_op_is_tested():
    assert set(OPS) == TABLE_OPS_COVERED


def test_every_public_op_is_tested():
    public = set(bz.ops.__all__)
    covered = (TABLE_OPS_COVERED | test_composites.COMPOSITES_COVERED | test_view_composites.COMPOSITES_COVERED
               | test_activations.COMPOSITES_COVERED | test_math_functions.MATH_FUNCTIONS_COVERED
               | set(HELPERS_COVERED))
    assert public == covered, f"untested: {sorted(public - covered)}, stale: {sorted(covered - public)}"


def test_table_entries_are_op_defs():
    for name, op in OPS.items():
        assert isinstance(op, bz.ops.OpDef) and op.name == name
        assert callable(op.shape) and callable(op.dtype) and callable(op.reference)
