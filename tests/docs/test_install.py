"""README's install lines work as written: from a checkout, from a git URL, from a built wheel.

The blocks marked `<!-- not-run: install -->` are run line by line in a fresh copy of this
checkout (tracked and untracked files, committed into a new git repository, so that
`git+file://$PWD` clones it), offline: every `pip install` gets `--no-index --no-deps
--no-build-isolation --target DIR` (the dependencies and hatchling, the build backend, are this
environment's: `pip install -e '.[dev]'` brings hatchling) and every `pip wheel` `--no-index
--no-build-isolation`. After each line the `dflash-tools` pip put in DIR/bin must be the
installed copy and inspect a bundled example (the wheel must carry the examples and configs).
Everything happens under tmp_path.

Each line builds the wheel once (a few seconds each, about half a minute in all on two cores):
marked `ci_only`, run by .ci/run after the default suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.doc_blocks import ROOT, blocks

INSTALL_BLOCKS = [b for b in blocks([ROOT / "README.md"]) if b.not_run == "install"]
OFFLINE_INSTALL = "--no-index --no-deps --no-build-isolation --target {target}"


def offline(command: str, target: Path) -> str:
    """The line with flags that keep pip off the network and inside `target`."""
    python = f"{sys.executable} -m pip"
    command = re.sub(r"\bpip install\b", f"{python} install {OFFLINE_INSTALL.format(target=target)}", command)
    return re.sub(r"\bpip wheel\b", f"{python} wheel --no-index --no-build-isolation", command)


def fresh_checkout(destination: Path) -> Path:
    """This working tree as a fresh clone would have it (untracked, not-ignored files included)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            (destination / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name.decode())
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fresh checkout"]):
        subprocess.run([*git, *args], cwd=destination, check=True, capture_output=True)
    return destination


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    pytest.importorskip("hatchling", reason="the build backend: pip install -e '.[dev]' installs it")
    return fresh_checkout(tmp_path_factory.mktemp("checkout"))


def test_readme_has_each_kind_of_install_line() -> None:
    lines = [c for b in INSTALL_BLOCKS for c in b.commands()]
    assert any(line.startswith("pip install .") for line in lines)
    assert any("git+" in line for line in lines)
    assert any("pip wheel" in line and ".whl" in line for line in lines)
    # Nothing names the package as if it came from PyPI.
    readme_and_docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in readme_and_docs:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"pip install ['\"]?dflash-tools\b(?!\s*@)", text), path


@pytest.mark.ci_only
@pytest.mark.parametrize("line", [c for b in INSTALL_BLOCKS for c in b.commands()], ids=lambda c: c.split(" #")[0])
def test_install_line(line: str, checkout: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "DFLASH_TOOLS_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", PIP_DISABLE_PIP_VERSION_CHECK="1"
    )
    try:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", offline(line, target)],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"`{line}`\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        script = target / "bin" / "dflash-tools"
        assert script.is_file(), f"`{line}` installed no dflash-tools script"
        run_env = {**env, "PYTHONPATH": str(target)}
        listed = subprocess.run(
            [str(script), "examples", "--json"], env=run_env, capture_output=True, text=True, timeout=120
        )
        assert listed.returncode == 0, listed.stderr
        paths = [Path(e["path"]) for e in json.loads(listed.stdout)["examples"]]
        assert paths and all(target in p.parents for p in paths), "not the installed copy"
        inspected = subprocess.run(
            [str(script), "inspect", "example:zlab-dflash2"], env=run_env, capture_output=True, text=True, timeout=120
        )
        assert inspected.returncode == 0 and inspected.stdout.startswith("OK"), inspected.stderr
        presets = target / "dflash_tools" / "_configs" / "presets"
        assert any(presets.glob("*.json")), "the wheel lacks configs/"
    finally:
        # `pip wheel -w dist` writes into the checkout: the next line starts from a fresh one.
        shutil.rmtree(checkout / "dist", ignore_errors=True)
