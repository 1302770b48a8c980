"""Every parser that reads outside data, fed arbitrary input by hypothesis: it never raises.

The outcome is always a parsed result, a `SafetensorsHeaderError` (what `inspect` reports as
DFT003), findings, or a `SourceError` (a clean exit 2). The JSON report always serializes to
strict UTF-8 JSON that parses back to the same document, and the human report never carries a
raw control character. The long campaign (100,000 inputs) is `fuzz/campaign.py`; its quick mode
runs in `test_hostile_fuzz.py`. Below the properties: regressions for the bugs it found.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dflash_tools_testing as testing
from dflash_tools.cli._output import reset_documents, write_json
from dflash_tools.cli.inspect_run import render_report
from dflash_tools.draft.target import TargetDescription, load_target, target_from_config
from dflash_tools.errors import SourceError
from dflash_tools.findings import CATALOGUE
from dflash_tools.inspect import InspectReport, describe, inspect_checkpoint, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint, parse_config_text, parse_index, safe_shard_name
from dflash_tools.reading.safetensors_header import (
    DTYPE_BITS,
    SafetensorsHeaderError,
    encode_header,
    expected_nbytes,
    parse_header,
    read_local_header,
)
from dflash_tools.reading.source import load_checkpoint
from tests.conftest import default_spec

HOSTILE_STRINGS = [
    "\x1b]52;c;cHduZWQ=\x07",
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[31mred",
    "\r\x1b[Kfake OK",
    "[bold red]markup[/]",
    "\u202egnp.exe",
    "\u2066x\u2069",
    "a\u200bb",
    "\x00",
    "\ud800",
    "\ufeff",
    "\u2028",
    "../../etc/passwd",
]
# What must never reach a terminal from a checkpoint (newline excepted: the renderer's own).
UNSAFE_OUTPUT = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**63, 2**64, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(HOSTILE_STRINGS),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, child in value.items():
            out.append((*prefix, key))
            out += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:3]):
            out.append((*prefix, index))
            out += paths(child, (*prefix, index))
    return out


def set_path(tree: Any, path: tuple[Any, ...], value: Any) -> None:
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


CONFIGS = {dialect: testing.make_config(dialect, default_spec(dialect)) for dialect in testing.ALL_DIALECTS}
CONFIG_PATHS = {dialect: paths(config) for dialect, config in CONFIGS.items()}
TENSORS = {
    dialect: parse_header(
        encode_header(testing.tensor_table(default_spec(dialect)))[0][8:], "model.safetensors"
    ).tensors
    for dialect in testing.ALL_DIALECTS
}


def check_report(report: InspectReport, target: TargetDescription | None = None) -> None:
    """The JSON document parses back exactly; the human report is inert."""
    for finding in report.findings:
        assert finding.code in CATALOGUE
        assert isinstance(finding.message, str) and isinstance(finding.hint, str)
    document = report.to_dict(include_tensors=True)
    sink = io.StringIO()
    reset_documents()  # write_json writes one document per command: this is a new one
    with contextlib.redirect_stdout(sink):
        write_json(document)
    sink.getvalue().encode("utf-8")
    assert json.loads(sink.getvalue()) == json.loads(json.dumps(document))
    human = io.StringIO()
    with contextlib.redirect_stdout(human):
        render_report(report, show_tensors=True, target_spec=target)
    human.getvalue().encode("utf-8")
    assert not UNSAFE_OUTPUT.search(human.getvalue()), human.getvalue()


def inspect_config(config: Any, dialect: str, target: TargetDescription | None = None) -> InspectReport:
    loaded = LoadedCheckpoint(
        source=dialect,
        kind="local",
        location=dialect,
        config=config,
        config_text="",
        tensors=dict(TENSORS[dialect]),
    )
    return inspect_loaded(loaded, target=target)


# --------------------------------------------------------------------------------------------
# safetensors headers
# --------------------------------------------------------------------------------------------


@PROPERTY
@given(data=st.binary(max_size=1024), file_size=st.one_of(st.none(), st.integers(0, 2**64)))
def test_header_bytes_parse_or_refuse(data: bytes, file_size: int | None) -> None:
    try:
        shard = parse_header(data, "model.safetensors", file_size)
    except SafetensorsHeaderError as exc:
        assert "\n" not in str(exc)
        return
    assert all(t.num_bytes == expected_nbytes(t.dtype, t.shape) for t in shard.tensors.values())


entry_values = st.one_of(json_values, st.sampled_from(list(DTYPE_BITS)), st.lists(st.integers(-5, 2**64), max_size=4))


@PROPERTY
@given(
    entries=st.dictionaries(
        st.one_of(st.text(max_size=10), st.sampled_from(HOSTILE_STRINGS), st.just("__metadata__")),
        st.one_of(
            json_values,
            st.fixed_dictionaries({"dtype": entry_values, "shape": entry_values, "data_offsets": entry_values}),
        ),
        max_size=5,
    ),
    file_size=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_structured_headers_parse_or_refuse(entries: dict[str, Any], file_size: int | None) -> None:
    data = json.dumps(entries, allow_nan=True).encode("utf-8", "surrogatepass")
    try:
        shard = parse_header(data, "model.safetensors", file_size)
    except SafetensorsHeaderError:
        return
    position = 0
    for tensor in sorted(shard.tensors.values(), key=lambda t: t.data_offsets):
        assert tensor.data_offsets[0] == position  # contiguous: no holes, no overlaps
        position = tensor.data_offsets[1]


tensor_specs = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=20),
        st.sampled_from(sorted(DTYPE_BITS)),
        st.lists(st.integers(0, 64), max_size=3).map(tuple),
    ),
    max_size=6,
    unique_by=lambda t: t[0],
).filter(lambda specs: all(name != "__metadata__" for name, _, _ in specs))


@PROPERTY
@given(tensors=tensor_specs)
def test_valid_headers_round_trip(tensors: list[tuple[str, str, tuple[int, ...]]]) -> None:
    prefix, offsets = encode_header(tensors, {"format": "pt"})
    size = len(prefix) + (offsets[-1][1] if offsets else 0)
    shard = parse_header(prefix[8:], "model.safetensors", size)
    assert {n: (t.dtype, t.shape) for n, t in shard.tensors.items()} == {n: (d, s) for n, d, s in tensors}


@PROPERTY
@given(
    length=st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 7, 2**63, 2**64 - 1, 100_000_001])),
    body=st.binary(max_size=256),
    cut=st.integers(0, 300),
)
def test_files_with_any_length_prefix(tmp_path: Path, length: int, body: bytes, cut: int) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes((struct.pack("<Q", length) + body)[:cut])
    try:
        read_local_header(path)
    except SafetensorsHeaderError as exc:
        assert "\n" not in str(exc)


# --------------------------------------------------------------------------------------------
# Shard index
# --------------------------------------------------------------------------------------------


@PROPERTY
@given(
    index=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {
                "weight_map": st.one_of(
                    json_values,
                    st.dictionaries(
                        st.text(max_size=8),
                        st.one_of(
                            json_values,
                            st.sampled_from(["../x.safetensors", "/etc/passwd", "a\\b", "C:x", "", "\x00", "a" * 300]),
                        ),
                        max_size=5,
                    ),
                )
            }
        ),
    ),
    raw=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_index_parse_or_refuse(index: Any, raw: bytes | None) -> None:
    data = raw if raw is not None else json.dumps(index, allow_nan=True).encode("utf-8", "surrogatepass")
    loaded = LoadedCheckpoint(source="x", kind="local", location="x", config=None, config_text=None)
    weight_map = parse_index(data, loaded)
    assert {f.code for f in loaded.findings} <= {"DFT004"}
    if weight_map is not None:
        assert all(safe_shard_name(name) is None for name in weight_map.values())


# --------------------------------------------------------------------------------------------
# Configs of every dialect, through the whole inspect path
# --------------------------------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), value=json_values)
def test_any_value_in_any_config_field(data: st.DataObject, value: Any) -> None:
    dialect = data.draw(st.sampled_from(testing.ALL_DIALECTS))
    config = json.loads(json.dumps(CONFIGS[dialect]))
    path = data.draw(st.sampled_from(CONFIG_PATHS[dialect]))
    set_path(config, path, value)
    target = None
    if data.draw(st.booleans()):
        target_config = testing.make_target_config(default_spec(dialect))
        target_config[data.draw(st.sampled_from(sorted(target_config)))] = data.draw(json_values)
        with contextlib.suppress(SourceError):
            target = target_from_config(target_config, "target", "target")
    check_report(inspect_config(config, dialect, target), target)


@PROPERTY
@given(data=st.data(), cut=st.integers(0, 2000), junk=st.binary(max_size=8))
def test_damaged_config_text(data: st.DataObject, cut: int, junk: bytes) -> None:
    dialect = data.draw(st.sampled_from(testing.ALL_DIALECTS))
    text = json.dumps(CONFIGS[dialect]).encode()
    damaged = text[:cut] + junk + text[cut + len(junk) :]
    try:
        decoded = damaged.decode("utf-8")
    except UnicodeDecodeError:
        return
    config, findings = parse_config_text(decoded, "config.json")
    if config is None:
        assert [f.code for f in findings] == ["DFT001"]
        return
    describe(config)
    check_report(inspect_config(config, dialect))


# --------------------------------------------------------------------------------------------
# Regressions: inputs the fuzz campaign found crashing, hanging or breaking the output
# --------------------------------------------------------------------------------------------


def zlab_config(**changes: Any) -> dict[str, Any]:
    config = testing.make_config("zlab-dflash", testing.TINY)
    config.update(changes)
    return config


def test_huge_layer_count_is_a_finding_not_a_hang() -> None:
    # Expected tensors are enumerated per layer: 10**9 layers once meant minutes and gigabytes.
    report = inspect_config(zlab_config(num_hidden_layers=10**9), "zlab-dflash")
    assert "DFT006" in {f.code for f in report.findings}
    assert any("num_hidden_layers" in f.message and "<= 1024" in f.message for f in report.findings)


def test_tensor_name_with_a_5000_digit_layer_number() -> None:
    # int() refuses more than 4300 digits: the unexpected-tensor check used to crash on it.
    loaded = LoadedCheckpoint(
        source="x",
        kind="local",
        location="x",
        config=zlab_config(),
        config_text="",
        tensors={
            **TENSORS["zlab-dflash"],
            "layers." + "9" * 5000 + ".x": next(iter(TENSORS["zlab-dflash"].values())),
        },
    )
    report = inspect_loaded(loaded)
    assert "DFT021" in {f.code for f in report.findings}
    check_report(report)


@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_integer_too_large_for_a_float_in_a_number_field(value: int) -> None:
    report = inspect_config(zlab_config(rms_norm_eps=value), "zlab-dflash")
    assert any(f.code == "DFT006" and "rms_norm_eps" in f.message for f in report.findings)


@pytest.mark.parametrize("theta", [10**400, float("nan"), float("inf")])
def test_unusable_rope_theta_in_draft_or_target(theta: float) -> None:
    target_config = testing.make_target_config(testing.TINY)
    target_config["rope_parameters"] = {"rope_theta": theta}
    target = target_from_config(target_config, "t", "t")
    assert target.rope_theta is None
    config = zlab_config(rope_parameters={"rope_theta": theta})
    check_report(inspect_config(config, "zlab-dflash", target), target)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_in_findings_stay_strict_json(value: float) -> None:
    config = zlab_config(block_size=value)
    report = inspect_config(config, "zlab-dflash")
    [finding] = [f for f in report.findings if f.code == "DFT010"]
    spelled = finding.to_dict()["values"]["block_size"]
    assert spelled in ("NaN", "Infinity", "-Infinity")
    check_report(report)


def test_deeply_nested_value_in_a_finding() -> None:
    value: Any = 1
    for _ in range(200):
        value = [value]
    report = inspect_config(zlab_config(block_size=value), "zlab-dflash")
    [finding] = [f for f in report.findings if f.code == "DFT010"]
    assert "nested deeper than" in json.dumps(finding.to_dict()["values"])
    check_report(report)


def test_lone_surrogates_are_exact_in_json_and_inert_for_humans(tmp_path: Path) -> None:
    # "\ud800" is a legal JSON escape but cannot be written as UTF-8: stdout used to fail.
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "qwen3\udfff"
    config["architectures"].append("\ud800\x1b]52;c;eA==\x07")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")  # ensure_ascii: \u escapes
    report = inspect_checkpoint(str(folder))
    check_report(report)
    assert report.description is not None and report.description.decoder.model_type == "qwen3\udfff"


def test_lone_surrogate_in_a_tensor_name_is_dft003(tmp_path: Path) -> None:
    # The safetensors library (serde_json) refuses such a header; so does inspect.
    header = json.dumps({"layers.0.\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT003" and "surrogate" in f.message for f in report.findings)
    check_report(report)


def test_index_naming_a_file_longer_than_the_file_system_allows(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY, shards=2)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "a" * 400 + ".safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT004" and "a" * 50 in f.message for f in report.findings)


def test_index_naming_a_shard_with_a_lone_surrogate(tmp_path: Path) -> None:
    # "\udaab" parses from JSON but is no file name: path operations raised UnicodeEncodeError.
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY, shards=2)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "model-\udaab.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT004" and "forbidden characters" in f.message for f in report.findings)
    check_report(report)


@pytest.mark.parametrize(
    "source",
    ["a" * 300, "org/" + "b" * 300, "org/name-", "org/na--me", "org/name..x", "/" + "x" * 5000],
)
def test_sources_the_os_or_the_hub_refuse_are_a_clean_exit_2(source: str) -> None:
    with pytest.raises(SourceError) as caught:
        load_checkpoint(source)
    assert "no such file or folder" in caught.value.message
    with pytest.raises(SourceError):
        load_target(source)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_target_that_is_a_device_does_not_hang(device: str) -> None:
    with pytest.raises(SourceError, match="not a regular file"):
        load_target(device)


def test_huge_sparse_config_is_refused_without_reading_it(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY)
    with open(folder / "config.json", "r+b") as handle:
        handle.truncate(1 << 40)  # a terabyte, sparse: reading it whole would exhaust memory
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT001" and "larger than" in f.message for f in report.findings)


def test_huge_sparse_index_is_refused_without_reading_it(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY, shards=2)
    with open(folder / "model.safetensors.index.json", "r+b") as handle:
        handle.truncate(1 << 40)
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT004" and "larger than" in f.message for f in report.findings)


def test_nan_and_infinity_everywhere_in_a_config() -> None:
    for dialect, config in CONFIGS.items():
        poisoned = json.loads(json.dumps(config))
        for path in CONFIG_PATHS[dialect]:
            with contextlib.suppress(KeyError, IndexError, TypeError):
                set_path(poisoned, path, math.nan)
        check_report(inspect_config(poisoned, dialect))
