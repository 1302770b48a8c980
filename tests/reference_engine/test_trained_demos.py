"""The trained CPU demo bundles (engine-demo, vllm-cpu-demo): what their manifest records, read
without torch and without retraining.

The bundles come from `python -m dflash_tools_testing.demos.bundle NAME` (training takes CPU
minutes; the `retrain` test in tests/smoke/test_trained_demo_ab.py reruns it on demand). Here each file is
checked against the sha256 the manifest recorded when it was trained, and every config, tokenizer
file and tensor header against what the recipe writes, so an accidental edit of a bundled file
(or of the recipe's shapes) fails the default suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_tools.plan.presets import load_prompts, resolve_prompts_path
from dflash_tools.reading.safetensors_header import read_local_header
from dflash_tools_testing.demos import bundle as bundles
from dflash_tools_testing.demos import checkpoints, corpus

BUNDLES = sorted(bundles.BUNDLES)
# The wheel ships both bundles: keep them small (engine-demo is bf16, vllm-cpu-demo float32).
MAX_BYTES = {"engine-demo": 1_000_000, "vllm-cpu-demo": 2_000_000}


def json_file(path: Path) -> object:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", BUNDLES)
def test_every_bundled_file_has_the_sha256_its_manifest_recorded(name: str) -> None:
    bundle = bundles.BUNDLES[name]
    manifest = bundles.read_manifest(bundle.folder)
    assert manifest["schema_version"] == bundles.MANIFEST_SCHEMA and manifest["bundle"] == name
    assert bundles.file_hashes(bundle.folder) == manifest["files"]
    total = sum(p.stat().st_size for p in bundle.folder.rglob("*") if p.is_file())
    assert total < MAX_BYTES[name]


@pytest.mark.parametrize("name", BUNDLES)
def test_configs_tokenizer_and_tensor_headers_are_what_the_recipe_writes(name: str) -> None:
    bundle = bundles.BUNDLES[name]
    folder = bundle.folder
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == sorted(["target", *bundle.drafts])
    assert json_file(folder / "target" / "config.json") == bundle.target_config()
    for file, document in checkpoints.tokenizer_files(bundle.shape).items():
        assert json_file(folder / "target" / file) == document, file
    for draft in bundle.drafts:
        assert json_file(folder / draft / "config.json") == bundles.draft_config(bundle, draft), draft
    for part, table in bundles.expected_tables(bundle).items():
        header = read_local_header(folder / part / "model.safetensors")
        assert [(t.name, t.dtype, t.shape) for t in header.tensors.values()] == table, part


@pytest.mark.parametrize("name", BUNDLES)
def test_manifest_says_how_the_bundle_was_made(name: str) -> None:
    bundle = bundles.BUNDLES[name]
    manifest = bundles.read_manifest(bundle.folder)
    assert manifest["regenerate"] == f"python -m dflash_tools_testing.demos.bundle {name}"
    assert manifest["seed"] == bundle.seed and manifest["recipe"] == bundles.asdict(bundle.recipe)
    training = manifest["training"]
    assert set(training) == {"cpu_seconds", "target", "target_answers", *bundle.drafts}
    assert training["target"]["steps"] == bundle.recipe.target_steps
    assert all(training[d]["steps"] == bundle.recipe.draft_steps for d in bundle.drafts)
    assert set(manifest["acceptance"]["drafts"]) == set(bundle.drafts)


def test_the_corpus_prompts_are_the_default_prompts() -> None:
    """The corpus copies configs/prompts/gsm8k-style.jsonl; an edit there must be a decision here."""
    assert list(corpus.PROMPTS) == load_prompts(resolve_prompts_path(None)).texts
    assert all(ord(c) < 126 for c in corpus.corpus_text(200, 1))
    assert corpus.problems(5, 3) == corpus.problems(5, 3) != corpus.problems(5, 4)


def test_the_demo_modules_import_without_torch() -> None:
    code = (
        "import sys, dflash_tools_testing.demos.bundle, dflash_tools_testing.demos.training; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
