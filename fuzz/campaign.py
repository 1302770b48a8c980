"""Fuzz campaign: every parser that reads outside data, fed hostile input, must never raise.

What it feeds (seeded from real fixtures of every dialect, at tiny and published shapes):

- `header`     `safetensors_header.parse_header` on mutated header JSON;
- `file`       `safetensors_header.read_local_header` on mutated whole files (length prefix 0, huge,
               "negative" as u64, off by a few; truncated anywhere; trailing bytes);
- `index`      `source.parse_index` on mutated `model.safetensors.index.json` bytes;
- `config`     `inspect.describe` and the whole `inspect_loaded` path (geometry, checks, tensor
               comparison, target pairing, profile match) on mutated configs of every dialect, with
               a mutated target config;
- `checkpoint` `load_checkpoint` + `inspect_loaded` on real folders on disk whose config, index and
               shards are mutated, including hostile file-system layouts (shards that are folders,
               symlinks leaving the folder, links to /dev/zero, empty files);
- `cli`        every 50th checkpoint is also run through the real `dflash-tools inspect` (in
               process, human and JSON output).
- `hub`        `load_hub_checkpoint` against a loopback stand-in Hub that answers each request (repo
               info, config.json, index, header range) with a mutated answer: status, headers
               (Content-Length, Content-Range, X-Repo-Commit, Retry-After, Location, encodings, error
               texts) and body; sometimes bytes that are not HTTP, or an answer cut anywhere. The
               result must be a checkpoint with findings or a one-line SourceError, within
               --timeout x the requests made (plus a second), and nothing written into the Hub cache.
- `engine_keys` one hazard of issue 12 per input, with an oracle: a key of the engine-read table
               (`dflash_tools/draft/config_keys.py`) set to a value of another JSON type, null, a bogus
               string or an extreme number; a key duplicated with a different value; a lone
               surrogate beside raw non-ASCII text; an unused key nested 65-989 deep; a list-valued
               block_size. inspect must name the key in a finding (error for a wrong type,
               at least a warning otherwise), and convert's planning must end in a plan or a
               one-line error, never an exception of ours.

- `counters`, `metrics`, `jsonl`, `protocol`  smoke-test's readers (`fuzz/smoke_inputs.py`): counts
               of a run or an SGLang answer, honest (which the relations of
               `smoke.counter_relations` must accept) or tampered with (one line naming the
               relation); vLLM `/metrics` pages with hostile position labels and values; dataset rows
               with line separators, lone surrogates and BOMs (the cache line must read back as
               written); protocol documents with hostile fields (counts only in the options' ranges).

Mutations: wrong types in every config field (systematic pass over every key path, then random),
huge / negative / float / NaN / Infinity numbers, deeply nested JSON (up to 100,000 levels),
duplicate keys, non-UTF-8 bytes, lone surrogates, BOMs, truncation, byte flips, terminal escape
sequences and rich markup in strings.

For every input the result must be one of: a parsed result, a `SafetensorsHeaderError` (what
becomes DFT003), findings, or a `SourceError` (a clean exit 2). Every message must be one line,
the JSON document must serialize (strict JSON, UTF-8) and the human report must render. Anything
else is counted as a traceback and saved under --crash-dir with its input.

    python fuzz/campaign.py               # 100,000 inputs (a few minutes)
    python fuzz/campaign.py --quick       # 3,000 inputs, for CI
    python fuzz/campaign.py --inputs 1000000 --seed 7

Exit status: 0 when no input produced a traceback, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import random
import re
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# The human renderer sizes its output from these; set before rich is imported.
os.environ.setdefault("COLUMNS", "120")
os.environ["NO_COLOR"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may touch the network
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.pop("DFLASH_TOOLS_DEBUG", None)

import dflash_tools_testing as testing
from dflash_tools.convert import plan_conversion
from dflash_tools.dialects import detect
from dflash_tools.draft import config_keys
from dflash_tools.draft.target import TargetDescription, target_from_config
from dflash_tools.errors import DflashToolsError, SourceError
from dflash_tools.findings import Severity
from dflash_tools.inspect import describe, inspect_loaded
from dflash_tools.reading.checkpoint import INDEX_NAME, LoadedCheckpoint, parse_config_text, parse_index
from dflash_tools.reading.safetensors_header import (
    MAX_HEADER_BYTES,
    SafetensorsHeaderError,
    encode_header,
    parse_header,
    read_local_header,
)
from dflash_tools.reading.source import load_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke_inputs  # beside this file: smoke-test's readers

HUB_TIMEOUT = 0.3  # --timeout of the hub target's reads: a hostile answer costs at most this per request

TARGETS = ("header", "file", "index", "config", "checkpoint", "engine_keys", "hub", *smoke_inputs.GENERATORS)
# Share of the random inputs each target gets (the systematic pass comes on top, within the total).
WEIGHTS = {
    "header": 3,
    "file": 2,
    "index": 1,
    "config": 3,
    "checkpoint": 2,
    "engine_keys": 2,
    "hub": 1,
    **dict.fromkeys(smoke_inputs.GENERATORS, 1),
}
CLI_EVERY = 50  # every Nth checkpoint input also goes through the real CLI
SLOW_SECONDS = 2.0  # an input slower than this is reported (a hang guard, not a failure)
HANG_SECONDS = 20  # an input slower than this is a failure (counted with the tracebacks)


# --------------------------------------------------------------------------------------------
# Seeds: real configs, headers and indexes of every dialect
# --------------------------------------------------------------------------------------------


@dataclass
class Seed:
    name: str
    dialect: str
    spec: testing.DraftSpec
    config: dict[str, Any]
    tensors: list[tuple[str, str, tuple[int, ...]]]


def _spec_for(dialect: str) -> testing.DraftSpec:
    if "dspark" in dialect:
        return testing.TINY_DSPARK
    if "dflash2" in dialect:
        return testing.TINY_DFLASH2
    return testing.TINY


def build_seeds() -> list[Seed]:
    seeds: list[Seed] = []
    for dialect in testing.ALL_DIALECTS:
        spec = _spec_for(dialect)
        seeds.append(Seed(dialect, dialect, spec, testing.make_config(dialect, spec), testing.tensor_table(spec)))
    for location in ("top", "both"):
        spec = testing.TINY
        seeds.append(
            Seed(
                f"zlab-dflash-{location}",
                "zlab-dflash",
                spec,
                testing.make_config("zlab-dflash", spec, block_size_location=location),
                testing.tensor_table(spec),
            )
        )
    reduced = replace(testing.TINY, draft_vocab_size=128, sample_from_anchor=None)
    seeds.append(
        Seed(
            "speculators-reduced-vocab",
            "speculators-dflash",
            reduced,
            testing.make_config("speculators-dflash", reduced),
            testing.tensor_table(reduced),
        )
    )
    for dialect in ("zlab-dflash2", "speculators-dflash2"):
        spec = testing.QWEN38_27B_DFLASH2
        seeds.append(
            Seed(f"{dialect}-qwen38-27b", dialect, spec, testing.make_config(dialect, spec), testing.tensor_table(spec))
        )
    spec = testing.QWEN3_8B_DFLASH_B16
    seeds.append(
        Seed(
            "zlab-qwen3-8b-b16",
            "zlab-dflash",
            spec,
            testing.make_config("zlab-dflash", spec),
            testing.tensor_table(spec),
        )
    )
    return seeds


def header_json(tensors: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None) -> dict[str, Any]:
    prefix, _ = encode_header(tensors, metadata)
    result: dict[str, Any] = json.loads(prefix[8:])
    return result


def index_json(tensors: list[tuple[str, str, tuple[int, ...]]], shards: int) -> dict[str, Any]:
    per_shard = -(-len(tensors) // shards)
    weight_map = {
        name: f"model-{i // per_shard + 1:05d}-of-{shards:05d}.safetensors" for i, (name, _, _) in enumerate(tensors)
    }
    return {"metadata": {"total_size": 0}, "weight_map": weight_map}


# --------------------------------------------------------------------------------------------
# Hostile values and mutations
# --------------------------------------------------------------------------------------------

ESCAPES = [
    "\x1b]52;c;cHduZWQ=\x07",  # OSC 52: write the clipboard
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b[2J\x1b[H",  # CSI clear screen
    "\x1b[31mred\x1b[0m",
    "\r\x1b[Kfake OK",
    "[bold red]markup[/]",
    "[link=https://evil.example]x[/link]",
    "\u202egnp.exe",  # right-to-left override
    "\u2066isolate\u2069",
    "zero\u200bwidth",
    "\x00nul",
    "\ud800",  # lone surrogate: valid in JSON text, not encodable as UTF-8
    "\udfff\ud800",
    "\ufeffbom",
    "\x85next-line\u2028line-sep",
    "a\nb",
    "%s%n%x{0}",
    "../../etc/passwd",
    "/dev/zero",
]


def hostile_scalars() -> list[Any]:
    return [
        0,
        -1,
        1,
        2,
        7,
        8,
        9,
        2**31,
        2**53 + 1,
        2**63 - 1,
        2**63,
        2**64,
        2**64 + 8,
        -(2**63),
        10**30,
        10**400,
        -(10**400),
        1.5,
        8.0,
        -0.0,
        1e308,
        5e-324,
        float("nan"),
        float("inf"),
        float("-inf"),
        True,
        False,
        None,
        "",
        "8",
        "true",
        "BF16",
        "x" * 5000,
        [],
        {},
        [1, 2, 3],
        [8],
        [True, False],
        [None],
        ["a", 1],
        [1.5, float("nan")],
        [-1, 2**64],
        {"a": 1},
        {"block_size": 8},
        [[1]],
        *ESCAPES,
    ]


def nested(depth: int, rng: random.Random) -> Any:
    value: Any = rng.choice([1, "x", None, float("nan")])
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def random_value(rng: random.Random, seed_values: list[Any]) -> Any:
    roll = rng.random()
    if roll < 0.55:
        return copy.deepcopy(rng.choice(HOSTILE))
    if roll < 0.7 and seed_values:
        return copy.deepcopy(rng.choice(seed_values))
    if roll < 0.8:
        return nested(rng.choice([2, 10, 50, 200, 400]), rng)
    if roll < 0.9:
        return rng.randint(-(2**70), 2**70)
    return "".join(
        chr(rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0xFFFF)])) for _ in range(rng.randint(0, 40))
    )


HOSTILE = hostile_scalars()


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path in a JSON tree (dict keys and list indexes), parents before children."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:6]):  # a few list items are enough
            yield (*prefix, index)
            yield from paths(child, (*prefix, index))


def leaves(value: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(value, dict):
        for child in value.values():
            out.extend(leaves(child))
    elif isinstance(value, list):
        for child in value[:6]:
            out.extend(leaves(child))
    else:
        out.append(value)
    return out


def _get(tree: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        tree = tree[step]
    return tree


def set_path(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return tree


def delete_path(tree: Any, path: tuple[Any, ...]) -> None:
    node = tree
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]


def mutate_tree(tree: Any, rng: random.Random, seed_values: list[Any], rounds: int | None = None) -> Any:
    tree = copy.deepcopy(tree)
    for _ in range(rounds or rng.choice([1, 1, 1, 2, 3, 5])):
        all_paths = list(paths(tree))
        op = rng.random()
        if not all_paths or op < 0.03:
            tree = random_value(rng, seed_values)
            continue
        path = rng.choice(all_paths)
        try:
            if op < 0.6:
                set_path(tree, path, random_value(rng, seed_values))
            elif op < 0.75:
                delete_path(tree, path)
            elif op < 0.85:
                parent = tree
                for key in path[:-1]:
                    parent = parent[key]
                if isinstance(parent, dict):
                    parent[rng.choice([*map(str, HOSTILE[-len(ESCAPES) :]), "block_size", "dflash_config", "x"])] = (
                        random_value(rng, seed_values)
                    )
                else:
                    parent.append(random_value(rng, seed_values))
            elif op < 0.93:
                # Move a subtree somewhere else (same shape, wrong place).
                other = rng.choice(all_paths)
                node = tree
                for key in other:
                    node = node[key]
                set_path(tree, path, copy.deepcopy(node))
            else:
                # Rename a key: the value stays, the key becomes hostile or a near miss.
                parent = tree
                for key in path[:-1]:
                    parent = parent[key]
                if isinstance(parent, dict):
                    value = parent.pop(path[-1])
                    name = str(path[-1])
                    parent[rng.choice([name.upper(), name + " ", " " + name, name + "\x00", rng.choice(ESCAPES)])] = (
                        value
                    )
        except (KeyError, IndexError, TypeError):
            continue  # an earlier round removed the parent
    return tree


def dumps(tree: Any, rng: random.Random) -> str:
    """Serialize like a sloppy writer might: NaN / Infinity literals, odd spacing, escapes or not."""
    return json.dumps(
        tree,
        allow_nan=True,
        ensure_ascii=rng.random() < 0.5,
        indent=rng.choice([None, 2, "\t"]),
        check_circular=False,
    )


def duplicate_keys(tree: Any, rng: random.Random) -> str:
    """A JSON object with one key written twice (json.dumps cannot produce this)."""
    if not isinstance(tree, dict) or not tree:
        return dumps(tree, rng)
    items = list(tree.items())
    key, value = rng.choice(items)
    extra = rng.choice([value, random_value(rng, []), None])
    position = rng.randint(0, len(items))
    items.insert(position, (key, extra))
    body = ",".join(f"{json.dumps(k)}:{json.dumps(v, allow_nan=True)}" for k, v in items)
    return "{" + body + "}"


def deep_text(rng: random.Random) -> str:
    depth = rng.choice([100, 900, 990, 1000, 5000, 100_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener * depth + "1" + closer * depth


TEXT_SUBSTITUTIONS = [
    ("8", "8e999"),
    ("8", "NaN"),
    ("8", "-Infinity"),
    ("8", "08"),
    ("8", "0x8"),
    ("8", "8."),
    ("8", "123456789012345678901234567890123456789"),
    ("true", "True"),
    ("false", "nul"),
    (":", "::"),
    (",", ",,"),
    ('"', "'"),
    ("[", "[" * 2000),
    ("}", ""),
]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        op = rng.random()
        if op < 0.25 and buf:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op < 0.4 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op < 0.55:
            bad = rng.choice(
                [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80", b"\x00", b"\xfe\xff"]
            )
            position = rng.randint(0, len(buf))
            buf[position:position] = bad
        elif op < 0.7 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif op < 0.8 and buf:
            start = rng.randrange(len(buf))
            del buf[start : start + rng.randint(1, 16)]
        elif op < 0.9 and buf:
            start = rng.randrange(len(buf))
            chunk = buf[start : start + rng.randint(1, 64)]
            position = rng.randint(0, len(buf))
            buf[position:position] = chunk
        else:
            old, new = rng.choice(TEXT_SUBSTITUTIONS)
            text = bytes(buf)
            index = text.find(old.encode())
            if index >= 0:
                buf[index : index + len(old)] = new.encode()
    return bytes(buf)


def json_input(tree: Any, rng: random.Random, seed_values: list[Any]) -> bytes:
    """Bytes of a mutated JSON document: structure-level, text-level, or both."""
    roll = rng.random()
    if roll < 0.45:
        return dumps(mutate_tree(tree, rng, seed_values), rng).encode("utf-8", "surrogatepass")
    if roll < 0.55:
        return duplicate_keys(mutate_tree(tree, rng, seed_values, 1) if rng.random() < 0.5 else tree, rng).encode(
            "utf-8", "surrogatepass"
        )
    if roll < 0.6:
        text = dumps(tree, rng)
        cut = rng.randrange(len(text)) if text else 0
        return (text[:cut] + deep_text(rng) + text[cut:]).encode()
    if roll < 0.63:
        return deep_text(rng).encode()
    if roll < 0.67:
        text = dumps(tree, rng)
        return rng.choice([text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode(), text.encode("latin-1", "replace")])
    base = dumps(mutate_tree(tree, rng, seed_values) if rng.random() < 0.5 else tree, rng)
    return mutate_bytes(base.encode("utf-8", "surrogatepass"), rng)


def systematic_trees(tree: Any) -> Iterator[Any]:
    """Every key path of `tree` set to every hostile value, and every key path deleted."""
    for path in list(paths(tree)):
        for value in HOSTILE:
            yield set_path(copy.deepcopy(tree), path, copy.deepcopy(value))
        mutated = copy.deepcopy(tree)
        delete_path(mutated, path)
        yield mutated


# --------------------------------------------------------------------------------------------
# Safetensors files
# --------------------------------------------------------------------------------------------


def file_bytes(header: bytes, data_size: int, rng: random.Random) -> bytes:
    """A whole safetensors file around `header`, with a hostile length prefix or size now and then."""
    header += b" " * (-len(header) % 8)
    length = len(header)
    roll = rng.random()
    if roll < 0.5:
        prefix_length = length
    else:
        prefix_length = rng.choice(
            [
                0,
                1,
                7,
                length - 1,
                length + 1,
                length + 8,
                length + data_size,
                length + data_size + 1,
                MAX_HEADER_BYTES,
                MAX_HEADER_BYTES + 1,
                2**63,
                2**64 - 1,  # -1 as a signed length
                2**64 - length,
                rng.randrange(2**64),
            ]
        )
        prefix_length %= 2**64
    body = struct.pack("<Q", prefix_length) + header + bytes(data_size)
    roll = rng.random()
    if roll < 0.2:
        body = body[: rng.randint(0, len(body))]
    elif roll < 0.3:
        body += bytes(rng.randint(1, 64))
    elif roll < 0.4:
        body = body[: rng.randint(0, 12)]
    return body


# --------------------------------------------------------------------------------------------
# Running one input and classifying the outcome
# --------------------------------------------------------------------------------------------


class Traceback(Exception):
    """An input broke a promise (unexpected exception, multi-line message, bad JSON document)."""


@dataclass
class Stats:
    tried: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    tracebacks: int = 0
    crash_kinds: Counter[str] = field(default_factory=Counter)
    slow: list[tuple[float, str]] = field(default_factory=list)
    cli_runs: int = 0


def one_line(text: str, what: str) -> None:
    if "\n" in text or "\r" in text:
        raise Traceback(f"{what} is not one line: {text[:200]!r}")


def check_findings(findings: list[Any]) -> None:
    """Messages keep untrusted text exactly (JSON shows it escaped); they must be strings."""
    for finding in findings:
        if not isinstance(finding.message, str) or not isinstance(finding.hint, str):
            raise Traceback(f"{finding.code}: message or hint is not a string")


# What may never reach a terminal from a checkpoint: C0/C1 controls (ESC starts OSC 52 / OSC 8 /
# CSI sequences), bidi and zero-width controls, line separators, lone surrogates.
UNSAFE_OUTPUT = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)


def check_terminal_output(text: str, what: str) -> None:
    match = UNSAFE_OUTPUT.search(text)
    if match:
        start = max(0, match.start() - 40)
        raise Traceback(f"{what} carries a raw control character: {text[start : match.end() + 40]!r}")


def render(report: Any, target: TargetDescription | None, show_tensors: bool) -> None:
    """The JSON document and the human report must both come out, strict JSON, valid UTF-8."""
    from dflash_tools.cli._output import reset_documents, write_json
    from dflash_tools.cli.inspect_run import render_report

    for include in (False, True):
        document = report.to_dict(include_tensors=include)
        reset_documents()  # a command writes one document; each render here is a command's
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink):
            write_json(document)
        text = sink.getvalue()
        text.encode("utf-8")  # what reaches stdout must be UTF-8
        if json.loads(text) != json.loads(json.dumps(document)):
            raise Traceback("the JSON document does not parse back to the report")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        render_report(report, show_tensors=show_tensors, target_spec=target)
    out.getvalue().encode("utf-8")
    check_terminal_output(out.getvalue(), "human report")


def run_inspect(
    loaded: LoadedCheckpoint, target: TargetDescription | None, k: int | None, stats: Stats, show_tensors: bool = True
) -> str:
    report = inspect_loaded(loaded, target=target, num_speculative_tokens=k)
    check_findings(report.findings)
    render(report, target, show_tensors)
    for finding in report.findings:
        stats.codes[finding.code] += 1
    return "exit 1 (error findings)" if not report.ok else "exit 0"


def target_for(tree: Any) -> TargetDescription | None:
    try:
        return target_from_config(tree, "target", "target/config.json") if isinstance(tree, dict) else None
    except SourceError as exc:
        one_line(exc.message, "target SourceError message")
        return None


def run_header(data: bytes, file_size: int | None) -> str:
    try:
        shard = parse_header(data, "model.safetensors", file_size)
    except SafetensorsHeaderError as exc:
        one_line(str(exc), "SafetensorsHeaderError")
        return "DFT003 (header refused)"
    for tensor in shard.tensors.values():
        assert tensor.num_bytes >= 0
    return "parsed"


def run_file(path: Path) -> str:
    try:
        read_local_header(path)
    except SafetensorsHeaderError as exc:
        one_line(str(exc), "SafetensorsHeaderError")
        return "DFT003 (header refused)"
    return "parsed"


def run_index(data: bytes) -> str:
    loaded = LoadedCheckpoint(source="x", kind="local", location="x", config=None, config_text=None)
    weight_map = parse_index(data, loaded)
    check_findings(loaded.findings)
    if weight_map is None:
        return "DFT004 (index refused)"
    return "parsed, DFT004 for some entries" if loaded.findings else "parsed"


def run_config(data: bytes, seed: Seed, target_tree: Any, k: int | None, stats: Stats, tensors: dict[str, Any]) -> str:
    text = data.decode("utf-8") if _utf8(data) else None
    if text is None:
        return "DFT001 (not UTF-8)"
    config, findings = parse_config_text(text, "config.json")
    check_findings(findings)
    if config is None:
        stats.codes["DFT001"] += 1
        return "DFT001 (not a JSON object)"
    desc, read_findings = describe(config)
    check_findings(read_findings)
    loaded = LoadedCheckpoint(
        source=seed.name, kind="local", location=seed.name, config=config, config_text=text, tensors=tensors
    )
    # The tensors here are the seed's own: their table was rendered once already.
    return run_inspect(loaded, target_for(target_tree), k, stats, show_tensors=False)


# Values of every JSON type, plus the exact values issue 12 found accepted.
HAZARD_VALUES: list[Any] = [None, 5, -1, 0, 1e30, 1e-30, "bogus", "7", "\x1b[31m", "", [], [8], {}, {"a": 1}, True]


def _json_type_matches(entry: config_keys.ConfigKey, value: Any) -> bool:
    """Whether `value` has the JSON type the table gives (the oracle's own, simpler reading)."""
    kind = config_keys.KeyType
    if value is None:
        return entry.nullable
    if entry.type in (kind.INT, kind.NUMBER):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok and (entry.type is kind.NUMBER or isinstance(value, int))
    if entry.type is kind.INT_OR_INT_LIST:
        return isinstance(value, int | list) and not isinstance(value, bool)
    wanted = {kind.BOOL: bool, kind.STR: str, kind.OBJECT: dict, kind.INT_LIST: list, kind.STR_LIST: list}
    return isinstance(value, wanted[entry.type])


def run_engine_keys(text: str, seed: Seed, expect_path: str, expect: str, tensors: dict[str, Any]) -> str:
    """inspect must name `expect_path` ("error": in an error finding; "named": in any finding)."""
    config, findings = parse_config_text(text, "config.json")
    check_findings(findings)
    loaded = LoadedCheckpoint(
        source=seed.name,
        kind="local",
        location=seed.name,
        config=config,
        config_text=text,
        tensors=tensors,
        findings=list(findings),
    )
    report = inspect_loaded(loaded)
    check_findings(report.findings)
    json.dumps(report.to_dict(), allow_nan=False).encode("utf-8")
    # A finding names the key when it lists it, or a key inside it (an object value's members).
    named = [f for f in report.findings if any(key == expect_path or key.startswith(expect_path) for key in f.keys)]
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    if expect == "error" and expect_path and not any(f.severity is Severity.ERROR for f in named):
        raise Traceback(f"no error finding names {expect_path!r}: {[f.message for f in report.findings]}")
    if expect == "error" and not expect_path and not errors:
        raise Traceback(f"no error finding: {[f.message for f in report.findings]}")
    try:
        plan = plan_conversion(loaded)
        plan.config_text.encode("utf-8")
        json.loads(plan.config_text)
    except DflashToolsError as exc:
        one_line(exc.message, "convert error message")
        return f"inspect exit {1 if errors else 0}, convert refused (exit {exc.exit_code})"
    return f"inspect exit {1 if errors else 0}, convert planned"


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def run_checkpoint(folder: Path, target: TargetDescription | None, k: int | None, stats: Stats) -> str:
    try:
        loaded = load_checkpoint(str(folder))
    except SourceError as exc:
        one_line(exc.message, "SourceError message")
        one_line(exc.hint, "SourceError hint")
        return "exit 2 (SourceError)"
    check_findings(loaded.findings)
    return run_inspect(loaded, target, k, stats)


def run_cli(folder: Path, target_dir: Path | None) -> str:
    from typer.testing import CliRunner

    from dflash_tools.cli import app

    runner = CliRunner()
    outcomes = []
    for extra in ([], ["--json"], ["--tensors"]):
        args = ["inspect", str(folder), *extra]
        if target_dir is not None:
            args += ["--target", str(target_dir)]
        result = runner.invoke(app, args)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise Traceback(f"CLI raised {type(result.exception).__name__}: {result.exception}")
        if result.exit_code not in (0, 1, 2) or "internal error" in result.stderr:
            raise Traceback(f"CLI exit {result.exit_code}: {result.stderr.strip()[:300]}")
        check_terminal_output(result.stdout, "CLI stdout")
        check_terminal_output(result.stderr, "CLI stderr")
        if result.exit_code == 2:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            if not lines or not lines[0].startswith("error:") or len(lines) > 2:
                raise Traceback(f"exit 2 without a one-line error: {result.stderr[:300]!r}")
        if "--json" in extra and result.exit_code != 2:
            result.stdout_bytes.decode("utf-8")
            json.loads(result.stdout)
        outcomes.append(result.exit_code)
    return f"cli exit {outcomes[0]}"


# --------------------------------------------------------------------------------------------
# Input generators: each yields (label, thunk) pairs; the thunk runs the input
# --------------------------------------------------------------------------------------------

Thunk = Callable[[], str]


# --------------------------------------------------------------------------------------------
# The hub target: a loopback stand-in Hub whose every answer is mutated
# --------------------------------------------------------------------------------------------


class AnswerServer:
    """127.0.0.1 only: each connection gets the answer planned for its path's kind, then is closed.

    Kinds: "info" (the repo info), "config", "index", "shard" (a header range). Every loop is
    bounded: one answer per connection, a request read of at most 64 KiB within 2 s.
    """

    def __init__(self) -> None:
        import socket
        import threading

        self.plan: dict[str, bytes] = {}
        self.requests = 0
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        threading.Thread(target=self._serve, name="fuzz-hub", daemon=True).start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: Any) -> None:
        with contextlib.suppress(OSError), connection:
            connection.settimeout(2)
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 64 * 1024:
                chunk = connection.recv(4096)
                if not chunk:
                    return
                request += chunk
            path = request.split(b" ", 2)[1].decode("latin-1") if request.count(b" ") >= 2 else ""
            self.requests += 1
            kind = (
                "info"
                if path.startswith("/api/models/")
                else "config"
                if path.endswith("/config.json")
                else "index"
                if path.endswith(INDEX_NAME)
                else "shard"
                if path.endswith(".safetensors")
                else "missing"
            )
            connection.sendall(self.plan.get(kind, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))


HUB_REPO = "fuzz/draft"
HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"
HOSTILE_HEADERS: dict[str, list[str]] = {
    "Content-Length": ["0", "1", "99999999", "9" * 30, "-5", "abc", "12, 13"],
    "Content-Range": ["bytes 0-7/8", "bytes */9", "junk", "bytes 5-1/2", "bytes 0-" + "9" * 50 + "/1"],
    "X-Repo-Commit": ["../../..", "/etc", "", HUB_COMMIT[::-1], "A" * 40, HUB_COMMIT + "\u202e"],
    "Retry-After": ["0", "3600", "-1", "Fri, 31 Dec 2100 23:59:59 GMT", "soon", "9" * 80],
    "Content-Encoding": ["gzip", "br", "identity", "x-evil"],
    "Location": ["/", "file:///etc/passwd", "http://127.0.0.1:9/", "//evil.example/x", "\x1b[2J"],
    "X-Error-Code": ["RepoNotFound", "RevisionNotFound", "EntryNotFound", "GatedRepo", "\x1b]52;c;x\x07"],
    "X-Error-Message": ESCAPES[:8],
    "Transfer-Encoding": ["chunked"],
}
HOSTILE_STATUSES = [200, 200, 200, 206, 301, 302, 307, 401, 403, 404, 416, 429, 500, 503, 599, 99]


def http_answer(status: int, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status} Fuzz"] + [f"{key}: {value}" for key, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "backslashreplace") + body


def run_hub(server: AnswerServer, cache: Path) -> str:
    from huggingface_hub import constants

    from dflash_tools.reading.hub import load_hub_checkpoint

    server.requests = 0
    started = time.perf_counter()
    try:
        loaded = load_hub_checkpoint(HUB_REPO, revision=None, token=None, timeout=HUB_TIMEOUT)
    except SourceError as exc:
        one_line(exc.message, "SourceError message")
        one_line(exc.hint, "SourceError hint")
        causes = (
            ("malformed answer", "malformed answer"),
            ("did not answer within", "timeout"),
            ("incomplete response", "incomplete response"),
            ("larger than", "too large"),
            ("rate-limited", "rate limited"),
            ("HTTP ", "HTTP status"),
            ("cannot connect", "no connection"),
        )
        cause = next((name for needle, name in causes if needle in exc.message), "Hub error answer")
        outcome = f"exit 2, one line: {cause}"
    else:
        check_findings(loaded.findings)
        outcome = "read, with findings" if loaded.findings else "read, no findings"
    elapsed = time.perf_counter() - started
    if elapsed > HUB_TIMEOUT * max(server.requests, 1) + 1.0:
        raise Traceback(f"took {elapsed:.1f} s for {server.requests} requests of --timeout {HUB_TIMEOUT}")
    if Path(constants.HF_HUB_CACHE).exists() and any(p.is_file() for p in Path(constants.HF_HUB_CACHE).rglob("*")):
        raise Traceback(f"wrote into the Hub cache {cache}")
    return outcome


@dataclass
class Input:
    """One fuzz input: `run` feeds it to the parser; `payload` is what gets saved if it fails."""

    run: Thunk
    payload: dict[str, bytes] = field(default_factory=dict)


class Campaign:
    def __init__(self, rng: random.Random, workdir: Path, stats: Stats) -> None:
        self.rng = rng
        self.workdir = workdir
        self.stats = stats
        self.seeds = build_seeds()
        self.tiny_seeds = [s for s in self.seeds if s.spec.hidden_size <= 64]
        self.seed_values = [v for s in self.seeds for v in leaves(s.config)]
        self.headers = {s.name: header_json(s.tensors, {"format": "pt"}) for s in self.seeds}
        self.tensor_tables = {}
        for seed in self.seeds:
            shard = parse_header(json.dumps(self.headers[seed.name]).encode(), "model.safetensors")
            self.tensor_tables[seed.name] = shard.tensors
        self.targets = [testing.make_target_config(s.spec) for s in self.tiny_seeds] + [
            testing.make_target_config(testing.TINY, multimodal=True)
        ]
        self.checkpoints_run = 0
        self.hub_server: AnswerServer | None = None

    # -- targets -----------------------------------------------------------------------------

    def header(self, tree: Any | None = None) -> Input:
        rng = self.rng
        seed = rng.choice(self.seeds)
        if tree is None:
            data = json_input(self.headers[seed.name], rng, self.seed_values)
        else:
            data = dumps(tree, rng).encode("utf-8", "surrogatepass")
        true_size = 8 + len(data) + sum(t.num_bytes for t in self.tensor_tables[seed.name].values())
        file_size = rng.choice([None, true_size, true_size + rng.randint(-64, 64), 0, 2**64])
        return Input(lambda: run_header(data, file_size), {"header.json": data, "file_size": str(file_size).encode()})

    def file(self) -> Input:
        rng = self.rng
        seed = rng.choice(self.tiny_seeds)
        header = json_input(self.headers[seed.name], rng, self.seed_values) if rng.random() < 0.5 else None
        if header is None:
            header = json.dumps(self.headers[seed.name]).encode()
        data_size = sum(t.num_bytes for t in self.tensor_tables[seed.name].values())
        body = file_bytes(header, data_size, rng)
        if rng.random() < 0.2:
            body = mutate_bytes(body, rng)
        path = self.workdir / "file.safetensors"

        def thunk() -> str:
            path.write_bytes(body)
            return run_file(path)

        return Input(thunk, {"file.safetensors": body})

    def index(self, tree: Any | None = None) -> Input:
        rng = self.rng
        seed = rng.choice(self.seeds)
        base = index_json(seed.tensors, rng.choice([2, 3]))
        if tree is None:
            data = json_input(base, rng, [*self.seed_values, "../x.safetensors", "/etc/passwd", "a\\b", "C:x"])
        else:
            data = dumps(tree, rng).encode("utf-8", "surrogatepass")
        return Input(lambda: run_index(data), {INDEX_NAME: data})

    def config(self, seed: Seed | None = None, tree: Any | None = None) -> Input:
        rng = self.rng
        seed = seed or rng.choice(self.seeds)
        if tree is None:
            data = json_input(seed.config, rng, self.seed_values)
        else:
            data = dumps(tree, rng).encode("utf-8", "surrogatepass")
        target_tree: Any = None
        if rng.random() < 0.5:
            target_tree = rng.choice(self.targets)
            if rng.random() < 0.5:
                target_tree = mutate_tree(target_tree, rng, self.seed_values)
        k = rng.choice([None, None, 1, 7, 8, 16, 10**6])
        tensors = self.tensor_tables[seed.name]
        payload = {"config.json": data, "seed": seed.name.encode(), "k": str(k).encode()}
        if target_tree is not None:
            payload["target-config.json"] = json.dumps(target_tree, allow_nan=True).encode("utf-8", "surrogatepass")
        return Input(lambda: run_config(data, seed, target_tree, k, self.stats, tensors), payload)

    def engine_keys(self) -> Input:
        rng = self.rng
        seed = rng.choice(self.tiny_seeds)
        tree = copy.deepcopy(seed.config)
        dialect = detect(tree)
        kind = rng.choice(["table", "table", "table", "duplicate", "surrogate", "deep", "list-block"])
        expect, path = "named", ""
        if kind == "table" and dialect is not None:
            present = list(config_keys.located(tree, dialect.spec))
            entry, path, old = rng.choice(present)
            value = rng.choice([v for v in HAZARD_VALUES if not (v == old and type(v) is type(old))] or [None])
            set_path(tree, tuple(path.split(".")), value)
            expect = "error" if not _json_type_matches(entry, value) else "any"
            text = dumps(tree, rng)
        elif kind == "duplicate":
            holders = [
                p
                for p in paths(tree)
                if all(isinstance(step, str) for step in p) and isinstance(_get(tree, p), dict) and _get(tree, p)
            ]
            where = rng.choice([(), *holders])
            holder = _get(tree, where)
            key = rng.choice(list(holder))
            other = rng.choice([v for v in HAZARD_VALUES if not (v == holder[key] and type(v) is type(holder[key]))])
            marker = "\u0000dup"  # a unique key, swapped for the duplicate in the text
            holder[marker] = other
            text = dumps(tree, rng).replace(json.dumps(marker), json.dumps(key), 1)
            path = ".".join([*map(str, where), key])
            expect = "error"
        elif kind == "surrogate":
            path = rng.choice(["note", "transformers_version", "zz"])
            tree[path] = "caf\u00e9 \ud800"
            # Raw UTF-8 for the é, the escape for the surrogate: what a file on disk can hold.
            text = json.dumps(tree, ensure_ascii=False, indent=rng.choice([None, 2])).replace("\ud800", "\\ud800")
            expect = "error"
        elif kind == "deep":
            depth = rng.randint(65, 989)
            tree["unused"] = 1
            text = dumps(tree, rng).replace('"unused": 1', '"unused": ' + "[" * depth + "1" + "]" * depth, 1)
            text = text.replace('"unused":1', '"unused":' + "[" * depth + "1" + "]" * depth, 1)
            path, expect = "", "error"
        else:
            # Where the seed's dialect keeps block_size (open-spec and native DSpark keep none).
            spot = "dflash_config" if isinstance(tree.get("dflash_config"), dict) else None
            holder = tree[spot] if spot else tree
            if "block_size" in holder:
                holder["block_size"] = [8]
                path, expect = ("dflash_config.block_size" if spot else "block_size"), "error"
            text = dumps(tree, rng)
        tensors = self.tensor_tables[seed.name]
        data = text.encode("utf-8", "surrogatepass")
        return Input(
            lambda: run_engine_keys(text, seed, path, expect, tensors),
            {"config.json": data, "seed": seed.name.encode(), "expect": f"{expect} {path}".encode()},
        )

    def hub(self) -> Input:
        """One hostile Hub: each of its four answers healthy, or mutated in status, headers or body."""
        rng = self.rng
        if self.hub_server is None:
            self.hub_server = AnswerServer()
        server = self.hub_server
        seed = rng.choice(self.tiny_seeds)
        shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        prefix, _ = encode_header(seed.tensors, {"format": "pt"})
        shard = prefix  # data is never read: the header range is all a reader asks for
        size = len(prefix) + sum(t.num_bytes for t in self.tensor_tables[seed.name].values())
        healthy: dict[str, tuple[int, dict[str, str], bytes]] = {
            "info": (
                200,
                {},
                json.dumps(
                    {"sha": HUB_COMMIT, "siblings": [{"rfilename": n} for n in ["config.json", INDEX_NAME, *shards]]}
                ).encode(),
            ),
            "config": (200, {"X-Repo-Commit": HUB_COMMIT}, json.dumps(seed.config).encode()),
            "index": (200, {"X-Repo-Commit": HUB_COMMIT}, json.dumps(index_json(seed.tensors, 2)).encode()),
            "shard": (206, {"Content-Range": f"bytes 0-{len(shard) - 1}/{size}"}, shard),
        }
        plan: dict[str, bytes] = {}
        for kind, (status, headers, body) in healthy.items():
            headers = {**headers, "Content-Length": str(len(body))}
            if rng.random() < 0.5:
                roll = rng.random()
                if roll < 0.35:
                    body = (
                        json_input(json.loads(body), rng, self.seed_values)
                        if kind != "shard"
                        else mutate_bytes(body, rng)
                    )
                    headers["Content-Length"] = str(len(body))
                elif roll < 0.6:
                    for name in rng.sample(list(HOSTILE_HEADERS), k=rng.randint(1, 3)):
                        headers[name] = rng.choice(HOSTILE_HEADERS[name])
                elif roll < 0.8:
                    status = rng.choice(HOSTILE_STATUSES)
                    if rng.random() < 0.5:
                        headers["Retry-After"] = rng.choice(HOSTILE_HEADERS["Retry-After"])
                elif roll < 0.9:
                    raw = http_answer(status, headers, body)
                    plan[kind] = raw[: rng.randrange(len(raw))]
                    continue
                else:
                    plan[kind] = rng.choice([b"", b"SSH-2.0-x\r\n\r\n", b"\x00" * 64, b"HTTP/1.1 200\r\n" * 2000])
                    continue
            plan[kind] = http_answer(status, headers, body)
        cache = self.workdir / "hub-cache"

        def thunk() -> str:
            from huggingface_hub import constants

            server.plan = plan
            saved = (
                constants.ENDPOINT,
                constants.HUGGINGFACE_CO_URL_TEMPLATE,
                constants.HF_HUB_OFFLINE,
                constants.HF_HUB_CACHE,
            )
            constants.ENDPOINT = server.url
            constants.HUGGINGFACE_CO_URL_TEMPLATE = server.url + "/{repo_id}/resolve/{revision}/{filename}"
            constants.HF_HUB_OFFLINE = False
            constants.HF_HUB_CACHE = str(cache)
            try:
                return run_hub(server, cache)
            finally:
                (
                    constants.ENDPOINT,
                    constants.HUGGINGFACE_CO_URL_TEMPLATE,
                    constants.HF_HUB_OFFLINE,
                    constants.HF_HUB_CACHE,
                ) = saved

        return Input(thunk, {f"{kind}.http": answer for kind, answer in plan.items()})

    def checkpoint(self) -> Input:
        rng = self.rng
        seed = rng.choice(self.tiny_seeds)
        folder = self.workdir / "ckpt"
        target_dir = self.workdir / "target"
        shards = rng.choice([1, 1, 2, 3])
        plan: list[str] = rng.sample(["config", "index", "shard", "fs", "none"], k=rng.choice([1, 1, 2, 3]))
        config_bytes = json_input(seed.config, rng, self.seed_values) if "config" in plan else None
        index_tree = index_json(seed.tensors, shards) if shards > 1 else None
        index_bytes = (
            json_input(index_tree, rng, [*self.seed_values, "../x.safetensors", "/etc/passwd"])
            if "index" in plan and index_tree is not None
            else None
        )
        shard_choice = rng.randrange(shards)
        shard_mutation = rng.random()
        fs_trick = rng.choice(
            ["dir", "symlink-out", "dev-zero", "dev-urandom", "dangling", "empty", "huge-length", "config-dir"]
        )
        target_tree = rng.choice(self.targets) if rng.random() < 0.3 else None
        if target_tree is not None and rng.random() < 0.5:
            target_tree = mutate_tree(target_tree, rng, self.seed_values)
        k = rng.choice([None, None, 7, 8])
        self.checkpoints_run += 1
        with_cli = self.checkpoints_run % CLI_EVERY == 0

        def thunk() -> str:
            if folder.exists():
                shutil.rmtree(folder)
            testing.write_checkpoint(folder, seed.dialect, seed.spec, shards=shards, config=seed.config)
            if config_bytes is not None:
                (folder / "config.json").write_bytes(config_bytes)
            if index_bytes is not None:
                (folder / INDEX_NAME).write_bytes(index_bytes)
            shard_files = sorted(folder.glob("*.safetensors"))
            if "shard" in plan and shard_files:
                victim = shard_files[shard_choice % len(shard_files)]
                raw = victim.read_bytes()
                header_length = int.from_bytes(raw[:8], "little")
                if shard_mutation < 0.5:
                    tree = json.loads(raw[8 : 8 + header_length])
                    new_header = json_input(tree, random.Random(shard_mutation), self.seed_values)
                    raw = file_bytes(new_header, len(raw) - 8 - header_length, random.Random(shard_mutation))
                else:
                    raw = mutate_bytes(raw, random.Random(shard_mutation))
                victim.write_bytes(raw)
            if "fs" in plan and shard_files:
                victim = shard_files[shard_choice % len(shard_files)]
                apply_fs_trick(fs_trick, victim, folder, self.workdir)
            target: TargetDescription | None = None
            if target_tree is not None:
                target = target_for(target_tree)
                if with_cli:
                    target_dir.mkdir(exist_ok=True)
                    (target_dir / "config.json").write_text(
                        json.dumps(target_tree, allow_nan=True), "utf-8", "surrogatepass"
                    )
            outcome = run_checkpoint(folder, target, k, self.stats)
            if with_cli:
                self.stats.cli_runs += 1
                run_cli(folder, target_dir if target_tree is not None else None)
            return outcome

        return Input(thunk)


def apply_fs_trick(trick: str, victim: Path, folder: Path, workdir: Path) -> None:
    victim.unlink()
    if trick == "dir":
        victim.mkdir()
    elif trick == "symlink-out":
        outside = workdir / "outside.safetensors"
        outside.write_bytes(struct.pack("<Q", 2) + b"{}")
        victim.symlink_to(outside)
    elif trick == "dev-zero":
        victim.symlink_to("/dev/zero")
    elif trick == "dev-urandom":
        victim.symlink_to("/dev/urandom")
    elif trick == "dangling":
        victim.symlink_to(folder / "nowhere")
    elif trick == "empty":
        victim.write_bytes(b"")
    elif trick == "huge-length":
        victim.write_bytes(struct.pack("<Q", 2**64 - 1) + b"{}")
    elif trick == "config-dir":
        victim.write_bytes(b"")
        (folder / "config.json").unlink()
        (folder / "config.json").mkdir()


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


class _Hang(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Hang()


def execute(label: str, item: Input, stats: Stats, crash_dir: Path, counter: int) -> None:
    stats.tried[label] += 1
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        outcome = item.run()
    except _Hang:
        outcome = None
        record_crash(stats, crash_dir, label, counter, f"hang: no answer within {HANG_SECONDS} s", item)
    except Exception as exc:
        outcome = None
        kind = "broken promise" if isinstance(exc, Traceback) else type(exc).__name__
        record_crash(stats, crash_dir, label, counter, traceback.format_exc(), item, kind)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.perf_counter() - started
    if elapsed > SLOW_SECONDS:
        stats.slow.append((elapsed, f"{label} #{counter}"))
    if outcome is not None:
        stats.outcomes[f"{label}: {outcome}"] += 1


def record_crash(
    stats: Stats, crash_dir: Path, label: str, counter: int, text: str, item: Input, kind: str = "hang"
) -> None:
    stats.tracebacks += 1
    stats.crash_kinds[f"{label}: {kind}"] += 1
    if stats.crash_kinds[f"{label}: {kind}"] > 5:
        return  # five examples of each kind are enough to debug it
    case = crash_dir / f"{label}-{counter}"
    case.mkdir(parents=True, exist_ok=True)
    (case / "traceback.txt").write_text(text, "utf-8", "backslashreplace")
    for name, data in item.payload.items():
        (case / name).write_bytes(data)
    work = crash_dir.parent / "work"
    if label == "checkpoint" and work.is_dir():
        with contextlib.suppress(OSError):
            shutil.copytree(work, case / "files", symlinks=True)


def plan_inputs(campaign: Campaign, total: int, systematic: bool) -> Iterator[tuple[str, Input]]:
    """The systematic pass (every key path x every hostile value, per dialect) then random inputs."""
    produced = 0
    rng = campaign.rng
    if systematic:
        for seed in campaign.tiny_seeds:
            for tree in systematic_trees(seed.config):
                if produced >= total:
                    return
                produced += 1
                yield "config", campaign.config(seed, tree)
        first = campaign.seeds[0]
        for tree in systematic_trees(campaign.headers[first.name]):
            if produced >= total:
                return
            produced += 1
            yield "header", campaign.header(tree)
        for tree in systematic_trees(index_json(first.tensors, 2)):
            if produced >= total:
                return
            produced += 1
            yield "index", campaign.index(tree)
    labels = list(WEIGHTS)
    weights = [WEIGHTS[label] for label in labels]
    while produced < total:
        label = rng.choices(labels, weights)[0]
        produced += 1
        if label in smoke_inputs.GENERATORS:
            yield label, smoke_input(label, rng)
        else:
            yield label, getattr(campaign, label)()


def smoke_input(label: str, rng: random.Random) -> Input:
    """One input for a smoke-test reader; a broken promise counts as a traceback."""
    run, payload = smoke_inputs.GENERATORS[label](rng)

    def checked() -> str:
        try:
            return run()
        except smoke_inputs.Broken as exc:
            raise Traceback(str(exc)) from None

    return Input(checked, payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="number of inputs (default 100000)")
    parser.add_argument("--quick", action="store_true", help="3000 inputs, random only: the CI run")
    parser.add_argument("--seed", type=int, default=20260601)
    parser.add_argument("--crash-dir", type=Path, default=None, help="where failing inputs go")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON document")
    args = parser.parse_args(argv)
    total = 3000 if args.quick else args.inputs

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    signal.signal(signal.SIGALRM, _alarm)
    base = Path(tempfile.mkdtemp(prefix="dflash-fuzz-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    workdir = base / "work"
    workdir.mkdir()
    crash_dir = args.crash_dir or base / "crashes"
    stats = Stats()
    campaign = Campaign(random.Random(args.seed), workdir, stats)
    started = time.perf_counter()
    try:
        for counter, (label, item) in enumerate(plan_inputs(campaign, total, systematic=not args.quick), 1):
            execute(label, item, stats, crash_dir, counter)
            if counter % 10_000 == 0:
                print(
                    f"  {counter} inputs, {stats.tracebacks} tracebacks, {time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if stats.tracebacks == 0:
            shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - started
    print_report(stats, elapsed, args.seed, crash_dir if stats.tracebacks else None)
    if args.json:
        print(
            json.dumps(
                {
                    "inputs": sum(stats.tried.values()),
                    "tracebacks": stats.tracebacks,
                    "seconds": round(elapsed, 1),
                    "by_target": dict(stats.tried),
                    "outcomes": dict(stats.outcomes),
                    "finding_codes": dict(stats.codes),
                    "cli_runs": stats.cli_runs,
                    "seed": args.seed,
                }
            )
        )
    return 1 if stats.tracebacks else 0


def print_report(stats: Stats, elapsed: float, seed: int, crash_dir: Path | None) -> None:
    total = sum(stats.tried.values())
    print(f"fuzz campaign (seed {seed}): {total:,} inputs in {elapsed:.1f} s ({total / max(elapsed, 1e-9):,.0f}/s)")
    print("inputs by parser: " + ", ".join(f"{k} {v:,}" for k, v in sorted(stats.tried.items())))
    print(f"real CLI runs (human, --json, --tensors each): {stats.cli_runs:,}")
    print(f"tracebacks: {stats.tracebacks}")
    for kind, count in stats.crash_kinds.most_common():
        print(f"  {kind}: {count}")
    if crash_dir is not None:
        print(f"  failing inputs saved under {crash_dir}")
    print("outcomes:")
    for outcome, count in sorted(stats.outcomes.items()):
        print(f"  {outcome}: {count:,}")
    print("finding codes raised: " + ", ".join(f"{k} {v:,}" for k, v in sorted(stats.codes.items())))
    if stats.slow:
        worst = sorted(stats.slow, reverse=True)[:5]
        print("slowest inputs (> 2 s): " + ", ".join(f"{what} {seconds:.1f} s" for seconds, what in worst))


if __name__ == "__main__":
    sys.exit(main())
