"""The plugin's wrappers, its import hook, its markers, and `register()` end to end.

There is no vLLM (nor a GPU) in CI, so `register()` runs in a subprocess against a stand-in
`vllm` package assembled from the real 0.33.0 sources: every fingerprinted function is copied
verbatim from the wheel into a class of the same name, so the plugin's version check, its
fingerprint check, its live checks, its wrappers and its import hook all run on the real function
objects. Functions that need CUDA are installed but not called; the wrappers' own logic is
exercised below with plain objects that carry the attributes vLLM's configs carry.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dflash_tools.vllm_plugin import patch
from dflash_tools.vllm_plugin.markers import (
    MARKER_DIR_ENV,
    REQUIRE_ENV,
    read_markers,
    summarize,
    write_marker,
)
from dflash_tools.vllm_plugin.sources import find_function, wheel_reader
from tests.vllm_wheel import wheel_fixture

# --- plain objects shaped like vLLM's configs -----------------------------------------------


def speculative_config(
    *,
    sample_from_anchor: bool | None,
    k: int = 7,
    method: str = "dflash",
    architectures: tuple[str, ...] = ("DFlash2DraftModel",),
) -> SimpleNamespace:
    dflash_config: dict[str, Any] = {"mask_token_id": 1}
    if sample_from_anchor is not None:
        dflash_config["sample_from_anchor"] = sample_from_anchor
    hf_config = SimpleNamespace(dflash_config=dflash_config)
    draft = SimpleNamespace(hf_config=hf_config, architectures=list(architectures))
    return SimpleNamespace(method=method, num_speculative_tokens=k, draft_model_config=draft)


def test_anchor_first_detection() -> None:
    assert patch.anchor_first_dflash(speculative_config(sample_from_anchor=True))
    assert not patch.anchor_first_dflash(speculative_config(sample_from_anchor=False))
    assert not patch.anchor_first_dflash(speculative_config(sample_from_anchor=None))
    assert not patch.anchor_first_dflash(speculative_config(sample_from_anchor=True, method="dspark"))
    assert not patch.anchor_first_dflash(
        speculative_config(sample_from_anchor=True, architectures=("LiLiCorrDraftModel",))
    )
    assert not patch.anchor_first_dflash(
        speculative_config(sample_from_anchor=True, architectures=("Qwen3XPressModel",))
    )
    assert not patch.anchor_first_dflash(None)
    assert patch.num_query_tokens(speculative_config(sample_from_anchor=True)) == 7
    assert patch.num_query_tokens(speculative_config(sample_from_anchor=False)) == 8


def test_compute_hash_separates_layouts_and_keeps_stock_hashes() -> None:
    wrapped = patch.wrap_compute_hash(lambda self: "stock")
    bonus = speculative_config(sample_from_anchor=False)
    anchor = speculative_config(sample_from_anchor=True)
    anchor_k6 = speculative_config(sample_from_anchor=True, k=6)
    assert wrapped(bonus) == "stock"
    assert wrapped(anchor) not in ("stock", wrapped(anchor_k6))
    assert getattr(wrapped, patch.WRAPPED_ATTR) is not None


def test_lookahead_and_v1_refusal() -> None:
    lookahead = patch.wrap_num_lookahead_tokens(lambda self: self.speculative_config.num_speculative_tokens + 1)
    assert lookahead(SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=True))) == 7
    assert lookahead(SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=False))) == 8
    features = patch.wrap_v1_unsupported_features(lambda self: ["other"])
    assert features(SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=False))) == ["other"]
    assert features(SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=True))) == [
        "other",
        patch.V1_FEATURE,
    ]


class DFlashSpeculator:
    """Shaped like vLLM's: the stock constructor raises on the flag and sets 1 + K queries."""

    def __init__(self, vllm_config: Any, device: Any) -> None:
        spec = vllm_config.speculative_config
        self.num_speculative_steps = spec.num_speculative_tokens
        self.num_query_per_req = 1 + self.num_speculative_steps
        if spec.draft_model_config.hf_config.dflash_config.get("sample_from_anchor", False):
            raise ValueError("sample_from_anchor=True is not supported for DFlash.")
        self.sample_from_anchor = False


class DFlash2Speculator(DFlashSpeculator):
    pass


class DSparkSpeculator(DFlashSpeculator):
    pass


def test_speculator_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARKER_DIR_ENV, str(tmp_path))
    original = DFlashSpeculator.__init__
    monkeypatch.setattr(DFlashSpeculator, "__init__", patch.wrap_speculator_init(original))
    anchor = SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=True))
    speculator = DFlash2Speculator(anchor, "cuda")
    assert (speculator.num_query_per_req, speculator.sample_from_anchor) == (7, True)
    # The flag is hidden only for the duration of the stock constructor.
    assert anchor.speculative_config.draft_model_config.hf_config.dflash_config["sample_from_anchor"] is True
    bonus = DFlashSpeculator(SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=False)), "cuda")
    assert (bonus.num_query_per_req, bonus.sample_from_anchor) == (8, False)
    with pytest.raises(ValueError, match="not supported for DFlash"):
        DSparkSpeculator(anchor, "cuda")  # subclasses keep stock behaviour
    events = summarize(read_markers(tmp_path), required=True)["speculators"]
    assert [(e["class"], e["num_query_per_req"], e["sample_from_anchor"]) for e in events] == [
        ("DFlash2Speculator", 7, True),
        ("DFlashSpeculator", 8, False),
    ]


def test_speculator_wrapper_restores_the_flag_when_the_constructor_fails() -> None:
    def failing(self: Any, vllm_config: Any, device: Any) -> None:
        raise RuntimeError("out of memory")

    wrapped = patch.wrap_speculator_init(failing)
    config = SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=True))
    with pytest.raises(RuntimeError, match="out of memory"):
        wrapped(DFlashSpeculator.__new__(DFlashSpeculator), config, "cuda")
    assert config.speculative_config.draft_model_config.hf_config.dflash_config["sample_from_anchor"] is True


def test_beam_drafts_are_refused_in_anchor_mode() -> None:
    config = SimpleNamespace(
        speculative_config=speculative_config(sample_from_anchor=True, architectures=("DFlash2BeamDraftModel",))
    )
    with pytest.raises(ValueError, match="DFlash2BeamDraftModel"):
        patch.wrap_speculator_init(DFlashSpeculator.__init__)(
            DFlash2Speculator.__new__(DFlash2Speculator), config, "cuda"
        )


def test_conv_block_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARKER_DIR_ENV, str(tmp_path))

    class Layer:
        def __init__(self, vllm_config: Any, *, config: Any = None, layer_idx: int = 0) -> None:
            block = 1 + vllm_config.speculative_config.num_speculative_tokens
            self.attention_conv = SimpleNamespace(block_size=block)
            self.mlp_conv = SimpleNamespace(block_size=block)

    init = patch.wrap_dflash2_layer_init(Layer.__init__)
    anchor, bonus = Layer.__new__(Layer), Layer.__new__(Layer)
    init(anchor, SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=True)), layer_idx=0)
    init(bonus, SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=False)), layer_idx=1)
    assert (anchor.attention_conv.block_size, anchor.mlp_conv.block_size) == (7, 7)
    assert (bonus.attention_conv.block_size, bonus.mlp_conv.block_size) == (8, 8)
    assert summarize(read_markers(tmp_path), required=False)["conv_block_sizes"] == [7]


def test_v1_proposer_fails_loudly_in_anchor_mode() -> None:
    calls: list[str] = []
    init = patch.wrap_v1_proposer_init(lambda self, vllm_config, device: calls.append("stock"))
    with pytest.raises(ValueError, match="VLLM_USE_V2_MODEL_RUNNER=1"):
        init(object(), SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=True)), "cuda")
    init(object(), SimpleNamespace(speculative_config=speculative_config(sample_from_anchor=False)), "cuda")
    assert calls == ["stock"]


def test_markers_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MARKER_DIR_ENV, raising=False)
    assert write_marker("plugin", {"status": "patched"}) is None  # outside a smoke test: nothing written
    monkeypatch.setenv(MARKER_DIR_ENV, str(tmp_path / "markers"))
    write_marker("plugin", {"status": "patched"})
    (tmp_path / "markers" / "broken.json").write_text("{", encoding="utf-8")
    markers = read_markers(tmp_path / "markers")
    assert len(markers) == 1
    import os

    state = summarize(markers, required=True, launcher_pid=os.getpid())
    assert state["active"] and state["statuses"] == ["patched"]
    assert not summarize(markers, required=True, launcher_pid=os.getpid() + 1)["active"]
    markers.append({"event": "plugin", "status": "refused", "reason": "vLLM 0.34.0", "pid": 1})
    state = summarize(markers, required=True)
    assert not state["active"] and state["reasons"] == ["vLLM 0.34.0"]


def test_import_hook_patches_a_module_when_it_is_first_imported(tmp_path: Path) -> None:
    """The real importlib machinery: the plugin never imports model code itself."""
    package = tmp_path / "hooked_pkg_for_dflash_tools"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "model.py").write_text("class Layer:\n    block_size = 8\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    seen: list[str] = []
    try:

        def callback(module: Any) -> None:
            seen.append(module.__name__)
            module.Layer.block_size = 7

        patch._when_imported("hooked_pkg_for_dflash_tools.model", callback)
        assert seen == []
        import hooked_pkg_for_dflash_tools.model as model  # type: ignore[import-not-found]

        assert seen == ["hooked_pkg_for_dflash_tools.model"]
        assert model.Layer.block_size == 7
        assert model.__loader__.__class__.__name__ == "SourceFileLoader"  # handed back to its loader
        patch._when_imported("hooked_pkg_for_dflash_tools.model", callback)  # already imported: at once
        assert seen == ["hooked_pkg_for_dflash_tools.model"] * 2
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("hooked_pkg_for_dflash_tools")]:
            del sys.modules[name]


# --- register() end to end on a stand-in vllm built from the real sources --------------------

STANDIN: dict[str, tuple[str, list[tuple[str | None, str | None, list[str]]]]] = {
    "vllm/config/speculative.py": (
        "import hashlib\n\nXPRESS_ARCHITECTURES = frozenset({'Qwen3XPressModel', 'DFlashQwen3XPressModel'})\n\n\n"
        "def safe_hash(data, usedforsecurity=False):\n    return hashlib.sha256(data)\n",
        [("SpeculativeConfig", None, ["compute_hash", "use_dflash", "use_dspark", "is_xpress"])],
    ),
    "vllm/config/vllm.py": (
        "",
        [
            (
                "VllmConfig",
                None,
                [
                    "num_speculative_tokens",
                    "num_lookahead_tokens",
                    "_get_v1_model_runner_unsupported_features",
                    "_is_dflash_candidate_draft",
                    "_dflash_needs_multi_kv_group",
                ],
            )
        ],
    ),
    "vllm/v1/spec_decode/dflash.py": ("", [("DFlashProposer", None, ["__init__"])]),
    "vllm/v1/worker/gpu/spec_decode/__init__.py": ("", [(None, None, ["init_speculator"])]),
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py": ("", [("DFlashSpeculator", None, ["__init__"])]),
    "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py": (
        "from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator\n",
        [("DFlash2Speculator", "DFlashSpeculator", ["__init__"])],
    ),
    "vllm/model_executor/models/qwen3_dflash2.py": (
        "",
        [("DFlashGroupedConv", None, ["__init__", "_convolve"]), ("DFlash2Qwen3DecoderLayer", None, ["__init__"])],
    ),
}


def build_standin_vllm(wheel: Path, root: Path, version: str = "0.33.0") -> Path:
    read = wheel_reader(wheel)
    for path, (header, classes) in STANDIN.items():
        source = read(path)
        assert source is not None, path
        lines = source.splitlines()
        # Annotations in the copied signatures name vLLM types this stand-in does not define.
        body = ["from __future__ import annotations\n", header]
        for class_name, base, functions in classes:
            if class_name is not None:
                body.append(f"\n\nclass {class_name}{f'({base})' if base else ''}:\n")
            for name in functions:
                found = find_function(source, f"{class_name}.{name}" if class_name else name)
                assert found is not None, (path, name)
                body.append("\n".join(lines[found.first_line - 1 : found.last_line]) + "\n\n")
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(body), encoding="utf-8")
    for folder in [root / "vllm", *[p for p in (root / "vllm").rglob("*") if p.is_dir()]]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text("", encoding="utf-8")
    (root / "vllm" / "__init__.py").write_text(f"__version__ = {version!r}\n", encoding="utf-8")
    return root


PROBE = textwrap.dedent(
    """
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    out = {}
    from dflash_tools import vllm_plugin
    try:
        vllm_plugin.register()
        vllm_plugin.register()  # vLLM may call it twice in one process
        out["registered"] = True
    except Exception as exc:
        out["registered"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
    from vllm.config.speculative import SpeculativeConfig
    from vllm.config.vllm import VllmConfig
    out["state"] = getattr(SpeculativeConfig, "_dflash_tools_patch", None)
    out["loaded_speculator_early"] = "vllm.v1.worker.gpu.spec_decode.dflash.speculator" in sys.modules

    def spec(sfa, method="dflash"):
        s = SpeculativeConfig()
        s.method = method
        s.num_speculative_tokens = 7
        s.enable_adaptive_verification = False
        s.draft_lm_head_quantization = None
        s.draft_model_config = SimpleNamespace(
            architectures=["DFlashDraftModel"], compute_hash=lambda: "draft",
            hf_config=SimpleNamespace(dflash_config={"sample_from_anchor": sfa}, layer_types=["sliding_attention"]))
        return s

    def config(sfa):
        c = VllmConfig()
        c.speculative_config = spec(sfa)
        c.diffusion_config = None
        c.parallel_config = SimpleNamespace(prefill_context_parallel_size=1, pipeline_parallel_size=1,
                                            enable_batch_sharded_sampling=False)
        c.scheduler_config = SimpleNamespace(async_scheduling=False)
        c.model_config = None
        return c

    out["lookahead"] = [config(True).num_lookahead_tokens, config(False).num_lookahead_tokens]
    out["hash_differs"] = spec(True).compute_hash() != spec(False).compute_hash()
    out["v1_features"] = [config(True)._get_v1_model_runner_unsupported_features(),
                          config(False)._get_v1_model_runner_unsupported_features()]
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
    from vllm.model_executor.models.qwen3_dflash2 import DFlash2Qwen3DecoderLayer
    from vllm.v1.spec_decode.dflash import DFlashProposer
    out["wrapped"] = {
        name: getattr(cls.__init__, "__dflash_tools_wrapped__", None) is not None
        for name, cls in [("speculator", DFlashSpeculator), ("layer", DFlash2Qwen3DecoderLayer),
                          ("proposer", DFlashProposer)]
    }
    try:
        DFlashProposer(SimpleNamespace(speculative_config=spec(True)), "cuda")
    except Exception as exc:  # stock vLLM goes on into CUDA set-up, which this stand-in lacks
        out["v1_proposer"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    """
)


def run_probe(root: Path, markers: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_TOOLS_")}
    environment[MARKER_DIR_ENV] = str(markers)
    environment.update(env or {})
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, str(root)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def vllm_wheel(request: pytest.FixtureRequest) -> Path:
    return wheel_fixture(request)


def test_register_patches_stock_0_33_0(vllm_wheel: Path, tmp_path: Path) -> None:
    root = build_standin_vllm(vllm_wheel, tmp_path / "site")
    out = run_probe(root, tmp_path / "markers", {REQUIRE_ENV: "1"})
    assert out["registered"], out.get("error")
    assert out["state"]["status"] == "patched"
    assert out["loaded_speculator_early"] is False  # patched lazily, on vLLM's own import
    assert out["lookahead"] == [7, 8]
    assert out["hash_differs"] is True
    assert out["v1_features"] == [[patch.V1_FEATURE], []]
    assert out["wrapped"] == {"speculator": True, "layer": True, "proposer": True}
    assert "reached the V1 DFlashProposer" in out["v1_proposer"]
    markers = read_markers(tmp_path / "markers")
    statuses = [m for m in markers if m["event"] == "plugin"]
    assert len(statuses) == 1 and statuses[0]["status"] == "patched"
    assert sorted(statuses[0]["sites"]) == sorted(
        ["speculative_compute_hash", "num_lookahead_tokens", "v1_unsupported_features", "dflash_speculator_init",
         "dflash2_decoder_layer_init", "v1_dflash_proposer_init"]
    )  # fmt: skip


def test_register_refuses_an_unknown_version(vllm_wheel: Path, tmp_path: Path) -> None:
    root = build_standin_vllm(vllm_wheel, tmp_path / "site", version="0.34.0")
    quiet = run_probe(root, tmp_path / "quiet")
    assert quiet["registered"] is True  # unrelated vLLM use is never broken
    assert quiet["state"]["status"] == "refused"
    assert quiet["lookahead"] == [8, 8]  # stock behaviour everywhere
    assert quiet["wrapped"] == {"speculator": False, "layer": False, "proposer": False}
    assert "V1 DFlashProposer" not in quiet["v1_proposer"]
    required = run_probe(root, tmp_path / "required", {REQUIRE_ENV: "1"})
    assert required["registered"] is False
    assert "PluginRefused" in required["error"] and "0.34.0" in required["error"]
    assert [m["status"] for m in read_markers(tmp_path / "required") if m["event"] == "plugin"] == ["refused"]


def test_register_stands_aside_when_vllm_has_the_upstream_change(vllm_wheel: Path, tmp_path: Path) -> None:
    root = build_standin_vllm(vllm_wheel, tmp_path / "site", version="0.35.0")
    speculative = root / "vllm/config/speculative.py"
    speculative.write_text(
        speculative.read_text(encoding="utf-8") + "\nnum_dflash_query_tokens = None\n", encoding="utf-8"
    )
    out = run_probe(root, tmp_path / "markers", {REQUIRE_ENV: "1"})
    assert out["registered"] is True
    assert out["state"]["status"] == "native"
    assert out["wrapped"] == {"speculator": False, "layer": False, "proposer": False}
