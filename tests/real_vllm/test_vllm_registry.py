"""The table's architecture rows against the release's own registry (docs/engines.md, "Architectures").

`_SPECULATIVE_DECODING_MODELS` in vllm/model_executor/models/registry.py is read from the
installed release (a literal dict, parsed, not imported). Every DFlash-family entry must have a
row in the table, with the loader the registry names, and every row must be an entry: a release
that registers a new DFlash-family draft fails this tier until its table has a row for it. An
entry of a family this test does not know (not EAGLE, MTP or the hidden-state extractor, and not
DFlash-family by its name) fails too, so a new family is classified, not passed over.
"""

from __future__ import annotations

import ast
import re

import pytest

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.vllm_plugin.sources import installed_package_root
from tests.engine_sources import Sources, top_level
from tests.real_vllm.conftest import VLLM_VERSION

pytestmark = pytest.mark.real_vllm

SPEC = f"vllm=={VLLM_VERSION}"
REGISTRY = "vllm/model_executor/models/registry.py"
# DFlash-family by name: DFlash, DFlash2 and their variants, DSpark, XPress, LiLiCorr, the Muse
# Glimmer assistant; and the names a DFly, DFlare or Domino class would carry.
DFLASH_FAMILY = re.compile(r"DFlash|DSpark|XPress|LiLiCorr|GlimmerAssistant|DFly|DFlare|Domino", re.IGNORECASE)
# The other speculative families vLLM registers.
OTHER_FAMILIES = re.compile(r"Eagle|MTP|ExtractHiddenStates|Medusa|MLPSpeculator", re.IGNORECASE)


def registry(sources: Sources) -> dict[str, tuple[str, str]]:
    node = top_level(sources.tree(REGISTRY))["_SPECULATIVE_DECODING_MODELS"]
    assert isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
    entries = ast.literal_eval(node.value)
    assert isinstance(entries, dict) and entries
    return entries


def dflash_family(entries: dict[str, tuple[str, str]]) -> dict[str, str]:
    """architecture -> `module.Class`, for the DFlash-family entries."""
    family = {}
    for name, (module, cls) in entries.items():
        if DFLASH_FAMILY.search(name) or DFLASH_FAMILY.search(cls):
            family[name] = f"{module}.{cls}"
        else:
            assert OTHER_FAMILIES.search(name), f"{name} -> {module}.{cls}: classify it (DFlash-family or not)"
    return family


def test_every_dflash_family_entry_has_a_row_and_every_row_an_entry() -> None:
    root = installed_package_root("vllm")
    assert root is not None, f"the tier installs vLLM {VLLM_VERSION}"
    registered = dflash_family(registry(Sources(root)))
    rules = ENGINE_RULES[SPEC]
    rows = {row.name: row.loader for row in rules.architectures}
    assert sorted(set(registered) - set(rows)) == [], "registered, with no row in the table"
    assert sorted(set(rows) - set(registered)) == [], "rows the release does not register"
    assert rows == registered
    # Every row cites the registry, and each algorithm's route lists exactly its rows.
    assert all(row.cite.startswith(REGISTRY) for row in rules.architectures)
    for route in rules.routes:
        assert set(route.architectures) == {row.name for row in rules.architectures if row.algorithm == route.algorithm}
