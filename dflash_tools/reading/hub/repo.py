"""Read a Hub repo: the entry points `load_hub_checkpoint`, `load_hub_config`, `list_hub_models`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from huggingface_hub.errors import OfflineModeIsEnabled

from dflash_tools.draft.findings import make_finding
from dflash_tools.errors import SourceError
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
    check_index_against_shards,
    is_offline,
    parse_config_text,
    parse_index,
)
from dflash_tools.reading.hub.cache import cached_config, load_from_cache
from dflash_tools.reading.hub.errors import HUB_ERRORS, hub_errors, is_unreachable, one_line, to_source_error
from dflash_tools.reading.hub.files import download_small_file, hub_checkpoint
from dflash_tools.reading.hub.headers import add_fetched, fetch_headers
from dflash_tools.reading.hub.session import HubRepo, effective_timeout, hf_api, model_info

if TYPE_CHECKING:
    from huggingface_hub import ModelInfo


def load_hub_checkpoint(
    repo_id: str,
    *,
    revision: str | None,
    token: str | None,
    timeout: float | None,
) -> LoadedCheckpoint:
    """Read config.json and every safetensors header of a Hub repo (never the weights).

    `location` is `repo_id@revision`; `commit` is the commit the revision resolved to.
    `bytes_read` counts the bytes received from safetensors files (header ranges). Raises
    SourceError when the repo cannot be found or reached; a repo that exists but is broken
    comes back with findings (DFT001, DFT003, DFT004, DFT005).
    """
    hub = HubRepo(repo_id, revision, token, effective_timeout(timeout))
    if is_offline():
        return load_from_cache(hub, unreachable=None)
    try:
        info = model_info(hub)
    except OfflineModeIsEnabled:
        return load_from_cache(hub, unreachable=None)
    except HUB_ERRORS as exc:
        if not is_unreachable(exc):
            raise to_source_error(exc, hub, "the repo info") from exc
        try:
            return load_from_cache(hub, unreachable=exc)
        except SourceError:
            raise to_source_error(exc, hub, "the repo info") from exc
    return _load_online(hub, info)


def load_hub_config(
    repo_id: str,
    *,
    revision: str | None,
    token: str | None,
    timeout: float | None,
) -> tuple[dict[str, Any], str]:
    """The parsed config.json of a (target) model repo, and a `repo@revision` location.

    Here a missing or invalid config is a SourceError: the caller cannot go on without it.
    Multimodal configs are returned as they are (the caller picks `text_config`).
    """
    hub = HubRepo(repo_id, revision, token, effective_timeout(timeout))
    data: bytes | None
    if is_offline():
        data = cached_config(hub, "HF_HUB_OFFLINE is set")
    else:
        # Resolve the commit first (one request, no retries): hf_hub_download alone would spend
        # ~25 s in its own retry loop before admitting that the Hub is unreachable.
        try:
            info = model_info(hub, files_metadata=False)
        except OfflineModeIsEnabled:
            data = cached_config(hub, "HF_HUB_OFFLINE is set")
        except HUB_ERRORS as exc:
            if not is_unreachable(exc):
                raise to_source_error(exc, hub, "the repo info") from exc
            try:
                data = cached_config(hub, "the Hub is unreachable")
            except SourceError:
                raise to_source_error(exc, hub, "the repo info") from exc
        else:
            listing = None if info.siblings is None else {s.rfilename for s in info.siblings}
            data = None
            if listing is None or CONFIG_NAME in listing:
                with hub_errors(hub, CONFIG_NAME):
                    data = download_small_file(hub, CONFIG_NAME, info.sha)
    if data is None:
        raise SourceError(
            f"{hub.label} has no {CONFIG_NAME}",
            "pass the repo id of the model itself (the one holding config.json), or check --revision",
        )
    name = f"{repo_id}/{CONFIG_NAME}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{name} is not UTF-8 text: {exc}", "check the repo on the Hub") from None
    config, findings = parse_config_text(text, name)
    if config is None:
        message = findings[0].message if findings else f"{name} cannot be parsed"
        raise SourceError(one_line(message), "check the repo on the Hub")
    return config, hub.label


def list_hub_models(
    author: str | None,
    search: str | None,
    *,
    token: str | None,
    limit: int = 200,
) -> list[str]:
    """Repo ids of the Hub models matching `author` and `search` (at most `limit`)."""
    filters = [f"author={author}" if author else "", f"search={search}" if search else ""]
    subject = " ".join(part for part in filters if part) or "all models"
    if limit < 1:
        return []
    if is_offline():
        raise SourceError(
            f"listing Hub models ({subject}) needs the network, but HF_HUB_OFFLINE is set",
            "unset HF_HUB_OFFLINE, or pass the repo ids you have cached",
        )
    hub = HubRepo(subject, None, token, effective_timeout(None))
    try:
        models = hf_api(token).list_models(author=author, search=search, limit=limit, token=token)
        return [model.id for model in models]
    except HUB_ERRORS as exc:
        raise to_source_error(exc, hub, "the model list", listing=True) from exc


def _load_online(hub: HubRepo, info: ModelInfo) -> LoadedCheckpoint:
    commit = info.sha if isinstance(info.sha, str) and info.sha else None
    # Everything read after this belongs to the resolved commit, so a push in between cannot
    # mix files of two commits into one report.
    pinned = commit or hub.revision
    listing: dict[str, int | None] | None = None
    if info.siblings is not None:
        listing = {sibling.rfilename: sibling.size for sibling in info.siblings}
    data: bytes | None = None
    if listing is None or CONFIG_NAME in listing:
        with hub_errors(hub, CONFIG_NAME):
            data = download_small_file(hub, CONFIG_NAME, pinned)
    loaded = hub_checkpoint(hub, commit, data)
    _read_remote_weights(hub, pinned, listing, loaded)
    return loaded


def _read_remote_weights(
    hub: HubRepo, pinned: str | None, listing: dict[str, int | None] | None, loaded: LoadedCheckpoint
) -> None:
    sizes = listing or {}
    index_data: bytes | None = None
    if listing is None or INDEX_NAME in listing:
        with hub_errors(hub, INDEX_NAME):
            index_data = download_small_file(hub, INDEX_NAME, pinned)

    if index_data is not None:
        weight_map = parse_index(index_data, loaded)
        if weight_map is None:
            return
        reported: set[str] = set()
        to_fetch: list[str] = []
        for shard_name in sorted(set(weight_map.values())):
            if listing is not None and shard_name not in listing:
                _missing_shard(loaded, shard_name, hub)
                reported.add(shard_name)
            else:
                to_fetch.append(shard_name)
        for fetched in fetch_headers(hub, pinned, to_fetch, sizes, missing_ok=True):
            if fetched.missing:
                _missing_shard(loaded, fetched.name, hub)
                reported.add(fetched.name)
            else:
                add_fetched(loaded, fetched)
        check_index_against_shards(loaded, weight_map, reported)
        return

    if listing is None:
        names = ["model.safetensors"]
    else:
        names = sorted(n for n in listing if n.endswith(".safetensors") and "/" not in n)
    fetched_any = False
    for fetched in fetch_headers(hub, pinned, names, sizes, missing_ok=listing is None):
        if not fetched.missing:
            fetched_any = True
            add_fetched(loaded, fetched)
    if not fetched_any:
        loaded.weights_inspected = False
        others = sorted(n for n in sizes if n.endswith((".bin", ".pt", ".pth", ".gguf")))
        hint = (
            f"the repo holds {', '.join(others[:3])}: only safetensors headers can be checked"
            if others
            else "tensor shapes were not checked"
        )
        loaded.findings.append(make_finding("DFT005", f"no *.safetensors files at the root of {hub.label}", hint))


def _missing_shard(loaded: LoadedCheckpoint, shard_name: str, hub: HubRepo) -> None:
    loaded.findings.append(
        make_finding(
            "DFT004",
            f"{INDEX_NAME} names {shard_name}, which does not exist in {hub.label}",
            "upload the missing shard, or regenerate the index from the shards",
            file=shard_name,
        )
    )
