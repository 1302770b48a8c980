"""Each error carries its own exit code and JSON `error.kind`; subclasses inherit them.

The kind used to be chosen from the class *name*, so subclasses (a Hub source error, a busy lock)
were reported as "operation" while exiting 2. These check the attributes on every error class the
package defines, found by walking the package, so a new subclass is covered without a list here.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import socket
import subprocess
import sys
from pathlib import Path

import dflash_tools
from dflash_tools import errors
from dflash_tools.errors import EXIT_FINDINGS, EXIT_USAGE, DflashToolsError, OperationError, SourceError, UsageError


def all_error_classes() -> set[type[DflashToolsError]]:
    skip = ("dflash_tools.vllm_plugin", "dflash_tools.reference_engine", "dflash_tools.smoke.vllm_engine")
    for module in pkgutil.walk_packages(dflash_tools.__path__, "dflash_tools."):
        if not module.name.startswith(skip) and not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: set[type[DflashToolsError]] = set()
    todo: list[type[DflashToolsError]] = [DflashToolsError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_class_reports_its_base_kind_and_exit_code() -> None:
    expected = {
        SourceError: ("source", EXIT_USAGE),
        UsageError: ("usage", EXIT_USAGE),
        OperationError: ("operation", EXIT_FINDINGS),
    }
    classes = all_error_classes()
    names = {cls.__name__ for cls in classes}
    assert {"HubSourceError", "LockBusy", "VerificationFailed"} <= names  # the walk found the subclasses
    for cls in classes:
        base = next((b for b in expected if issubclass(cls, b)), None)
        if base is None:
            assert cls is DflashToolsError
            continue
        assert (cls.kind, cls.exit_code) == expected[base], cls


def test_exit_codes_have_one_home() -> None:
    from dflash_tools.cli import _errors

    assert (_errors.EXIT_OK, _errors.EXIT_FINDINGS, _errors.EXIT_USAGE) == (errors.EXIT_OK, 1, 2)


def test_an_unreachable_hub_target_is_a_source_error_like_an_unreachable_draft(tmp_path: Path) -> None:
    """The Hub client raises a SourceError subclass when it cannot connect; for the draft and for
    `--target` alike, the JSON error is kind "source" with exit 2 (it was "operation" for the target).
    `plan` and `smoke-test --dry-run` answer without such a target instead, and say it was not
    read (DFT090, `target.not_read`: docs/plan.md)."""
    with socket.socket() as probe:  # a port nothing listens on: connections are refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DFLASH_TOOLS_"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT=f"http://127.0.0.1:{port}")
    errors = [
        ["inspect", "nobody/no-draft", "--timeout", "5"],
        ["inspect", "example:zlab-dflash2", "--target", "nobody/no-target", "--timeout", "5"],
    ]
    answered = [
        ["smoke-test", "--dry-run", "-t", "nobody/no-target", "-d", "example:zlab-dflash2", "--timeout", "5"],
        ["plan", "-t", "nobody/no-target", "-d", "example:zlab-dflash2", "--timeout", "5"],
    ]
    for args in errors + answered:
        result = subprocess.run(
            [sys.executable, "-m", "dflash_tools", *args, "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        document = json.loads(result.stdout)
        if args in errors:
            assert (result.returncode, document["error"]["kind"]) == (2, "source"), (args, document)
            continue
        assert (result.returncode, document["exit_code"], "error" in document) == (0, 0, False), (args, document)
        target = document["plans"][0]["target"] if args[0] == "plan" else document["target"]
        assert "could not be reached" in target["not_read"]["reason"], (args, target)
        assert "DFT090" in json.dumps(document), (args, document)
