"""Reference engine throughput: speculative decoding vs the target alone, measured in one run.

For each bundled demo draft (`dflash_tools/examples/engine-demo`, a tiny Qwen3 target with a
planted pattern and DFlash / DFlash2 drafts in both layouts) prints, as medians over --repeats:
  - tokens/s with speculation and with the target alone, and their ratio (the speed-up),
  - the mean acceptance length (1 + accepted / drafts),
  - the fraction of generation time spent in the draft (its forward, selector walk and context
    appends; the rest is the target's verify forwards and bookkeeping).

With --target and --draft it measures that pair instead (e.g. a real published pair on a GPU:
--device cuda --dtype bfloat16 --prompt "..." ; text prompts need the target's tokenizer).

    python bench/bench_engine.py [--max-tokens 128] [--repeats 3] [--device cpu]
    python bench/bench_engine.py --quick     # 1 prompt, 8 tokens, 1 run: for CI
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reference_engine import run_request
from dflash_tools_testing.demos import engine_demo as demo


def request_for(
    target: str, draft: str, algorithm: str, args: argparse.Namespace, prompt_ids: list[list[int]] | None
) -> dict[str, Any]:
    report = inspect_checkpoint(draft)
    geometry = report.geometry
    if geometry is None:
        raise SystemExit(f"{draft}: no geometry ({report.findings[0].message if report.findings else 'unknown'})")
    k, sfa = geometry.max_speculative_tokens, geometry.sample_from_anchor
    engine_args: dict[str, Any] = {"target_impl": args.target_impl}
    if args.threads:
        engine_args["num_threads"] = args.threads
    return {
        "schema_version": 1,
        "engine": "torch",
        "target": target,
        "draft": draft,
        "algorithm": algorithm,
        "num_speculative_tokens": k,
        "block_size": geometry.block_size,
        "sample_from_anchor": sfa,
        "num_query_tokens": k if sfa else k + 1,
        "prompts": list(args.prompt or []),
        "prompt_token_ids": prompt_ids,
        "max_tokens": args.max_tokens,
        "baseline": True,
        "seed": 0,
        "dtype": args.dtype,
        "device": args.device,
        "engine_args": engine_args,
        "env": {},
        "revision": None,
        "chat": args.chat,
    }


def measure(request: dict[str, Any], repeats: int) -> dict[str, float]:
    rows = []
    for _ in range(repeats):
        result = run_request(request)
        if not result["ok"]:
            raise SystemExit(f"{request['draft']}: {result['error']}")
        if not result["token_identical"]:
            print(f"warning: {request['draft']}: output differs from the target alone", file=sys.stderr)
        rows.append(
            {
                "spec_tps": result["tokens_per_second"],
                "base_tps": result["baseline"]["tokens_per_second"],
                "speedup": result["tokens_per_second"] / result["baseline"]["tokens_per_second"],
                "acceptance_length": result["mean_acceptance_length"],
                "draft_fraction": result["engine_details"]["draft_time_fraction"],
            }
        )
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4, help="demo prompts (token ids)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: the engine's default)")
    parser.add_argument("--target-impl", default="builtin", choices=["auto", "builtin", "transformers"])
    parser.add_argument("--target", help="measure this target instead of the demo")
    parser.add_argument("--draft", action="append", help="draft(s) to pair with --target")
    parser.add_argument("--algorithm", default=None, help="dflash or dflash2 (default: the draft's)")
    parser.add_argument("--prompt", action="append", help="text prompt (with --target)")
    parser.add_argument("--chat", action="store_true", help="apply the target's chat template")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--quick", action="store_true", help="1 prompt, 8 new tokens, 1 run (CI: it still runs)")
    args = parser.parse_args()
    if args.quick:
        args.max_tokens, args.repeats, args.prompts = 8, 1, 1

    cases: list[tuple[str, dict[str, Any]]] = []
    if args.target:
        if not args.draft or not args.prompt:
            parser.error("--target needs --draft and --prompt")
        for draft in args.draft:
            report = inspect_checkpoint(draft)
            algorithm = args.algorithm or (report.description.algorithm.value if report.description else "dflash")
            cases.append((f"{draft} ({algorithm})", request_for(args.target, draft, algorithm, args, None)))
    else:
        folder = demo.bundled_demo_dir()
        prompts = demo.demo_prompts(args.prompts, 12)
        for name, (_dialect, algorithm, _sfa) in demo.DEMO_DRAFTS.items():
            for served in ["dflash", "dflash2"] if algorithm == "dflash2" else ["dflash"]:
                label = f"{name} as {served}" if served != algorithm else name
                cases.append((label, request_for(str(folder / "target"), str(folder / name), served, args, prompts)))

    results = {label: measure(request, args.repeats) for label, request in cases}
    if args.json:
        print(json.dumps({"schema_version": 1, "max_tokens": args.max_tokens, "results": results}, indent=2))
        return
    print(f"reference engine, {args.max_tokens} new tokens per prompt, median of {args.repeats} runs")
    header = (
        f"{'draft':<36} {'spec tok/s':>10} {'target tok/s':>12} {'speed-up':>9} {'accept len':>10} {'draft time':>10}"
    )
    print(header)
    print("-" * len(header))
    for label, row in results.items():
        print(
            f"{label:<36} {row['spec_tps']:>10.0f} {row['base_tps']:>12.0f} {row['speedup']:>8.2f}x "
            f"{row['acceptance_length']:>10.2f} {row['draft_fraction']:>9.0%}"
        )


if __name__ == "__main__":
    main()
