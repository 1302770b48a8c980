"""`dflash-tools examples`, run: list the bundled example checkpoints (the options are in `examples_cmd`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from dflash_tools.cli._errors import handle_errors
from dflash_tools.cli._layout import console_width, print_line, wrap_words
from dflash_tools.cli._output import OutputFormat, printable, stdout_console, write_json
from dflash_tools.errors import SourceError, UsageError
from dflash_tools.files.atomic import cleanup_on_error, contains, is_empty_dir, make_staging_dir, publish_dir
from dflash_tools.reading.local import examples_dir
from dflash_tools.reading.source import EXAMPLE_PREFIX

SCHEMA_VERSION = 1

# What each bundled example is for; a folder without an entry is still listed.
DESCRIPTIONS = {
    "zlab-dflash": "z-lab DFlash, block_size at top level and in dflash_config",
    "zlab-dflash2": "z-lab DFlash2, bonus-anchor (B 8, K 7, 8 query positions)",
    "zlab-dflash2-anchor-first": "z-lab DFlash2, anchor-first (B 7, K 7, 7 query positions)",
    "speculators-dflash": "speculators format, DFlash",
    "speculators-dflash2": "speculators format, DFlash2",
    "speculators-dspark": "speculators format, DSpark",
    "speculators-dflash-legacy": "pre-April-2026 speculators save: proposal count = block size (DFT012)",
    "dspark-native": "native DSpark (Qwen3DSparkModel), no sample_from_anchor key",
    "open-spec": "Open Spec Config",
    "tiny-target": "config-only target the drafts above pair with (--target); no weights: smoke-test refuses it",
    "engine-demo/target": "tiny real target (weights, tokenizer) for the CPU smoke-test demo",
    "engine-demo/zlab-dflash": "DFlash draft built for the demo target, bonus-anchor",
    "engine-demo/zlab-dflash-anchor-first": "DFlash draft for the demo target, anchor-first",
    "engine-demo/zlab-dflash2": "DFlash2 draft for the demo target, bonus-anchor",
    "engine-demo/zlab-dflash2-anchor-first": "DFlash2 draft for the demo target, anchor-first",
    "vllm-cpu-demo/target": "tiny real target with head_dim 64, float32, that vLLM's CPU build serves",
    "vllm-cpu-demo/zlab-dflash": "DFlash draft for the vLLM CPU demo target, bonus-anchor (B 8, K 7)",
    "vllm-cpu-demo/zlab-dflash-anchor-first": "DFlash draft for the vLLM CPU demo target, anchor-first (B 7, K 7)",
}


def all_examples() -> list[tuple[str, str]]:
    """Every folder with a config.json under the bundled examples, nested ones as `group/name`."""
    root = examples_dir()
    names = sorted(
        str(config.parent.relative_to(root).as_posix())
        for config in root.rglob("config.json")
        if config.parent != root and not any(part.startswith((".", "_")) for part in config.relative_to(root).parts)
    )
    return [(name, DESCRIPTIONS.get(name, "")) for name in names]


def find_example(name: str) -> tuple[str, str]:
    """(name, description) of the example NAME (or example:NAME); SourceError naming them all if none."""
    wanted = name.removeprefix(EXAMPLE_PREFIX)
    examples = dict(all_examples())
    if wanted not in examples:
        raise SourceError(
            f"no bundled example named {wanted!r}",
            "choose one of: " + ", ".join(examples),
        )
    return wanted, examples[wanted]


def copy_example(name: str, destination: str) -> Path:
    """Copy a bundled example into `destination`, a new folder: built aside and renamed into place,
    so an interrupted copy leaves nothing (no half an example that inspects as broken).

    The destination follows convert's rule for `-o` (docs/reliability.md, "Path safety"): absent or
    an empty folder, not a link (dangling or not), and never inside the bundled examples, through a
    link or not (they are the package's own files). Every refusal, and a destination that cannot be
    written, is a usage error naming the destination as given (exit 2), never the staging folder.
    """
    target = Path(destination).expanduser().absolute()
    bundled = examples_dir()
    if target.is_symlink():
        raise UsageError(f"--copy-to {destination}: a link, not a new folder", "pass a new folder (not a link)")
    if contains(bundled, target) or contains(target, bundled):
        raise UsageError(
            f"--copy-to {destination}: inside the bundled examples ({bundled}), which are never modified",
            "pass a folder of your own, e.g. ./my-draft",
        )
    if target.exists() and not is_empty_dir(target):
        kind = "a folder" if target.is_dir() else "not a folder"
        raise UsageError(f"--copy-to {destination}: exists and is {kind} that is not empty", "pass a new folder")
    try:
        stage = make_staging_dir(target)
        with cleanup_on_error(stage):
            shutil.copytree(bundled / name, stage, dirs_exist_ok=True)
            try:
                publish_dir(stage, target, replace_existing=False)
            except FileExistsError:
                raise UsageError(
                    f"--copy-to {destination}: was filled by someone else meanwhile", "pass a new folder"
                ) from None
    except OSError as exc:
        raise UsageError(
            f"--copy-to {destination}: cannot write there ({exc.strerror or type(exc).__name__})",
            "pass a folder you can write to",
        ) from None
    return target


def run(
    *,
    name: str | None = None,
    copy_to: str | None = None,
    output_format: OutputFormat,
    json_flag: bool,
    names_only: bool,
    no_color: bool,
) -> None:
    """Run `dflash-tools examples` with the options `examples_cmd` parsed."""
    fmt = OutputFormat.JSON if json_flag else output_format
    with handle_errors("examples", json_output=fmt is OutputFormat.JSON, source=name):
        if copy_to is not None and name is None:
            raise UsageError(
                "--copy-to needs the example to copy", "pass NAME: dflash-tools examples NAME --copy-to DIR"
            )
        if name is not None:
            found, description = find_example(name)
            if copy_to is not None:
                path = copy_example(found, copy_to)
                if fmt is OutputFormat.JSON:
                    write_json(
                        {
                            "schema_version": SCHEMA_VERSION,
                            "command": "examples",
                            "ok": True,
                            "copied": {"source": EXAMPLE_PREFIX + found, "path": str(path)},
                        }
                    )
                    return
                console = stdout_console(no_color)
                for line in wrap_words(
                    f"copied {EXAMPLE_PREFIX}{found} to {printable(path)}",
                    console_width(console),
                    "  ",
                    first_indent="",
                ):
                    print_line(console, line)
                return
            examples = [(found, description)]
        else:
            examples = all_examples()
        if fmt is OutputFormat.JSON:
            write_json(
                {
                    "schema_version": SCHEMA_VERSION,
                    "command": "examples",
                    "ok": True,
                    "examples": [
                        {"source": EXAMPLE_PREFIX + name, "description": text, "path": str(Path(examples_dir(), name))}
                        for name, text in examples
                    ],
                }
            )
            return
        console = stdout_console(no_color)
        if names_only:
            for name, _ in examples:
                print_line(console, EXAMPLE_PREFIX + name)
            return
        width = console.width
        for name, text in examples:
            print_line(console, EXAMPLE_PREFIX + name, style="bold")
            for line in wrap_words(text, width, "    ", first_indent="    "):
                print_line(console, line)
