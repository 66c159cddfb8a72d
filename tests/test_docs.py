"""Every ```python block of README.md and docs/*.md runs as written, in a fresh process, and prints something.

A block preceded by `<!-- gpu -->` needs an NVIDIA GPU: it runs in the GPU suite (`-m cuda`).
`<!-- requires: torch -->` (any importable module names, comma-separated) skips a block where one is
missing. Each block runs with its own empty BRAZE_CACHE_DIR, in a temporary folder.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from braze.compile import cuda_driver

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*(gpu|requires:\s*[\w.,\s]+?)\s*-->$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    gpu: bool
    requires: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, each with the markers on the lines right above it."""
    lines = path.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].strip() != "```python":
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        markers, above = [], index - 1
        while above >= 0 and MARKER.match(lines[above].strip()):
            markers.append(MARKER.match(lines[above].strip()).group(1))
            above -= 1
        requires = tuple(name.strip() for m in markers if m.startswith("requires:")
                         for name in m.split(":", 1)[1].split(",") if name.strip())
        blocks.append(Block(path, index + 1, "\n".join(lines[index + 1:end]) + "\n", "gpu" in markers, requires))
        index = end + 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in python_blocks(path)]


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "BRAZE_CACHE_DIR": str(folder / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("BRAZE_DUMP", None)
    script = folder / "block.py"  # a file, as a user runs it: @bz.kernel reads its function's source
    script.write_text(block.code)
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)


def _check(block: Block, tmp_path: Path) -> None:
    missing = [name for name in block.requires if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{block.name} needs {', '.join(missing)}")
    done = run_block(block, tmp_path)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr}"
    assert done.stdout.strip(), f"{block.name} printed nothing"


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.gpu], ids=lambda b: b.name)
def test_a_cpu_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    _check(block, tmp_path)


@pytest.mark.cuda
@pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.gpu], ids=lambda b: b.name)
def test_a_gpu_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    _check(block, tmp_path)


def test_every_document_has_blocks_and_the_quickstart_is_the_example() -> None:
    """The README's quickstart is examples/quickstart.py verbatim (make wheel-check runs that file)."""
    readme = [b for b in BLOCKS if b.path.name == "README.md"]
    assert readme and any(b.path.name == "index.md" for b in BLOCKS)
    assert (ROOT / "examples" / "quickstart.py").read_text() in [b.code for b in readme]


def test_the_block_finder_reads_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nprint(1)\n```\n<!-- gpu -->\n<!-- requires: torch, cupy -->\n"
                    "```python\nprint(2)\n```\n```sh\nls\n```\n")
    first, second = python_blocks(page)
    assert (first.line, first.code, first.gpu, first.requires) == (3, "print(1)\n", False, ())
    assert (second.line, second.code, second.gpu, second.requires) == (8, "print(2)\n", True, ("torch", "cupy"))


def test_docstrings_name_sections_that_exist() -> None:
    """`docs/architecture.md, "Runtime"` in a docstring names a heading of that page."""
    cited = re.compile(r'(docs/[\w.]+\.md), "([^"]+)"')
    found = 0
    for path in [*ROOT.glob("braze/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        for page, section in cited.findall(path.read_text()):
            headings = {line.lstrip("#").strip() for line in (ROOT / page).read_text().splitlines()
                        if line.startswith("#")}
            assert section in headings, f"{path.relative_to(ROOT)} cites {page}, {section!r}: no such heading"
            found += 1
    assert found >= 10


def test_source_names_only_files_of_the_repository() -> None:
    """A path like `braze/runtime/fast_call.py` in a docstring or comment names a file that exists, and
    no text cites a document outside the repository (a design note a reader of it cannot open)."""
    path_like = re.compile(r"(?<![\w/.])((?:braze|tests|docs|benchmarks|examples)/[\w/.-]*\w\.(?:py|md|json|cuh|h))")
    sources = [*ROOT.glob("braze/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("examples/*.py"),
               *ROOT.glob("benchmarks/*.py")]
    missing, outside = [], []
    for path in sources:
        text = path.read_text()
        for name in path_like.findall(text):
            written_by_a_benchmark = path.parts[-2] == "benchmarks" and name.startswith("benchmarks/results/")
            if not (ROOT / name).exists() and not written_by_a_benchmark:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
        if "DESIGN" in text and path != Path(__file__):
            outside.append(str(path.relative_to(ROOT)))
    assert not missing, missing
    assert not outside, f"cite docs/architecture.md instead of a design note: {outside}"
