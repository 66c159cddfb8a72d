"""The syntax trees of braze's source files, parsed in a process of their own.

CPython 3.11's `ast.parse` keeps its recursion count in state shared by the whole interpreter, so a
parse that runs while another thread also builds a tree (the `traceback` module parses a line to
place its carets) fails with "SystemError: AST constructor recursion depth mismatch". A test worker
runs braze's thread pools and threads of its own; a fresh interpreter that parses and pickles the
trees has no other thread. Unpickling builds the nodes through their constructors, which is safe.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from pathlib import Path

_PARSE_AND_PICKLE = """
import ast, pickle, sys
paths = sys.argv[1:]
sys.stdout.buffer.write(pickle.dumps({p: ast.parse(open(p).read(), p) for p in paths}))
"""


def parse_files(paths: list[Path]) -> dict[Path, ast.Module]:
    """Each path's syntax tree, parsed in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _PARSE_AND_PICKLE, *map(str, paths)],
                          capture_output=True, timeout=120, check=True)
    trees = pickle.loads(done.stdout)
    return {path: trees[str(path)] for path in paths}
