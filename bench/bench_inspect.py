"""inspect reads headers only: its time must not grow with the weight bytes.

Builds sparse checkpoints (no disk cost) in 16 shards: ~60 GB of real Qwen3.8-27B-DFlash2 layer
shapes (90 layers), and the same tensor names at a tenth of the width (~0.7 GB), then prints,
measured in this run:
  - inspect time for each and their ratio (should be ~1: same tensors, ~70x the bytes),
  - bytes read by inspect vs the weight bytes,
  - the ratio against loading the 60 GB checkpoint with safetensors (numpy, tensor by tensor,
    so memory stays bounded; capped at --load-seconds and extrapolated from the bytes loaded).
CLI start-up is bench/bench_startup.py's.

    python bench/bench_inspect.py [--load-seconds 60]   # the figures in docs/benchmarks.md
    python bench/bench_inspect.py --quick               # one inspect each, 1 s of loading: for CI
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import dflash_tools_testing as testing
from dflash_tools.inspect import inspect_checkpoint

# F16 has BF16's size; numpy (the torch-free safetensors loader used as baseline) cannot hold BF16.
REAL = replace(testing.QWEN38_27B_DFLASH2, num_hidden_layers=90, layer_types=None, dtype="F16")
# Same tensor names and count, a tenth of the width: only the weight bytes differ.
NARROW = replace(REAL, hidden_size=512, intermediate_size=1792, num_attention_heads=4, num_key_value_heads=1)


def build(root: Path, name: str, spec: testing.DraftSpec) -> Path:
    return testing.write_checkpoint(root / name, "zlab-dflash2", spec, shards=16)


def time_inspect(folder: Path, repeats: int = 5) -> tuple[float, int, int]:
    times = []
    report = None
    for _ in range(repeats):
        start = time.perf_counter()
        report = inspect_checkpoint(str(folder))
        times.append(time.perf_counter() - start)
    assert report is not None
    doc = report.to_dict()
    return statistics.median(times), doc["tensors"]["header_bytes_read"], doc["tensors"]["bytes"]


def time_safetensors_load(folder: Path, budget: float) -> tuple[float, int, bool]:
    from safetensors import safe_open

    loaded = 0
    start = time.perf_counter()
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), framework="numpy") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                loaded += handle.get_tensor(name).nbytes
                if time.perf_counter() - start > budget:
                    return time.perf_counter() - start, loaded, True
    return time.perf_counter() - start, loaded, False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="one inspect of each, 1 s of loading (CI)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 5
    if args.quick:
        args.load_seconds = 1.0
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as tmp:
        root = Path(tmp)
        small, large = build(root, "narrow", NARROW), build(root, "real", REAL)
        t_small, read_small, bytes_small = time_inspect(small, repeats)
        t_large, read_large, bytes_large = time_inspect(large, repeats)
        print(
            f"inspect  {bytes_small / 1e9:6.2f} GB, 16 shards: {t_small * 1000:7.1f} ms, header bytes read {read_small:,}"
        )
        print(
            f"inspect  {bytes_large / 1e9:6.2f} GB, 16 shards: {t_large * 1000:7.1f} ms, header bytes read {read_large:,}"
        )
        print(
            f"ratio time(large) / time(small) = {t_large / t_small:.2f}  "
            f"(same {len(testing.tensor_table(REAL))} tensors, weight bytes ratio {bytes_large / bytes_small:.0f}x)"
        )
        print(f"bytes read / weight bytes (60 GB) = {read_large / bytes_large:.2e}")
        t_load, loaded, capped = time_safetensors_load(large, args.load_seconds)
        full_load = t_load * bytes_large / loaded if loaded else float("inf")
        note = f" (stopped after {t_load:.0f} s at {loaded / 1e9:.1f} GB, extrapolated)" if capped else ""
        print(f"safetensors load of the 60 GB checkpoint: {full_load:.1f} s{note}")
        print(f"ratio load / inspect = {full_load / t_large:,.0f}x")
        print(f"disk actually used by both checkpoints: {testing.disk_usage(root) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
