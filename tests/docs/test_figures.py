"""Measured figures in the docs come from `bench/figures.py`, with their command beside them."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# bench/ is a folder of scripts, not a package: load the one we test from its file.
_spec = importlib.util.spec_from_file_location("bench_figures", ROOT / "bench" / "figures.py")
assert _spec is not None and _spec.loader is not None
figures = importlib.util.module_from_spec(_spec)
sys.modules["bench_figures"] = figures  # its dataclass looks its module up there
_spec.loader.exec_module(figures)

# A duration or a ratio typed by hand: `32.8 ms`, `1.08x`, `376 s`.
_MEASURED = re.compile(r"\b\d+(?:\.\d+)?(?: ?ms\b|x\b| s\b)")


def test_figure_blocks_are_well_formed() -> None:
    found = figures.figures()
    assert len([f for f in found if f.file.name == "benchmarks.md"]) >= 4
    assert [problem for figure in found for problem in figures.problems(figure)] == []


def test_the_benchmarks_page_has_no_figure_typed_by_hand() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    outside = re.sub(r"<!-- figure: .*?<!-- /figure -->", "", text, flags=re.S)
    assert _MEASURED.findall(outside) == [], "put measured figures in a figure block (docs/development.md)"


def test_a_block_without_its_output_is_a_problem(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- figure: python bench/bench_startup.py -->\n<!-- /figure -->\n", encoding="utf-8")
    (found,) = figures.figures([page])
    assert found.command == "python bench/bench_startup.py"
    assert figures.problems(found) != []
