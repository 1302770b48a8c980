"""The repo info, config.json and the shard index of a Hub repo: bounded GETs, parsed and checked.

Online, nothing is written: these small files are read into memory under a size cap and never
cached (huggingface_hub's `hf_hub_download` would stream any size into the cache first). A later
offline run finds whatever `hf download` or an engine put in the Hub cache.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_url
from huggingface_hub.errors import RemoteEntryNotFoundError

from dflash_tools.errors import SourceError
from dflash_tools.findings import make_finding
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    MAX_JSON_BYTES,
    LoadedCheckpoint,
    parse_config_text,
    read_small_file,
    safe_shard_name,
    too_large_reason,
    too_many_values,
)
from dflash_tools.reading.http import HttpMalformed, HttpTooLarge
from dflash_tools.reading.hub.http import Deadline, request
from dflash_tools.reading.hub.session import HubRepo

COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")
# The largest repo info a model repo plausibly has: ~40 bytes per file without sizes, so this
# lists over 400,000 files. A 300 MB answer is refused before it is read.
MAX_REPO_INFO_BYTES = 16 * 1024 * 1024
REPO_INFO = "the repo info"
# The repo info keys read here; every other value is dropped while parsing, so a repo card or
# widget data of any size costs nothing.
_REPO_INFO_KEYS = frozenset({"sha", "siblings", "rfilename"})


@dataclass(frozen=True)
class RepoInfo:
    """What the repo info says: the commit the revision resolves to, and the repo's files."""

    commit: str | None
    files: frozenset[str] | None  # None: the answer listed no files (then each is asked for)


def fetch_repo_info(hub: HubRepo) -> RepoInfo:
    """The repo info (`HfApi.model_info`'s answer, without file sizes), bounded and checked."""
    answer = request(
        hub.repo_info_url(),
        what=REPO_INFO,
        headers=hub.headers(),
        deadline=Deadline(hub.timeout),
        limit=MAX_REPO_INFO_BYTES,
    )
    if answer.status != 200:
        raise HttpMalformed(REPO_INFO, f"HTTP {answer.status} instead of 200")
    return parse_repo_info(answer.body)


def parse_repo_info(data: bytes) -> RepoInfo:
    """Check the parts of a repo info that are used: `sha` a commit hash, `siblings` a list of safe names."""
    refused = too_many_values(data)
    if refused:
        raise HttpMalformed(REPO_INFO, f"{refused} (no model repo's info holds that many)")
    try:
        info = json.loads(data, object_pairs_hook=_needed_keys)
    except (ValueError, RecursionError) as exc:
        raise HttpMalformed(REPO_INFO, f"not JSON ({_short(str(exc))})") from None
    if not isinstance(info, dict):
        raise HttpMalformed(REPO_INFO, f"a JSON {_json_type(info)} instead of an object")
    sha = info.get("sha")
    if sha is not None and not (isinstance(sha, str) and COMMIT_HASH.match(sha)):
        raise HttpMalformed(REPO_INFO, f"a commit sha {_short(sha)} that is not 40 hexadecimal digits")
    siblings = info.get("siblings")
    if siblings is None:
        return RepoInfo(sha, None)
    if not isinstance(siblings, list):
        raise HttpMalformed(REPO_INFO, f"'siblings' is a JSON {_json_type(siblings)} instead of a list of files")
    files: set[str] = set()
    for sibling in siblings:
        name = sibling.get("rfilename") if isinstance(sibling, dict) else None
        if not isinstance(name, str):
            raise HttpMalformed(REPO_INFO, f"a file entry {_short(sibling)} without an 'rfilename' string")
        if safe_shard_name(name):
            raise HttpMalformed(REPO_INFO, f"the file list names {_short(name)}, which is not a path inside the repo")
        files.add(name)
    return RepoInfo(sha, frozenset(files))


def _needed_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value for key, value in pairs if key in _REPO_INFO_KEYS}


def _json_type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=True, default=str)
    text = ascii(text) if isinstance(value, str) else text
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class SmallFile:
    """A JSON file of the repo: its bytes, or why it was not read (`refused`, e.g. "larger than 64 MiB")."""

    data: bytes | None = None
    refused: str | None = None


def fetch_small_file(hub: HubRepo, filename: str, pinned: str | None) -> SmallFile | None:
    """`filename` of the pinned commit (None when the repo does not have it), read up to MAX_JSON_BYTES."""
    url = hf_hub_url(hub.repo_id, filename, revision=pinned)
    try:
        answer = request(
            url, what=filename, headers=hub.headers(), deadline=Deadline(hub.timeout), limit=MAX_JSON_BYTES
        )
    except RemoteEntryNotFoundError:
        return None
    except HttpTooLarge:
        return SmallFile(refused=too_large_reason(MAX_JSON_BYTES))
    if answer.status != 200:
        raise HttpMalformed(filename, f"HTTP {answer.status} instead of the file")
    served = answer.headers.get("X-Repo-Commit")
    if served is not None and not COMMIT_HASH.match(served.strip()):
        raise HttpMalformed(filename, f"an X-Repo-Commit header {_short(served)} that is not a commit hash")
    if served is not None and pinned is not None and COMMIT_HASH.match(pinned) and served.strip() != pinned:
        raise HttpMalformed(
            filename, f"the file of commit {served.strip()[:12]} although commit {pinned[:12]} was asked"
        )
    return SmallFile(data=answer.body)


def hub_checkpoint(hub: HubRepo, commit: str | None, config: SmallFile | None) -> LoadedCheckpoint:
    """The checkpoint of `hub` at `commit`, its config read from `config` (None: missing, a finding)."""
    loaded = LoadedCheckpoint(
        source=hub.repo_id,
        kind="hub",
        location=hub.label,
        config=None,
        config_text=None,
        revision=hub.revision,
        commit=commit,
    )
    set_config(loaded, config, hub)
    return loaded


def set_config(loaded: LoadedCheckpoint, config: SmallFile | None, hub: HubRepo) -> None:
    if config is None:
        loaded.findings.append(
            make_finding(
                "DFT001",
                f"{CONFIG_NAME} is missing from {hub.label}",
                "a draft checkpoint needs its config.json next to the weights; check the repo and --revision",
                file=CONFIG_NAME,
            )
        )
        return
    if config.refused is not None or config.data is None:
        # The same words as for a local file (reading.local.read_config_file).
        loaded.findings.append(
            make_finding(
                "DFT001", f"{CONFIG_NAME} is {config.refused}: not a config", "restore config.json", file=CONFIG_NAME
            )
        )
        return
    try:
        text = config.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        loaded.findings.append(
            make_finding("DFT001", f"{CONFIG_NAME} is not UTF-8 text: {exc}", "restore config.json", file=CONFIG_NAME)
        )
        return
    config.data = None  # the text is all that is kept: a large config is not held twice
    parsed, findings = parse_config_text(text, CONFIG_NAME)
    loaded.config = parsed
    loaded.config_text = text
    loaded.findings.extend(findings)


def read_cached_file(path: Path, hub: HubRepo) -> SmallFile:
    """A JSON file from the local Hub cache, read in place under the same cap as any other."""
    try:
        return SmallFile(data=read_small_file(path))
    except ValueError as exc:
        return SmallFile(refused=str(exc))
    except OSError as exc:
        raise SourceError(
            f"{hub.label}: cannot read the cached {path.name}: {exc.strerror or exc}",
            "check the permissions of the Hugging Face cache (HF_HUB_CACHE)",
        ) from None
