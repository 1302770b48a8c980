"""Read a Hub repo: the entry points `load_hub_checkpoint`, `load_hub_config`, `list_hub_models`."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urljoin

import httpx2
from huggingface_hub import constants
from huggingface_hub.errors import OfflineModeIsEnabled

from dflash_tools.errors import SourceError
from dflash_tools.findings import Severity, make_finding
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
    brief_names,
    check_index_against_shards,
    is_offline,
    looks_like_repo_id,
    parse_config_text,
    parse_index,
    too_many_values,
)
from dflash_tools.reading.http import HttpMalformed
from dflash_tools.reading.hub.cache import cached_config, load_from_cache
from dflash_tools.reading.hub.errors import (
    HUB_ERRORS,
    HubSourceError,
    hub_errors,
    is_unreachable,
    one_line,
    to_source_error,
)
from dflash_tools.reading.hub.files import (
    MAX_REPO_INFO_BYTES,
    REPO_INFO,
    RepoInfo,
    SmallFile,
    fetch_repo_info,
    fetch_small_file,
    hub_checkpoint,
)
from dflash_tools.reading.hub.headers import MAX_REMOTE_HEADER_TOTAL, MAX_REMOTE_SHARDS, add_fetched, fetch_headers
from dflash_tools.reading.hub.http import Deadline, request
from dflash_tools.reading.hub.published import (
    PublishedConfig,
    drafts_of_target,
    no_bundled_config,
    profile_without_config,
    published_config,
)
from dflash_tools.reading.hub.session import HubRepo, effective_timeout


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
    comes back with findings (DFT001, DFT003, DFT004, DFT005). Each request ends within
    `timeout` seconds (see reading.hub.http).
    """
    hub = HubRepo(repo_id, revision, token, effective_timeout(timeout))
    if is_offline():
        return _cache_or_published(hub, None, None)
    try:
        info = fetch_repo_info(hub)
    except OfflineModeIsEnabled:
        return _cache_or_published(hub, None, None)
    except HUB_ERRORS as exc:
        if not is_unreachable(exc):
            raise to_source_error(exc, hub, REPO_INFO) from exc
        return _cache_or_published(hub, exc, to_source_error(exc, hub, REPO_INFO))
    return _load_online(hub, info)


def _cache_or_published(
    hub: HubRepo, unreachable: BaseException | None, failure: SourceError | None
) -> LoadedCheckpoint:
    """The Hub cannot answer: the local cache, else the config.json a bundled published profile
    stores (`hub.published`), else the failure (`failure`, or the cache's own), saying what the
    profile knows when it stores no config."""
    try:
        return load_from_cache(hub, unreachable=unreachable)
    except SourceError as missing:
        published = published_config(hub.repo_id, hub.revision)
        if published is not None:
            return _from_published(hub, published, unreachable)
        # Offline (no `failure`) the Hub was not asked: "unreachable", as a connection error is.
        error = failure or HubSourceError(missing.message, missing.hint, absence="unreachable")
        if profile_without_config(hub.repo_id) is not None:
            note = "; " + no_bundled_config(hub.repo_id)
        else:
            note = _only_drafts_bundled(hub)  # a preset's target: its drafts are bundled, it is not
        if not note:
            raise error from None
        raise HubSourceError(error.message + note, error.hint, absence=getattr(error, "absence", "")) from None


def _from_published(hub: HubRepo, published: PublishedConfig, unreachable: BaseException | None) -> LoadedCheckpoint:
    """The checkpoint as its bundled published config.json describes it: config only (DFT056)."""
    loaded = hub_checkpoint(hub, published.revision, SmallFile(data=published.text.encode("utf-8")))
    loaded.weights_inspected = False
    why = (
        "offline (HF_HUB_OFFLINE)"
        if unreachable is None
        else f"the Hub could not be reached ({one_line(str(unreachable), 80)})"
    )
    revision = published.revision or "revision not recorded"
    others = (
        f"; {published.releases - 1} other release(s) known, --revision picks one" if published.releases > 1 else ""
    )
    note = f"; {published.note}" if published.note else ""
    loaded.findings.append(
        make_finding(
            "DFT056",
            f"{why} and {hub.repo_id} is not in the local Hugging Face cache: its config.json was read from the "
            f"bundled profile of {published.profile} (revision {revision}, sha256 {published.sha256[:16]}...){others}"
            f"{note}",
            "rerun online (or with the repo in the Hugging Face cache) to read its current revision and its "
            "safetensors headers",
            values={
                "profile": published.profile,
                "repo": published.repo,
                "revision": published.revision,
                "config_sha256": published.sha256,
            },
            file=CONFIG_NAME,
        )
    )
    return loaded


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
    config: SmallFile | None
    if is_offline():
        config = _cached_target_config(hub, "HF_HUB_OFFLINE is set")
    else:
        # The commit first (one request): the config is then read from that commit.
        try:
            info = fetch_repo_info(hub)
        except OfflineModeIsEnabled:
            config = _cached_target_config(hub, "HF_HUB_OFFLINE is set")
        except HUB_ERRORS as exc:
            if not is_unreachable(exc):
                raise to_source_error(exc, hub, REPO_INFO) from exc
            try:
                config = cached_config(hub, "the Hub is unreachable")
            except SourceError:
                error = to_source_error(exc, hub, REPO_INFO)
                raise HubSourceError(
                    error.message + _only_drafts_bundled(hub), error.hint, absence=error.absence
                ) from exc
        else:
            config = None
            if info.files is None or CONFIG_NAME in info.files:
                with hub_errors(hub, CONFIG_NAME):
                    config = fetch_small_file(hub, CONFIG_NAME, info.commit or hub.revision)
    if config is None:
        raise SourceError(
            f"{hub.label} has no {CONFIG_NAME}",
            "pass the repo id of the model itself (the one holding config.json), or check --revision",
        )
    name = f"{repo_id}/{CONFIG_NAME}"
    if config.data is None:
        raise SourceError(f"{name} is {config.refused}: not a config", "check the repo on the Hub")
    try:
        text = config.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{name} is not UTF-8 text: {exc}", "check the repo on the Hub") from None
    parsed, findings = parse_config_text(text, name)
    if parsed is None:
        message = findings[0].message if findings else f"{name} cannot be parsed"
        raise SourceError(one_line(message), "check the repo on the Hub")
    return parsed, hub.label


def _cached_target_config(hub: HubRepo, why: str) -> SmallFile | None:
    """A target's cached config.json; not cached, the error says that the bundled profiles hold
    the configs of its published drafts, not the target's (a preset names both)."""
    try:
        return cached_config(hub, why)
    except SourceError as missing:
        # Offline the Hub was not asked about the repo: "unreachable" (`hub_not_asked`).
        raise HubSourceError(missing.message + _only_drafts_bundled(hub), missing.hint, absence="unreachable") from None


def _only_drafts_bundled(hub: HubRepo) -> str:
    drafts = drafts_of_target(hub.repo_id)
    if not drafts:
        return ""
    return f"; dflash-tools bundles the published configs of its drafts ({', '.join(drafts)}), not the target's"


def list_hub_models(
    author: str | None,
    search: str | None,
    *,
    token: str | None,
    limit: int = 200,
    timeout: float | None = None,
) -> list[str]:
    """Repo ids of the Hub models matching `author` and `search` (at most `limit`).

    Read like the repo info (reading.hub.http): each page within --timeout and 16 MiB, at most
    MODEL_LIST_PAGES pages, every id checked to be a repo id (a hostile list could name paths).
    """
    filters = [f"author={author}" if author else "", f"search={search}" if search else ""]
    subject = " ".join(part for part in filters if part) or "all models"
    if limit < 1:
        return []
    if is_offline():
        raise SourceError(
            f"listing Hub models ({subject}) needs the network, but HF_HUB_OFFLINE is set",
            "unset HF_HUB_OFFLINE, or pass the repo ids you have cached",
        )
    hub = HubRepo(subject, None, token, effective_timeout(timeout))
    url = f"{constants.ENDPOINT}/api/models"
    params: dict[str, str] | None = {
        key: value
        for key, value in (("author", author), ("search", search), ("limit", str(min(limit, MODELS_PER_PAGE))))
        if value
    }
    ids: list[str] = []
    try:
        for _ in range(MODEL_LIST_PAGES):
            answer = request(
                url,
                what="the model list",
                headers=hub.headers(),
                deadline=Deadline(hub.timeout),
                limit=MAX_REPO_INFO_BYTES,
                params=params,
            )
            ids += parse_model_list(answer.body)
            following = httpx2.Response(200, headers=answer.headers).links.get("next", {}).get("url")
            if len(ids) >= limit or not following:
                break
            url, params = urljoin(url, following), None
    except HUB_ERRORS as exc:
        raise to_source_error(exc, hub, "the model list", listing=True) from exc
    return ids[:limit]


# The Hub sends at most this many models per page of its list; pages followed at most.
MODELS_PER_PAGE = 1000
MODEL_LIST_PAGES = 10


def parse_model_list(data: bytes) -> list[str]:
    """The `id` of every model in a page of the model list; anything else is a malformed answer."""
    what = "the model list"
    if too_many_values(data):
        raise HttpMalformed(what, "more JSON values than any page of models holds")
    try:
        models = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise HttpMalformed(what, f"not JSON ({one_line(str(exc), 80)})") from None
    if not isinstance(models, list):
        raise HttpMalformed(what, "not a JSON list")
    ids = []
    for model in models:
        repo_id = model.get("id") if isinstance(model, dict) else None
        if not isinstance(repo_id, str) or not looks_like_repo_id(repo_id) or repo_id.startswith("hf://"):
            raise HttpMalformed(what, f"an entry whose id is not a repo id ({ascii(repo_id)[:60]})")
        ids.append(repo_id)
    return ids


def _load_online(hub: HubRepo, info: RepoInfo) -> LoadedCheckpoint:
    # Everything read after this belongs to the resolved commit, so a push in between cannot
    # mix files of two commits into one report.
    pinned = info.commit or hub.revision
    config: SmallFile | None = None
    if info.files is None or CONFIG_NAME in info.files:
        with hub_errors(hub, CONFIG_NAME):
            config = fetch_small_file(hub, CONFIG_NAME, pinned)
    loaded = hub_checkpoint(hub, info.commit, config)
    _read_remote_weights(hub, pinned, info.files, loaded)
    return loaded


def _read_remote_weights(
    hub: HubRepo, pinned: str | None, listing: frozenset[str] | None, loaded: LoadedCheckpoint
) -> None:
    index: SmallFile | None = None
    if listing is None or INDEX_NAME in listing:
        with hub_errors(hub, INDEX_NAME):
            index = fetch_small_file(hub, INDEX_NAME, pinned)

    if index is not None:
        if index.data is None:
            loaded.findings.append(
                make_finding(
                    "DFT004", f"{INDEX_NAME} cannot be read: {index.refused}", "re-download the index", file=INDEX_NAME
                )
            )
            return
        weight_map = parse_index(index.data, loaded)
        index.data = None
        if weight_map is None:
            return
        shard_names = sorted(set(weight_map.values()))
        if _too_many_shards(hub, loaded, len(shard_names), f"{INDEX_NAME} names"):
            return
        reported: set[str] = set()
        to_fetch: list[str] = []
        for shard_name in shard_names:
            if listing is not None and shard_name not in listing:
                _missing_shard(loaded, shard_name, hub, len(reported))
                reported.add(shard_name)
            else:
                to_fetch.append(shard_name)
        skipped: list[str] = []
        for fetched in fetch_headers(hub, pinned, to_fetch, missing_ok=True):
            if fetched.missing:
                _missing_shard(loaded, fetched.name, hub, len(reported))
                reported.add(fetched.name)
            elif fetched.over_budget:
                skipped.append(fetched.name)
            else:
                add_fetched(loaded, fetched)
        if len(reported) > MAX_MISSING_FINDINGS:
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{INDEX_NAME} names {len(reported) - MAX_MISSING_FINDINGS:,} more shards that do not exist in {hub.label}",
                    "upload the missing shards, or regenerate the index from the shards",
                    file=INDEX_NAME,
                )
            )
        if skipped:
            _over_budget(hub, loaded, skipped)
            return
        check_index_against_shards(loaded, weight_map, reported)
        return

    if listing is None:
        names = ["model.safetensors"]
    else:
        names = sorted(n for n in listing if n.endswith(".safetensors") and "/" not in n)
    if _too_many_shards(hub, loaded, len(names), "the repo holds"):
        return
    fetched_any = False
    skipped = []
    for fetched in fetch_headers(hub, pinned, names, missing_ok=listing is None):
        if fetched.over_budget:
            skipped.append(fetched.name)
        elif not fetched.missing:
            fetched_any = True
            add_fetched(loaded, fetched)
    if skipped:
        _over_budget(hub, loaded, skipped)
        return
    if not fetched_any:
        loaded.weights_inspected = False
        others = sorted(n for n in listing or () if n.endswith((".bin", ".pt", ".pth", ".gguf")))
        hint = (
            f"the repo holds {', '.join(others[:3])}: only safetensors headers can be checked"
            if others
            else "tensor shapes were not checked"
        )
        loaded.findings.append(make_finding("DFT005", f"no *.safetensors files at the root of {hub.label}", hint))


# Missing shards reported one by one before one finding counts the rest.
MAX_MISSING_FINDINGS = 50


def _missing_shard(loaded: LoadedCheckpoint, shard_name: str, hub: HubRepo, already: int) -> None:
    if already >= MAX_MISSING_FINDINGS:
        return
    loaded.findings.append(
        make_finding(
            "DFT004",
            f"{INDEX_NAME} names {shard_name}, which does not exist in {hub.label}",
            "upload the missing shard, or regenerate the index from the shards",
            file=shard_name,
        )
    )


def _download_hint(hub: HubRepo) -> str:
    revision = f" --revision {hub.revision}" if hub.revision else ""
    return (
        f"download the repo (`hf download {hub.repo_id}{revision}`) and inspect the folder, where no such limit applies"
    )


def _too_many_shards(hub: HubRepo, loaded: LoadedCheckpoint, count: int, what: str) -> bool:
    """More shards than are read over the network: none is read (a partial set would read as missing tensors)."""
    if count <= MAX_REMOTE_SHARDS:
        return False
    loaded.weights_inspected = False
    loaded.findings.append(
        make_finding(
            "DFT005",
            f"{what} {count:,} safetensors files, more than the {MAX_REMOTE_SHARDS} whose headers are read over "
            "the network (a draft has one or two): tensor shapes were not checked",
            _download_hint(hub),
            severity=Severity.WARNING,
        )
    )
    return True


def _over_budget(hub: HubRepo, loaded: LoadedCheckpoint, skipped: list[str]) -> None:
    loaded.weights_inspected = False
    loaded.findings.append(
        make_finding(
            "DFT005",
            f"the safetensors headers of {hub.label} exceed {MAX_REMOTE_HEADER_TOTAL // (1024 * 1024)} MiB in all, "
            f"more than is read over the network: {brief_names(skipped)} not read, tensor shapes were not checked",
            _download_hint(hub),
            severity=Severity.WARNING,
            file=skipped[0],
        )
    )
