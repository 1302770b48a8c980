"""Hostile inputs to plan, presets, the engine views, convert's reads and the Python API: numbers no
engine holds (`inf`, `1e308`, K and counts beyond 64 bits), configs with counts no model has,
layer kinds that are lists, config files that are folders or FIFOs, presets of the wrong types,
NaN, deep nesting or a sparse terabyte, prompts and engine arguments of the same kind, and shard
indexes that are garbage, not UTF-8, a list, too deep, a FIFO or a sparse terabyte.

A case is one command line, run with `--json` (in process through typer's runner, or as a real
subprocess under a timeout where the old code hung). It ends cleanly when:

- the exit code is the expected one (2: the input is unusable; 1: findings or a refused run; 0
  where the input is fine), and stdout is one JSON document with `schema_version`;
- the expected words are in that document (the cause, the file or the key, a finding's code);
- it ended within its bound (a hang or a four-minute count is the failure it guards);
- no internal error and no traceback reached stderr;
- a convert case leaves nothing beside OUT when it fails.

`python -m tests.hostile.input_cases` runs every case and prints the table in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dflash_tools_testing as testing

INT64_MAX = 2**63 - 1
TERABYTE = 1 << 40
DEEP = 100_000  # nesting levels: Python's own parser raises RecursionError at about 1,000
CLI = shutil.which("dflash-tools") or str(Path(sys.executable).with_name("dflash-tools"))

Argv = Callable[[Path], list[str]]


@dataclass
class Case:
    name: str
    surface: str
    argv: Argv
    exit_code: int
    expect: tuple[str, ...]  # each in the JSON document
    bound: float = 20.0  # seconds
    subprocess: bool = False  # run as a real process under a timeout (the old code hung)
    # Refused by the option's parser (click): exit 2 and the words on stderr. Its JSON document
    # is the command line's usage-error path, not this suite's (tests/cli).
    parser: bool = False
    beside_out: str | None = None  # convert: the folder OUT is made in, that must stay empty on failure


@dataclass
class Outcome:
    case: Case
    exit_code: int
    document: dict[str, Any] | None
    stdout: str
    stderr: str
    seconds: float


# --- the fixtures every case reads -------------------------------------------------------------


def _config(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def _target(root: Path, name: str, **changes: Any) -> None:
    folder = testing.write_target(root / name, testing.TINY)
    config = json.loads((folder / "config.json").read_text())
    config.update({"max_position_embeddings": 4096, **changes})
    _config(folder / "config.json", config)


def _draft(root: Path, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    config = testing.make_config("zlab-dflash", testing.TINY)
    config["dflash_config"] = dict(config["dflash_config"])
    change(config)
    testing.write_checkpoint(root / name, "zlab-dflash", testing.TINY, config=config)


def _sparse(path: Path, size: int, head: bytes = b"{") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)


def _deep(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


def _preset(root: Path, name: str, text: str | bytes) -> None:
    path = root / "presets" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)


def _good_preset(root: Path, **changes: Any) -> dict[str, Any]:
    preset: dict[str, Any] = {
        "schema_version": 1,
        "target": str(root / "target"),
        "drafts": [{"draft": str(root / "draft")}],
        "engine_args": {"max_model_len": 2048},
    }
    preset.update(changes)
    return preset


def _prefixed_draft(root: Path, name: str) -> Path:
    """A sharded draft whose tensors carry a `model.` prefix: convert renames them, so it rewrites
    the shard index (the reads of item 3 happen on that path)."""
    table = [(f"model.{tensor}", dtype, shape) for tensor, dtype, shape in testing.tensor_table(testing.TINY)]
    return testing.write_checkpoint(root / name, "zlab-dflash", testing.TINY, shards=2, tensors=table)


INDEXES: dict[str, Callable[[Path], None]] = {
    "garbage": lambda p: p.write_bytes(b"\x00\x01garbage{{{"),
    "not UTF-8": lambda p: p.write_bytes(b'{"weight_map": {"a": "\xff\xfe"}}'),
    "a list": lambda p: p.write_text('[{"weight_map": {}}]'),
    "too deep": lambda p: p.write_text('{"weight_map": ' + _deep() + "}"),
    "a million values": lambda p: p.write_text('{"weight_map": {}, "x": [' + ",".join(["[]"] * 1_000_000) + "]}"),
    "no weight_map": lambda p: p.write_text('{"metadata": {}}'),
    "a sparse terabyte": lambda p: _sparse(p, TERABYTE),
    "a FIFO": lambda p: os.mkfifo(p),
}

COPIED_INDEXES = ("a FIFO", "a sparse terabyte")


def build_fixtures(root: Path) -> None:
    testing.write_checkpoint(root / "draft", "zlab-dflash", testing.TINY)
    _target(root, "target")
    _target(root, "t-layers", num_hidden_layers=10**9)
    _target(root, "t-layers-float", num_hidden_layers=1e9)
    _target(root, "t-hidden-digits", hidden_size="@")
    digits = root / "t-hidden-digits" / "config.json"
    digits.write_text(digits.read_text().replace('"@"', "9" * 5001))  # json.dumps writes at most 4,300
    _target(root, "t-positions", max_position_embeddings=10**30)
    _target(root, "t-rope", rope_scaling={"rope_type": "yarn", "factor": 1e308})
    _target(root, "t-dtype", torch_dtype="float99")
    _target(root, "t-layer-kinds", layer_types=[["full_attention"], {"kind": 1}, "full_attention", 7])
    (root / "t-folder" / "config.json").mkdir(parents=True)
    (root / "t-fifo").mkdir()
    os.mkfifo(root / "t-fifo" / "config.json")
    (root / "t-garbage").mkdir()
    (root / "t-garbage" / "config.json").write_bytes(b"\x89PNG not a config")

    def no_ids(config: dict[str, Any]) -> None:
        config["num_hidden_layers"] = 10**9
        config["dflash_config"].pop("target_layer_ids")

    _draft(root, "d-layers", no_ids)
    _draft(root, "d-layer-kinds", lambda c: c.update(layer_types=[["sliding_attention"], {"kind": "full"}]))
    _draft(root, "d-own-layers", lambda c: c["dflash_config"].update(target_layer_ids=[1, 9]))

    _preset(root, "string-seqs", json.dumps(_good_preset(root, engine_args={"max_num_seqs": "eight"})))
    _preset(root, "string-k", json.dumps(_good_preset(root, num_speculative_tokens="7")))
    _preset(root, "huge-k", json.dumps(_good_preset(root, num_speculative_tokens=2**64)))
    _preset(root, "drafts-object", json.dumps(_good_preset(root, drafts={"draft": "x"})))
    floor = '{"mean_acceptance_length": NaN, "provenance": "a run"}'
    _preset(
        root, "nan-floor", json.dumps(_good_preset(root)).replace('"drafts": [{', f'"drafts": [{{"floor": {floor}, ')
    )
    _preset(root, "deep", json.dumps(_good_preset(root))[:-1] + ', "x": ' + _deep(5_000) + "}")
    _preset(root, "values", json.dumps(_good_preset(root))[:-1] + ', "x": [' + ",".join(["[]"] * 1_000_000) + "]}")
    _preset(root, "not-utf8", b'{"schema_version": 1, "name": "\xff"}')
    _preset(root, "list", "[1, 2]")
    _preset(root, "many-bad", json.dumps(_good_preset(root, chat="yes", max_tokens=-1, env={"A": 1}, drafts=[{}])))
    _preset(root, "inf-memory", json.dumps(_good_preset(root, engine_args={"gpu_memory_utilization": 1e308})))
    _sparse(root / "presets" / "sparse.json", TERABYTE)
    os.mkfifo(root / "presets" / "fifo.json")

    (root / "prompts").mkdir()
    os.mkfifo(root / "prompts" / "fifo.jsonl")
    _sparse(root / "prompts" / "sparse.jsonl", TERABYTE, b'{"prompt": "a"}\n')
    (root / "prompts" / "deep.jsonl").write_text('{"prompt": ' + _deep() + "}\n")
    (root / "prompts" / "not-utf8.jsonl").write_bytes(b'{"prompt": "\xff"}\n')

    for name, write in INDEXES.items():
        folder = _prefixed_draft(root, f"index-{name}")
        index = folder / "model.safetensors.index.json"
        index.unlink()
        write(index)
        (root / "outs" / name).mkdir(parents=True)
    for name in COPIED_INDEXES:
        # No tensor renamed: the index is carried to OUT as it is, and must be a regular small file.
        folder = testing.write_checkpoint(root / f"copied-{name}", "zlab-dflash", testing.TINY, shards=2)
        index = folder / "model.safetensors.index.json"
        index.unlink()
        INDEXES[name](index)
        (root / "outs" / f"copied-{name}").mkdir(parents=True)


# --- the cases ---------------------------------------------------------------------------------


def _plan(draft: str, target: str, *extra: str) -> Argv:
    return lambda root: ["plan", "-t", str(root / target), "-d", str(root / draft), *extra]


def _smoke(*extra: str) -> Argv:
    def argv(root: Path) -> list[str]:
        args = [a.replace("ROOT", str(root)) for a in extra]
        return ["smoke-test", "-t", str(root / "target"), "-d", str(root / "draft"), "--dry-run", *args]

    return argv


def _with_preset(command: str, name: str) -> Argv:
    if command == "plan":
        return lambda root: ["plan", "--preset", str(root / "presets" / f"{name}.json"), "--max-model-len", "2048"]
    return lambda root: ["smoke-test", "--preset", str(root / "presets" / f"{name}.json"), "--dry-run"]


def _convert(name: str) -> Argv:
    return lambda root: ["convert", str(root / f"index-{name}"), "-o", str(root / "outs" / name / "OUT")]


_G = "--gpu-memory"
CASES: list[Case] = [
    # plan: the numbers on its command line
    Case(
        "--gpu-memory inf", "plan numbers", _plan("draft", "target", _G, "inf"), 2, ("not a memory size",), parser=True
    ),
    Case(
        "--gpu-memory 1e308",
        "plan numbers",
        _plan("draft", "target", _G, "1e308"),
        2,
        ("not a memory size",),
        parser=True,
    ),
    Case(
        "--gpu-memory nan", "plan numbers", _plan("draft", "target", _G, "nan"), 2, ("not a memory size",), parser=True
    ),
    Case(
        "--gpu-memory -80", "plan numbers", _plan("draft", "target", _G, "-80"), 2, ("not a memory size",), parser=True
    ),
    Case("--gpu-memory 0", "plan numbers", _plan("draft", "target", _G, "0"), 2, ("not above 0",)),
    Case("--gpu-memory 2000000TiB", "plan numbers", _plan("draft", "target", _G, "2000000TiB"), 2, ("at most",)),
    Case(
        "--gpu-memory 80 parsecs",
        "plan numbers",
        _plan("draft", "target", _G, "80 parsecs"),
        2,
        ("memory size",),
        parser=True,
    ),
    Case("--gpu-memory 80GB", "plan numbers", _plan("draft", "target", _G, "80GB"), 0, ('"gpu_memory_gib": 80',)),
    Case("--gpu-memory 80GiB", "plan numbers", _plan("draft", "target", _G, "80GiB"), 0, ('"gpu_memory_gib": 80',)),
    Case(
        "--gpu-memory 81920MiB", "plan numbers", _plan("draft", "target", _G, "81920MiB"), 0, ('"gpu_memory_gib": 80',)
    ),
    Case("-k 2^63", "plan numbers", _plan("draft", "target", "-k", str(2**63)), 2, ("64-bit",)),
    Case("-k of 5,000 digits", "plan numbers", _plan("draft", "target", "-k", "9" * 5000), 2, ("64-bit",)),
    Case("-k ²", "plan numbers", _plan("draft", "target", "-k", "²"), 2, ("not a number or a range",)),
    Case("--max-num-seqs 2^63", "plan numbers", _plan("draft", "target", "--max-num-seqs", str(2**63)), 2, ("64-bit",)),
    Case(
        "--max-num-seqs 2^63-1",
        "plan numbers",
        _plan("draft", "target", "--max-num-seqs", str(INT64_MAX)),
        1,
        ("DFT088", "max_num_batched_tokens"),
    ),
    Case(
        "--max-model-len 2^70", "plan numbers", _plan("draft", "target", "--max-model-len", str(2**70)), 2, ("64-bit",)
    ),
    Case(
        "--max-model-len past the context",
        "plan numbers",
        _plan("draft", "target", "--max-model-len", "100000"),
        1,
        ("DFT088", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
    ),
    Case(
        "--gpu-memory-utilization 1e308",
        "plan numbers",
        _plan("draft", "target", "--gpu-memory-utilization", "1e308"),
        2,
        ("--gpu-memory-utilization",),
        parser=True,
    ),
    Case(
        "--tensor-parallel-size 2^64",
        "plan numbers",
        _plan("draft", "target", "--tensor-parallel-size", str(2**64)),
        2,
        ("64-bit",),
    ),
    Case("--engine ''", "plan numbers", _plan("draft", "target", "--engine", ""), 2, ("names no engine",)),
    # plan: the target's config
    Case("target of 10^9 layers", "target config", _plan("draft", "t-layers"), 2, ("more than any model has",), 10),
    Case("target of 1e9 layers", "target config", _plan("draft", "t-layers-float"), 2, ("not a positive integer",)),
    Case("hidden size of 5,001 digits", "target config", _plan("draft", "t-hidden-digits"), 2, ("t-hidden-digits",)),
    Case(
        "10^30 positions",
        "target config",
        _plan("draft", "t-positions"),
        2,
        ("max_position_embeddings is an integer of 31 digits, more than any model has",),
    ),
    Case("RoPE factor 1e308", "target config", _plan("draft", "t-rope", "--max-model-len", "2048"), 0, ("sglang",)),
    Case("an unknown dtype", "target config", _plan("draft", "t-dtype"), 2, ("its config's dtype 'float99'",)),
    Case("layer kinds that are lists", "target config", _plan("draft", "t-layer-kinds"), 0, ('"serves": true',)),
    Case("config.json a folder", "target config", _plan("draft", "t-folder"), 2, ("not a regular file (a folder)",)),
    Case("config.json a FIFO", "target config", _plan("draft", "t-fifo"), 2, ("a FIFO",), 20, True),
    Case("config.json garbage", "target config", _plan("draft", "t-garbage"), 2, ("config.json",)),
    # the engine views, plan and convert --for on a draft's hostile config
    Case(
        "10^9 layers, no ids: --engine sglang",
        "draft config",
        lambda root: ["inspect", str(root / "d-layers"), "--engine", "sglang"],
        1,
        ("DFT006", "num_hidden_layers"),
        10,
    ),
    Case(
        "10^9 layers, no ids: --engine all",
        "draft config",
        lambda root: ["inspect", str(root / "d-layers"), "--engine", "all"],
        1,
        ("DFT006",),
        10,
    ),
    Case("10^9 layers, no ids: plan", "draft config", _plan("d-layers", "target"), 1, ("DFT006",), 10),
    Case(
        "10^9 layers, no ids: convert --for all",
        "draft config",
        lambda root: ["convert", str(root / "d-layers"), "--for", "all", "--dry-run"],
        1,
        ("num_hidden_layers",),
        10,
    ),
    Case(
        "layer kinds that are lists: --engine all",
        "draft config",
        lambda root: ["inspect", str(root / "d-layer-kinds"), "--engine", "all"],
        1,
        ("DFT006", "layer_types"),
    ),
    Case("layer kinds that are lists: plan", "draft config", _plan("d-layer-kinds", "target"), 1, ("DFT006",)),
    Case(
        "layer kinds that are lists: convert --for all",
        "draft config",
        lambda root: ["convert", str(root / "d-layer-kinds"), "--for", "all", "--dry-run"],
        0,
        ('"engines"',),
    ),
    Case(
        "ids past its own num_target_layers",
        "draft config",
        lambda root: ["inspect", str(root / "d-own-layers")],
        1,
        ("DFT030", "num_target_layers"),
    ),
    # presets, through plan and smoke-test
    Case("engine_args.max_num_seqs 'eight'", "presets", _with_preset("plan", "string-seqs"), 2, ("max_num_seqs",)),
    Case("num_speculative_tokens '7'", "presets", _with_preset("plan", "string-k"), 2, ("num_speculative_tokens",)),
    Case("num_speculative_tokens 2^64", "presets", _with_preset("smoke", "huge-k"), 2, ("64-bit",)),
    Case("drafts an object", "presets", _with_preset("plan", "drafts-object"), 2, ("drafts is a JSON object",)),
    Case("a floor of NaN", "presets", _with_preset("smoke", "nan-floor"), 2, ("mean_acceptance_length",)),
    Case("5,000 levels deep", "presets", _with_preset("plan", "deep"), 2, ("cannot read JSON", "nest")),
    Case("a million values", "presets", _with_preset("smoke", "values"), 2, ("values",)),
    Case("not UTF-8", "presets", _with_preset("plan", "not-utf8"), 2, ("not-utf8.json",)),
    Case("a list", "presets", _with_preset("plan", "list"), 2, ("not a JSON object",)),
    Case(
        "five bad fields",
        "presets",
        _with_preset("smoke", "many-bad"),
        2,
        ("chat is", "max_tokens is", "env.A is", "drafts[0].draft is missing"),
    ),
    Case("gpu_memory_utilization 1e308", "presets", _with_preset("plan", "inf-memory"), 2, ("gpu_memory_utilization",)),
    Case("a sparse terabyte", "presets", _with_preset("plan", "sparse"), 2, ("larger than",), 10),
    Case("a FIFO", "presets", _with_preset("plan", "fifo"), 2, ("a FIFO",), 20, True),
    # prompts and engine arguments, through smoke-test
    Case(
        "--prompts a FIFO",
        "prompts",
        _smoke("--prompts", "ROOT/prompts/fifo.jsonl"),
        2,
        ("FIFO",),
        20,
        True,
    ),
    Case(
        "--prompts a sparse terabyte",
        "prompts",
        _smoke("--prompts", "ROOT/prompts/sparse.jsonl"),
        2,
        ("larger than",),
        10,
    ),
    Case(
        "--prompts 100,000 levels deep",
        "prompts",
        _smoke("--prompts", "ROOT/prompts/deep.jsonl"),
        2,
        ("line 1",),
    ),
    Case("--prompts not UTF-8", "prompts", _smoke("--prompts", "ROOT/prompts/not-utf8.jsonl"), 2, ("utf-8",)),
    # convert: a shard index it must rewrite
    *[
        Case(
            f"index {name}",
            "convert's shard index",
            _convert(name),
            1,
            ("DFT004", "model.safetensors.index.json"),
            20,
            name == "a FIFO",
            name,
        )
        for name in INDEXES
    ],
    *[
        Case(
            f"index {name}, carried as it is",
            "convert's shard index",
            lambda root, name=name: [
                "convert",
                str(root / f"copied-{name}"),
                "-o",
                str(root / "outs" / f"copied-{name}" / "OUT"),
            ],
            1,
            ("model.safetensors.index.json",),
            20,
            name == "a FIFO",
            f"copied-{name}",
        )
        for name in COPIED_INDEXES
    ],
]


# --- running a case ----------------------------------------------------------------------------


def _environment() -> dict[str, str]:
    return dict(os.environ, NO_COLOR="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", COLUMNS="200")


def run_case(case: Case, root: Path) -> Outcome:
    argv = [*case.argv(root), "--json"]
    started = time.monotonic()
    if case.subprocess:
        try:
            done = subprocess.run(
                [CLI, *argv], env=_environment(), capture_output=True, text=True, timeout=case.bound + 10
            )
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            code, stdout, stderr = -9, "", f"did not end in {case.bound + 10:.0f} s"
    else:
        from typer.testing import CliRunner

        from dflash_tools.cli import app

        result = CliRunner().invoke(app, argv, env=_environment())
        code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += f"\nescaped: {type(result.exception).__name__}: {result.exception}"
    seconds = time.monotonic() - started
    try:
        document = json.loads(stdout)
    except ValueError:
        document = None
    return Outcome(case, code, document if isinstance(document, dict) else None, stdout, stderr, seconds)


def problems(outcome: Outcome, root: Path) -> list[str]:
    case, found = outcome.case, []
    if outcome.exit_code != case.exit_code:
        found.append(f"exit {outcome.exit_code}, expected {case.exit_code}")
    if case.parser and outcome.document is None:
        found += [f"{word!r} not on stderr" for word in case.expect if word not in outcome.stderr]
    elif outcome.document is None or "schema_version" not in outcome.document:
        found.append(f"stdout is not one JSON document: {outcome.stdout[:200]!r}")
    else:
        text = json.dumps(outcome.document, ensure_ascii=False)
        found += [f"{word!r} not in the document" for word in case.expect if word not in text]
    if outcome.seconds > case.bound:
        found.append(f"took {outcome.seconds:.1f} s, bound {case.bound:.0f} s")
    for bad in ("Traceback", "internal error", "escaped:", "did not end"):
        if bad in outcome.stderr:
            found.append(f"{bad}: {outcome.stderr[-300:]!r}")
    if case.beside_out is not None and outcome.exit_code != 0:
        left = sorted(p.name for p in (root / "outs" / case.beside_out).iterdir())
        if left:
            found.append(f"left beside OUT: {left}")
    return found


def summary(outcomes: list[Outcome], root: Path) -> str:
    surfaces: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        surfaces.setdefault(outcome.case.surface, []).append(outcome)
    lines = ["| surface | cases | exit 2 | exit 1 | exit 0 | ended cleanly |", "|---|---|---|---|---|---|"]
    for surface, group in surfaces.items():
        codes = [o.exit_code for o in group]
        clean = sum(not problems(o, root) for o in group)
        lines.append(f"| {surface} | {len(group)} | {codes.count(2)} | {codes.count(1)} | {codes.count(0)} | {clean} |")
    return "\n".join(lines)


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        build_fixtures(root)
        started = time.monotonic()
        outcomes = [run_case(case, root) for case in CASES]
        for outcome in outcomes:
            for problem in problems(outcome, root):
                print(f"{outcome.case.name}: {problem}")
        print(summary(outcomes, root))
        bad = sum(bool(problems(o, root)) for o in outcomes)
        print(f"{len(outcomes)} cases in {time.monotonic() - started:.1f} s: {len(outcomes) - bad} ended cleanly")
        return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["CASES", "Case", "build_fixtures", "problems", "replace", "run_case"]
