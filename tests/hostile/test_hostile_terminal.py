"""Terminal safety: text from a checkpoint or the Hub is inert in human output and exact in JSON.

A stranger's checkpoint can name tensors, shard files and its own folder with escape sequences
(OSC 52 writes the clipboard, OSC 8 plants links, CSI clears the screen or rewrites a line),
rich markup (`[link=...]`) and bidi / zero-width controls that make text read differently than
it is. None of that may reach the terminal as such; JSON output keeps every byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from tests.hub_server import HubServer, safetensors_bytes

HOSTILE = [
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: put "rm -rf ~" on the clipboard
    "\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b[2J\x1b[1;1H",  # CSI: clear the screen, home the cursor
    "\r\x1b[K\x1b[32mOK\x1b[0m",  # rewrite the current line as a green OK
    "[bold red]markup[/bold red]",
    "[link=https://evil.example]click[/link]",
    "\u202egnp.exe",  # right-to-left override
    "\u2067isolate\u2069",
    "zero\u200bwidth\ufeff",
    "bell\x07del\x7fc1\x9b",
]
# The same, usable in one folder name ("/" would make sub-folders).
FOLDER_SAFE = [text.replace("/", "_") for text in HOSTILE]
UNSAFE_OUTPUT = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def assert_inert(*outputs: str) -> None:
    for text in outputs:
        found = UNSAFE_OUTPUT.search(text)
        assert found is None, (
            f"raw control character {found.group()!r} in: {text[max(0, found.start() - 60) :][:160]!r}"
        )
        assert "internal error" not in text


def strings(document: object) -> set[str]:
    """Every string (keys too) in a JSON document."""
    found: set[str] = set()
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.add(item)
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def hostile_checkpoint(root: Path, *, shards: int = 1) -> tuple[Path, list[str]]:
    """A real checkpoint in a hostile-named folder, with hostile tensor names."""
    folder = root / ("draft " + "".join(FOLDER_SAFE))
    names = [f"verifier_{i}.{text}" for i, text in enumerate(HOSTILE)]
    table = testing.tensor_table(testing.TINY) + [(name, "BF16", (4,)) for name in names]
    testing.write_checkpoint(folder, "zlab-dflash", testing.TINY, tensors=table, shards=shards)
    return folder, names


# --------------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------------


def test_inspect_human_output_is_inert(tmp_path: Path) -> None:
    folder, _ = hostile_checkpoint(tmp_path)
    code, out, err = run("inspect", str(folder), "--tensors")
    assert code == 0, err  # unexpected tensors are warnings
    assert_inert(out, err)
    assert "[bold red]markup[/bold red]" in out  # markup shown as text, not applied
    assert "\\x1b]52;c;cm0gLXJmIH4=" in out  # the escape shown visibly
    assert "\\u202egnp.exe" in out


def test_inspect_json_is_exact(tmp_path: Path) -> None:
    folder, names = hostile_checkpoint(tmp_path)
    code, out, _ = run("inspect", str(folder), "--json", "--tensors")
    assert code == 0
    assert_inert(out)  # unsafe characters travel as \uXXXX escapes, which parse back exactly
    document = json.loads(out)
    assert document["source"] == str(folder)
    assert set(names) <= {row["name"] for row in document["tensor_table"]}
    keys = {key for finding in document["findings"] for key in finding["keys"]}
    assert set(names) <= keys


def test_hostile_shard_names_in_an_index(tmp_path: Path) -> None:
    folder, _ = hostile_checkpoint(tmp_path, shards=2)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    for position, tensor in enumerate(list(index["weight_map"])[: len(HOSTILE)]):
        index["weight_map"][tensor] = f"model-{HOSTILE[position]}.safetensors"
    index_path.write_text(json.dumps(index, ensure_ascii=False), encoding="utf-8")
    code, out, err = run("inspect", str(folder))
    assert code == 1  # missing shards are DFT004 errors
    assert_inert(out, err)
    code, out, _ = run("inspect", str(folder), "--json")
    texts = strings(json.loads(out))
    # Names with a backslash are refused outright (quoted in the message); the rest are exact.
    assert all(any(f"model-{text}.safetensors" in t for t in texts) for text in HOSTILE if "\\" not in text)


def test_hostile_config_strings(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "d", "zlab-dflash", testing.TINY)
    config = json.loads((folder / "config.json").read_text())
    config["dflash_config"]["block_size"] = HOSTILE[0]
    config["dflash_config"]["target_layer_ids"] = HOSTILE[1]
    config["model_type"] = HOSTILE[6]
    config["architectures"].append(HOSTILE[4])
    config[HOSTILE[3]] = HOSTILE[2]
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    code, out, err = run("inspect", str(folder))
    assert code == 1
    assert_inert(out, err)
    code, out, _ = run("inspect", str(folder), "--json")
    values = strings([finding.get("values", {}) for finding in json.loads(out)["findings"]])
    assert HOSTILE[1] in values  # the config is unreadable past target_layer_ids: no geometry check


def test_unknown_dialect_and_missing_source_errors_are_inert(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": HOSTILE}), encoding="utf-8")
    code, out, err = run("inspect", str(folder))
    assert code == 1
    assert_inert(out, err)
    code, out, err = run("inspect", str(tmp_path / ("missing" + HOSTILE[0] + HOSTILE[6])))
    assert code == 2
    assert_inert(out, err)
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1


def test_several_sources_summary_is_inert(tmp_path: Path) -> None:
    folder, _ = hostile_checkpoint(tmp_path)
    code, out, err = run("inspect", str(folder), str(tmp_path / ("gone" + HOSTILE[3])), "example:zlab-dflash")
    assert code == 2
    assert_inert(out, err)


# --------------------------------------------------------------------------------------------
# convert and smoke-test
# --------------------------------------------------------------------------------------------


def test_convert_human_output_and_diff_are_inert(tmp_path: Path) -> None:
    folder, names = hostile_checkpoint(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    del config["dflash_config"]["sample_from_anchor"]  # so the run has a config diff to show
    config["note"] = "".join(HOSTILE)
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    code, out, err = run("convert", str(folder), "--dry-run")
    assert code == 0, err
    assert_inert(out, err)
    code, out, err = run("convert", str(folder), "-o", str(tmp_path / ("out" + FOLDER_SAFE[2])))
    assert code == 0, err
    assert_inert(out, err)
    code, out, err = run("convert", str(folder), "-o", str(tmp_path / "out2"), "--json")
    assert code == 0, err
    assert_inert(out)
    texts = strings(json.loads(out))
    assert all(any(name in text for text in texts) for name in names)
    written = json.loads((tmp_path / "out2" / "config.json").read_text(encoding="utf-8"))
    assert written["note"] == "".join(HOSTILE)  # the file keeps every byte


def test_convert_refusal_messages_are_inert(tmp_path: Path) -> None:
    folder, _ = hostile_checkpoint(tmp_path)
    out_dir = tmp_path / ("busy" + FOLDER_SAFE[0])
    out_dir.mkdir()
    (out_dir / "keep").write_text("x")
    code, out, err = run("convert", str(folder), "-o", str(out_dir))
    assert code == 2
    assert_inert(out, err)


def test_smoke_test_dry_run_is_inert(tmp_path: Path) -> None:
    folder, _ = hostile_checkpoint(tmp_path)
    target = tmp_path / ("target" + FOLDER_SAFE[5])
    testing.write_target(target, testing.TINY)
    code, out, err = run("smoke-test", "-t", str(target), "-d", str(folder), "--dry-run")
    assert code in (0, 1), err
    assert_inert(out, err)
    code, out, _ = run("smoke-test", "-t", str(target), "-d", str(folder), "--dry-run", "--json")
    assert_inert(out)
    assert str(folder) in strings(json.loads(out))


# --------------------------------------------------------------------------------------------
# Hub metadata
# --------------------------------------------------------------------------------------------


def test_hub_metadata_is_inert_and_exact(hub: HubServer) -> None:
    names = [f"verifier_{i}.{text}" for i, text in enumerate(HOSTILE)]
    table = testing.tensor_table(testing.TINY) + [(name, "BF16", (4,)) for name in names]
    config = testing.make_config("zlab-dflash", testing.TINY)
    config["model_type"] = HOSTILE[0]
    hub.add_repo(
        "evil/draft",
        {
            "config.json": json.dumps(config).encode(),
            "model.safetensors": safetensors_bytes(table, {"format": "pt", HOSTILE[1]: HOSTILE[2]}),
        },
    )
    code, out, err = run("inspect", "evil/draft", "--tensors")
    # A model_type no engine can resolve is an error (issue 12), reported inertly.
    assert code == 1, err
    assert_inert(out, err)
    code, out, _ = run("inspect", "evil/draft", "--json", "--tensors")
    document = json.loads(out)
    assert set(names) <= {row["name"] for row in document["tensor_table"]}
    assert [f["keys"] for f in document["findings"] if f["severity"] == "error"] == [["model_type"]]
    assert HOSTILE[0] in strings([f.get("values", {}) for f in document["findings"]])


def test_hub_error_text_is_inert(hub: HubServer) -> None:
    hub.add_repo("evil/draft", {"config.json": b"{}"})
    hub.fail["/api/models/evil/draft"] = (403, "denied " + "".join(h for h in HOSTILE if "\r" not in h))
    code, out, err = run("inspect", "evil/draft")
    assert code == 2
    assert_inert(out, err)
    assert len([line for line in err.splitlines() if line.strip()]) <= 2
