"""convert: config-only work must not grow with the weights; a repack must stream like `cp`.

(a) Config-only normalization of sparse checkpoints: ~60 GB of real Qwen3.8-27B-DFlash2 layer
    shapes (90 layers, 16 shards) and the same 1356 tensors and 16 shards at ~6 GB (narrower
    layers): time of each and their ratio (should be ~1: only the weight bytes differ), and the
    weight bytes copied (0: unchanged shards are hard-linked). For scale, also a real-width ~6 GB
    checkpoint (9 layers, 2 shards): the cost follows the tensor count (headers), not the bytes.
(b) A conversion that must drop a tensor (speculators -> z-lab drops `embed_tokens.weight`) on
    real (random, non-sparse) data, ~0.5 GB and ~2 GB, each run in a child process:
      - throughput as a ratio of `cp` on the same files (page cache warm for both),
      - peak RSS of the child for both sizes (VmHWM, i.e. ru_maxrss of the exec'd image: Linux
        ru_maxrss also counts the forking parent's pages): it must not grow with the size,
      - the same drop done by loading with safetensors (numpy) and saving again.
    The kernel-copy path (copy_file_range) and the bounded-buffer path are both measured.

Everything lives in a temporary folder (on the file system of --dir, default the system temp
dir) that is removed at the end.

    python bench/bench_convert.py [--dir DIR] [--large-gb 2]   # the figures in docs/benchmarks.md
    python bench/bench_convert.py --quick                      # every step once, on MBs: for CI
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import dflash_tools_testing as testing
from dflash_tools.reading.safetensors_header import expected_nbytes

# F16 has BF16's size; the numpy baseline cannot hold BF16.
REAL = replace(testing.QWEN38_27B_DFLASH2, layer_types=None, dtype="F16")
LARGE_SPARSE = replace(REAL, num_hidden_layers=90)
# Same names, count and shards as LARGE_SPARSE; a tenth of the bytes.
NARROW_SPARSE = replace(
    LARGE_SPARSE, hidden_size=1536, intermediate_size=5376, num_attention_heads=12, num_key_value_heads=4
)
FEW_LAYERS_SPARSE = replace(REAL, num_hidden_layers=9)


def table_bytes(spec: testing.DraftSpec) -> int:
    return sum(expected_nbytes(d, s) for _, d, s in testing.tensor_table(spec))


def dense_spec(target_bytes: int, *, quick: bool = False) -> testing.DraftSpec:
    """A speculators DFlash draft with its (older-save) embed_tokens, about `target_bytes` big
    (`quick`: at a small width and vocabulary, so that a few MB are possible)."""
    base = replace(
        testing.TINY,
        hidden_size=256 if quick else 2048,
        num_attention_heads=2 if quick else 16,
        num_key_value_heads=1 if quick else 4,
        head_dim=128,
        intermediate_size=512 if quick else 6144,
        vocab_size=4096 if quick else 151936,
        mask_token_id=4000 if quick else 151669,
        target_layer_ids=(1, 9, 17, 25, 33),
        num_target_layers=36,
        layer_types=None,
        dtype="F16",
        with_embed_tokens=True,
        num_hidden_layers=1,
    )
    per_layer = table_bytes(replace(base, num_hidden_layers=2)) - table_bytes(base)
    layers = max(1, round((target_bytes - table_bytes(base)) / per_layer) + 1)
    return replace(base, num_hidden_layers=layers)


def write_dense(folder: Path, spec: testing.DraftSpec) -> Path:
    """Real bytes (not sparse): a random block (64 MiB, or the size of the largest tensor) repeated,
    so the disk really holds them."""
    rng = np.random.default_rng(0)
    block = rng.bytes(min(64 << 20, max(expected_nbytes(d, s) for _, d, s in testing.tensor_table(spec))))
    data = {}
    for name, dtype, shape in testing.tensor_table(spec):
        size = expected_nbytes(dtype, shape)
        data[name] = (block * (size // len(block) + 1))[:size]
    return testing.write_checkpoint(folder, "speculators-dflash", spec, data=data)


def settle() -> None:
    """Flush dirty pages first, so one measurement does not pay for the previous one's writeback."""
    os.sync()


def timed(command: list[str]) -> float:
    settle()
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


PEAK_RSS = """
def peak_rss_kb():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

CHILD_CONVERT = (
    PEAK_RSS
    + """
import json, sys, time
from dflash_tools.convert import repack
from dflash_tools.convert import convert_checkpoint
if sys.argv[3] == "buffered":
    original = repack.copy_range
    def buffered(*args, **kwargs):
        kwargs["kernel_copy"] = False
        return original(*args, **kwargs)
    repack.copy_range = buffered
start = time.perf_counter()
result = convert_checkpoint(sys.argv[1], sys.argv[2], to="zlab")
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "maxrss_kb": peak_rss_kb(), "weight_bytes_copied": result.weight_bytes_copied}))
"""
)

CHILD_SAFETENSORS = (
    PEAK_RSS
    + """
import json, sys, time
from safetensors.numpy import load_file, save_file
start = time.perf_counter()
tensors = load_file(sys.argv[1])
del tensors["embed_tokens.weight"]
save_file(tensors, sys.argv[2], metadata={"format": "pt"})
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "maxrss_kb": peak_rss_kb()}))
"""
)

CHILD_BASELINE = (
    PEAK_RSS
    + """
import json
import dflash_tools.convert
print(json.dumps({"maxrss_kb": peak_rss_kb()}))
"""
)


def child(code: str, *args: str) -> dict[str, float]:
    settle()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def warm(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(16 << 20):
            pass


def bench_config_only(root: Path, attempts: int) -> None:
    from dflash_tools.convert import convert_checkpoint

    print("(a) config-only normalization of sparse checkpoints (Qwen3.8-27B-DFlash2 layer shapes)")
    rows = []
    for label, spec, shards in (
        ("~6 GB", NARROW_SPARSE, 16),
        ("~60 GB", LARGE_SPARSE, 16),
        ("~6 GB*", FEW_LAYERS_SPARSE, 2),
    ):
        source = testing.write_checkpoint(root / f"sparse-{shards}", "zlab-dflash2", spec, shards=shards)
        times = []
        copied = linked = 0
        for attempt in range(attempts):
            out = root / f"sparse-{shards}-out-{attempt}"
            start = time.perf_counter()
            result = convert_checkpoint(str(source), out)
            times.append(time.perf_counter() - start)
            copied, linked = result.weight_bytes_copied, result.bytes_linked
            shutil.rmtree(out)
        rows.append((label, table_bytes(spec), shards, statistics.median(times), copied, linked))
        shutil.rmtree(source)
    tensors = {
        label: len(testing.tensor_table(spec))
        for label, spec in (("~6 GB", NARROW_SPARSE), ("~60 GB", LARGE_SPARSE), ("~6 GB*", FEW_LAYERS_SPARSE))
    }
    for label, weight_bytes, shards, seconds, copied, linked in rows:
        print(
            f"  {label:7s} {weight_bytes / 1e9:6.2f} GB, {tensors[label]:4d} tensors in {shards:2d} shards: "
            f"{seconds * 1000:7.1f} ms (median of {attempts}), weight bytes copied {copied}, hard-linked {linked / 1e9:.2f} GB"
        )
    ratio = rows[1][3] / rows[0][3]
    print(
        f"  time ratio 60 GB / 6 GB (same tensors and shards) = {ratio:.2f} for {rows[1][1] / rows[0][1]:.1f}x "
        "the weight bytes (~1 expected)"
    )
    print(
        f"  * real widths, 9 layers: {rows[1][3] / rows[2][3]:.1f}x faster than 90 layers for "
        f"{tensors['~60 GB'] / tensors['~6 GB*']:.1f}x fewer tensors: the cost is per tensor header, not per byte"
    )


def bench_repack(root: Path, small_gb: float, large_gb: float, attempts: int, quick: bool) -> None:
    print("(b) conversion that drops a tensor (speculators -> z-lab, embed_tokens), real data")
    baseline = child(CHILD_BASELINE)["maxrss_kb"]
    print(f"  child baseline (python + dflash_tools.convert imported): {baseline / 1024:.0f} MiB RSS")
    results = {}
    for label, gb in (("small", small_gb), ("large", large_gb)):
        spec = dense_spec(int(gb * 1e9), quick=quick)
        source = write_dense(root / f"dense-{label}", spec)
        weights = source / "model.safetensors"
        size = weights.stat().st_size
        warm(weights)
        cp_times, cp_sync_times = [], []
        for attempt in range(attempts):
            target = root / f"cp-{label}-{attempt}"
            cp_times.append(timed(["cp", "--reflink=never", str(weights), str(target)]))
            target.unlink()
            # convert fsyncs what it writes (a crash must not leave a file that looks complete).
            cp_sync_times.append(
                timed(["sh", "-c", 'cp --reflink=never "$0" "$1" && sync "$1"', str(weights), str(target)])
            )
            target.unlink()
        runs: dict[str, dict[str, float]] = {}
        for mode in ("kernel", "buffered"):
            for attempt in range(attempts):
                out = root / f"out-{label}-{mode}-{attempt}"
                run = child(CHILD_CONVERT, str(source), str(out), mode)
                if mode not in runs or run["seconds"] < runs[mode]["seconds"]:
                    runs[mode] = run
                shutil.rmtree(out)
        safetensors_run = None
        if label == "large":
            out_file = root / "safetensors-out.safetensors"
            safetensors_run = child(CHILD_SAFETENSORS, str(weights), str(out_file))
            out_file.unlink()
        results[label] = (size, min(cp_times), min(cp_sync_times), runs, safetensors_run)
        shutil.rmtree(source)
    for label, (size, cp_seconds, cp_sync_seconds, runs, safetensors_run) in results.items():
        print(
            f"  {label}: {size / 1e9:.2f} GB file; cp --reflink=never {cp_seconds:.2f} s "
            f"({size / cp_seconds / 1e9:.2f} GB/s), cp + sync {cp_sync_seconds:.2f} s"
        )
        for mode, run in runs.items():
            print(
                f"    convert ({mode:8s} copy): {run['seconds']:.2f} s = {cp_seconds / run['seconds']:.2f}x cp's "
                f"throughput, {cp_sync_seconds / run['seconds']:.2f}x cp+sync's "
                f"({run['weight_bytes_copied'] / run['seconds'] / 1e9:.2f} GB/s written, fsynced); "
                f"peak RSS {run['maxrss_kb'] / 1024:.0f} MiB "
                f"(+{(run['maxrss_kb'] - baseline) / 1024:.0f} MiB over baseline); "
                f"weight bytes written {run['weight_bytes_copied'] / 1e9:.2f} GB"
            )
        if safetensors_run is not None:
            print(
                f"    safetensors load+save (numpy): {safetensors_run['seconds']:.2f} s = "
                f"{cp_seconds / safetensors_run['seconds']:.2f}x cp's throughput; peak RSS "
                f"{safetensors_run['maxrss_kb'] / 1024:.0f} MiB"
            )
    small, large = results["small"], results["large"]
    for mode in ("kernel", "buffered"):
        growth = (large[3][mode]["maxrss_kb"] - small[3][mode]["maxrss_kb"]) / 1024
        print(
            f"  peak RSS growth from {small[0] / 1e9:.2f} GB to {large[0] / 1e9:.2f} GB ({mode}): {growth:+.0f} MiB "
            f"(the file grew by {(large[0] - small[0]) / 2**20:.0f} MiB)"
        )
    baseline_run = large[4]
    assert baseline_run is not None
    speedup = baseline_run["seconds"] / large[3]["kernel"]["seconds"]
    print(
        f"  convert vs safetensors load+save on {large[0] / 1e9:.2f} GB: {speedup:.1f}x faster, "
        f"{baseline_run['maxrss_kb'] / large[3]['kernel']['maxrss_kb']:.1f}x less peak RSS"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="where to put the temporary files (same file system as real use)")
    parser.add_argument("--small-gb", type=float, default=0.5)
    parser.add_argument("--large-gb", type=float, default=2.0)
    parser.add_argument("--skip-repack", action="store_true")
    parser.add_argument("--quick", action="store_true", help="every step once, on a few MB (CI: it still runs)")
    args = parser.parse_args()
    if args.quick:
        args.small_gb, args.large_gb = 0.005, 0.02
    root = Path(tempfile.mkdtemp(prefix="dflash-tools-bench-convert-", dir=args.dir))
    start = time.perf_counter()
    try:
        bench_config_only(root, 1 if args.quick else 5)
        if not args.skip_repack:
            bench_repack(root, args.small_gb, args.large_gb, 1 if args.quick else 2, args.quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
