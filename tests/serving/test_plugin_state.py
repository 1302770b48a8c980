"""One vocabulary for "how is an anchor-first draft served by this vLLM" (`serving.plugin_state`),
worded as the documents always word it: the column of `inspect --engine`, smoke-test's `serving`,
and the installed vLLM's `anchor_first`. The module's table is what the functions do, and every
word they produce is one docs/smoke-test.md or docs/inspect.md documents.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dflash_tools.serving.plugin_state as plugin_state_module
from dflash_tools.serving.plugin_state import PluginState, anchor_first_word, engine_column_word
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.smoke.run_plan import Serving

ROOT = Path(__file__).resolve().parents[2]


def docstring_table() -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in (plugin_state_module.__doc__ or "").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2], cells[3])
    return rows


def test_the_docstring_table_is_what_the_functions_do() -> None:
    table = docstring_table()
    assert set(table) == {state.value for state in PluginState}
    for state in PluginState:
        column, serving, anchor_first = table[state.value]
        assert engine_column_word(state, needed=True, plugin_supported=True) == column, state
        if serving != "(not used)":
            assert Serving.of(state, needed=True).value == serving, state
        if anchor_first != "(not used)":
            words = {
                anchor_first_word(state, v1_serves_them_silently=False),
                anchor_first_word(state, v1_serves_them_silently=True),
            }
            assert " / ".join(sorted(words, reverse=True)) == anchor_first, state
    assert {engine_column_word(state, needed=False, plugin_supported=True) for state in PluginState} == {"not needed"}
    assert {Serving.of(state, needed=False).value for state in PluginState} == {"stock"}
    # A release the plugin does not patch, not installed here: nothing to assume.
    assert engine_column_word(PluginState.ASSUMED, needed=True, plugin_supported=False) == "missing"


def test_every_word_is_documented() -> None:
    smoke_doc = (ROOT / "docs" / "smoke-test.md").read_text(encoding="utf-8")
    documented_serving = set(re.findall(r"^\| `([a-z/]+)` \|", smoke_doc, re.MULTILINE))
    produced = {Serving.of(state, needed=needed).value for state in PluginState for needed in (True, False)}
    assert produced <= documented_serving
    anchor_first = re.search(r"`anchor_first`: ((?:`[a-z]+`,? ?)+)", smoke_doc.replace("\n", " "))
    assert anchor_first is not None
    documented_anchor = set(re.findall(r"`([a-z]+)`", anchor_first.group(1)))
    produced_anchor = {
        anchor_first_word(state, v1_serves_them_silently=silently)
        for state in PluginState
        for silently in (True, False)
    }
    assert produced_anchor <= documented_anchor


def capability(
    support: str, *, registered: bool = True, allowed: bool = True, disabled: bool = False
) -> VllmCapability:
    return VllmCapability(
        installed=support != "absent",
        version="0.33.0",
        location=None,
        support=support,
        reason=f"vLLM is {support}",
        plugin_registered=registered,
        plugin_allowed=allowed,
        plugin_disabled=disabled,
    )


@pytest.mark.parametrize(
    ("cap", "state", "serves"),
    [
        (capability("absent"), PluginState.ABSENT, False),
        (capability("native"), PluginState.NATIVE, True),
        (capability("patchable"), PluginState.ACTIVE, True),
        (capability("patchable", allowed=False), PluginState.NOT_LOADED, True),
        (capability("patchable", disabled=True), PluginState.NOT_LOADED, True),
        (capability("patchable", registered=False), PluginState.NOT_REGISTERED, False),
        (capability("unsupported"), PluginState.UNSUPPORTED, False),
    ],
)
def test_the_installed_vllm_has_one_state(cap: VllmCapability, state: PluginState, serves: bool) -> None:
    assert cap.plugin_state is state
    assert cap.serves_anchor_first is serves
    assert (cap.plugin_reason == "") is (state in (PluginState.NATIVE, PluginState.ACTIVE))
