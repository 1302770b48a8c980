"""Marker files: how the plugin tells the launcher, from every vLLM process, what it did.

A run must never proceed with the plugin silently inactive: without it, vLLM refuses an
anchor-first draft, or, on 0.33.0's V1 runner, drafts it in the wrong layout (docs/tier-vllm.md,
"The refuse path"). The launcher points
`DFLASH_TOOLS_PLUGIN_MARKER_DIR` at an empty folder; the plugin writes one JSON file per event
(plugin status at load, each speculator it saw constructed) from whichever process it runs in,
and the launcher reads them back. Outside a smoke test the variable is unset and nothing is
written.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

ENTRY_POINT_NAME = "dflash_tools"
"""Name of our entry point in the `vllm.general_plugins` group (what VLLM_PLUGINS must list)."""

MARKER_DIR_ENV = "DFLASH_TOOLS_PLUGIN_MARKER_DIR"
REQUIRE_ENV = "DFLASH_TOOLS_REQUIRE_PLUGIN"
"""Set to 1 by the launcher when the plan needs the patch: refusing then fails the process."""
DISABLE_ENV = "DFLASH_TOOLS_PLUGIN_DISABLE"
"""Set to 1 to keep the plugin from touching vLLM at all (it still writes a marker)."""

_counter = itertools.count()


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def write_marker(event: str, payload: dict[str, Any]) -> Path | None:
    """Write `{event, pid, ...payload}` atomically into the marker folder, if one is set."""
    folder = os.environ.get(MARKER_DIR_ENV)
    if not folder:
        return None
    directory = Path(folder)
    pid = os.getpid()
    document = {"event": event, "pid": pid, **payload}
    name = f"{event}-{pid}-{next(_counter)}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f".{name}.partial"
        partial.write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
        partial.replace(directory / name)
    except OSError:
        # A marker is evidence for the launcher; failing to write one must not break serving.
        return None
    return directory / name


def read_markers(directory: Path) -> list[dict[str, Any]]:
    """Every complete marker in the folder, oldest name first."""
    markers: list[dict[str, Any]] = []
    if not directory.is_dir():
        return markers
    for path in sorted(directory.glob("*.json")):
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(value, dict):
            markers.append(value)
    return markers


def summarize(markers: list[dict[str, Any]], *, required: bool, launcher_pid: int | None = None) -> dict[str, Any]:
    """What the launcher needs to know: did the plugin load, patch, and see the speculator?

    `active` means every process that reported a plugin status reported `patched` or `native`,
    and at least one did (the launcher's own process when `launcher_pid` is given).
    """
    statuses = [m for m in markers if m.get("event") == "plugin"]
    good = {"patched", "native"}
    processes = sorted({int(m["pid"]) for m in statuses if isinstance(m.get("pid"), int)})
    active = bool(statuses) and all(m.get("status") in good for m in statuses)
    if launcher_pid is not None:
        active = active and any(m.get("pid") == launcher_pid for m in statuses)
    speculators = [m for m in markers if m.get("event") in ("speculator", "proposer")]
    conv = [m for m in markers if m.get("event") == "dflash2_conv"]
    reasons = sorted({str(m.get("reason")) for m in statuses if m.get("status") not in good and m.get("reason")})
    return {
        "required": required,
        "active": active,
        "statuses": sorted({str(m.get("status")) for m in statuses}),
        "processes": processes,
        "speculators": [
            {
                "class": m.get("class"),
                "runner": m.get("runner"),
                "num_query_per_req": m.get("num_query_per_req"),
                "sample_from_anchor": m.get("sample_from_anchor"),
                "num_speculative_tokens": m.get("num_speculative_tokens"),
            }
            for m in speculators
        ],
        "conv_block_sizes": sorted({int(m["block_size"]) for m in conv if isinstance(m.get("block_size"), int)}),
        "reasons": reasons,
    }
