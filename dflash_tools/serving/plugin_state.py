"""How anchor-first DFlash drafts are served by one vLLM: one vocabulary, and its words in each document.

Only anchor-first DFlash / DFlash2 drafts depend on it: stock vLLM refuses them (or, on a V1
runner, drafts them in the wrong layout), a vLLM with the upstream change serves them itself, and
the dflash-tools plugin serves them on the releases it patches (docs/tier-vllm.md). `PluginState`
says which of these holds; the installed vLLM's comes from its files
(`VllmCapability.plugin_state`), a release that is not installed here is `ASSUMED` to have the
plugin installed with it on the serving host.

The documents word it as they always have (docs/inspect.md, docs/smoke-test.md); each wording is
derived from the state in one place: here, except smoke-test's run `serving`, which is the member
of its own `smoke.run_plan.Serving` that `Serving.of(state, needed=...)` picks (smoke-test is a
layer above this one):

| state            | `inspect --engine` column `plugin` | smoke-test run `serving` | capability `anchor_first` |
|------------------|------------------------------------|--------------------------|---------------------------|
| `native`         | native                             | native                   | native                    |
| `active`         | active                             | plugin                   | patched                   |
| `not-loaded`     | missing                            | plugin                   | refused / misaligned      |
| `not-registered` | missing                            | unavailable              | refused / misaligned      |
| `unsupported`    | missing                            | unavailable              | refused / misaligned      |
| `assumed`        | needed                             | (not used)               | (not used)                |
| `absent`         | missing                            | unknown                  | absent                    |

A draft that does not need the plugin is `not needed` in the column and `stock` in smoke-test.
smoke-test launches the plugin itself where it is registered but not allowed (`not-loaded`):
it adds it to `VLLM_PLUGINS` for its own runs.
"""

from __future__ import annotations

from enum import StrEnum


class PluginState(StrEnum):
    """How one vLLM stands with anchor-first DFlash drafts (and the dflash-tools plugin)."""

    NATIVE = "native"  # its own code serves them (the upstream change): no plugin needed
    ACTIVE = "active"  # a release the plugin patches, and vLLM will load the plugin
    NOT_LOADED = "not-loaded"  # a release the plugin patches, registered, but not loaded (VLLM_PLUGINS, disabled)
    NOT_REGISTERED = "not-registered"  # a release the plugin patches, but dflash-tools is not installed with it
    UNSUPPORTED = "unsupported"  # the plugin does not patch this vLLM (another release, changed sources)
    ASSUMED = "assumed"  # a release not installed here: the plugin is taken to be installed with it
    ABSENT = "absent"  # no vLLM here, or it was not inspected

    @property
    def serves_anchor_first(self) -> bool:
        """The draft runs as trained (for `NOT_LOADED`: once the launcher loads the plugin)."""
        return self in (PluginState.NATIVE, PluginState.ACTIVE, PluginState.NOT_LOADED)


def engine_column_word(state: PluginState, *, needed: bool, plugin_supported: bool) -> str:
    """JSON `engines[...].plugin` of `inspect --engine` and `plan`."""
    if not needed:
        return "not needed"
    if state in (PluginState.NATIVE, PluginState.ACTIVE):
        return state.value
    if state is PluginState.ASSUMED and plugin_supported:
        return "needed"
    return "missing"


def anchor_first_word(state: PluginState, *, v1_serves_them_silently: bool) -> str:
    """JSON `vllm.anchor_first` of the installed vLLM: what happens to an anchor-first DFlash draft."""
    if state is PluginState.ABSENT:
        return "absent"
    if state is PluginState.NATIVE:
        return "native"
    if state is PluginState.ACTIVE:
        return "patched"
    return "misaligned" if v1_serves_them_silently else "refused"
