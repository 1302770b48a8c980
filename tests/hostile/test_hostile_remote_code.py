"""No code from a checkpoint is ever executed.

z-lab configs carry `auto_map` entries pointing at Python files shipped with the weights
(`dflash.py`); transformers runs them under `trust_remote_code=True`. dflash-tools reads such a
config as data only. The checkpoint below is armed: importing any of its Python files writes a
marker file. Every command runs against it in a real subprocess (with transformers installed, and
with the checkpoint folder as the working directory, where a stray `json.py` would shadow the
standard library for a careless `python -m`), and the marker must never appear. A control run
shows the trap is real: transformers with `trust_remote_code=True` does trip it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dflash_tools_testing as testing

# Module names a process might import from its working directory.
DECOYS = ("json", "typer", "rich", "huggingface_hub", "safetensors", "transformers", "torch", "dflash_tools")
CLI = shutil.which("dflash-tools") or str(Path(sys.executable).with_name("dflash-tools"))


def arm(folder: Path, marker: Path) -> None:
    """Make every Python file of the checkpoint write `marker` (with its own name) when run."""
    payload = (
        f"import os\nwith open({str(marker)!r}, 'a') as _f:\n    _f.write(__name__ + ' ' + str(os.getpid()) + '\\n')\n"
    )
    (folder / "dflash.py").write_text(
        payload + "class DFlashDraftModel:\n    pass\nclass DFlash2DraftModel:\n    pass\n", encoding="utf-8"
    )
    (folder / "configuration_dflash.py").write_text(payload + "class DFlashConfig:\n    pass\n", encoding="utf-8")
    for name in DECOYS:
        (folder / f"{name}.py").write_text(payload, encoding="utf-8")
    (folder / "sitecustomize.py").write_text(payload, encoding="utf-8")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": "configuration_dflash.DFlashConfig",
        "AutoModel": "dflash.DFlashDraftModel",
        "AutoModelForCausalLM": "dflash.DFlashDraftModel",
    }
    config["trust_remote_code"] = True  # a config cannot grant itself trust
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


@pytest.fixture
def armed(tmp_path: Path) -> tuple[Path, Path]:
    folder = testing.write_checkpoint(tmp_path / "armed-draft", "zlab-dflash", testing.TINY)
    marker = tmp_path / "REMOTE-CODE-RAN"
    arm(folder, marker)
    return folder, marker


def env(tmp_path: Path) -> dict[str, str]:
    out = dict(os.environ)
    out.update(
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_COLOR="1",
        TRANSFORMERS_OFFLINE="1",
    )
    out.pop("PYTHONPATH", None)
    return out


def run_cli(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, env=env(tmp_path), capture_output=True, text=True, timeout=300)


def test_no_command_runs_checkpoint_code(armed: tuple[Path, Path], tmp_path: Path) -> None:
    folder, marker = armed
    target = tmp_path / "target"
    testing.write_target(target, testing.TINY)
    in_place = tmp_path / "in-place-copy"
    shutil.copytree(folder, in_place)
    runs = [
        ["inspect", "."],
        ["inspect", ".", "--json", "--tensors", "--target", str(target)],
        ["inspect", "config.json"],
        ["convert", ".", "--dry-run"],
        ["convert", ".", "-o", str(tmp_path / "converted")],
        ["convert", ".", "-o", str(tmp_path / "speculators"), "--to", "speculators", "--target", str(target)],
        ["convert", str(in_place), "--in-place", "--block-size", "8"],
        ["smoke-test", "-t", str(target), "-d", ".", "--dry-run"],
    ]
    for args in runs:
        done = run_cli(args, folder, tmp_path)
        assert done.returncode in (0, 1), (args, done.stderr)
        assert "internal error" not in done.stderr
        assert not marker.exists(), (
            f"`dflash-tools {' '.join(args)}` ran code from the checkpoint: {marker.read_text()}"
        )
    # The converted copies still carry the Python files (they are the checkpoint's), untouched.
    assert (tmp_path / "converted" / "dflash.py").read_text() == (folder / "dflash.py").read_text()
    converted = json.loads((tmp_path / "converted" / "config.json").read_text())
    assert converted["auto_map"]["AutoModel"] == "dflash.DFlashDraftModel"


def test_library_calls_do_not_import_transformers_or_run_code(armed: tuple[Path, Path], tmp_path: Path) -> None:
    folder, marker = armed
    script = (
        "import sys\n"
        "from dflash_tools.inspect import inspect_checkpoint\n"
        "from dflash_tools.convert import convert_checkpoint\n"
        f"report = inspect_checkpoint({str(folder)!r})\n"
        f"convert_checkpoint({str(folder)!r}, {str(tmp_path / 'lib-out')!r})\n"
        "print(sorted(m for m in ('transformers', 'torch', 'dflash', 'configuration_dflash') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert not marker.exists()


def test_the_trap_is_real_transformers_trips_it(armed: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder, marker = armed
    script = (
        "from transformers import AutoModel\n"
        "try:\n"
        f"    AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert marker.exists(), "control run: transformers with trust_remote_code=True should have imported dflash.py"
