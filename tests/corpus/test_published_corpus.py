"""Real published draft configs (tests/corpus/): provenance, inspect, normalize, round trip.

Every file is the config.json of a draft someone else published or trained; none was written by
this project. Each one is inspected, normalized by `convert` and, where convert translates it,
taken to the other dialect and back. Files of architectures the tool cannot read yet are strict
xfails (`entries.PENDING_ARCHITECTURES`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.convert import convert_checkpoint, plan_conversion
from dflash_tools.draft.profiles import load_profiles
from dflash_tools.errors import OperationError
from dflash_tools.inspect import inspect_checkpoint
from tests.corpus.entries import BY_DIR, CLASSES, CORPUS, ENTRIES, PENDING_ARCHITECTURES, Entry

# What each file reads as today (None: no dialect recognized).
DIALECTS = {
    "edited/PixelML__Qwen3.8-Flash-Next-NVFP4-DFlash__partial": "dspark-native",
    "edited/RadixArk__Qwen3.8-27B-DSpark__partial": "dspark-native",
    "edited/RedHatAI__Qwen3.6-35B-A3B-speculator.dspark__reduced": "speculators-dspark",
    "edited/deepseek-ai__dspark_gemma4_12b_block7__from-dict": "dspark-native",
    "edited/deepseek-ai__dspark_qwen3_4b_block7__trimmed": "dspark-native",
    "edited/deepseek-ai__dspark_qwen3_8b_block7__reflowed": "dspark-native",
    "edited/nvidia__NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4-DFlash__quantization-elided": "zlab-dflash",
    "edited/nvidia__NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4-DSpark__atlas-reduced": "dspark-native",
    "edited/nvidia__NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4-DSpark__quantization-elided": "dspark-native",
    "edited/poolside__Laguna-S-2.1-DFlash__partial": None,
    # A partial copy without `architectures`: no dialect to recognize, whatever the tool learns.
    "edited/z-lab__Qwen3.6-35B-A3B-DFlash__f181eece-partial": None,
    "published/RadixArk__Kimi-K3-DSpark__9c4b2577": "dspark-native",
    "published/RadixArk__Kimi-K3-DSpark__eb03982e": "dspark-native",
    "published/XiaomiMiMo__MiMo-V2.5-Pro-FP4-DFlash__b754e6c8": "zlab-dflash",
    "published/incoai__GLM-5.3-DFlash2__425aa615": "zlab-dflash2",
    "published/incoai__GLM-5.3-Flash-DFlash2__bf582e4e": "zlab-dflash2",
    "published/incoai__Muse-Glimmer-30B-DFlash2__8336acb8": "zlab-dflash2",
    "published/incoai__Qwen3.8-27B-DFlash2__dedf8df6": "zlab-dflash2",
    "published/meta-models__Muse-Glimmer-30B-assistant__e8192f3a": "muse-glimmer-assistant",
    "published/z-lab__Muse-Glimmer-30B-DFlash2__b54ffdd1": "zlab-dflash2",
    "published/z-lab__Qwen3-4B-DFlash-b16__b74e3a32": "zlab-dflash",
    "published/z-lab__Qwen3-8B-DFlash-b16__9b41424b": "zlab-dflash",
    "published/z-lab__Qwen3.5-4B-DFlash__9a1996cc": "zlab-dflash",
    "published/z-lab__Qwen3.6-35B-A3B-DFlash__unknown-revision": "zlab-dflash",
    "published/z-lab__Qwen3.8-27B-DFlash2__50307d4c": "zlab-dflash2",
    "unpublished/minimax-m27-dflash-end-to-end-DRAFT": "speculators-dflash",
    "unpublished/speculators-issue-613__qwen36-35b-dflash": "speculators-dflash",
    "edited/RedHatAI__GLM-5.2-speculator.dspark__sglang-test-dict": "speculators-dspark",
    "framework/lightseekorg__TorchSpec__6f21829c-dflash_draft_config": "zlab-dflash",
    # Domino: no dialect, and no engine release registers DominoDraftModel (DFT002).
    "framework/lightseekorg__TorchSpec__afe66884-domino_draft_config": None,
    "framework/lightseekorg__TorchSpec__37a86412-glm52_dspark_draft_config": "dspark-native",
    # K3DSparkModel: vLLM registers it, no dialect reads it (DFT008).
    "framework/lightseekorg__TorchSpec__7f1e0906-kimi_k3_dspark_mla": None,
    "framework/lightseekorg__TorchSpec__a31111ee-kimi_k3_dflash2_mla_swa": "zlab-dflash2",
    "framework/lightseekorg__TorchSpec__86083849-qwen3_8b_dflash": "zlab-dflash",
    "framework/lightseekorg__TorchSpec__d9069939-qwen3_8_27b_dspark_draft": "dspark-native",
    "framework/sgl-project__SpecForge__b3d2401f-qwen3-8b-dflash": "zlab-dflash",
    "framework/sgl-project__SpecForge__4e3f4555-qwen3-8b-dspark": "dspark-native",
    "framework/sgl-project__SpecForge__a5200182-glm-5.2-dspark": "dspark-native",
    "framework/sgl-project__SpecForge__5943b2f6-qwen3.6-27b-dflash2": "zlab-dflash2",
}
# Architectures no engine release registers: the tool names the markers it looked for (DFT002).
UNREGISTERED = {"DominoDraftModel"}

# Translations convert refuses, and the phrase that says why (docs/rules.md, "Dialects").
REFUSED_TRANSLATIONS = {
    "published/z-lab__Muse-Glimmer-30B-DFlash2__b54ffdd1": "output_multiplier",
    "published/incoai__Muse-Glimmer-30B-DFlash2__8336acb8": "output_multiplier",
    "unpublished/minimax-m27-dflash-end-to-end-DRAFT": "reduced vocabulary",
}


def params(entries: Any, extra: Callable[[Entry], list[pytest.MarkDecorator]] | None = None) -> list[Any]:
    out = []
    for entry in entries:
        marks = []
        if entry.dir in PENDING_ARCHITECTURES:
            marks.append(pytest.mark.xfail(strict=True, reason=PENDING_ARCHITECTURES[entry.dir]))
        marks += extra(entry) if extra else []
        out.append(pytest.param(entry, id=entry.dir, marks=marks))
    return out


def published(entry: Entry) -> bool:
    return entry.klass == "published"


# --- the corpus itself ---------------------------------------------------------------------


def test_every_file_has_its_provenance_and_its_sha256() -> None:
    on_disk = sorted(str(path.parent.relative_to(CORPUS)) for path in CORPUS.glob("*/*/config.json"))
    assert on_disk == sorted(BY_DIR) and len(BY_DIR) == len(ENTRIES)
    for entry in ENTRIES:
        assert entry.klass in CLASSES and entry.dir.startswith(entry.klass + "/"), entry.dir
        assert entry.file_sha256() == entry.sha256, entry.dir
        assert entry.config_path.stat().st_size == entry.size, entry.dir
        assert entry.found_in, entry.dir
        if published(entry) or entry.klass == "edited":
            assert entry.repo and entry.repo.count("/") == 1, entry.dir
        if published(entry):
            # A published file is either hash-verified, or a verbatim quote of the whole file.
            assert entry.verified or "verbatim" in entry.how, entry.dir
        else:
            assert not entry.verified, entry.dir


def test_at_least_twelve_distinct_published_configs() -> None:
    files = {entry.sha256 for entry in ENTRIES if published(entry)}
    verified = {entry.sha256 for entry in ENTRIES if published(entry) and entry.verified}
    owners = {entry.repo.split("/")[0] for entry in ENTRIES if published(entry) and entry.repo}
    assert len(files) >= 12 and len(verified) >= 11
    assert {"z-lab", "incoai", "RadixArk", "XiaomiMiMo", "meta-models"} <= owners


def test_the_release_table_is_the_corpus() -> None:
    """Each published release in configs/profiles is a corpus file (same sha256, same content),
    and each published corpus file is a release: one home for the bytes, checked against the table."""
    releases = {(r.repo, r.revision): r for p in load_profiles() for r in p.releases}
    corpus = {(e.repo, e.revision): e for e in ENTRIES if published(e)}
    assert set(releases) == set(corpus)
    for key, release in releases.items():
        entry = corpus[key]
        assert release.config_sha256 == entry.sha256, key
        assert release.config == entry.config(), key


# --- inspect -------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", params(ENTRIES))
def test_inspect_reads_every_file(entry: Entry) -> None:
    report = inspect_checkpoint(str(entry.folder))
    document = json.loads(json.dumps(report.to_dict()))
    assert document["config_sha256"] == entry.sha256
    if entry.dir not in PENDING_ARCHITECTURES:
        # A pending file reads as nothing today; when it reads, its entry here gets its dialect.
        assert document["dialect"] == DIALECTS[entry.dir]
    # Bad input gets findings that name their keys, never a traceback.
    for finding in report.findings:
        if finding.severity.value == "error":
            assert finding.keys or finding.file, (finding.code, finding.message)
    if entry.architecture is not None and entry.architecture not in UNREGISTERED:
        assert "DFT002" not in {f.code for f in report.findings}
    if published(entry):
        assert report.description is not None and report.ok, [f.message for f in report.findings]


@pytest.mark.parametrize("entry", [e for e in ENTRIES if published(e)], ids=lambda e: e.dir)
def test_a_published_config_is_identified_as_its_release(entry: Entry) -> None:
    report = inspect_checkpoint(str(entry.config_path))
    profile = report.profile
    assert profile is not None and profile.release is not None
    assert profile.matched_by == "config sha256"
    assert profile.release.config_sha256 == entry.sha256
    # Mirrors publish the same bytes: the release found is this repo's or a byte-identical one.
    same_file = {(e.repo, e.revision) for e in ENTRIES if e.sha256 == entry.sha256}
    assert (profile.release.repo, profile.release.revision) in same_file
    assert {"DFT050", "DFT054"}.isdisjoint(f.code for f in report.findings)
    assert report.to_dict()["profile"]["release"]["config_sha256"] == entry.sha256


# --- convert -------------------------------------------------------------------------------


def readable(entry: Entry) -> bool:
    return DIALECTS[entry.dir] is not None and entry.dir not in PENDING_ARCHITECTURES


def clean(entry: Entry) -> bool:
    """Read without an error finding: what convert normalizes."""
    return readable(entry) and inspect_checkpoint(str(entry.folder)).ok


CONVERTIBLE = [e for e in ENTRIES if clean(e)]


def copy_of(entry: Entry, folder: Path) -> Path:
    folder.mkdir()
    shutil.copyfile(entry.config_path, folder / "config.json")
    return folder


def test_the_convertible_files_are_the_ones_read_without_errors() -> None:
    assert len({e.sha256 for e in CONVERTIBLE if published(e)}) >= 8
    assert {e.dir for e in CONVERTIBLE} >= set(REFUSED_TRANSLATIONS)


@pytest.mark.parametrize("entry", CONVERTIBLE, ids=lambda e: e.dir)
def test_normalize_writes_the_layout_down_and_is_idempotent(entry: Entry, tmp_path: Path) -> None:
    source = copy_of(entry, tmp_path / "source")
    convert_checkpoint(str(source), tmp_path / "normalized")
    after = inspect_checkpoint(str(tmp_path / "normalized"))
    assert {f.code for f in after.findings}.isdisjoint({"DFT010", "DFT011", "DFT012"})
    assert after.description is not None and after.description.dialect.value == DIALECTS[entry.dir]
    # What the draft is does not change: the same geometry, and every published key kept.
    before = inspect_checkpoint(str(source))
    assert after.to_dict()["geometry"]["layout"] == before.to_dict()["geometry"]["layout"]
    assert after.to_dict()["model"] == before.to_dict()["model"]
    normalized = json.loads((tmp_path / "normalized" / "config.json").read_text())
    assert all(normalized[key] == value for key, value in entry.config().items() if key != "dflash_config")
    again = plan_conversion(str(tmp_path / "normalized"))
    assert not again.changed and again.diff() == ""
    assert (source / "config.json").read_bytes() == entry.config_path.read_bytes()


def other_family(entry: Entry) -> str:
    return "speculators" if DIALECTS[entry.dir] in ("zlab-dflash", "zlab-dflash2") else "zlab"


def translatable(entry: Entry) -> bool:
    return DIALECTS[entry.dir] in ("zlab-dflash", "zlab-dflash2", "speculators-dflash", "speculators-dflash2")


ROUND_TRIPS = [e for e in CONVERTIBLE if translatable(e) and e.dir not in REFUSED_TRANSLATIONS]
# Round trips that give back the normalized config but not its bytes (strict xfails: a bug in
# convert, reported; delete the entry when it is fixed).
BYTES_DIFFER: dict[str, str] = {}


@pytest.mark.parametrize("entry", ROUND_TRIPS, ids=lambda e: e.dir)
def test_round_trip_gives_back_the_normalized_config(entry: Entry, tmp_path: Path) -> None:
    source = copy_of(entry, tmp_path / "source")
    home = "zlab" if other_family(entry) == "speculators" else "speculators"
    convert_checkpoint(str(source), tmp_path / "there", to=other_family(entry))
    there = inspect_checkpoint(str(tmp_path / "there"))
    assert there.ok and there.description is not None
    assert there.description.dialect.family == other_family(entry)
    assert (
        there.to_dict()["model"]["target_layer_ids"]
        == inspect_checkpoint(str(source)).to_dict()["model"]["target_layer_ids"]
    )
    convert_checkpoint(str(tmp_path / "there"), tmp_path / "back", to=home)
    convert_checkpoint(str(source), tmp_path / "normalized")
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back == json.loads((tmp_path / "normalized" / "config.json").read_text())


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(e, id=e.dir, marks=[pytest.mark.xfail(strict=True, reason=BYTES_DIFFER[e.dir])])
        if e.dir in BYTES_DIFFER
        else pytest.param(e, id=e.dir)
        for e in ROUND_TRIPS
    ],
)
def test_round_trip_gives_back_the_normalized_bytes(entry: Entry, tmp_path: Path) -> None:
    source = copy_of(entry, tmp_path / "source")
    home = "zlab" if other_family(entry) == "speculators" else "speculators"
    convert_checkpoint(str(source), tmp_path / "there", to=other_family(entry))
    convert_checkpoint(str(tmp_path / "there"), tmp_path / "back", to=home)
    convert_checkpoint(str(source), tmp_path / "normalized")
    assert (tmp_path / "back" / "config.json").read_bytes() == (tmp_path / "normalized" / "config.json").read_bytes()


@pytest.mark.parametrize("entry", [BY_DIR[d] for d in REFUSED_TRANSLATIONS], ids=lambda e: e.dir)
def test_translations_that_would_change_the_draft_are_refused_by_name(entry: Entry, tmp_path: Path) -> None:
    source = copy_of(entry, tmp_path / "source")
    with pytest.raises(OperationError) as refused:
        convert_checkpoint(str(source), tmp_path / "there", to=other_family(entry))
    assert REFUSED_TRANSLATIONS[entry.dir] in str(refused.value)
    assert not (tmp_path / "there").exists()


def test_dspark_files_are_normalized_not_translated(tmp_path: Path) -> None:
    # The Muse Glimmer assistant translates to and from z-lab (tests/dialects/test_muse_glimmer.py).
    dspark = [e for e in CONVERTIBLE if not translatable(e) and DIALECTS[e.dir] != "muse-glimmer-assistant"]
    assert len(dspark) >= 3
    for entry in dspark:
        source = copy_of(entry, tmp_path / entry.dir.replace("/", "_"))
        with pytest.raises(OperationError, match="cross-dialect conversion covers"):
            convert_checkpoint(str(source), tmp_path / "out", to=other_family(entry))
