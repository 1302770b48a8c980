"""Kill drills for `dflash-tools convert`: SIGKILL at random points must never lose or corrupt data.

A sharded fixture (speculators DFlash, 3 shards, ~11 MB of random weights, an `embed_tokens`
copy that `--to zlab` drops by streaming, no `sample_from_anchor` key) is converted by the real
CLI in a subprocess, which is killed with SIGKILL:

- at a uniformly random time over a whole run (most land in start-up, some in the writing);
- exactly at a named step (the test-only pause points in `convert`: staged, config-written,
  repacking, built, verified = just before the final rename, published = just after it; for
  `--in-place`: verified, backed-up, replaced, renamed, config-replaced);
- a random 0-40 ms after such a step is released, which lands inside the writes, the final
  `rename` of the staging folder, and the in-place swaps.

Three kinds of run are drilled: `-o OUT --to zlab` (config and index rewritten, one shard
repacked, two hard-linked), `-o OUT --link-mode copy` (every shard copied), and `--in-place --to
zlab` on a copy of the fixture. After every kill:

- the source is byte-identical (every file's bytes, mode and mtime);
- `-o` runs: OUT does not exist, or it is exactly the reference result (same files, same bytes)
  and inspects clean; hidden staging folders left by the kill are counted and removed;
- `--in-place` runs: the folder inspects without errors, config.json is the old or the new one,
  the tensors (read through the index) are the old set or the new set, and a rerun completes
  the conversion to the reference result.

Then two conversions race to the same OUT: exactly one must win, OUT must be the reference
result, and the loser must exit with a one-line message (no traceback, no "internal error").

    python bench/kill_drill.py                # 240 kills + 20 races (a few minutes)
    python bench/kill_drill.py --quick        # 10 chosen kills + 2 races, for CI
    python bench/kill_drill.py --trials 1000 --seed 3

Exit status: 0 when every trial passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dflash_tools_testing as testing
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.safetensors_header import expected_nbytes, read_local_header

SPEC = replace(
    testing.TINY,
    hidden_size=256,
    intermediate_size=512,
    head_dim=64,
    vocab_size=16384,
    mask_token_id=16000,
    with_embed_tokens=True,
    sample_from_anchor=None,
)
INDEX = "model.safetensors.index.json"
STAGING_MARK = ".dflash-tools-"


@dataclass(frozen=True)
class Variant:
    name: str
    args: tuple[str, ...]
    in_place: bool
    stages: tuple[str, ...]


VARIANTS = (
    Variant(
        "output-to-zlab",
        ("--to", "zlab"),
        False,
        ("staged", "config-written", "repacking", "built", "verified", "published"),
    ),
    Variant(
        "output-copy", ("--link-mode", "copy"), False, ("staged", "config-written", "built", "verified", "published")
    ),
    Variant(
        "in-place-to-zlab", ("--to", "zlab"), True, ("verified", "backed-up", "replaced", "renamed", "config-replaced")
    ),
)


# --------------------------------------------------------------------------------------------
# Snapshots of folders
# --------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def signature(folder: Path, *, times: bool = False, skip_backups: bool = False) -> dict[str, tuple[Any, ...]]:
    """Every entry: kind, mode, bytes (sha256) or link target; mtimes too when `times`."""
    out: dict[str, tuple[Any, ...]] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if skip_backups and name.endswith(".bak"):
            continue
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            out[name] = ("link", str(path.readlink()))
        elif stat.S_ISDIR(info.st_mode):
            out[name] = ("dir", stat.S_IMODE(info.st_mode))
        else:
            entry: tuple[Any, ...] = ("file", stat.S_IMODE(info.st_mode), sha256(path))
            out[name] = (*entry, info.st_mtime_ns) if times else entry
    return out


def tensor_digests(folder: Path) -> dict[str, str]:
    """sha256 of every tensor's bytes, read through the index (what an engine would load)."""
    index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    headers: dict[str, Any] = {}
    for name, shard in index["weight_map"].items():
        if shard not in headers:
            headers[shard] = read_local_header(folder / shard, shard)
        header = headers[shard]
        tensor = header.tensors[name]
        with open(folder / shard, "rb") as handle:
            handle.seek(header.data_start + tensor.data_offsets[0])
            out[name] = hashlib.sha256(handle.read(tensor.num_bytes)).hexdigest()
    return out


def leftovers(parent: Path) -> list[Path]:
    """Hidden staging folders (`.NAME.dflash-tools-partial-*`) a kill left behind."""
    return [p for p in parent.iterdir() if p.name.startswith(".") and STAGING_MARK in p.name]


INTERIM_MARK = ".dflash-tools-new"


# --------------------------------------------------------------------------------------------
# Running the CLI
# --------------------------------------------------------------------------------------------


def cli_env(pause_at: str | None = None, marker: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(NO_COLOR="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", COLUMNS="200")
    env.pop("DFLASH_TOOLS_DEBUG", None)
    env.pop("DFLASH_TOOLS_TEST_PAUSE_AT", None)
    env.pop("DFLASH_TOOLS_TEST_PAUSE_FILE", None)
    if pause_at is not None and marker is not None:
        env["DFLASH_TOOLS_TEST_PAUSE_AT"] = pause_at
        env["DFLASH_TOOLS_TEST_PAUSE_FILE"] = str(marker)
    return env


def convert_args(variant: Variant, source: Path, output: Path | None) -> list[str]:
    where = ["--in-place"] if variant.in_place else ["-o", str(output)]
    return [sys.executable, "-m", "dflash_tools", "convert", str(source), *where, *variant.args, "--quiet"]


def run_to_end(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=cli_env(), capture_output=True, text=True, timeout=300)


def wait_for(marker: Path, process: subprocess.Popen[str], timeout: float = 120) -> bool:
    """True when the process reached the pause point; False when it finished without reaching it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    raise TimeoutError(f"no pause marker after {timeout} s")


def kill(process: subprocess.Popen[str]) -> bool:
    """SIGKILL; True when the process was still running (the kill landed)."""
    alive = process.poll() is None
    if alive:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    return alive


# --------------------------------------------------------------------------------------------
# The drill
# --------------------------------------------------------------------------------------------


@dataclass
class Reference:
    source_signature: dict[str, tuple[Any, ...]]
    outputs: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    in_place_tree: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    config_old: bytes = b""
    config_new: bytes = b""
    tensors_old: dict[str, str] = field(default_factory=dict)
    tensors_new: dict[str, str] = field(default_factory=dict)


@dataclass
class Results:
    trials: Counter[str] = field(default_factory=Counter)
    killed: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    staging_leftovers: int = 0
    untidy_in_place: int = 0
    races: int = 0
    race_failures: list[str] = field(default_factory=list)
    race_outcomes: Counter[str] = field(default_factory=Counter)


def build_fixture(root: Path) -> Path:
    rng = random.Random(0)
    data = {n: rng.randbytes(expected_nbytes(d, s)) for n, d, s in testing.tensor_table(SPEC)}
    return testing.write_checkpoint(root / "source", "speculators-dflash", SPEC, shards=3, data=data)


def make_reference(root: Path, source: Path) -> Reference:
    reference = Reference(source_signature=signature(source, times=True))
    for variant in VARIANTS:
        if variant.in_place:
            work = root / "reference-in-place"
            shutil.copytree(source, work)
            reference.config_old = (work / "config.json").read_bytes()
            reference.tensors_old = tensor_digests(work)
            started = time.perf_counter()
            done = run_to_end(convert_args(variant, work, None))
            reference.durations[variant.name] = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"reference {variant.name} failed: {done.stderr}")
            reference.in_place_tree = signature(work, skip_backups=True)
            reference.config_new = (work / "config.json").read_bytes()
            reference.tensors_new = tensor_digests(work)
            continue
        out = root / f"reference-{variant.name}"
        started = time.perf_counter()
        done = run_to_end(convert_args(variant, source, out))
        reference.durations[variant.name] = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"reference {variant.name} failed: {done.stderr}")
        reference.outputs[variant.name] = signature(out)
    return reference


def one_trial(
    number: int, variant: Variant, kind: str, rng: random.Random, root: Path, source: Path, ref: Reference
) -> tuple[str, bool, str | None]:
    """Run and kill one conversion; returns (description, killed while running, failure or None)."""
    trial_dir = root / f"trial-{number}"
    trial_dir.mkdir()
    marker = trial_dir / "pause-marker"
    target = trial_dir / "work" if variant.in_place else trial_dir / "out"
    if variant.in_place:
        shutil.copytree(source, target)
    args = convert_args(variant, target if variant.in_place else source, None if variant.in_place else target)
    description = f"{variant.name} {kind}"
    if kind == "timed":
        delay = rng.uniform(0, 1.1 * ref.durations[variant.name])
        description += f" {delay * 1000:.0f} ms"
        process = subprocess.Popen(args, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        killed = kill(process)
    else:
        step, _, after = kind.partition("+")
        process = subprocess.Popen(
            args, env=cli_env(step, marker), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        reached = wait_for(marker, process)
        if reached and after:
            delay = rng.uniform(0, 0.040)
            description += f" {delay * 1000:.1f} ms"
            marker.unlink()
            time.sleep(delay)
        killed = kill(process)
        marker.unlink(missing_ok=True)
    stderr = process.stderr.read() if process.stderr else ""
    if process.stderr:
        process.stderr.close()
    if not killed and process.returncode != 0:
        return description, killed, f"finished with exit {process.returncode} before the kill: {stderr.strip()[:300]}"
    failure = check_after(variant, target, source, ref)
    return description, killed, failure


def check_after(variant: Variant, target: Path, source: Path, ref: Reference) -> str | None:
    if signature(source, times=True) != ref.source_signature:
        return "the source changed"
    if not variant.in_place:
        if target.exists() or target.is_symlink():
            if signature(target) != ref.outputs[variant.name]:
                return "OUT exists but differs from the reference result"
            report = inspect_checkpoint(str(target))
            if not report.ok:
                return "OUT exists but inspects with errors: " + "; ".join(f.code for f in report.findings)
        return None
    report = inspect_checkpoint(str(target))
    if not report.ok:
        return "in-place folder inspects with errors: " + "; ".join(f"{f.code} {f.message}" for f in report.findings)
    config = (target / "config.json").read_bytes()
    if config not in (ref.config_old, ref.config_new):
        return "config.json is neither the old nor the new one"
    backup = target / "config.json.bak"
    if config == ref.config_new and (not backup.is_file() or backup.read_bytes() != ref.config_old):
        return "config.json was replaced but config.json.bak is not the original"
    tensors = tensor_digests(target)
    if tensors not in (ref.tensors_old, ref.tensors_new):
        return "the indexed tensors are neither the old set nor the new set"
    # Recovery: a rerun (--force replaces the backups of the interrupted run) finishes the job.
    rerun = run_to_end(convert_args(variant, target, None) + ["--force"])
    if rerun.returncode != 0:
        return f"rerun after the kill failed (exit {rerun.returncode}): {rerun.stderr.strip()[:300]}"
    report = inspect_checkpoint(str(target))
    if not report.ok or (target / "config.json").read_bytes() != ref.config_new:
        return "after the rerun the folder is not the converted checkpoint"
    if tensor_digests(target) != ref.tensors_new:
        return "after the rerun the indexed tensors are not the converted ones"
    return None


def untidy(target: Path, ref: Reference) -> bool:
    """Whether a recovered in-place folder still differs from a clean run (interim shard names)."""
    return signature(target, skip_backups=True) != ref.in_place_tree


def race(number: int, rng: random.Random, root: Path, source: Path, ref: Reference) -> tuple[str, str | None]:
    variant = VARIANTS[0]
    race_dir = root / f"race-{number}"
    race_dir.mkdir()
    out = race_dir / "out"
    if rng.random() < 0.3:
        out.mkdir()  # an empty OUT that both may claim
    stagger = rng.uniform(0, 0.3)
    first = subprocess.Popen(
        convert_args(variant, source, out), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    time.sleep(stagger)
    second = subprocess.Popen(
        convert_args(variant, source, out), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    errors = []
    codes = []
    for process in (first, second):
        _, err = process.communicate(timeout=300)
        codes.append(process.returncode)
        errors.append(err)
    outcome = f"exits {sorted(codes)}"
    if sorted(codes)[0] != 0 or codes.count(0) != 1:
        return outcome, f"expected exactly one success, got exits {codes}: {[e.strip()[:200] for e in errors]}"
    loser = errors[codes.index(next(c for c in codes if c != 0))]
    lines = [line for line in loser.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("error:") or "internal error" in loser or "Traceback" in loser:
        return outcome, f"the losing run did not end with a one-line error: {loser.strip()[:300]!r}"
    if len(lines) > 2:
        return outcome, f"the losing run printed more than an error and a hint: {loser.strip()[:300]!r}"
    if signature(out) != ref.outputs[variant.name]:
        return outcome, "OUT is not the reference result after the race"
    if signature(source, times=True) != ref.source_signature:
        return outcome, "the source changed during the race"
    outcome += f" (loser: {lines[0][7:60]}...)"
    return outcome, None


# The quick (CI) plan: the riskiest moments of each kind of run, then one random kill each.
QUICK_PLAN = (
    ("output-to-zlab", "verified+"),  # inside the final rename of the staging folder
    ("output-to-zlab", "repacking"),
    ("output-to-zlab", "timed"),
    ("output-copy", "config-written+"),
    ("output-copy", "verified"),
    ("in-place-to-zlab", "backed-up"),
    ("in-place-to-zlab", "replaced"),
    ("in-place-to-zlab", "renamed+"),
    ("in-place-to-zlab", "config-replaced"),
    ("in-place-to-zlab", "timed"),
)


def plan_trials(count: int, rng: random.Random, quick: bool = False) -> list[tuple[Variant, str]]:
    """Every step of every variant at least once (exactly, and just after), the rest at random."""
    if quick:
        by_name = {v.name: v for v in VARIANTS}
        return [(by_name[name], kind) for name, kind in QUICK_PLAN]
    plan: list[tuple[Variant, str]] = []
    for variant in VARIANTS:
        for step in variant.stages:
            plan.append((variant, step))
            if step != variant.stages[-1]:
                plan.append((variant, step + "+"))
    while len(plan) < count:
        variant = rng.choice(VARIANTS)
        roll = rng.random()
        if roll < 0.4:
            plan.append((variant, "timed"))
        elif roll < 0.6:
            plan.append((variant, rng.choice(variant.stages)))
        else:
            plan.append((variant, rng.choice(variant.stages[:-1]) + "+"))
    rng.shuffle(plan)
    return plan[:count] if count >= len(plan) else rng.sample(plan, count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=240, help="kill trials (default 240)")
    parser.add_argument("--races", type=int, default=20, help="two-process races (default 20)")
    parser.add_argument("--quick", action="store_true", help="10 chosen kills and 2 races: the CI run")
    parser.add_argument("--seed", type=int, default=20260601)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp folder, tmpfs if any)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    trials, races = (len(QUICK_PLAN), 2) if args.quick else (args.trials, args.races)
    rng = random.Random(args.seed)
    base = args.dir or Path(tempfile.gettempdir())
    if args.dir is None and Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
        base = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="dflash-kill-drill-", dir=base))
    results = Results()
    started = time.perf_counter()
    try:
        source = build_fixture(root)
        ref = make_reference(root, source)
        print(
            "fixture: speculators-dflash, 3 shards, "
            f"{sum(p.stat().st_size for p in source.iterdir()) / 1e6:.1f} MB; full runs: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in ref.durations.items()),
            flush=True,
        )
        for number, (variant, kind) in enumerate(plan_trials(trials, rng, args.quick), 1):
            description, killed, failure = one_trial(number, variant, kind, rng, root, source, ref)
            results.trials[variant.name] += 1
            results.killed[variant.name] += killed
            results.kinds[
                "at a random time"
                if kind == "timed"
                else ("just after " if kind.endswith("+") else "at ") + kind.rstrip("+")
            ] += 1
            results.outcomes["killed mid-run" if killed else "finished before the kill"] += 1
            parent = root / f"trial-{number}"
            # Staging folders are siblings of OUT (or of the folder rewritten in place).
            results.staging_leftovers += len(leftovers(parent))
            if variant.in_place and not failure and untidy(parent / "work", ref):
                results.untidy_in_place += 1
            if failure:
                results.failures.append(f"trial {number} ({description}): {failure}")
                print(f"  FAIL trial {number} ({description}): {failure}", flush=True)
            elif not args.keep:
                shutil.rmtree(parent, ignore_errors=True)
            if number % 25 == 0:
                print(f"  {number} trials, {len(results.failures)} failures", file=sys.stderr, flush=True)
        for number in range(1, races + 1):
            outcome, failure = race(number, rng, root, source, ref)
            results.races += 1
            results.race_outcomes[outcome.split(" (")[0]] += 1
            if failure:
                results.race_failures.append(f"race {number}: {failure}")
                print(f"  FAIL race {number}: {failure}", flush=True)
            elif not args.keep:
                shutil.rmtree(root / f"race-{number}", ignore_errors=True)
    finally:
        if not args.keep and not results.failures and not results.race_failures:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    total = sum(results.trials.values())
    print(f"kill drill (seed {args.seed}): {total} SIGKILL trials in {elapsed:.0f} s")
    for variant in VARIANTS:
        print(
            f"  {variant.name}: {results.trials[variant.name]} trials, "
            f"{results.killed[variant.name]} killed mid-run, the rest finished first"
        )
    print("  kill points: " + ", ".join(f"{k} {v}" for k, v in sorted(results.kinds.items())))
    print(f"failures: {len(results.failures)}")
    for failure in results.failures[:20]:
        print(f"  {failure}")
    print(
        f"staging folders left behind by kills (hidden .OUT{STAGING_MARK}*, never a valid-looking OUT): "
        f"{results.staging_leftovers}"
    )
    print(
        f"in-place runs recovered by a rerun but still naming interim *{INTERIM_MARK}.safetensors shards: "
        f"{results.untidy_in_place}"
    )
    print(f"races to the same OUT: {results.races}, failures: {len(results.race_failures)}")
    for outcome, count in sorted(results.race_outcomes.items()):
        print(f"  {outcome}: {count}")
    for failure in results.race_failures[:20]:
        print(f"  {failure}")
    if results.failures or results.race_failures:
        print(f"work folder kept: {root}")
    return 1 if results.failures or results.race_failures else 0


if __name__ == "__main__":
    sys.exit(main())
