"""The plugin's pieces that need no vLLM: draft detection, its import hook, its markers, and two
wrapper paths the real engine cannot be made to take on CPU.

`register()` and every wrapper are tested against the real vLLM 0.33.0 objects in the real-vLLM
tier (tests/real_vllm, docs/tier-vllm.md); nothing here stands in for them. The two exceptions
below use plain classes because vLLM's own cannot produce the case here: a speculator
constructor that fails half-way (it needs a GPU to run out of memory), and a DFlash2Beam draft
(no such checkpoint is bundled).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dflash_tools.vllm_plugin import patch
from dflash_tools.vllm_plugin.markers import (
    MARKER_DIR_ENV,
    read_markers,
    summarize,
    write_marker,
)

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

        patch.when_imported("hooked_pkg_for_dflash_tools.model", callback)
        assert seen == []
        import hooked_pkg_for_dflash_tools.model as model  # type: ignore[import-not-found]

        assert seen == ["hooked_pkg_for_dflash_tools.model"]
        assert model.Layer.block_size == 7
        assert model.__loader__.__class__.__name__ == "SourceFileLoader"  # handed back to its loader
        patch.when_imported("hooked_pkg_for_dflash_tools.model", callback)  # already imported: at once
        assert seen == ["hooked_pkg_for_dflash_tools.model"] * 2
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("hooked_pkg_for_dflash_tools")]:
            del sys.modules[name]
