"""The plugin's part of each vLLM release it patches: one module per release, found from the tables.

Each engine table that the plugin patches names its module here (`EngineRules.plugin_module`,
e.g. `dflash_tools.vllm_plugin.releases.v0_34`); that module holds the release's `VERSION`, its
fingerprinted `SITES` and `apply(checks)`, which installs its wrappers (`patch.py` holds the
wrappers and the installers every release shares). So adding a vLLM release takes its table
(`engine_rules/vllm_X_Y.py`) and its module here, and nothing else in the code
(docs/adding-an-engine-release.md). A module is imported only when its release is asked for.

Imports: `engine_rules` (which release names which module) and the plugin's own modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.vllm_plugin.patch import PluginRefused
from dflash_tools.vllm_plugin.site import Site, SiteCheck


def release(version: str | None) -> str | None:
    """`0.34.0` from `0.34.0+cpu` (a local build label is the same release), None if absent."""
    return version.split("+", 1)[0] if version else None


def module_names() -> dict[str, str]:
    """vLLM version -> the dotted name of the plugin module that patches it, oldest first."""
    return {
        rules.version: rules.plugin_module
        for rules in ENGINE_RULES.values()
        if rules.engine == "vllm" and rules.plugin_module
    }


def release_module(version: str | None) -> ModuleType | None:
    """The plugin module of a release the plugin patches (its `VERSION` checked), else None."""
    name = module_names().get(release(version) or "")
    if name is None:
        return None
    module = importlib.import_module(name)
    if getattr(module, "VERSION", None) != release(version):
        raise PluginRefused(f"{name} is named for vLLM {release(version)} but says VERSION {module.VERSION!r}")
    return module


def sites_for(version: str | None) -> tuple[Site, ...]:
    """The fingerprinted sites of a release the plugin patches, or () for any other."""
    module = release_module(version)
    return tuple(module.SITES) if module is not None else ()


def apply_patches(version: str | None, checks: Sequence[SiteCheck]) -> list[str]:
    """Install every wrapper of the release, whose sites were all checked (`checks`): config
    sites now, model and runner sites when vLLM imports them. Returns the keys of the patched sites."""
    module = release_module(version)
    if module is None:
        raise PluginRefused(f"no patch route for vLLM {version}")
    module.apply({check.site.key: check for check in checks})
    return [check.site.key for check in checks if check.site.patched]
