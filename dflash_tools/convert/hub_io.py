"""convert's traffic with the Hub: the source snapshot to build from, and pushing the result."""

from __future__ import annotations

from pathlib import Path

from dflash_tools._version import __version__
from dflash_tools.convert.plan import ConvertPlan
from dflash_tools.convert.result import BACKUP_SUFFIX, PushResult
from dflash_tools.errors import OperationError, SourceError
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    LoadedCheckpoint,
)
from dflash_tools.reading.local import load_following_links


def local_checkpoint(loaded: LoadedCheckpoint, *, token: str | None) -> LoadedCheckpoint:
    """The source as a local folder with its headers (a Hub repo is downloaded into the cache)."""
    if loaded.kind != "hub":
        return loaded
    try:
        folder = _download_snapshot(loaded.source, loaded.commit or loaded.revision, token)
    except Exception as exc:
        raise SourceError(
            f"{loaded.location}: downloading the checkpoint failed: {type(exc).__name__}: {one_line(str(exc))}",
            "check the network (or HF_HUB_OFFLINE with a complete cached snapshot) and run again",
        ) from None
    # Snapshot files are links into the cache's blobs: read them through the links.
    local = load_following_links(folder, loaded.source)
    local.kind = "hub"
    if set(local.tensors) != set(loaded.tensors) or local.config != loaded.config:
        raise OperationError(
            f"{loaded.location}: the downloaded files differ from the ones inspected",
            "the repo changed while converting: run convert again",
        )
    return local


def _download_snapshot(repo_id: str, revision: str | None, token: str | None) -> Path:
    """Every file of the revision, in the Hugging Face cache; returns the snapshot folder."""
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download

    if constants.HF_HUB_OFFLINE:
        return Path(snapshot_download(repo_id, revision=revision, token=token, local_files_only=True))
    info = HfApi(token=token).model_info(repo_id, revision=revision, token=token)
    pinned = info.sha or revision
    names = sorted(s.rfilename for s in info.siblings or [])
    if CONFIG_NAME not in names:
        names.append(CONFIG_NAME)
    snapshot: Path | None = None
    for name in names:
        path = Path(hf_hub_download(repo_id, name, revision=pinned, token=token))
        if name == CONFIG_NAME:
            snapshot = path.parent
    assert snapshot is not None
    return snapshot


def one_line(text: str, limit: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def require_cached_weights(loaded: LoadedCheckpoint) -> None:
    """Offline (or with the Hub unreachable) a Hub source can only be written from a full cache."""
    from dflash_tools.reading.checkpoint import is_offline

    if loaded.kind != "hub":
        return
    cut_off = is_offline() or any(f.code == "DFT007" for f in loaded.findings)
    missing = [f for f in loaded.findings if f.code == "DFT005"]
    if cut_off and missing:
        raise SourceError(
            f"{loaded.location}: {missing[0].message}",
            f"connect to the Hub, or fetch the repo first with `hf download {loaded.source}`; "
            "--dry-run and --check work from what is cached",
        )


def default_commit_message(plan: ConvertPlan) -> str:
    if plan.cross_dialect:
        return f"Convert draft config to {plan.output_dialect.family} form with dflash-tools"
    return "Normalize draft config (block_size, sample_from_anchor) with dflash-tools"


def commit_description(plan: ConvertPlan) -> str:
    lines = [f"Converted with dflash-tools {__version__} (`dflash-tools convert`).", ""]
    g = plan.geometry
    lines.append(
        f"Geometry: block_size {g.block_size}, sample_from_anchor {str(g.sample_from_anchor).lower()} "
        f"({g.layout}), K_max {g.max_speculative_tokens}."
    )
    lines += [f"- {d.message}" for d in plan.decisions]
    lines += [f"- tensor {c.name}: {c.action} ({c.reason})" for c in plan.tensor_changes]
    return "\n".join(lines)


def push_folder(
    folder: Path,
    repo_id: str,
    *,
    create_pr: bool = True,
    token: str | None = None,
    commit_message: str = "Upload converted draft with dflash-tools",
    commit_description: str | None = None,
) -> PushResult:
    """Upload `folder` to `repo_id` through huggingface_hub: a pull request unless `create_pr=False`."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        if not create_pr:
            api.create_repo(repo_id, exist_ok=True, token=token)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            commit_message=commit_message,
            commit_description=commit_description,
            create_pr=create_pr,
            token=token,
            ignore_patterns=[f"*{BACKUP_SUFFIX}"],
        )
    except Exception as exc:
        raise OperationError(
            f"pushing {folder} to {repo_id} failed: {type(exc).__name__}: {one_line(str(exc))}",
            f"the converted checkpoint is complete at {folder}; push it later with "
            f"`hf upload {repo_id} {folder} . --create-pr` (the repo must exist; --no-pr creates it)",
        ) from None
    return PushResult(repo_id, getattr(info, "commit_url", None), getattr(info, "pr_url", None))
