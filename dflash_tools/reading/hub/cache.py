"""Offline, or with the Hub unreachable: a repo read from the local Hub cache alone (read in place, never written)."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.file_download import repo_folder_name

from dflash_tools.errors import SourceError
from dflash_tools.findings import make_finding
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
    add_shard,
    brief_names,
    check_index_against_shards,
    parse_index,
)
from dflash_tools.reading.hub.errors import offline_hint, one_line, weights_hint
from dflash_tools.reading.hub.files import COMMIT_HASH, SmallFile, hub_checkpoint, read_cached_file
from dflash_tools.reading.hub.session import HubRepo
from dflash_tools.reading.safetensors_header import read_local_header


def cached_config(hub: HubRepo, why: str) -> SmallFile | None:
    """The cached config.json of the revision; None when the cache knows the repo has none."""
    entry = try_to_load_from_cache(hub.repo_id, CONFIG_NAME, revision=hub.revision)
    if entry is None:
        raise SourceError(
            f"{hub.label}: {why} and {CONFIG_NAME} is not in the local Hugging Face cache",
            offline_hint(hub),
        )
    return read_cached_file(Path(entry), hub) if isinstance(entry, str) else None


def load_from_cache(hub: HubRepo, *, unreachable: BaseException | None) -> LoadedCheckpoint:
    why = "offline (HF_HUB_OFFLINE)" if unreachable is None else "the Hub is unreachable"
    commit = _cached_commit(hub)
    snapshot = _cached_snapshot(hub, commit)
    loaded = hub_checkpoint(hub, commit, cached_config(hub, why))
    if unreachable is not None:
        loaded.findings.append(
            make_finding(
                "DFT007",
                f"the Hub could not be reached ({one_line(str(unreachable), 120)}): {hub.label} was read from the "
                "local cache, which may be older than the Hub",
                "rerun when the Hub is reachable to check the current revision",
            )
        )

    index_entry = try_to_load_from_cache(hub.repo_id, INDEX_NAME, revision=hub.revision)
    if isinstance(index_entry, str):
        index = read_cached_file(Path(index_entry), hub)
        if index.data is None:
            loaded.findings.append(
                make_finding(
                    "DFT004", f"{INDEX_NAME} cannot be read: {index.refused}", "re-download the index", file=INDEX_NAME
                )
            )
            return loaded
        weight_map = parse_index(index.data, loaded)
        if weight_map is None:
            return loaded
        shard_names = sorted(set(weight_map.values()))
        missing: list[str] = []
        for shard_name in shard_names:
            path = snapshot / shard_name if snapshot is not None else None
            if path is not None and path.is_file():
                add_shard(loaded, lambda p=path, n=shard_name: read_local_header(p, n))
            else:
                missing.append(shard_name)
        check_index_against_shards(loaded, weight_map, set(missing))
        if missing:
            # Comparing a partial set against the config would report every tensor of the
            # missing shards as missing from the checkpoint (DFT020): a false error, offline.
            loaded.weights_inspected = False
            loaded.findings.append(
                make_finding(
                    "DFT005",
                    f"{why}: {len(missing)} of {len(shard_names)} shards of {hub.label} are not in "
                    f"the local cache, tensor shapes were not checked: {brief_names(missing)}",
                    weights_hint(hub),
                    file=missing[0],
                )
            )
        return loaded

    files: list[Path] = []
    if snapshot is not None:
        files = sorted(p for p in snapshot.glob("*.safetensors") if p.is_file())
    for path in files:
        add_shard(loaded, lambda p=path: read_local_header(p, p.name))
    if not files:
        loaded.weights_inspected = False
        loaded.findings.append(
            make_finding(
                "DFT005",
                f"{why}: no safetensors weights of {hub.label} are in the local cache, tensor shapes were not checked",
                weights_hint(hub),
            )
        )
    return loaded


def _repo_cache_dir(repo_id: str) -> Path:
    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")


def _cached_commit(hub: HubRepo) -> str | None:
    revision = hub.revision or constants.DEFAULT_REVISION
    if COMMIT_HASH.match(revision):
        return revision
    ref = _repo_cache_dir(hub.repo_id) / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if COMMIT_HASH.match(commit) else None


def _cached_snapshot(hub: HubRepo, commit: str | None) -> Path | None:
    if commit is None:
        return None
    snapshot = _repo_cache_dir(hub.repo_id) / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None
