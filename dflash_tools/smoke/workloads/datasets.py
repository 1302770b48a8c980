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

Every read is bounded before it allocates (docs/reliability.md): a JSONL file is a regular file of
at most MAX_DATASET_BYTES, read like a prompts file (`reading.checkpoint.read_small_file`), UTF-8
with or without a BOM, split at "\\n" alone (JSON Lines: a JSON string may hold U+2028, U+2029 or
U+0085 raw, where `str.splitlines` would break it); a parquet file is refused from its metadata
(more than MAX_ROWS rows, or more than MAX_DATASET_BYTES uncompressed) before a row is decoded,
and then read a batch at a time, the column it needs only, with each batch's string lengths
measured in Arrow (dictionary-encoded columns included) before they become Python strings. One
prompt (a turn) holds at most MAX_PROMPT_CHARS characters, a row at most MAX_TURNS turns.

The cache is written so that it reads back: U+2028, U+2029, U+0085 and lone surrogates escaped,
in a temporary file synced and renamed into place. A cache that cannot be read is named as this
tool's cache, with the command that removes it.

Imports: `errors`, `reading` (the bounded readers), `smoke.limits` (the ranges of the counts);
`datasets` and `pyarrow` only inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.errors import DflashToolsError, SourceError, UsageError
from dflash_tools.plan.presets import MAX_PROMPT_CHARS
from dflash_tools.reading.checkpoint import read_small_file
from dflash_tools.reading.json_hazards import JsonRefused, json_values_bound, loads_bounded

# A dataset's test split is a few megabytes (GSM8K's 1,319 rows: 0.7 MB); a hostile or wrong file
# may be anything. These caps hold for the file and for what its rows decode to.
MAX_DATASET_BYTES = 64 * 1024 * 1024
MAX_DATASET_VALUES = 4_000_000
MAX_ROWS = 1_000_000
MAX_TURNS = 64
# Parquet rows decoded at a time.
PARQUET_BATCH_ROWS = 1024
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
            return _capped(list(turns), where, "turns")
        value = row.get(self.field)
        if self.multi_turn:
            ok = isinstance(value, list) and value and all(isinstance(t, str) and t.strip() for t in value)
            if not ok:
                raise UsageError(f"{where}: {self.field!r} is not a list of turns", f"check the {self.name} file")
            return _capped(list(value), where, self.field)  # type: ignore[arg-type]
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"{where}: {self.field!r} is missing or empty", f"check the {self.name} file")
        _capped([value], where, self.field)
        return [self.template.replace("{text}", value) if self.template else value]


def _capped(turns: list[str], where: str, key: str) -> list[str]:
    """The turns of one row, each within MAX_PROMPT_CHARS, at most MAX_TURNS of them."""
    if len(turns) > MAX_TURNS:
        raise UsageError(
            f"{where}: {key!r} holds {len(turns):,} turns, more than MAX_TURNS {MAX_TURNS}", "check the file"
        )
    for turn in turns:
        if len(turn) > MAX_PROMPT_CHARS:
            raise UsageError(
                f"{where}: {key!r} holds a prompt of {len(turn):,} characters, more than MAX_PROMPT_CHARS "
                f"({MAX_PROMPT_CHARS:,}, one prompt's cap)",
                "no dataset's prompt is near that: is this the right file?",
            )
    return turns


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
class DatasetPrompts(JsonDocument):
    """The selected prompts of one dataset, and where they came from."""

    spec: DatasetSpec
    source: str  # "file PATH", "cache PATH", "datasets library (Hub or its cache)"
    rows: int  # rows in the dataset
    order: str
    indices: list[int] = field(metadata=json_rules(name="prompts", encode=len))  # the measured rows
    warmup_indices: list[int] = field(metadata=json_rules(name="warmup", encode=len))
    turns: list[list[str]] = field(metadata=json_rules(omit=True))  # of every row

    json_keys: ClassVar[tuple[str, ...]] = (
        "name",
        "title",
        "hf_id",
        "config",
        "split",
        "source",
        "rows",
        "order",
        "prompts",
        "warmup",
        "turns_sent",
    )
    json_properties: ClassVar[Mapping[str, str]] = {
        "name": "spec.name",
        "title": "spec.title",
        "hf_id": "spec.hf_id",
        "config": "spec.config",
        "split": "spec.split",
        "turns_sent": "turns_sent",
    }
    turns_sent: ClassVar[str] = "the first turn of each row"

    @property
    def prompts(self) -> list[str]:
        """The first turn of each measured row: what is sent."""
        return [self.turns[i][0] for i in self.indices]

    @property
    def warmup_prompts(self) -> list[str]:
        return [self.turns[i][0] for i in self.warmup_indices]


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


def _dataset_file_error(path: Path, exc: OSError | ValueError) -> DflashToolsError:
    if isinstance(exc, FileNotFoundError):
        return SourceError(f"{path}: no such file", "check the path")
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return UsageError(f"{path}: cannot read it: {reason}", "pass a JSONL or parquet file of the dataset's test split")


def read_rows(path: Path) -> list[Any]:
    """Rows of a local JSONL (one JSON object per line) or parquet file, bounded (module docstring)."""
    if path.suffix.lower() == ".parquet":
        return _read_parquet(path, None)
    try:
        data = read_small_file(path, MAX_DATASET_BYTES)
    except (OSError, ValueError) as exc:  # missing, a folder or FIFO, larger than the cap
        raise _dataset_file_error(path, exc) from None
    return json_lines(data, str(path))


def json_lines(data: bytes, where: str) -> list[Any]:
    """JSON Lines: UTF-8 (a BOM is tolerated), one JSON value a line, lines split at "\\n" alone."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not UTF-8 text (byte {exc.start})", "pass a JSONL file") from None
    if json_values_bound(text) > MAX_DATASET_VALUES:
        raise UsageError(
            f"{where}: more than {MAX_DATASET_VALUES:,} JSON values", "pass the dataset's test split alone"
        )
    rows: list[Any] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if len(rows) >= MAX_ROWS:
            raise UsageError(f"{where}: more than {MAX_ROWS:,} rows", "pass the dataset's test split alone")
        try:
            rows.append(loads_bounded(line, max_values=MAX_DATASET_VALUES))
        except JsonRefused as exc:
            raise UsageError(f"{where}: line {number} is {exc}", "write one JSON object per line") from None
    return rows


def _parquet_column(schema_names: list[str], spec: DatasetSpec | None) -> list[str]:
    """The columns a dataset's prompts are built from (its field, else z-lab's `turns`)."""
    if spec is None:
        return list(schema_names)
    for name in (spec.field, "turns"):
        if name in schema_names:
            return [name]
    return list(schema_names[:1])  # no such column: the rows say so (`DatasetSpec.turns`)


def _string_bytes(array: Any) -> tuple[int, int]:
    """(longest string, total string bytes) of an Arrow array, measured without building Python
    strings: a dictionary-encoded column through its dictionary (30 million rows of one short
    string take a few kilobytes of parquet, and gigabytes as Python objects)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        return _combine([_string_bytes(chunk) for chunk in array.chunks])
    if isinstance(array, pa.DictionaryArray):
        dictionary = array.dictionary
        if _is_text(dictionary.type):
            used = pc.take(pc.binary_length(dictionary), array.indices)
            return int(pc.max(used).as_py() or 0), int(pc.sum(used).as_py() or 0)
        longest, total = _string_bytes(dictionary)  # an upper bound: every row the largest entry
        return longest, longest * len(array) if total else 0
    if isinstance(array, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray):
        return _string_bytes(array.flatten())
    if isinstance(array, pa.StructArray):
        return _combine([_string_bytes(child) for child in array.flatten()])
    if _is_text(array.type):
        lengths = pc.binary_length(array)
        return int(pc.max(lengths).as_py() or 0), int(pc.sum(lengths).as_py() or 0)
    return 0, 0


def _combine(sizes: list[tuple[int, int]]) -> tuple[int, int]:
    return max((m for m, _ in sizes), default=0), sum(t for _, t in sizes)


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _read_parquet(path: Path, spec: DatasetSpec | None) -> list[Any]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise UsageError(f"{path}: reading parquet needs pyarrow", f"pip install pyarrow; or {INSTALL_HINT}") from None
    try:
        # The same checks as any small file (a regular file, the size cap) before pyarrow opens it.
        size = _regular_file_size(path)
    except (OSError, ValueError) as exc:
        raise _dataset_file_error(path, exc) from None
    if size > MAX_DATASET_BYTES:
        raise UsageError(f"{path}: larger than {MAX_DATASET_BYTES // 2**20} MiB", "pass the dataset's test split alone")
    try:
        handle = parquet.ParquetFile(path)
        metadata = handle.metadata
        names = list(handle.schema_arrow.names)
    except Exception as exc:  # pyarrow's errors have no common base
        raise UsageError(f"{path}: not a readable parquet file ({type(exc).__name__})", "check the file") from None
    # Refused from the footer, before a row is decoded.
    if metadata.num_rows > MAX_ROWS:
        raise UsageError(
            f"{path}: {metadata.num_rows:,} rows, more than {MAX_ROWS:,} (from the file's metadata; nothing decoded)",
            "pass the dataset's test split alone",
        )
    uncompressed = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    if uncompressed > MAX_DATASET_BYTES:
        raise UsageError(
            f"{path}: {uncompressed:,} bytes uncompressed, more than {MAX_DATASET_BYTES // 2**20} MiB (from the "
            "file's metadata; nothing decoded)",
            "pass the dataset's test split alone",
        )
    columns = _parquet_column(names, spec)
    rows: list[Any] = []
    decoded = 0
    try:
        # Dictionary-encoded string columns stay encoded (`read_dictionary`): measured through the
        # dictionary, never expanded before the lengths are known.
        reader = parquet.ParquetFile(path, read_dictionary=columns)
        for batch in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
            longest, total = _string_bytes(batch.to_struct_array())
            decoded += total
            if longest > 4 * MAX_PROMPT_CHARS:  # UTF-8 bytes: at most 4 a character
                raise UsageError(
                    f"{path}: a row holds a string of {longest:,} bytes, more than MAX_PROMPT_CHARS "
                    f"({MAX_PROMPT_CHARS:,} characters, one prompt's cap)",
                    "no dataset's prompt is near that: is this the right file?",
                )
            if decoded > MAX_DATASET_BYTES:
                raise UsageError(
                    f"{path}: its rows decode to more than {MAX_DATASET_BYTES // 2**20} MiB of text",
                    "pass the dataset's test split alone",
                )
            rows.extend(batch.to_pylist())
    except UsageError:
        raise
    except Exception as exc:  # pyarrow's errors have no common base (a MemoryError included)
        raise UsageError(f"{path}: not a readable parquet file ({type(exc).__name__})", "check the file") from None
    return rows


def _regular_file_size(path: Path) -> int:
    """The size of a regular file, from its descriptor opened without blocking (a FIFO never blocks
    this; `reading.checkpoint.read_small_file` reads the same way)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    return info.st_size


def _turns_of(spec: DatasetSpec, rows: list[Any], where: str) -> list[list[str]]:
    turns = [spec.turns(row, f"{where}: row {index + 1}") for index, row in enumerate(rows)]
    if not turns:
        raise UsageError(f"{where}: no rows", f"pass the {spec.name} test split")
    return turns


# What the cache must never hold raw: characters `str.splitlines` (and other readers' line
# splitting) break at, which JSON allows inside strings, and lone surrogates, which UTF-8 cannot
# encode. Each is written as its JSON escape, which reads back as the same string.
_UNSAFE_IN_CACHE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def cache_line(turns: list[str]) -> str:
    """One line of the cache: `{"turns": [...]}`, readable text kept as is, line separators escaped."""
    text = json.dumps({"turns": turns}, ensure_ascii=False)
    return _UNSAFE_IN_CACHE.sub(lambda match: f"\\u{ord(match.group()):04x}", text) + "\n"


def _write_cache(path: Path, turns: list[list[str]]) -> None:
    """z-lab's cache format, written whole or not at all: a temporary file beside it, synced, then
    renamed into place (a killed run leaves the old cache or none, never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            for row in turns:
                out.write(cache_line(row))
            out.flush()
            os.fsync(out.fileno())
        Path(temporary).replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            Path(temporary).unlink()


def _read_cache(spec: DatasetSpec, cached: Path) -> list[list[str]]:
    """The cached rows; a cache that cannot be read is named as this tool's cache, with the command
    that removes it (the next online run writes it again)."""
    try:
        return _turns_of(spec, read_rows(cached), str(cached))
    except (UsageError, SourceError) as exc:
        raise UsageError(
            f"dflash-tools' dataset cache {cached} cannot be read: {exc.message.removeprefix(str(cached) + ': ')}",
            f"remove it with `rm '{cached}'`: the next run loads {spec.hf_id} again and rewrites it",
        ) from None


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
    if len(loaded) > MAX_ROWS:
        raise UsageError(f"dataset {spec.name} ({spec.hf_id}): more than {MAX_ROWS:,} rows", "pass a local file")
    return [dict(row) for row in loaded]


def load_dataset_prompts(
    name: str,
    count: int,
    *,
    order: str = "dataset",
    warmup: int = 0,
    path: str | os.PathLike[str] | None = None,
    cache: str | os.PathLike[str] | None = None,
    refresh: bool = False,
) -> DatasetPrompts:
    """`count` prompts of a dataset (and `warmup` more), from `path`, the cache or `datasets`.

    `cache`: the cache folder (default `cache_dir()`); `refresh`: load through `datasets` even when
    the cache has the dataset. Every argument is checked (type and range, the command line's:
    `count` as --num-prompts) before a file is opened; a wrong one is a UsageError naming it. Bad
    rows are a UsageError naming the file and row.
    """
    spec, path, cache = _arguments(name, count, order, warmup, path, cache, refresh)
    if path is not None:
        turns = _turns_of(spec, _read_rows_of(spec, path), str(path))
        source = f"file {path}"
    else:
        cached = (cache or cache_dir()) / f"{spec.name}.jsonl"
        if cached.is_file() and not refresh:
            turns = _read_cache(spec, cached)
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


def _read_rows_of(spec: DatasetSpec, path: Path) -> list[Any]:
    return _read_parquet(path, spec) if path.suffix.lower() == ".parquet" else read_rows(path)


def _arguments(
    name: Any, count: Any, order: Any, warmup: Any, path: Any, cache: Any, refresh: Any
) -> tuple[DatasetSpec, Path | None, Path | None]:
    """The arguments of `load_dataset_prompts`, checked as the command line checks its options."""
    from dflash_tools.smoke.limits import BOUNDS

    if not isinstance(name, str):
        raise UsageError(f"dataset is {_shown(name)}, not a dataset name", f"pass one of {', '.join(DATASETS)}")
    spec = dataset_spec(name)
    for argument, value, bound in (("count", count, "--num-prompts"), ("warmup", warmup, "warmup")):
        try:
            BOUNDS[bound].check(value, argument)
        except UsageError as exc:
            raise UsageError(f"dataset {spec.name}: {exc.message}", exc.hint) from None
        if value is None:
            raise UsageError(f"dataset {spec.name}: {argument} is None", BOUNDS[bound].describe())
    if not isinstance(order, str) or order not in ("dataset", "shuffled-42"):
        raise UsageError(f"dataset {spec.name}: order is {_shown(order)}, not 'dataset' or 'shuffled-42'", "fix it")
    if not isinstance(refresh, bool):
        raise UsageError(f"dataset {spec.name}: refresh is {_shown(refresh)}, not True or False", "pass a bool")
    return spec, _optional_path(path, "dataset_file"), _optional_path(cache, "cache")


def _optional_path(value: Any, argument: str) -> Path | None:
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise UsageError(f"{argument} is {_shown(value)}, not a path", "pass a str or pathlib.Path")
    return Path(value).expanduser()


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"
