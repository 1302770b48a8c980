"""The five datasets the DFlash model cards report on, as prompts for a smoke test.

Each is the Hugging Face dataset z-lab's benchmark loads, with the prompt built the way it builds
it (dflash 0.1.0, `dflash/benchmark.py`, DATASETS; vLLM's DFlash CI builds gsm8k, humaneval and
mt-bench the same way):

    gsm8k      openai/gsm8k, config main, split test            "{question}\\nPlease reason step by step, ..."
    math500    HuggingFaceH4/MATH-500, split test               "{problem}\\nPlease reason step by step, ..."
    humaneval  openai/openai_humaneval, split test              "Write a solution to the following problem ..."
    mbpp       google-research-datasets/mbpp, config sanitized, split test    the row's `prompt`
    mt-bench   HuggingFaceH4/mt_bench_prompts, split train      the row's `prompt`: a list of turns

A row becomes a list of turns (one, except mt-bench's two); both benchmarks send the first turn
alone as one user message, and so does a smoke test (the other turns are kept, not sent).

Where the rows come from, first match wins:

1. a local file the caller names (JSONL with the dataset's own columns or `{"turns": [...]}` per
   line, or parquet when pyarrow is installed);
2. this tool's cache, `<cache>/datasets/<name>.jsonl` (`{"turns": [...]}` per line, z-lab's own
   cache format), where `<cache>` is $DFLASH_TOOLS_CACHE or `~/.cache/dflash-tools`: written the
   first time the `datasets` library loads the dataset, read offline afterwards;
3. the `datasets` library (the optional extra `datasets`), which downloads from the Hub, or reads
   its own cache when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set.

Which rows: "dataset" order takes the first N (vLLM's CI); "shuffled-42" is z-lab's order, the
row indices shuffled by `random.Random(42)` and cycled when N exceeds the rows
(`_select_dataset`), and its warm-up requests come after the N measured ones.

Imports: nothing of ours beyond `errors`; `datasets` and `pyarrow` only inside the functions that
need them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_tools.errors import SourceError, UsageError

# A dataset file is megabytes; a hostile or wrong one may be anything.
MAX_DATASET_BYTES = 512 * 1024 * 1024
MAX_ROWS = 1_000_000
REASON_STEP_BY_STEP = "\nPlease reason step by step, and put your final answer within \\boxed{}."
INSTALL_HINT = (
    "install the datasets extra (in a checkout: pip install '.[datasets]'), or pass the dataset's rows as a "
    "local JSONL or parquet file: --dataset-file FILE"
)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    title: str  # as a sentence names it: "GSM8K"
    hf_id: str
    config: str | None
    split: str
    field: str  # the column the prompt is built from
    template: str | None  # "{text}" is the field's text ("\\boxed{}" stays as is); None: the field itself
    multi_turn: bool = False

    def turns(self, row: Any, where: str) -> list[str]:
        """The prompt turns of one row (of the dataset's columns, or z-lab's `{"turns": [...]}`)."""
        if not isinstance(row, dict):
            raise UsageError(f"{where}: not a JSON object", f"each row holds {self.field!r} or 'turns'")
        if "turns" in row and self.field not in row:
            turns = row["turns"]
            if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
                raise UsageError(f"{where}: 'turns' is not a list of prompts", "write the turns as a list of strings")
            return list(turns)
        value = row.get(self.field)
        if self.multi_turn:
            ok = isinstance(value, list) and value and all(isinstance(t, str) and t.strip() for t in value)
            if not ok:
                raise UsageError(f"{where}: {self.field!r} is not a list of turns", f"check the {self.name} file")
            return list(value)  # type: ignore[arg-type]
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"{where}: {self.field!r} is missing or empty", f"check the {self.name} file")
        return [self.template.replace("{text}", value) if self.template else value]


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("gsm8k", "GSM8K", "openai/gsm8k", "main", "test", "question", "{text}" + REASON_STEP_BY_STEP),
        DatasetSpec(
            "math500", "MATH-500", "HuggingFaceH4/MATH-500", None, "test", "problem", "{text}" + REASON_STEP_BY_STEP
        ),
        DatasetSpec(
            "humaneval",
            "HumanEval",
            "openai/openai_humaneval",
            None,
            "test",
            "prompt",
            "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{text}\n```",
        ),
        DatasetSpec("mbpp", "MBPP", "google-research-datasets/mbpp", "sanitized", "test", "prompt", None),
        DatasetSpec("mt-bench", "MT-Bench", "HuggingFaceH4/mt_bench_prompts", None, "train", "prompt", None, True),
    )
}


def dataset_spec(name: str) -> DatasetSpec:
    spec = DATASETS.get(name.lower())
    if spec is None:
        raise UsageError(f"dataset {name!r}: not one of {', '.join(DATASETS)}", "pass --prompts FILE for your own")
    return spec


@dataclass
class DatasetPrompts:
    """The selected prompts of one dataset, and where they came from."""

    spec: DatasetSpec
    source: str  # "file PATH", "cache PATH", "datasets library (Hub or its cache)"
    rows: int  # rows in the dataset
    order: str
    indices: list[int]  # the measured rows
    warmup_indices: list[int]
    turns: list[list[str]]  # of every row

    @property
    def prompts(self) -> list[str]:
        """The first turn of each measured row: what is sent."""
        return [self.turns[i][0] for i in self.indices]

    @property
    def warmup_prompts(self) -> list[str]:
        return [self.turns[i][0] for i in self.warmup_indices]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "title": self.spec.title,
            "hf_id": self.spec.hf_id,
            "config": self.spec.config,
            "split": self.spec.split,
            "source": self.source,
            "rows": self.rows,
            "order": self.order,
            "prompts": len(self.indices),
            "warmup": len(self.warmup_indices),
            "turns_sent": "the first turn of each row",
        }


def select_rows(rows: int, count: int, order: str, warmup: int = 0) -> tuple[list[int], list[int]]:
    """(measured, warm-up) row indices: the first `count` rows, or z-lab's shuffled order."""
    if rows < 1:
        return [], []
    if order == "dataset":
        chosen = list(range(min(count + warmup, rows)))
    elif order == "shuffled-42":
        shuffled = list(range(rows))
        random.Random(42).shuffle(shuffled)
        chosen = [shuffled[i % rows] for i in range(count + warmup)]
    else:
        raise UsageError(f"row order {order!r}: not 'dataset' or 'shuffled-42'", "fix the protocol")
    return chosen[:count], chosen[count:]


def cache_dir() -> Path:
    root = os.environ.get("DFLASH_TOOLS_CACHE")
    if root:
        return Path(root).expanduser() / "datasets"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "dflash-tools" / "datasets"


# --- reading rows ---------------------------------------------------------------------------------


def _read_bytes(path: Path) -> bytes:
    try:
        if not path.is_file():
            raise SourceError(f"{path}: not a regular file", "pass a JSONL or parquet file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_DATASET_BYTES + 1)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})", "check the path") from None
    if len(data) > MAX_DATASET_BYTES:
        raise UsageError(f"{path}: larger than {MAX_DATASET_BYTES // 2**20} MiB", "pass the dataset's test split alone")
    return data


def read_rows(path: Path) -> list[Any]:
    """Rows of a local JSONL (one JSON object per line) or parquet file."""
    if path.suffix.lower() == ".parquet":
        return _read_parquet(path)
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start})", "pass a JSONL file") from None
    rows: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(rows) >= MAX_ROWS:
            raise UsageError(f"{path}: more than {MAX_ROWS:,} rows", "pass the dataset's test split alone")
        try:
            rows.append(json.loads(line))
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{path}: line {number} is not JSON ({exc})", "write one JSON object per line") from None
    return rows


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise UsageError(f"{path}: reading parquet needs pyarrow", f"pip install pyarrow; or {INSTALL_HINT}") from None
    _read_bytes(path)  # the same checks (a regular file, the size cap) before pyarrow opens it
    try:
        rows: list[Any] = parquet.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow's errors have no common base
        raise UsageError(f"{path}: not a readable parquet file ({type(exc).__name__})", "check the file") from None
    return rows


def _turns_of(spec: DatasetSpec, rows: list[Any], where: str) -> list[list[str]]:
    turns = [spec.turns(row, f"{where}: row {index + 1}") for index, row in enumerate(rows)]
    if not turns:
        raise UsageError(f"{where}: no rows", f"pass the {spec.name} test split")
    return turns


def _write_cache(path: Path, turns: list[list[str]]) -> None:
    """z-lab's cache format, written whole or not at all (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            for row in turns:
                out.write(json.dumps({"turns": row}, ensure_ascii=False) + "\n")
        Path(temporary).replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            Path(temporary).unlink()


def _from_library(spec: DatasetSpec) -> list[Any]:
    try:
        import datasets
    except ImportError:
        raise UsageError(
            f"dataset {spec.name}: not in the cache ({cache_dir() / (spec.name + '.jsonl')}) and the `datasets` "
            "library is not installed",
            INSTALL_HINT,
        ) from None
    args = (spec.hf_id, spec.config) if spec.config else (spec.hf_id,)
    try:
        loaded = datasets.load_dataset(*args, split=spec.split)
    except Exception as exc:  # network, offline without a cache, a renamed dataset: one line each
        message = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise SourceError(
            f"dataset {spec.name} ({spec.hf_id}): cannot be loaded ({message})",
            "check the network, or set HF_HUB_OFFLINE=1 to use the cache; or pass its rows as a local JSONL or "
            "parquet file: --dataset-file FILE",
        ) from None
    return [dict(row) for row in loaded]


def load_dataset_prompts(
    name: str,
    count: int,
    *,
    order: str = "dataset",
    warmup: int = 0,
    path: Path | None = None,
    cache: Path | None = None,
    refresh: bool = False,
) -> DatasetPrompts:
    """`count` prompts of a dataset (and `warmup` more), from `path`, the cache or `datasets`.

    `cache`: the cache folder (default `cache_dir()`); `refresh`: load through `datasets` even when
    the cache has the dataset. Bad rows are a UsageError naming the file and row.
    """
    spec = dataset_spec(name)
    if count < 1:
        raise UsageError(f"dataset {spec.name}: {count} prompts asked for", "ask for at least one")
    if path is not None:
        turns = _turns_of(spec, read_rows(path), str(path))
        source = f"file {path}"
    else:
        cached = (cache or cache_dir()) / f"{spec.name}.jsonl"
        if cached.is_file() and not refresh:
            turns = _turns_of(spec, read_rows(cached), str(cached))
            source = f"cache {cached}"
        else:
            turns = _turns_of(spec, _from_library(spec), f"{spec.hf_id} ({spec.split})")
            source = (
                f"datasets library: {spec.hf_id}" + (f" ({spec.config})" if spec.config else "") + f", {spec.split}"
            )
            with contextlib.suppress(OSError):  # a cache that cannot be written is no reason to fail
                _write_cache(cached, turns)
    measured, warm = select_rows(len(turns), count, order, warmup)
    return DatasetPrompts(spec, source, len(turns), order, measured, warm, turns)
