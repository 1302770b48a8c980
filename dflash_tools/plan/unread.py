"""A target or a draft the Hub could not be asked about: what `plan` and `smoke-test --dry-run`
say instead of stopping (DFT090, DFT091).

Offline (HF_HUB_OFFLINE) or with the Hub unreachable, a target that is not in the local Hugging
Face cache cannot be read, and dflash-tools bundles the published configs of drafts, not of
targets (docs/inspect.md, "Offline: the bundled published configs"). Everything that needs no
target is still answered (each engine release's outcome, K and query positions, the launch lines,
the token budget); the checks that need its config.json are named as not checked
(`TARGET_CHECKS`). A repo the Hub says does not exist, a local path and a broken config stay
errors (`reading.source.hub_not_asked` tells them apart).

A draft in the same state (not cached, and no bundled profile stores its config.json: DaoCloud's
Qwen3.8-27B-DFlash2-Exp) gets an entry of its own that says it was not read (DFT091, an error:
nothing of it is checked, no launch line is written), with what a bundled profile records of it
(`reading.hub.published.profile_without_config`); the other drafts are planned as they are
(docs/plan.md, "Offline: a draft that cannot be read").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dflash_tools.documents import JsonDocument
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.source import hub_not_asked

if TYPE_CHECKING:  # the Hub reader (huggingface_hub) is imported when a draft was not read
    from dflash_tools.reading.hub.published import ProfileRecord

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


@dataclass(frozen=True)
class UnreadDraft(UnreadTarget):
    """A draft not read: as a target, and what a bundled profile records of it (None: no profile
    names it)."""

    profile: ProfileRecord | None = None


def _download_hint(source: str, revision: str | None) -> str:
    repo = source.removeprefix("hf://")
    pinned = f" --revision {revision}" if revision else ""
    return f"`hf download {repo}{pinned} --include '*.json'` puts its config in the Hugging Face cache; or run online"


def unread_target(source: str, revision: str | None, exc: BaseException) -> UnreadTarget | None:
    """The target SOURCE as not read, when `exc` says only that the Hub could not be asked about
    it; None when `exc` is another failure (the caller raises it)."""
    reason = hub_not_asked(source, exc)
    if reason is None:
        return None
    return UnreadTarget(reason, _download_hint(source, revision), str(getattr(exc, "message", exc)))


def unread_draft(source: str, revision: str | None, exc: BaseException) -> UnreadDraft | None:
    """The draft SOURCE as not read, on the same test as `unread_target`; None for any other
    failure (a local path that does not exist, a repo the Hub says does not exist, a broken config)."""
    reason = hub_not_asked(source, exc)
    if reason is None:
        return None
    from dflash_tools.reading.hub.published import profile_without_config

    repo = source.removeprefix("hf://")
    pinned = f" --revision {revision}" if revision else ""
    # config.json by name, not `--include '*.json'` as for a target: the command then fits the
    # 80 columns of a finding's hint for the longest draft repo ids (a draft needs only its config).
    hint = f"run online, or put its config in the Hugging Face cache: `hf download {repo} config.json{pinned}`"
    return UnreadDraft(reason, hint, str(getattr(exc, "message", exc)), profile_without_config(repo))


def unread_draft_finding(source: str, unread: UnreadDraft) -> Finding:
    """DFT091: the draft's config.json was not read, so nothing of it is checked; what a bundled
    profile records of it, in the words of the reader's own error (`no_bundled_config`)."""
    from dflash_tools.reading.hub.published import no_bundled_config

    repo = source.removeprefix("hf://")
    return make_finding(
        "DFT091",
        f"draft {source} was not read: {unread.reason}, and {no_bundled_config(repo)}. Its config.json is not "
        "known: nothing of the draft is checked, and no launch line is written for it",
        unread.hint,
        values={
            "draft": source,
            "reason": unread.reason,
            "profile": unread.profile.to_dict() if unread.profile is not None else None,
        },
        file="config.json",
    )


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
