"""dflash_tools.reading.hub against a real local HTTP server imitating the Hub (no network, no mocks)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants

import dflash_tools_testing as testing
from dflash_tools.errors import SourceError
from dflash_tools.files.hf_cache import is_in_hf_cache
from dflash_tools.reading.checkpoint import INDEX_NAME, LoadedCheckpoint
from dflash_tools.reading.hub import HEADER_PROBE_BYTES, list_hub_models, load_hub_checkpoint, load_hub_config
from dflash_tools.reading.safetensors_header import encode_header
from dflash_tools.reading.source import load_checkpoint
from tests.hub_server import HubServer, header_size, safetensors_bytes

REPO = "z-lab/Tiny-DFlash2"
CONFIG = {"architectures": ["DFlash2DraftModel"], "hidden_size": 256, "is_causal": False}
# Big enough (1 MiB of data) that a header-only read is visibly smaller than the file.
TENSORS_A = [("fc.weight", "F32", (512, 512)), ("hidden_norm.weight", "BF16", (256,))]
TENSORS_B = [("norm.weight", "BF16", (256,)), ("layers.0.mlp.up_proj.weight", "BF16", (512, 256))]


# --------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------


def config_bytes(config: dict[str, object] | None = None) -> bytes:
    return json.dumps(config or CONFIG, indent=2).encode()


def index_bytes(weight_map: dict[str, str]) -> bytes:
    return json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode()


def sharded_files() -> dict[str, bytes]:
    shard_a, shard_b = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    weight_map = {name: shard_a for name, _, _ in TENSORS_A}
    weight_map.update({name: shard_b for name, _, _ in TENSORS_B})
    return {
        "config.json": config_bytes(),
        INDEX_NAME: index_bytes(weight_map),
        shard_a: safetensors_bytes(TENSORS_A),
        shard_b: safetensors_bytes(TENSORS_B),
        "README.md": b"# tiny\n",
    }


def load(revision: str | None = None, timeout: float | None = 5, repo: str = REPO) -> LoadedCheckpoint:
    return load_hub_checkpoint(repo, revision=revision, token=None, timeout=timeout)


def codes(loaded: LoadedCheckpoint) -> list[str]:
    return [f.code for f in loaded.findings]


def cache_files(names: list[str], revision: str | None = None, repo: str = REPO) -> None:
    """Populate the Hub cache the way a user would (huggingface_hub's own download)."""
    for name in names:
        huggingface_hub.hf_hub_download(repo, name, revision=revision)


def go_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def tree_state(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime) for p in sorted(root.rglob("*"))}


def assert_one_line(err: SourceError) -> None:
    assert "\n" not in err.message
    assert err.hint and "\n" not in err.hint


def assert_header_only(hub: HubServer, name: str, data: bytes, repo: str = REPO) -> None:
    served = hub.bytes_served(repo, name)
    assert 0 < served < len(data)
    assert served <= max(HEADER_PROBE_BYTES, header_size(data))


# --------------------------------------------------------------------------------------------
# Online: layouts
# --------------------------------------------------------------------------------------------


def test_single_file(hub: HubServer) -> None:
    data = safetensors_bytes(TENSORS_A)
    sha = hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": data})
    loaded = load()
    assert loaded.kind == "hub"
    assert loaded.source == REPO
    assert loaded.location == f"{REPO}@main"
    assert loaded.revision is None
    assert loaded.commit == sha
    assert loaded.config == CONFIG
    assert loaded.findings == []
    assert loaded.weights_inspected
    assert set(loaded.tensors) == {"fc.weight", "hidden_norm.weight"}
    assert loaded.tensors["fc.weight"].shape == (512, 512)
    [shard] = loaded.shards
    assert shard.file == "model.safetensors"
    assert shard.file_size == len(data)  # learnt from Content-Range
    assert_header_only(hub, "model.safetensors", data)
    assert loaded.bytes_read == hub.bytes_served(REPO, "model.safetensors")


def test_user_agent_names_the_tool(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    load()
    agents = {r.headers.get("user-agent", "") for r in hub.requests}
    assert agents and all("dflash-tools/" in agent for agent in agents)


def test_sharded(hub: HubServer) -> None:
    files = sharded_files()
    hub.add_repo(REPO, files)
    loaded = load()
    assert loaded.findings == []
    assert {s.file for s in loaded.shards} == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }
    assert set(loaded.tensors) == {name for name, _, _ in TENSORS_A + TENSORS_B}
    assert loaded.tensors["norm.weight"].file == "model-00002-of-00002.safetensors"
    total = 0
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        assert_header_only(hub, name, files[name])
        total += hub.bytes_served(REPO, name)
    assert loaded.bytes_read == total


def test_shards_are_fetched_concurrently(hub: HubServer) -> None:
    hub.add_repo(REPO, sharded_files())
    hub.slow = {"-of-00002.safetensors": 0.5}
    started = time.monotonic()
    loaded = load()
    assert time.monotonic() - started < 0.9  # one after the other would take at least 1.0 s
    assert len(loaded.shards) == 2


def test_custom_filename_and_only_root_files(hub: HubServer) -> None:
    data = safetensors_bytes(TENSORS_A)
    hub.add_repo(
        REPO,
        {
            "config.json": config_bytes(),
            "draft_model.safetensors": data,
            "extra/other.safetensors": safetensors_bytes(TENSORS_B),
            "pytorch_model.bin": b"\0" * 16,
        },
    )
    loaded = load()
    assert loaded.findings == []
    assert [s.file for s in loaded.shards] == ["draft_model.safetensors"]
    assert hub.bytes_served(REPO, "extra/other.safetensors") == 0
    assert hub.bytes_served(REPO, "pytorch_model.bin") == 0


def test_large_header_costs_exactly_the_header(hub: HubServer) -> None:
    # A header bigger than the first probe: the second request asks for the remainder only.
    metadata = {"notes": "x" * (HEADER_PROBE_BYTES + 5000)}
    data = safetensors_bytes(TENSORS_A, metadata)
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": data})
    loaded = load()
    assert loaded.findings == []
    assert loaded.shards[0].metadata == metadata
    assert hub.bytes_served(REPO, "model.safetensors") == header_size(data) < len(data)
    assert loaded.bytes_read == header_size(data)
    ranges = [r.range for r in hub.requests if r.path.endswith("model.safetensors")]
    assert ranges == [
        f"bytes=0-{HEADER_PROBE_BYTES - 1}",
        f"bytes={HEADER_PROBE_BYTES}-{header_size(data) - 1}",
    ]


def test_revision_passed_through(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    v2_config = {**CONFIG, "hidden_size": 512}
    v2_sha = hub.add_repo(
        REPO,
        {"config.json": config_bytes(v2_config), "model.safetensors": safetensors_bytes(TENSORS_B)},
        revision="v2",
    )
    loaded = load(revision="v2")
    assert loaded.config == v2_config
    assert loaded.commit == v2_sha
    assert loaded.revision == "v2"
    assert loaded.location == f"{REPO}@v2"
    assert set(loaded.tensors) == {name for name, _, _ in TENSORS_B}
    paths = hub.paths()
    assert paths[0] == f"/api/models/{REPO}/revision/v2"
    # Every file is read from the commit the revision resolved to: a push in between cannot mix
    # two commits into one report.
    assert paths[1:] == [f"/{REPO}/resolve/{v2_sha}/config.json", f"/{REPO}/resolve/{v2_sha}/model.safetensors"]


def test_online_reads_write_nothing_into_the_cache(hub: HubServer) -> None:
    hub.add_repo(REPO, sharded_files())
    load()
    load_hub_config(REPO, revision=None, token=None, timeout=5)
    assert not Path(constants.HF_HUB_CACHE).exists()


@pytest.mark.parametrize("shards", [1, 3])
def test_hub_and_local_reads_agree(hub: HubServer, tmp_path: Path, shards: int) -> None:
    """The same checkpoint, read from a folder and from the Hub, gives the same picture."""
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash2", testing.TINY_DFLASH2, shards=shards)
    hub.add_repo(REPO, {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()})
    local = load_checkpoint(str(folder))
    remote = load()
    assert remote.config == local.config
    assert remote.config_text == local.config_text
    assert remote.tensors == local.tensors
    assert [f.to_dict() for f in remote.findings] == [f.to_dict() for f in local.findings] == []
    assert [(s.file, s.header_length, s.file_size) for s in remote.shards] == [
        (s.file, s.header_length, s.file_size) for s in local.shards
    ]


# --------------------------------------------------------------------------------------------
# Online: broken repos are findings
# --------------------------------------------------------------------------------------------


def _valid_prefix_and_data() -> tuple[bytes, int]:
    prefix, offsets = encode_header(TENSORS_A)
    return prefix, offsets[-1][1]


def _corrupt(kind: str) -> bytes:
    prefix, data_size = _valid_prefix_and_data()
    if kind == "truncated-data":
        return prefix + bytes(data_size - 100)
    if kind == "trailing-bytes":
        return prefix + bytes(data_size + 64)
    if kind == "not-json":
        body = b"{not json" + b" " * 7
        return len(body).to_bytes(8, "little") + body + bytes(1024 * 1024)
    if kind == "length-past-eof":
        return (10**6).to_bytes(8, "little") + b"{}" + bytes(100)
    if kind == "huge-length":
        return (30_000_000).to_bytes(8, "little") + b"{" + bytes(40_000_000)
    if kind == "hole":
        header = {
            "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            "b": {"dtype": "F32", "shape": [4], "data_offsets": [32, 48]},
        }
        body = json.dumps(header).encode()
        body += b" " * (-len(body) % 8)
        return len(body).to_bytes(8, "little") + body + bytes(48)
    if kind == "three-bytes":
        return b"\x01\x02\x03"
    if kind == "empty":
        return b""
    raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("truncated-data", "holds only"),
        ("trailing-bytes", "trailing bytes"),
        ("not-json", "not valid JSON"),
        ("length-past-eof", "runs past the end"),
        ("hole", "hole of 16 bytes"),
        ("huge-length", "limit for headers read over the network"),
        ("three-bytes", "file is 3 bytes"),
        ("empty", "file is 0 bytes"),
    ],
)
def test_corrupt_remote_header_is_dft003(hub: HubServer, kind: str, reason: str) -> None:
    hub.add_repo(
        REPO,
        {
            "config.json": config_bytes(),
            "a-broken.safetensors": _corrupt(kind),
            "b-fine.safetensors": safetensors_bytes(TENSORS_B),
        },
    )
    loaded = load()
    [finding] = loaded.findings
    assert finding.code == "DFT003"
    assert finding.file == "a-broken.safetensors"
    assert reason in finding.message
    # The healthy file is still read.
    assert set(loaded.tensors) == {name for name, _, _ in TENSORS_B}


def test_index_problems_are_dft004(hub: HubServer) -> None:
    shard_a = "model-00001-of-00002.safetensors"
    weight_map = {name: shard_a for name, _, _ in TENSORS_A[:1]}  # hidden_norm.weight not indexed
    weight_map["norm.weight"] = "model-00002-of-00002.safetensors"  # listed, absent from the repo
    weight_map["evil.weight"] = "../outside.safetensors"  # escapes the checkpoint folder
    hub.add_repo(
        REPO,
        {
            "config.json": config_bytes(),
            INDEX_NAME: index_bytes(weight_map),
            shard_a: safetensors_bytes(TENSORS_A),
        },
    )
    loaded = load()
    assert set(codes(loaded)) == {"DFT004"}
    messages = " | ".join(f.message for f in loaded.findings)
    assert "names model-00002-of-00002.safetensors, which does not exist" in messages
    assert "escapes the checkpoint folder" in messages
    assert "'hidden_norm.weight', which model.safetensors.index.json does not list" in messages
    assert len(loaded.findings) == 3
    assert hub.bytes_served(REPO, "model-00002-of-00002.safetensors") == 0


def test_unreadable_index_is_dft004(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), INDEX_NAME: b"{oops"})
    loaded = load()
    assert codes(loaded) == ["DFT004"]
    assert "cannot be read as JSON" in loaded.findings[0].message


def test_missing_config_is_dft001_not_an_error(hub: HubServer) -> None:
    hub.add_repo(REPO, {"model.safetensors": safetensors_bytes(TENSORS_A)})
    loaded = load()
    assert loaded.config is None
    assert codes(loaded) == ["DFT001"]
    assert REPO in loaded.findings[0].message
    assert set(loaded.tensors) == {"fc.weight", "hidden_norm.weight"}


def test_invalid_config_is_dft001(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": b"[1, 2", "model.safetensors": safetensors_bytes(TENSORS_A)})
    loaded = load()
    assert loaded.config is None
    assert loaded.config_text == "[1, 2"
    assert codes(loaded) == ["DFT001"]


def test_no_safetensors_is_dft005(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "pytorch_model.bin": b"\0" * 8})
    loaded = load()
    assert codes(loaded) == ["DFT005"]
    assert not loaded.weights_inspected
    assert "pytorch_model.bin" in loaded.findings[0].hint


# --------------------------------------------------------------------------------------------
# Online: sources that cannot be reached are SourceErrors
# --------------------------------------------------------------------------------------------


def test_repo_not_found(hub: HubServer) -> None:
    with pytest.raises(SourceError) as info:
        load(repo="nobody/nothing")
    assert "nobody/nothing: no such model repo" in info.value.message
    assert "hf auth login" in info.value.hint
    assert_one_line(info.value)


@pytest.mark.parametrize("gate_api", [False, True])
def test_gated(hub: HubServer, gate_api: bool) -> None:
    hub.gate_api = gate_api
    hub.add_repo(REPO, {"config.json": config_bytes()}, gated=True)
    with pytest.raises(SourceError) as info:
        load()
    assert f"{REPO} is a gated repo" in info.value.message
    assert f"request access at {hub.url}/{REPO}" in info.value.hint
    assert_one_line(info.value)


def test_revision_not_found(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes()})
    with pytest.raises(SourceError) as info:
        load(revision="does-not-exist")
    assert "revision 'does-not-exist' does not exist" in info.value.message
    assert "--revision" in info.value.hint
    assert_one_line(info.value)


def test_timeout_on_repo_info(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes()})
    hub.slow = {"/api/models/": 3.0}
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        load(timeout=0.3)
    assert time.monotonic() - started < 2.5
    assert "did not answer within 0.3s" in info.value.message
    assert "--timeout" in info.value.hint
    assert_one_line(info.value)


def test_timeout_on_header_names_the_file(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    hub.slow = {"model.safetensors": 3.0}
    with pytest.raises(SourceError) as info:
        load(timeout=0.3)
    assert "did not answer within 0.3s for model.safetensors" in info.value.message
    assert_one_line(info.value)


def test_truncated_range_responses_are_resumed(hub: HubServer) -> None:
    data = safetensors_bytes(TENSORS_A + TENSORS_B)
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": data})
    hub.truncate_ranges_to = 64  # every range body stops after 64 bytes, connection closed
    loaded = load()
    assert loaded.findings == []
    assert len(loaded.tensors) == 4
    assert hub.bytes_served(REPO, "model.safetensors") == header_size(data)
    gets = [r for r in hub.requests if r.path.endswith("model.safetensors")]
    assert len(gets) == -(-header_size(data) // 64)


def test_truncated_to_nothing_is_a_source_error(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    hub.truncate_ranges_to = 0
    with pytest.raises(SourceError) as info:
        load()
    assert "incomplete response for model.safetensors" in info.value.message
    assert_one_line(info.value)


def test_short_range_responses(hub: HubServer) -> None:
    data = safetensors_bytes(TENSORS_A)
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": data})
    hub.short_ranges = 100  # honest 206 answers, never more than 100 bytes
    loaded = load()
    assert loaded.findings == []
    assert loaded.shards[0].file_size == len(data)
    assert hub.bytes_served(REPO, "model.safetensors") == header_size(data)


def test_server_ignoring_range_is_cut_off(hub: HubServer) -> None:
    data = safetensors_bytes([("big", "U8", (8 * 1024 * 1024,))])
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": data})
    hub.ignore_range = True
    loaded = load()
    assert loaded.findings == []
    assert loaded.shards[0].file_size == len(data)  # from Content-Length
    assert loaded.bytes_read < len(data) // 4


def test_unwritable_cache_still_works_and_writes_nothing(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(blocker / "hub"))
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    loaded = load()
    assert loaded.config == CONFIG
    assert loaded.findings == []
    assert blocker.read_text() == "x"
    # The config is one GET into memory: the cache is never written, so it need not be writable.
    config_gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("config.json")]
    assert len(config_gets) == 1


# --------------------------------------------------------------------------------------------
# Offline: the local cache only, read-only
# --------------------------------------------------------------------------------------------


def test_offline_full_cache(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    files = sharded_files()
    sha = hub.add_repo(REPO, files)
    cache_files(["config.json", INDEX_NAME, *[n for n in files if n.endswith(".safetensors")]])
    cache = Path(constants.HF_HUB_CACHE)
    before = tree_state(cache)
    go_offline(monkeypatch)
    hub.clear_log()
    loaded = load()
    assert hub.requests == []  # not one request
    assert loaded.findings == []
    assert loaded.commit == sha
    assert loaded.weights_inspected
    assert set(loaded.tensors) == {name for name, _, _ in TENSORS_A + TENSORS_B}
    assert loaded.bytes_read == sum(8 + s.header_length for s in loaded.shards)
    assert tree_state(cache) == before  # nothing written, nothing touched


def test_offline_partial_cache_is_dft005(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo(REPO, sharded_files())
    cache_files(["config.json", INDEX_NAME, "model-00001-of-00002.safetensors"])
    go_offline(monkeypatch)
    loaded = load()
    assert codes(loaded) == ["DFT005"]
    finding = loaded.findings[0]
    assert "1 of 2 shards" in finding.message
    assert "model-00002-of-00002.safetensors" in finding.message
    assert "HF_HUB_OFFLINE" in finding.message
    assert not loaded.weights_inspected  # a partial set would read as missing tensors (DFT020)
    assert set(loaded.tensors) == {name for name, _, _ in TENSORS_A}


def test_offline_config_only(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    cache_files(["config.json"])
    go_offline(monkeypatch)
    loaded = load()
    assert loaded.config == CONFIG
    assert codes(loaded) == ["DFT005"]
    assert not loaded.weights_inspected


def test_offline_single_file_cached(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    cache_files(["config.json", "model.safetensors"])
    go_offline(monkeypatch)
    loaded = load()
    assert loaded.findings == []
    assert set(loaded.tensors) == {"fc.weight", "hidden_norm.weight"}


def test_offline_nothing_cached(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes()})
    go_offline(monkeypatch)
    with pytest.raises(SourceError) as info:
        load()
    assert REPO in info.value.message
    assert "HF_HUB_OFFLINE" in info.value.message
    assert f"hf download {REPO} --include '*.json'" in info.value.hint
    assert_one_line(info.value)
    assert hub.requests == []


def test_offline_revision_uses_its_snapshot(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes()})
    v2_config = {**CONFIG, "hidden_size": 512}
    v2_sha = hub.add_repo(REPO, {"config.json": config_bytes(v2_config)}, revision="v2")
    cache_files(["config.json"])
    cache_files(["config.json"], revision="v2")
    go_offline(monkeypatch)
    assert load(revision="v2").config == v2_config
    assert load(revision="v2").commit == v2_sha
    assert load().config == CONFIG


def test_unreachable_hub_falls_back_to_cache(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    cache_files(["config.json", "model.safetensors"])
    hub.stop()  # connection refused from now on
    loaded = load()
    assert loaded.config == CONFIG
    assert set(loaded.tensors) == {"fc.weight", "hidden_norm.weight"}
    assert [f.code for f in loaded.findings] == ["DFT007"]  # the user learns the result may be stale


def test_unreachable_hub_nothing_cached(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes()})
    hub.stop()
    with pytest.raises(SourceError) as info:
        load()
    assert f"{REPO}@main: cannot connect to {hub.url}" in info.value.message
    assert_one_line(info.value)


# --------------------------------------------------------------------------------------------
# load_hub_config / list_hub_models
# --------------------------------------------------------------------------------------------


def test_load_hub_config_returns_the_dict(hub: HubServer) -> None:
    target = {
        "architectures": ["Qwen3_8ForConditionalGeneration"],
        "text_config": {"hidden_size": 5120, "num_hidden_layers": 64, "vocab_size": 248320},
        "vision_config": {"hidden_size": 1152},
    }
    hub.add_repo("Qwen/Qwen3.8-27B", {"config.json": config_bytes(target)})
    config, location = load_hub_config("Qwen/Qwen3.8-27B", revision=None, token=None, timeout=5)
    assert config == target
    assert location == "Qwen/Qwen3.8-27B@main"


def test_load_hub_config_errors(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo("org/no-config", {"README.md": b"hi"})
    hub.add_repo("org/bad-config", {"config.json": b"{"})
    hub.add_repo("org/good", {"config.json": config_bytes()})
    with pytest.raises(SourceError, match="org/no-config@main has no config.json"):
        load_hub_config("org/no-config", revision=None, token=None, timeout=5)
    with pytest.raises(SourceError, match="not valid JSON"):
        load_hub_config("org/bad-config", revision=None, token=None, timeout=5)
    with pytest.raises(SourceError, match="no such model repo"):
        load_hub_config("org/missing", revision=None, token=None, timeout=5)
    with pytest.raises(SourceError, match="revision 'nope' does not exist"):
        load_hub_config("org/good", revision="nope", token=None, timeout=5)
    # Offline: a copy the user downloaded works, anything else is a SourceError naming the repo.
    cache_files(["config.json"], repo="org/good")
    go_offline(monkeypatch)
    config, _ = load_hub_config("org/good", revision=None, token=None, timeout=5)
    assert config == CONFIG
    with pytest.raises(
        SourceError,
        match="org/never-fetched@main: HF_HUB_OFFLINE is set and config.json is not in the",
    ):
        load_hub_config("org/never-fetched", revision=None, token=None, timeout=5)


def test_load_hub_config_unreachable(hub: HubServer) -> None:
    hub.add_repo("org/good", {"config.json": config_bytes()})
    cache_files(["config.json"], repo="org/good")
    hub.stop()
    started = time.monotonic()
    config, _ = load_hub_config("org/good", revision=None, token=None, timeout=5)
    assert config == CONFIG
    with pytest.raises(SourceError) as info:
        load_hub_config("org/other", revision=None, token=None, timeout=5)
    assert time.monotonic() - started < 5  # no retry loop
    assert f"org/other@main: cannot connect to {hub.url}" in info.value.message
    assert_one_line(info.value)


def test_list_hub_models(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for repo in (
        "z-lab/Qwen3-8B-DFlash-b16",
        "z-lab/Qwen3.8-27B-DFlash2",
        "z-lab/other",
        "someone/DFlash-x",
    ):
        hub.add_repo(repo, {"config.json": config_bytes()})
    assert list_hub_models("z-lab", "DFlash", token=None) == [
        "z-lab/Qwen3-8B-DFlash-b16",
        "z-lab/Qwen3.8-27B-DFlash2",
    ]
    assert list_hub_models(None, "dflash", token=None, limit=1) == ["someone/DFlash-x"]
    go_offline(monkeypatch)
    with pytest.raises(SourceError, match="needs the network"):
        list_hub_models("z-lab", None, token=None)


# --------------------------------------------------------------------------------------------
# is_in_hf_cache
# --------------------------------------------------------------------------------------------


def test_is_in_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    repo = cache / "models--org--name"
    blob = repo / "blobs" / ("ab" * 32)
    snapshot = repo / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    blob.parent.mkdir(parents=True)
    blob.write_text("{}")
    (snapshot / "config.json").symlink_to(blob)

    assert is_in_hf_cache(cache)
    assert is_in_hf_cache(snapshot / "config.json")
    assert is_in_hf_cache(snapshot / "not-yet-written.json")

    # Elsewhere, a cache laid out the real way (a second cache, or one copied) is refused...
    other_repo = tmp_path / "copy" / "models--org--other"
    (other_repo / "blobs").mkdir(parents=True)
    assert is_in_hf_cache(other_repo / "snapshots" / ("d" * 40) / "config.json") is False  # no snapshots/ yet
    (other_repo / "snapshots").mkdir()
    assert is_in_hf_cache(other_repo / "snapshots" / ("d" * 40) / "config.json")
    # ...but a folder merely named `snapshots/<hex>` is not the cache (issue 12: decide by layout).
    lookalike = tmp_path / "work" / "snapshots" / ("d" * 40) / "config.json"
    assert not is_in_hf_cache(lookalike)

    # A symlink elsewhere that resolves into a blobs/ folder, and a folder full of them.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").symlink_to(blob)
    assert is_in_hf_cache(outside / "config.json")
    assert is_in_hf_cache(outside)
    # A folder symlinked to the snapshot resolves into the cache.
    (tmp_path / "link-to-snapshot").symlink_to(snapshot)
    assert is_in_hf_cache(tmp_path / "link-to-snapshot")

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert not is_in_hf_cache(plain)
    assert not is_in_hf_cache(plain / "config.json")
    assert not is_in_hf_cache(tmp_path / "new-output")
    assert not is_in_hf_cache(Path(os.path.relpath(plain)))


def test_cli_audit_of_an_author(hub: HubServer) -> None:
    """`inspect --author z-lab --search DFlash`: every matching repo, concurrently, one table / JSON array."""
    from typer.testing import CliRunner

    from dflash_tools.cli import app

    def repo_files(dialect: str, spec: testing.DraftSpec, *, break_it: bool = False) -> dict[str, bytes]:
        config = testing.make_config(dialect, spec)
        if break_it:
            config["dflash_config"]["block_size"] = 0
        return {
            "config.json": json.dumps(config).encode(),
            "model.safetensors": safetensors_bytes(testing.tensor_table(spec)),
        }

    hub.add_repo("z-lab/Tiny-DFlash2", repo_files("zlab-dflash2", testing.TINY_DFLASH2))
    hub.add_repo("z-lab/Tiny-DFlash", repo_files("zlab-dflash", testing.TINY))
    hub.add_repo("z-lab/Broken-DFlash2", repo_files("zlab-dflash2", testing.TINY_DFLASH2, break_it=True))
    hub.add_repo("z-lab/unrelated", {"config.json": b"{}"})
    result = CliRunner().invoke(app, ["inspect", "--author", "z-lab", "--search", "DFlash", "--json"])
    documents = json.loads(result.stdout)
    assert result.exit_code == 1  # one of them has an error finding
    assert {d["source"]: d["ok"] for d in documents} == {
        "z-lab/Broken-DFlash2": False,
        "z-lab/Tiny-DFlash": True,
        "z-lab/Tiny-DFlash2": True,
    }
    broken = next(d for d in documents if d["source"] == "z-lab/Broken-DFlash2")
    assert "DFT010" in {f["code"] for f in broken["findings"]}
    table = CliRunner().invoke(app, ["inspect", "--author", "z-lab", "--search", "DFlash"])
    assert "3 source(s), 1 with errors or unreadable" in table.stdout


# --------------------------------------------------------------------------------------------
# The I/O policy: honest retries, one deadline per request
# --------------------------------------------------------------------------------------------


def test_retries_are_bounded_capped_and_quiet(hub: HubServer, capfd: pytest.CaptureFixture[str]) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    hub.fail["/config.json"] = (503, "busy")
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        load(timeout=10)
    # Three attempts (two retries), 0.5 s then 1 s apart: not huggingface_hub's five, 1 + 2 + 4 + 8 s.
    assert len([p for p in hub.paths() if p.endswith("/config.json")]) == 3
    assert time.monotonic() - started < 4
    assert info.value.message == f"{REPO}@main: the Hub failed with HTTP 503 for config.json: busy"
    assert capfd.readouterr().err == ""  # no library logs its retries


def test_retry_after_is_honoured_within_the_deadline_only(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    hub.fail["/config.json"] = (429, "slow down")
    hub.fail_headers["/config.json"] = {"Retry-After": "1"}
    hub.fail_times["/config.json"] = 1
    started = time.monotonic()
    assert load(timeout=3).config == CONFIG  # waited the second it was asked to, then read it
    assert 1 <= time.monotonic() - started < 3
    hub.fail_times["/config.json"] = 1
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        load(timeout=0.5)  # the wait does not fit: no wait, and the message says what was asked
    assert time.monotonic() - started < 0.5
    assert "asked to wait 1 s, longer than --timeout 0.5s allows" in info.value.message


def test_a_dripped_answer_ends_at_the_deadline(hub: HubServer) -> None:
    hub.add_repo(REPO, {"config.json": config_bytes(), "model.safetensors": safetensors_bytes(TENSORS_A)})
    hub.drip["/config.json"] = 0.05  # every byte well within any read timeout: only a deadline ends it
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        load(timeout=1)
    assert time.monotonic() - started < 2.5  # the repo info, then one second for config.json
    assert "did not answer within 1s for config.json" in info.value.message


def test_headers_past_the_budget_are_not_read(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from dflash_tools.reading.hub import headers

    # The real budget is 32 MiB; three 64 KiB probes fit in 128 KiB, a fourth file's does not.
    monkeypatch.setattr(headers, "MAX_REMOTE_HEADER_TOTAL", 3 * HEADER_PROBE_BYTES)
    files = sharded_files()
    files["model-00003-of-00004.safetensors"] = safetensors_bytes([("extra.a", "BF16", (2,))])
    files["model-00004-of-00004.safetensors"] = safetensors_bytes([("extra.b", "BF16", (2,))])
    index = json.loads(files[INDEX_NAME])
    index["weight_map"].update(
        {"extra.a": "model-00003-of-00004.safetensors", "extra.b": "model-00004-of-00004.safetensors"}
    )
    files[INDEX_NAME] = json.dumps(index).encode()
    hub.add_repo(REPO, files)
    # The same file is left unread on every run: the budget goes to the files in order, not to
    # whichever fetching thread gets there first (a race once failed this test on a 2-core CI).
    for _ in range(5):
        loaded = load()
        [finding] = [f for f in loaded.findings if f.code == "DFT005"]
        assert "exceed" in finding.message and "model-00004-of-00004.safetensors not read" in finding.message
        assert "00003" not in finding.message, finding.message
        assert not loaded.weights_inspected  # a partial set would read as missing tensors
    assert hub.bytes_served(REPO, "model-00004-of-00004.safetensors") == 0
    assert hub.bytes_served(REPO, "model-00003-of-00004.safetensors") > 0
