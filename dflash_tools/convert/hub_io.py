"""convert's traffic with the Hub: the source snapshot to build from, and pushing the result."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from dflash_tools._version import __version__
from dflash_tools.convert.plan import ConvertPlan
from dflash_tools.convert.result import BACKUP_SUFFIX, PushResult
from dflash_tools.errors import OperationError, SourceError
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
)
from dflash_tools.reading.local import load_following_links

# Files convert downloads from one Hub repo: a draft repo holds a handful (config, weights,
# README). A repo with 100,000 files is not a checkpoint to copy whole.
MAX_CONVERT_FILES = 1000
# Files downloaded at once (huggingface_hub's snapshot_download default).
DOWNLOAD_WORKERS = 8


def local_checkpoint(loaded: LoadedCheckpoint, *, token: str | None, timeout: float | None = None) -> LoadedCheckpoint:
    """The source as a local folder with its headers (a Hub repo is downloaded into the cache)."""
    if loaded.kind != "hub":
        return loaded
    if loaded.unsafe_index_entries:
        # The same refusal as for a local folder (build._refuse_escaping_index), before any download.
        raise OperationError(
            f"{loaded.location}/{INDEX_NAME}: {loaded.unsafe_index_entries[0]}: refusing to write an index "
            "that points outside the output",
            "fix the index so that every shard is a file inside the checkpoint folder",
        )
    try:
        folder = _download_snapshot(loaded, token, timeout)
    except (SourceError, OperationError):
        raise
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


def _download_snapshot(loaded: LoadedCheckpoint, token: str | None, timeout: float | None) -> Path:
    """Every file of the inspected commit, in the Hugging Face cache; returns the snapshot folder.

    The file list comes from the bounded repo-info read (reading.hub); the files themselves are
    downloaded by huggingface_hub (into its cache, eight at a time), whose reads time out per read
    rather than per file: weights legitimately take minutes.
    """
    from huggingface_hub import constants, hf_hub_download, snapshot_download

    from dflash_tools.reading.hub.errors import HUB_ERRORS, MALFORMED_HINT, HubSourceError, to_source_error
    from dflash_tools.reading.hub.files import COMMIT_HASH, fetch_repo_info
    from dflash_tools.reading.hub.session import LIBRARY_NAME, HubRepo, effective_timeout, library_version

    revision = loaded.commit or loaded.revision
    if constants.HF_HUB_OFFLINE:
        return Path(snapshot_download(loaded.source, revision=revision, token=token, local_files_only=True))
    hub = HubRepo(loaded.source, revision, token, effective_timeout(timeout))
    try:
        info = fetch_repo_info(hub)
    except HUB_ERRORS as exc:
        raise to_source_error(exc, hub, "the repo info", repo_known=True) from exc
    names = sorted(info.files or ())
    if CONFIG_NAME not in names:
        names.append(CONFIG_NAME)
    if len(names) > MAX_CONVERT_FILES:
        raise OperationError(
            f"{loaded.location} holds {len(names):,} files; convert copies a whole checkpoint and stops at "
            f"{MAX_CONVERT_FILES:,}: nothing was downloaded",
            f"download the checkpoint's own files (`hf download {loaded.source} --include '*.json' '*.safetensors'`) "
            "and convert that folder",
        )
    pinned = info.commit or revision

    def download(name: str) -> Path:
        try:
            return Path(
                hf_hub_download(
                    loaded.source,
                    name,
                    revision=pinned,
                    token=token,
                    etag_timeout=hub.timeout,
                    library_name=LIBRARY_NAME,
                    library_version=library_version(),
                )
            )
        except HUB_ERRORS as exc:
            raise to_source_error(exc, hub, name, repo_known=True) from exc
        except ValueError as exc:
            # huggingface_hub refuses a commit header that would place the file outside its snapshot.
            detail = (
                "an X-Repo-Commit header that would place the file outside its snapshot"
                if "pointer path" in str(exc)
                else one_line(str(exc), 160)
            )
            raise HubSourceError(
                f"{loaded.location}: the server sent a malformed answer for {name}: {detail}", MALFORMED_HINT
            ) from None

    with ThreadPoolExecutor(max_workers=min(DOWNLOAD_WORKERS, len(names))) as pool:
        futures = {name: pool.submit(download, name) for name in names}
        try:
            paths = {name: future.result() for name, future in futures.items()}
        finally:
            for future in futures.values():
                future.cancel()
    snapshot = paths[CONFIG_NAME].parent
    for name, path in paths.items():
        where = path
        for _ in PurePosixPath(name).parts:
            where = where.parent
        commit_ok = pinned is None or not COMMIT_HASH.match(pinned) or where.name == pinned
        if where != snapshot or not commit_ok:
            raise HubSourceError(
                f"{loaded.location}: the server sent a malformed answer for {name}: it was stored under another "
                f"commit ({where.name[:40]!r})",
                MALFORMED_HINT,
            )
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
