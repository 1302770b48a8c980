"""The cards' five datasets as smoke-test prompts: from local files, from the cache, through `datasets`.

Offline: every file is written by the test. The `datasets` library is not a dependency of the
default suite; where its path is tested, a stand-in module takes its place in `sys.modules` and
records how it was called (the Hub id, config and split z-lab's benchmark loads).
"""

from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.errors import SourceError, UsageError
from dflash_tools.smoke.workloads.datasets import DATASETS, load_dataset_prompts, select_rows

STEP = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_library_and_an_empty_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No `datasets` (an import fails), and the cache in a fresh folder."""
    monkeypatch.setitem(sys.modules, "datasets", None)
    cache = tmp_path / "cache"
    monkeypatch.setenv("DFLASH_TOOLS_CACHE", str(cache))
    return cache / "datasets"


@pytest.mark.parametrize(
    ("name", "row", "prompt"),
    [
        ("gsm8k", {"question": "Tom has 3 apples.", "answer": "#### 3"}, "Tom has 3 apples." + STEP),
        ("math500", {"problem": "Find x.", "solution": "x"}, "Find x." + STEP),
        (
            "humaneval",
            {"task_id": "HumanEval/0", "prompt": "def f(x):\n"},
            "Write a solution to the following problem and make sure that it passes the tests:\n"
            "```python\ndef f(x):\n\n```",
        ),
        ("mbpp", {"task_id": 2, "prompt": "Write a function that adds."}, "Write a function that adds."),
        ("mt-bench", {"category": "writing", "prompt": ["First turn.", "Second turn."]}, "First turn."),
    ],
)
def test_each_dataset_from_a_local_file_of_its_own_columns(
    name: str, row: dict[str, Any], prompt: str, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / f"{name}.jsonl", [row, row])
    loaded = load_dataset_prompts(name, 1, path=path)
    assert loaded.prompts == [prompt]
    assert loaded.source == f"file {path}" and loaded.rows == 2
    if name == "mt-bench":
        assert loaded.turns[0] == ["First turn.", "Second turn."]  # kept; the first is sent


def test_zlab_cache_format_and_a_prepopulated_cache(no_library_and_an_empty_cache: Path, tmp_path: Path) -> None:
    cache = no_library_and_an_empty_cache
    cache.mkdir(parents=True)
    write_jsonl(cache / "gsm8k.jsonl", [{"turns": [f"question {i}"]} for i in range(10)])
    loaded = load_dataset_prompts("gsm8k", 3)
    assert loaded.prompts == ["question 0", "question 1", "question 2"]
    assert loaded.source == f"cache {cache / 'gsm8k.jsonl'}"
    assert loaded.to_dict()["hf_id"] == "openai/gsm8k" and loaded.to_dict()["rows"] == 10


def test_nothing_cached_and_no_library_is_one_line_with_the_way_out() -> None:
    with pytest.raises(UsageError) as raised:
        load_dataset_prompts("math500", 4)
    assert "not in the cache" in raised.value.message and "datasets` library is not installed" in raised.value.message
    assert "\n" not in raised.value.message and "pip install '.[datasets]'" in raised.value.hint
    assert "--dataset-file FILE" in raised.value.hint  # the option that takes the local file, by name


class FakeDatasets(types.ModuleType):
    """The `datasets` library's `load_dataset`, recording its calls; rows of a real dataset's columns."""

    def __init__(self, rows: list[dict[str, Any]], fail: Exception | None = None) -> None:
        super().__init__("datasets")
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.rows = rows
        self.fail = fail

    def load_dataset(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append((args, kwargs))
        if self.fail:
            raise self.fail
        return self.rows


def test_through_the_library_once_then_from_the_cache(
    monkeypatch: pytest.MonkeyPatch, no_library_and_an_empty_cache: Path
) -> None:
    library = FakeDatasets([{"prompt": f"task {i}", "task_id": i} for i in range(5)])
    monkeypatch.setitem(sys.modules, "datasets", library)
    first = load_dataset_prompts("mbpp", 2)
    assert library.calls == [(("google-research-datasets/mbpp", "sanitized"), {"split": "test"})]
    assert first.prompts == ["task 0", "task 1"] and first.source.startswith("datasets library")
    cached = no_library_and_an_empty_cache / "mbpp.jsonl"
    assert [json.loads(line) for line in cached.read_text().splitlines()][:2] == [
        {"turns": ["task 0"]},
        {"turns": ["task 1"]},
    ]
    second = load_dataset_prompts("mbpp", 2)
    assert len(library.calls) == 1 and second.source == f"cache {cached}" and second.prompts == first.prompts
    load_dataset_prompts("mbpp", 2, refresh=True)
    assert len(library.calls) == 2


def test_each_dataset_asks_the_library_for_its_hub_id_config_and_split(monkeypatch: pytest.MonkeyPatch) -> None:
    want = {
        "gsm8k": (("openai/gsm8k", "main"), {"split": "test"}),
        "math500": (("HuggingFaceH4/MATH-500",), {"split": "test"}),
        "humaneval": (("openai/openai_humaneval",), {"split": "test"}),
        "mbpp": (("google-research-datasets/mbpp", "sanitized"), {"split": "test"}),
        "mt-bench": (("HuggingFaceH4/mt_bench_prompts",), {"split": "train"}),
    }
    assert set(want) == set(DATASETS)
    for name, call in want.items():
        field = DATASETS[name].field
        library = FakeDatasets([{field: ["a turn"] if name == "mt-bench" else "text"}])
        monkeypatch.setitem(sys.modules, "datasets", library)
        load_dataset_prompts(name, 1, refresh=True)
        assert library.calls == [call], name


def test_a_library_failure_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nmore lines")
    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets([], fail=failure))
    with pytest.raises(SourceError) as raised:
        load_dataset_prompts("gsm8k", 1)
    assert raised.value.message.startswith("dataset gsm8k (openai/gsm8k): cannot be loaded (Couldn't reach")
    assert "\n" not in raised.value.message
    assert "--dataset-file FILE" in raised.value.hint


def test_row_order_dataset_and_zlab_shuffle() -> None:
    assert select_rows(1319, 3, "dataset") == ([0, 1, 2], [])
    assert select_rows(80, 200, "dataset") == (list(range(80)), [])  # vLLM's CI: min(200, rows)
    # z-lab's benchmark: the indices shuffled by random.Random(42), cycled, warm-up rows after.
    order = list(range(1319))
    random.Random(42).shuffle(order)
    measured, warmup = select_rows(1319, 128, "shuffled-42", warmup=1)
    assert measured == order[:128] and warmup == [order[128]]
    measured, _ = select_rows(3, 5, "shuffled-42")
    shuffled = list(range(3))
    random.Random(42).shuffle(shuffled)
    assert measured == shuffled + shuffled[:2]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"question": "ok"}\n{"answer": "no question"}\n', "row 2: 'question' is missing or empty"),
        (b'{"question": "ok"}\nnot json\n', "line 2 is not JSON"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b"", "no rows"),
        (b'{"turns": "one string"}\n', "row 1: 'turns' is not a list of prompts"),
        (b"[1, 2]\n", "row 1: not a JSON object"),
    ],
)
def test_bad_files_are_one_line_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "gsm8k.jsonl"
    path.write_bytes(content)
    with pytest.raises(UsageError) as raised:
        load_dataset_prompts("gsm8k", 1, path=path)
    assert str(path) in raised.value.message and message in raised.value.message
    assert "\n" not in raised.value.message


def test_unknown_dataset_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not one of gsm8k, math500, humaneval, mbpp, mt-bench"):
        load_dataset_prompts("squad", 1)
    with pytest.raises(SourceError, match="missing.jsonl: no such file"):
        load_dataset_prompts("gsm8k", 1, path=tmp_path / "missing.jsonl")


def test_parquet_needs_pyarrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "test-00000-of-00001.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(UsageError, match="reading parquet needs pyarrow"):
        load_dataset_prompts("gsm8k", 1, path=path)


@pytest.mark.network
def test_gsm8k_online_through_the_library(monkeypatch: pytest.MonkeyPatch, no_library_and_an_empty_cache: Path) -> None:
    monkeypatch.delitem(sys.modules, "datasets")
    pytest.importorskip("datasets")
    loaded = load_dataset_prompts("gsm8k", 4, order="shuffled-42")
    assert loaded.rows == 1319 and len(loaded.prompts) == 4 and all(p.endswith(STEP) for p in loaded.prompts)
    again = load_dataset_prompts("gsm8k", 4, order="shuffled-42")
    assert again.source.startswith("cache ") and again.prompts == loaded.prompts
