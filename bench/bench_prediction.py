"""The K sweep's predicted speed-up against the measured one, on the bundled CPU demos.

`smoke-test -k 1,3,7` measures each K and predicts the speed-up of every K from the largest
measured one (docs/smoke-test.md, "The K sweep"). This runs that sweep through the torch
reference engine on each DFlash demo draft of `example:engine-demo` (a DFlash2 draft serves only
its trained K: nothing to compare) and prints, per measured K other than the reference:

  - the measured speed-up: the median of the timed repetitions, with its range,
  - the predicted speed-up,
  - predicted / measured, with the range the measured spread allows, and whether it is within
    15% (the sweep's own PREDICTION_TOLERANCE) or inside the measured spread.

It goes through the same core entry point as the command (`smoke.run.smoke_test`), so the
figures are the ones the report prints; the sweep section's `prediction_check` says why the model
does not hold where it misses.

    python bench/bench_prediction.py [-k 1,3,7] [--max-tokens 64] [--prompts 4] [--repeat 5]
    python bench/bench_prediction.py --quick     # one draft, K 1 and 3, 8 tokens, 2 repetitions: CI
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from dflash_tools.plan.presets import DraftEntry, Floor
from dflash_tools.serving.k_values import parse_k_values
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.run import smoke_test
from dflash_tools.smoke.sweep import PREDICTION_TOLERANCE
from dflash_tools_testing.demos import engine_demo as demo


def sweep(draft: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One draft's K sweep through the torch engine: its document's sweep section and runs."""
    options = SmokeOptions(
        target="example:engine-demo/target",
        drafts=[DraftEntry(f"example:engine-demo/{draft}")],
        prompts=[],
        prompt_token_ids=demo.demo_prompts(args.prompts, 12),
        prompts_source="engine-demo prompts",
        k_values=args.k_values,
        engine="torch",
        device="cpu",
        max_tokens=args.max_tokens,
        repeat=args.repeat,
        # The demo drafts are planted, not judged here: any acceptance passes.
        floor=Floor(mean_acceptance_length=1.0, first_position_rate=0.0, provenance="bench"),
        output_dir=work / draft,
    )
    document = smoke_test(options)
    (entry,) = document["drafts"]
    if not entry["runs"]:
        raise SystemExit(f"{draft}: {entry['verdict']['reasons']}")
    return entry


def compare(entry: dict[str, Any]) -> dict[str, Any]:
    """Per measured K but the reference: measured and predicted speed-up, and their ratio."""
    section = entry.get("k_sweep") or {}
    prediction = section.get("prediction") or {}
    reference = (prediction.get("model") or {}).get("reference_k")
    rows = []
    for row in section.get("rows", []):
        k, measured, predicted = row["num_speculative_tokens"], row["speedup_spread"], row["predicted_speedup"]
        if k == reference or measured is None or predicted is None:
            continue
        rows.append(
            {
                "k": k,
                "measured": measured,
                "predicted": predicted,
                "ratio": predicted / measured["median"],
                "ratio_low": predicted / measured["high"],
                "ratio_high": predicted / measured["low"],
                "within_tolerance": abs(predicted / measured["median"] - 1) <= PREDICTION_TOLERANCE,
                "within_spread": measured["samples"] > 1 and measured["low"] <= predicted <= measured["high"],
            }
        )
    check = section.get("prediction_check") or {}
    return {
        "reference_k": reference,
        "available": bool(prediction.get("available")),
        "reason": prediction.get("reason"),
        "rows": rows,
        "holds": check.get("holds"),
        "why_not": check.get("why_not"),
        "best_measured": section.get("best_measured"),
        "no_best_measured": section.get("no_best_measured"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="1,3,7", help="the K to measure (the largest is the reference)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4, help="demo prompts (token ids)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions of each K")
    parser.add_argument("--draft", action="append", help="demo draft(s) (default: every DFlash demo draft)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--quick", action="store_true", help="one draft, K 1 and 3, 8 tokens, 2 repetitions (CI)")
    args = parser.parse_args()
    if args.quick:
        args.k, args.max_tokens, args.prompts, args.repeat = "1,3", 8, 1, 2
    args.k_values = parse_k_values(args.k)
    drafts = args.draft or [name for name, (_, algorithm, _) in demo.DEMO_DRAFTS.items() if algorithm == "dflash"]
    if args.quick:
        drafts = drafts[:1]

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-prediction-") as work:
        for draft in drafts:
            print(f"measuring {draft} at K = {args.k} ...", file=sys.stderr)
            results[draft] = compare(sweep(draft, args, Path(work)))
    if args.json:
        document = {"schema_version": 1, "tolerance": PREDICTION_TOLERANCE, "repeat": args.repeat, "results": results}
        print(json.dumps(document, indent=2))
        return
    print(
        f"predicted vs measured speed-up, torch engine on CPU, {args.prompts} prompts x {args.max_tokens} tokens, "
        f"{args.repeat} timed repetitions per K (median, range)"
    )
    header = f"{'draft':<28} {'K':>3} {'measured':>22} {'predicted':>9} {'predicted/measured':>24}"
    print(header)
    print("-" * len(header))
    for draft, found in results.items():
        if not found["available"]:
            print(f"{draft:<28} no prediction: {found['reason']}")
            continue
        for row in found["rows"]:
            measured = row["measured"]
            shown = f"{measured['median']:.2f}x ({measured['low']:.2f}-{measured['high']:.2f})"
            ratio = f"{row['ratio']:.2f} ({row['ratio_low']:.2f}-{row['ratio_high']:.2f})"
            mark = " ok" if row["within_tolerance"] or row["within_spread"] else " off"
            print(f"{draft:<28} {row['k']:>3} {shown:>22} {row['predicted']:>8.2f}x {ratio:>21}{mark}")
        if found["why_not"]:
            print(f"  {draft}: {found['why_not']}")
    print(f"ok: within {PREDICTION_TOLERANCE:.0%} of the measured median or inside its range; off: neither")


if __name__ == "__main__":
    main()
