"""What the plugin was written against, and how a vLLM is classified from its sources.

The patch is only correct for code that behaves exactly like the code it was derived from: a
refactor that moves the query count, renames an attribute or reorders `__init__` would make the
wrappers silently wrong. So the plugin refuses to patch unless every site of the installed
release's table (`SITES` of its module in `releases/`) hashes to the recorded value (`site.py`).
Both the launcher (without importing vLLM) and the plugin (inside every vLLM process) call
`classify`; the real-vLLM test tiers check the recorded hashes against each installed release
(docs/tier-vllm.md).

A vLLM that serves anchor-first DFlash drafts itself is recognised from its code, not from its
version (`native_evidence`): its `DFlashSpeculator.__init__` reads `sample_from_anchor` without
refusing it, and its DFlash2 layer no longer sizes the convolution block as 1 + K.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.engine_rules import vllm_plugin_versions
from dflash_tools.vllm_plugin import releases
from dflash_tools.vllm_plugin.site import Site, SiteCheck, check_site, check_sites, find_class, find_site
from dflash_tools.vllm_plugin.sources import SourceReader, find_function

__all__ = [
    "SUPPORTED_VERSIONS",
    "Classification",
    "Site",
    "SiteCheck",
    "check_site",
    "check_sites",
    "classify",
    "find_class",
    "find_site",
    "has_v1_runner",
    "native_evidence",
    "release",
    "sites_for",
]

SUPPORTED_VERSIONS: tuple[str, ...] = vllm_plugin_versions()
"""vLLM releases the plugin patches: the engine tables (`engine_rules/vllm_*.py`) that name a plugin module."""

SPECULATOR_FILE = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
DFLASH2_MODEL_FILE = "vllm/model_executor/models/qwen3_dflash2.py"
STOCK_CONV_BLOCK = "block_size=1 + speculative_config.num_speculative_tokens"


def release(version: str | None) -> str | None:
    """`0.34.0` from `0.34.0+cpu` (a local build label is the same release), None if absent."""
    return releases.release(version)


def sites_for(version: str | None) -> tuple[Site, ...]:
    """The site table of a supported release, or () for any other."""
    return releases.sites_for(version)


V1_RUNNER_FILE = "vllm/v1/worker/gpu_model_runner.py"


def has_v1_runner(reader: SourceReader) -> bool:
    """Whether this vLLM still ships the V1 model runner (read from its files, whatever the version)."""
    return reader(V1_RUNNER_FILE) is not None


def _mentions(node: ast.AST, name: str) -> bool:
    return name in ast.unparse(node)


def native_evidence(reader: SourceReader) -> list[str]:
    """Why this vLLM serves anchor-first DFlash drafts itself; [] when it does not.

    Read from the code, whatever the version says: `DFlashSpeculator.__init__` reads
    `sample_from_anchor`, raises on no branch that tests it, and does not pin it to False; and
    the DFlash2 layer's convolution block is no longer the stock `1 + K`.
    """
    found = find_function(reader(SPECULATOR_FILE) or "", "DFlashSpeculator.__init__")
    if found is None:
        return []
    try:
        body = ast.parse(textwrap.dedent(found.text))
    except SyntaxError:
        return []
    if not _mentions(body, "sample_from_anchor"):
        return []
    for node in ast.walk(body):
        refuses = (
            isinstance(node, ast.If)
            and _mentions(node.test, "sample_from_anchor")
            and any(isinstance(inner, ast.Raise) for inner in ast.walk(node))
        )
        pins_off = (
            isinstance(node, ast.Assign)
            and any(_mentions(target, "self.sample_from_anchor") for target in node.targets)
            and isinstance(node.value, ast.Constant)
            and node.value.value is False
        )
        if refuses or pins_off:
            return []
    layer = find_function(reader(DFLASH2_MODEL_FILE) or "", "DFlash2Qwen3DecoderLayer.__init__")
    if layer is not None and STOCK_CONV_BLOCK in layer.text:
        return []
    evidence = [f"{SPECULATOR_FILE}: DFlashSpeculator.__init__ accepts sample_from_anchor"]
    if layer is not None:
        evidence.append(f"{DFLASH2_MODEL_FILE}: the DFlash2 convolution block is not 1 + K")
    return evidence


@dataclass
class Classification(JsonDocument):
    """How this vLLM can serve anchor-first DFlash drafts.

    support: "native" (its own code serves them), "patchable" (a release the plugin was written
    against, every fingerprint of that release matches), or "unsupported".
    """

    support: str
    version: str | None
    reason: str
    checks: list[SiteCheck] = field(default_factory=list, metadata=json_rules(name="fingerprints"))
    native_markers: list[str] = field(default_factory=list)

    json_keys: ClassVar[tuple[str, ...]] = (
        "support",
        "version",
        "reason",
        "supported_versions",
        "native_markers",
        "fingerprints",
    )
    json_properties: ClassVar[Mapping[str, str]] = {"supported_versions": "supported_versions"}

    @property
    def supported_versions(self) -> tuple[str, ...]:
        return SUPPORTED_VERSIONS

    @property
    def release(self) -> str | None:
        return release(self.version)


def classify(version: str | None, reader: SourceReader) -> Classification:
    evidence = native_evidence(reader)
    if evidence:
        return Classification(
            "native",
            version,
            f"vLLM {version} serves anchor-first DFlash drafts itself ({evidence[0]})",
            native_markers=evidence,
        )
    sites = sites_for(version)
    if not sites:
        return Classification(
            "unsupported",
            version,
            f"vLLM {version} is not a release the plugin was written against "
            f"(supported: {', '.join(SUPPORTED_VERSIONS)}), and its own code refuses anchor-first DFlash drafts",
        )
    checks = check_sites(reader, sites)
    bad = [check for check in checks if not check.ok]
    if bad:
        return Classification(
            "unsupported",
            version,
            f"vLLM {version} has been modified: {bad[0].describe()}"
            + (f" and {len(bad) - 1} more site(s)" if len(bad) > 1 else ""),
            checks,
        )
    return Classification(
        "patchable",
        version,
        f"vLLM {version}: all {len(checks)} fingerprinted functions match; the dflash-tools plugin "
        "applies the anchor-sampling change at runtime",
        checks,
    )
