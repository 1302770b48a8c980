"""The bundled CPU demos, trained: `engine-demo` and `vllm-cpu-demo` (docs/reference-engine.md,
"The trained demos").

Each bundle is a tiny Qwen3ForCausalLM target with a character tokenizer, trained on the
word-problem corpus (`corpus.py`), and z-lab drafts trained against it with the DFlash objective
in their own layout (`training.py`). `manifest.json` beside the folders records how they were
made (recipe, seeds, steps, CPU time, final losses), what they measured when they were made (the
layout A/B on the torch reference engine) and the sha256 of every file, so that an accidental edit
is caught without retraining (tests/reference_engine/test_trained_demos.py).

    python -m dflash_tools_testing.demos.bundle engine-demo [FOLDER]
    python -m dflash_tools_testing.demos.bundle vllm-cpu-demo [FOLDER]

regenerates one (default: the bundled folder). Bit-exact reproduction across machines is not
promised (float rounding in the BLAS differs); what a regeneration must reproduce is the A/B.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import dflash_tools_testing as testing
from dflash_tools.reading.local import examples_dir
from dflash_tools_testing.demos import checkpoints, corpus, engine_demo, vllm_cpu_demo
from dflash_tools_testing.demos.checkpoints import DemoShape
from dflash_tools_testing.demos.training import RECIPE, Recipe, encode_text, round_like_stored

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1
# The wrong-tap copy every A/B uses: the layers one below the declared (1, 2), the off-by-one a
# converter makes when it reads z-lab's `target_layer_ids` as hidden-state indices.
WRONG_TAPS = (0, 1)
K = 7


@dataclass(frozen=True)
class DraftEntry:
    dialect: str
    algorithm: str
    sample_from_anchor: bool


@dataclass(frozen=True)
class Bundle:
    """One bundled demo: its shape, stored dtype, seed, drafts and how each draft is described."""

    name: str
    shape: DemoShape
    dtype: str  # "BF16" (engine-demo) or "F32" (vllm-cpu-demo: vLLM and the engine read the same values)
    seed: int
    drafts: dict[str, DraftEntry]
    draft_spec: Callable[[DraftEntry], testing.DraftSpec]
    target_config: Callable[[], dict[str, Any]]
    draft_config_extra: dict[str, Any]
    recipe: Recipe = RECIPE

    @property
    def folder(self) -> Path:
        return examples_dir() / self.name


def _engine_draft_spec(entry: DraftEntry) -> testing.DraftSpec:
    # The trained DFlash2 drafts choose among 4 candidates (the planted ones among 8, a whole cycle).
    spec = engine_demo.draft_spec(entry.algorithm, sample_from_anchor=entry.sample_from_anchor)
    return replace(spec, selector_top_k=4, verifier="dflash-tools/engine-demo-target")


def _cpu_draft_spec(entry: DraftEntry) -> testing.DraftSpec:
    return vllm_cpu_demo.draft_spec(sample_from_anchor=entry.sample_from_anchor)


ENGINE_DEMO = Bundle(
    name=engine_demo.DEMO_DIR_NAME,
    shape=engine_demo.PATTERN,
    dtype="BF16",
    seed=engine_demo.DEMO_SEED,
    drafts={
        name: DraftEntry(dialect, algorithm, sfa) for name, (dialect, algorithm, sfa) in engine_demo.DEMO_DRAFTS.items()
    },
    draft_spec=_engine_draft_spec,
    target_config=lambda: engine_demo.target_config(engine_demo.PATTERN),
    draft_config_extra={},
)
VLLM_CPU_DEMO = Bundle(
    name=vllm_cpu_demo.DEMO_DIR_NAME,
    shape=vllm_cpu_demo.SPEC,
    dtype="F32",
    seed=vllm_cpu_demo.DEMO_SEED,
    drafts={name: DraftEntry("zlab-dflash", "dflash", sfa) for name, sfa in vllm_cpu_demo.DEMO_DRAFTS.items()},
    draft_spec=_cpu_draft_spec,
    target_config=lambda: vllm_cpu_demo.target_config(vllm_cpu_demo.SPEC),
    draft_config_extra={"dtype": "float32", "max_position_embeddings": vllm_cpu_demo.SPEC.max_position_embeddings},
)
BUNDLES = {bundle.name: bundle for bundle in (ENGINE_DEMO, VLLM_CPU_DEMO)}


def draft_config(bundle: Bundle, name: str) -> dict[str, Any]:
    entry = bundle.drafts[name]
    config = testing.make_config(entry.dialect, bundle.draft_spec(entry))
    config.update(bundle.draft_config_extra)
    return config


def expected_tables(bundle: Bundle) -> dict[str, list[testing.TensorSpec]]:
    """Folder -> the (name, dtype, shape) of every tensor its model.safetensors must hold."""
    shape = bundle.shape
    h, d = shape.hidden_size, shape.head_dim
    q, kv, inter = shape.target_heads * d, shape.target_kv_heads * d, shape.target_intermediate
    target: list[testing.TensorSpec] = [("model.embed_tokens.weight", bundle.dtype, (shape.vocab_size, h))]
    for layer in range(shape.target_layers):
        p = f"model.layers.{layer}."
        for name, dims in (
            ("input_layernorm.weight", (h,)),
            ("post_attention_layernorm.weight", (h,)),
            ("self_attn.q_proj.weight", (q, h)),
            ("self_attn.k_proj.weight", (kv, h)),
            ("self_attn.v_proj.weight", (kv, h)),
            ("self_attn.o_proj.weight", (h, q)),
            ("self_attn.q_norm.weight", (d,)),
            ("self_attn.k_norm.weight", (d,)),
            ("mlp.gate_proj.weight", (inter, h)),
            ("mlp.up_proj.weight", (inter, h)),
            ("mlp.down_proj.weight", (h, inter)),
        ):
            target.append((p + name, bundle.dtype, dims))
    target += [("model.norm.weight", bundle.dtype, (h,)), ("lm_head.weight", bundle.dtype, (shape.vocab_size, h))]
    tables = {"target": target}
    for name, entry in bundle.drafts.items():
        tables[name] = testing.tensor_table(bundle.draft_spec(entry))
    return tables


def prompt_ids(bundle: Bundle, count: int = len(corpus.PROMPTS)) -> list[list[int]]:
    """The smoke test's default prompts through the demo's character tokenizer."""
    return [encode_text(prompt, bundle.shape) for prompt in corpus.PROMPTS[:count]]


def wrong_tap_copy(draft: Path, destination: Path, taps: tuple[int, ...] = WRONG_TAPS) -> Path:
    """A copy of a z-lab draft folder whose config reads other target layers (same weights)."""
    shutil.copytree(draft, destination)
    config_path = destination / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["dflash_config"]["target_layer_ids"] = list(taps)
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return destination


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_hashes(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under `root` except the manifest."""
    return {
        path.relative_to(root).as_posix(): sha256(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }


def run_engine(
    target: Path, draft: Path, algorithm: str, sample_from_anchor: bool, prompts: list[list[int]], max_tokens: int
) -> dict[str, Any]:
    """One reference-engine run (float32 on the CPU, the built-in target); the result document."""
    from dflash_tools.reference_engine import run_request

    request = {
        "schema_version": 1,
        "engine": "torch",
        "target": str(target),
        "draft": str(draft),
        "algorithm": algorithm,
        "num_speculative_tokens": K,
        "block_size": K if sample_from_anchor else K + 1,
        "sample_from_anchor": sample_from_anchor,
        "num_query_tokens": K if sample_from_anchor else K + 1,
        "prompts": [],
        "prompt_token_ids": prompts,
        "max_tokens": max_tokens,
        "baseline": False,
        "seed": 0,
        "dtype": "float32",
        "device": "cpu",
        "engine_args": {"warmup": False, "target_impl": "builtin", "num_threads": 1},
        "env": {},
        "revision": None,
    }
    result = run_request(request)
    if not result["ok"]:
        raise RuntimeError(f"{draft}: {result['error']}")
    return result


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "mean_acceptance_length": round(result["mean_acceptance_length"], 3),
        "acceptance_rate_per_position": [round(rate, 3) for rate in result["acceptance_rate_per_position"]],
        "num_drafts": result["num_drafts"],
    }


def measure_ab(
    bundle: Bundle, root: Path, name: str, prompts: list[list[int]], max_tokens: int, scratch: Path
) -> dict[str, Any]:
    """The declared layout, the flipped one and the wrong-tap copy of draft `name` under `root`."""
    entry = bundle.drafts[name]
    target, draft = root / "target", root / name
    wrong = wrong_tap_copy(draft, scratch / f"{name}-wrong-taps")
    runs = {
        "declared": run_engine(target, draft, entry.algorithm, entry.sample_from_anchor, prompts, max_tokens),
        "flipped": run_engine(target, draft, entry.algorithm, not entry.sample_from_anchor, prompts, max_tokens),
        "wrong_taps": run_engine(target, wrong, entry.algorithm, entry.sample_from_anchor, prompts, max_tokens),
    }
    shutil.rmtree(wrong)
    return {role: _summary(result) for role, result in runs.items()}


def write_bundle(bundle: Bundle, root: Path, *, measure: bool = True) -> dict[str, Any]:
    """Train and write `target/`, every draft folder and `manifest.json` under `root`; the manifest."""
    from dflash_tools_testing.demos import training

    recipe = bundle.recipe
    root.mkdir(parents=True, exist_ok=True)
    problems = corpus.problems(recipe.corpus_problems, bundle.seed)
    started = time.process_time()
    raw, target_record = training.train_target(bundle.shape, problems, recipe, bundle.seed)
    config = bundle.target_config()
    checkpoints.write_target(root / "target", bundle.shape, raw, config, dtype=bundle.dtype)
    stored = round_like_stored(raw, bundle.dtype)
    data = training.target_answers(root / "target", bundle.shape, problems, recipe, bundle.seed + 5)
    records: dict[str, Any] = {
        "target": target_record,
        "target_answers": {"sequences": int(data.ids.shape[0]), "cpu_seconds": data.cpu_seconds},
    }
    for index, (name, entry) in enumerate(bundle.drafts.items()):
        dspec = bundle.draft_spec(entry)
        tensors, records[name] = training.train_draft(
            dspec, bundle.shape, stored, data, recipe, bundle.seed + 10 + index
        )
        checkpoints.write_draft(root / name, entry.dialect, dspec, tensors, config=draft_config(bundle, name))
    training_seconds = round(time.process_time() - started, 1)
    acceptance: dict[str, Any] = {}
    if measure:
        scratch = root / ".measure"
        scratch.mkdir(exist_ok=True)
        prompts = prompt_ids(bundle)
        acceptance = {
            name: measure_ab(bundle, root, name, prompts, MEASURE_MAX_TOKENS, scratch) for name in bundle.drafts
        }
        shutil.rmtree(scratch)
    manifest = {
        "schema_version": MANIFEST_SCHEMA,
        "bundle": bundle.name,
        "regenerate": f"python -m dflash_tools_testing.demos.bundle {bundle.name}",
        "seed": bundle.seed,
        "recipe": asdict(recipe),
        "training": {"cpu_seconds": training_seconds, **records},
        "acceptance": {
            "engine": "torch reference engine, float32, CPU",
            "prompts": f"the {len(corpus.PROMPTS)} default prompts (configs/prompts/gsm8k-style.jsonl)",
            "max_tokens": MEASURE_MAX_TOKENS,
            "num_speculative_tokens": K,
            "wrong_taps": list(WRONG_TAPS),
            "drafts": acceptance,
        },
        "files": file_hashes(root),
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


MEASURE_MAX_TOKENS = 64


def read_manifest(root: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    return value


if __name__ == "__main__":  # pragma: no cover - maintenance entry point (regenerates a bundle)
    import sys

    chosen = BUNDLES[sys.argv[1]]
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else chosen.folder
    if out.exists():
        for child in [out / "target", *(out / name for name in chosen.drafts)]:
            shutil.rmtree(child, ignore_errors=True)
    result = write_bundle(chosen, out)
    print(json.dumps({"training": result["training"], "acceptance": result["acceptance"]}, indent=2))
