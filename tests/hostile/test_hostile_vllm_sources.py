"""`--engine vllm` reads vLLM's installed source files: a hostile install is a finding, never a hang.

A vLLM package folder whose source files are a FIFO (a read would wait forever for a writer), a
link to /dev/zero (a read would fill memory), a folder, a file far larger than any source, or bytes
that are not UTF-8. vLLM itself is not imported: the package here is a folder on sys.path, which is
all `inspect --engine vllm` and `smoke-test --dry-run` look at (the real install is tested in the
real-vLLM tier).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.serving.vllm_capability import detect_vllm
from dflash_tools.vllm_plugin.sources import MAX_SOURCE_BYTES, directory_reader


def hostile_vllm(root: Path) -> Path:
    package = root / "vllm"
    (package / "config").mkdir(parents=True)
    (package / "v1" / "spec_decode").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    os.mkfifo(package / "_version.py")
    (package / "config" / "vllm.py").symlink_to("/dev/zero")
    (package / "v1" / "spec_decode" / "dflash.py").write_bytes(b"class DFlashProposer(\xff\xfe):\n    pass\n")
    return root


def read_within(seconds: float, read: object, relative: str) -> str | None:
    """`read(relative)` in a thread: the test fails (rather than hangs) if the read blocks."""
    result: list[str | None] = []
    worker = threading.Thread(target=lambda: result.append(read(relative)), daemon=True)  # type: ignore[operator]
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"reading {relative} did not return within {seconds} s"
    return result[0]


def test_reader_reads_regular_files_only_capped_and_leniently(tmp_path: Path) -> None:
    root = hostile_vllm(tmp_path)
    (root / "vllm" / "huge.py").write_bytes(b"")
    os.truncate(root / "vllm" / "huge.py", MAX_SOURCE_BYTES + 1)  # sparse: no disk cost
    (root / "vllm" / "folder.py").mkdir()
    reader = directory_reader(root)
    assert read_within(5, reader, "vllm/_version.py") is None
    assert read_within(5, reader, "vllm/config/vllm.py") is None
    assert read_within(5, reader, "vllm/huge.py") is None
    assert read_within(5, reader, "vllm/folder.py") is None
    assert read_within(5, reader, "vllm/missing.py") is None
    text = read_within(5, reader, "vllm/v1/spec_decode/dflash.py")
    assert text == "class DFlashProposer(\ufffd\ufffd):\n    pass\n"
    assert reader.problems == {
        "vllm/_version.py": "not a regular file (a FIFO)",
        "vllm/config/vllm.py": "not a regular file (a device)",
        "vllm/huge.py": "larger than 8 MiB, not a source file",
        "vllm/folder.py": "not a regular file (a folder)",
    }


def test_an_unreadable_install_is_one_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(hostile_vllm(tmp_path)))
    capability = detect_vllm({})
    assert capability.installed and capability.support == "unsupported"
    assert "vllm/config/vllm.py: not a regular file (a device)" in capability.reason
    for draft in ("example:zlab-dflash", "example:zlab-dflash2-anchor-first"):
        result = CliRunner().invoke(app, ["inspect", draft, "--engine", "vllm", "--json"])
        assert result.exit_code == 0, result.stdout + result.stderr
        [finding] = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "DFT052"]
        assert "\n" not in finding["message"]
        assert "vllm/config/vllm.py: not a regular file (a device)" in finding["message"]


def test_smoke_dry_run_refuses_on_an_unreadable_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(hostile_vllm(tmp_path)))
    result = CliRunner().invoke(
        app,
        [
            "smoke-test",
            "--dry-run",
            "--engine",
            "vllm",
            "-t",
            "example:engine-demo/target",
            "-d",
            "example:engine-demo/zlab-dflash-anchor-first",
            "--json",
        ],
    )
    assert result.exit_code == 2, result.stdout + result.stderr  # refused: the layout cannot be checked
    document = json.loads(result.stdout)
    assert "vLLM's source files cannot be read" in json.dumps(document)
    assert "internal error" not in result.stderr
