"""A target the Hub could not be asked about: what `plan` and `smoke-test --dry-run` say instead
of stopping (DFT090).

Offline (HF_HUB_OFFLINE) or with the Hub unreachable, a target that is not in the local Hugging
Face cache cannot be read, and dflash-tools bundles the published configs of drafts, not of
targets (docs/inspect.md, "Offline: the bundled published configs"). Everything that needs no
target is still answered (each engine release's outcome, K and query positions, the launch lines,
the token budget); the checks that need its config.json are named as not checked
(`TARGET_CHECKS`). A repo the Hub says does not exist, a local path and a broken config stay
errors (`reading.source.hub_not_asked` tells them apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_tools.documents import JsonDocument
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.source import hub_not_asked

# What needs the target's config.json: JSON `not_checked` (the keys) and DFT090's words.
TARGET_CHECKS = {
    "memory": "the memory fit",
    "tensor_parallel": "TP/DCP against its heads",
    "max_model_len": "max_model_len against its max_position_embeddings",
    "pairing": "the draft's pairing with it (hidden size, vocabulary, layer count against the taps)",
}


@dataclass(frozen=True)
class UnreadTarget(JsonDocument):
    """Why the target was not read (`reason`, one line), how to get it read (`hint`), and the
    reader's own message (`error`)."""

    reason: str
    hint: str
    error: str


def unread_target(source: str, revision: str | None, exc: BaseException) -> UnreadTarget | None:
    """The target SOURCE as not read, when `exc` says only that the Hub could not be asked about
    it; None when `exc` is another failure (the caller raises it)."""
    reason = hub_not_asked(source, exc)
    if reason is None:
        return None
    repo = source.removeprefix("hf://")
    pinned = f" --revision {revision}" if revision else ""
    hint = f"`hf download {repo}{pinned} --include '*.json'` puts its config in the Hugging Face cache; or run online"
    return UnreadTarget(reason, hint, str(getattr(exc, "message", exc)))


def unread_target_finding(source: str, unread: UnreadTarget, checks: tuple[str, ...] = tuple(TARGET_CHECKS)) -> Finding:
    """DFT090: the target's config.json was not read, and which of `TARGET_CHECKS` that leaves
    unchecked (all of them for `plan`; the pairing for `smoke-test --dry-run`)."""
    words = "; ".join(TARGET_CHECKS[check] for check in checks)
    # The memory fit reads the safetensors headers too, which a `*.json` download does not fetch.
    headers = " (the memory fit needs its safetensors headers too: online they are read by range request)"
    return make_finding(
        "DFT090",
        f"target {source}: its config.json could not be read ({unread.reason}): not checked: {words}",
        unread.hint + (headers if "memory" in checks else ""),
        values={"target": source, "reason": unread.reason, "not_checked": list(checks)},
        file="config.json",
    )
