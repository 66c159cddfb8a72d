"""Loading another test file as a module, to run its generators somewhere else (the GPU suite runs the
CPU fuzzers' programs): test files are not a package, so they are loaded by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).parent


def load(relative: str) -> ModuleType:
    """The test file at `relative` (to tests/) as a module of its own name, loaded once."""
    name = "braze_tests_" + relative.removesuffix(".py").replace("/", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / relative)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
