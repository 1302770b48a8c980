"""Writes `engine_rules/generated/` from the released packages, or checks it (`--check`).

    python -m dflash_tools.engine_rules.generate_defaults [--check] [--vllm-root DIR ...]
        [--sglang-wheel FILE] [--only transformers|vllm|sglang]

For every engine release's `ConfigLoading` (its module names the transformers version its table
comes from and its generated file):

- `transformers-VERSION.json`: every model_type that transformers' `AutoConfig` knows, and for the
  model_types drafts declare (`DRAFT_MODEL_TYPES`) what their config classes fill in
  (`transformers_probe.table`), asked of that transformers in a process of its own: the one
  installed here when it is that version, else its wheel (`pip download --no-deps`), unpacked
  into a temporary folder put first on the path.
- `vllm-VERSION.json`: vLLM's config registry, its speculative config classes, the architectures
  it maps to a model_type and the `speculators_model_type`s it translates, read (never imported)
  from `vllm/transformers_utils/config.py` and `configs/speculators/algos.py` of that release:
  the vLLM installed here when it is that release, or a folder holding the release's `vllm/`
  package (`--vllm-root`, repeatable; a vLLM wheel is too large to fetch for this).
- `sglang-VERSION.json`: SGLang's config registry and the classes it registers with AutoConfig,
  read from the released wheel's `sglang/srt/utils/hf_transformers/` and `sglang/srt/configs/`
  (`--sglang-wheel`, else `pip download --no-deps`).

Nothing is written by hand; the vLLM tiers and the SGLang tier regenerate these files from the
releases they install and fail on any difference (tests/real_vllm/test_generated_tables.py,
tests/real_sglang/test_sglang_config_loading.py).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.engine_rules.config_loading import GENERATED, ConfigLoading
from dflash_tools.engine_rules.transformers_probe import ask

# The model_types draft configs declare (the corpus, z-lab's, TorchSpec's and speculators'
# decoders), whose classes' fills the tables describe; every other known model_type is listed
# with its class only.
DRAFT_MODEL_TYPES = (
    "deepseek_v3",
    "deepseek_v32",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gemma4_text",
    "glm4_moe",
    "glm_moe_dsa",
    "gpt_oss",
    "kimi_linear",
    "laguna",
    "lfm2",
    "llama",
    "mimo_v2_flash",
    "minimax",
    "minimax_m2",
    "ministral",
    "mistral",
    "muse_glimmer_assistant",
    "qwen2",
    "qwen3",
    "qwen3_5_text",
    "qwen3_moe",
    "qwen3_next",
)

_VLLM_CONFIG = "vllm/transformers_utils/config.py"
_VLLM_ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"
_SGLANG_COMMON = "sglang/srt/utils/hf_transformers/common.py"
_SGLANG_CONFIG = "sglang/srt/utils/hf_transformers/config.py"


def dump(data: dict[str, Any]) -> str:
    """The files' one layout: sorted keys, one level of indent, a final newline."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def loadings() -> list[ConfigLoading]:
    return [rules.config_loading for rules in ENGINE_RULES.values() if rules.config_loading is not None]


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def fetch_wheel(requirement: str, folder: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder), requirement],
        check=True,
    )
    name = requirement.split("==")[0].replace("-", "_")
    return next(folder.glob(f"{name}-*.whl"))


def transformers_json(version: str, scratch: Path, path: Path | None = None) -> dict[str, Any]:
    """The table of transformers `version`: from `path` (a folder holding that transformers, put
    first on the path), the one installed here, or its wheel unpacked in `scratch`."""
    if path is None and installed_version("transformers") != version:
        wheel = fetch_wheel(f"transformers=={version}", scratch / "wheels")
        path = scratch / f"transformers-{version}"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(path)
    answer = ask("table", {"model_types": list(DRAFT_MODEL_TYPES)}, path)
    if answer["transformers"] != version:
        raise RuntimeError(f"asked transformers {version}, got {answer['transformers']}")
    return answer


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _string_map(node: ast.expr | None) -> dict[str, str]:
    """A dict literal, dict(...) or LazyConfigDict(...) of strings (with `**{...}` parts)."""
    out: dict[str, str] = {}
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                out.update(_string_map(value))
            elif isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                out[str(key.value)] = str(value.value)
    elif isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg is None:
                out.update(_string_map(keyword.value))
            elif isinstance(keyword.value, ast.Constant):
                out[keyword.arg] = str(keyword.value.value)
    return out


def vllm_json(version: str, root: Path) -> dict[str, Any]:
    """vLLM `version`'s config-loading facts, read from its `vllm/` package under `root`."""
    tree = ast.parse((root / _VLLM_CONFIG).read_text(encoding="utf-8"))
    registry = _string_map(_assigned(tree, "_CONFIG_REGISTRY"))
    speculative_node = _assigned(tree, "_SPECULATIVE_DECODING_CONFIGS")
    speculative = sorted(
        str(element.value) for element in getattr(speculative_node, "elts", []) if isinstance(element, ast.Constant)
    )
    algos = ast.parse((root / _VLLM_ALGOS).read_text(encoding="utf-8"))
    speculators = [
        str(decorator.args[0].value)
        for node in algos.body
        if isinstance(node, ast.FunctionDef)
        for decorator in node.decorator_list
        if isinstance(decorator, ast.Call)
        and getattr(decorator.func, "id", "") == "register_speculator"
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
    ]
    if not registry or not speculative or not speculators:
        raise RuntimeError(f"vLLM {version}: the registry, speculative set or speculators list was not found")
    return {
        "engine": "vllm",
        "version": version,
        "registry": {k: v for k, v in sorted(registry.items()) if k not in speculative},
        "speculative": {k: registry[k] for k in speculative},
        "architecture_model_types": dict(sorted(_string_map(_assigned(tree, "_ARCHITECTURE_TO_MODEL_TYPE")).items())),
        "speculators_model_types": speculators,
        "cites": [
            f"{_VLLM_CONFIG}: _CONFIG_REGISTRY, _SPECULATIVE_DECODING_CONFIGS, _ARCHITECTURE_TO_MODEL_TYPE",
            f"{_VLLM_ALGOS}: SUPPORTED_SPECULATORS_TYPES",
        ],
    }


def vllm_root(version: str, roots: Iterable[Path]) -> Path | None:
    """A folder holding vLLM `version`'s package: given, or the vLLM installed here."""
    for root in roots:
        metadata = list(root.glob(f"vllm-{version}*.dist-info"))
        if (root / _VLLM_CONFIG).is_file() and metadata:
            return root
    if (installed_version("vllm") or "").split("+")[0] == version:
        import importlib.util

        spec = importlib.util.find_spec("vllm")
        if spec is not None and spec.origin is not None:
            return Path(spec.origin).parent.parent
    return None


# --------------------------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------------------------


def _class_model_types(sources: dict[str, ast.Module]) -> dict[str, str]:
    """Class name -> its `model_type` class attribute (inherited from a base found here)."""
    own: dict[str, str] = {}
    bases: dict[str, list[str]] = {}
    for tree in sources.values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases.setdefault(node.name, [getattr(b, "id", getattr(b, "attr", "")) for b in node.bases])
            for item in node.body:
                target = item.target if isinstance(item, ast.AnnAssign) else None
                targets = item.targets if isinstance(item, ast.Assign) else ([target] if target else [])
                value = item.value if isinstance(item, ast.Assign | ast.AnnAssign) else None
                if any(getattr(t, "id", "") == "model_type" for t in targets) and isinstance(value, ast.Constant):
                    own.setdefault(node.name, str(value.value))

    def lookup(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        if name in own:
            return own[name]
        for base in bases.get(name, []):
            if base not in seen and (found := lookup(base, seen | {name})) is not None:
                return found
        return None

    return {name: found for name in bases if (found := lookup(name)) is not None}


def _names(node: ast.expr | None) -> list[str]:
    return [element.id for element in getattr(node, "elts", []) if isinstance(element, ast.Name)]


def _package_files(location: Path) -> dict[str, str]:
    """The .py files of a wheel, or of a folder holding the unpacked package, by their path."""
    if location.is_dir():
        return {
            path.relative_to(location).as_posix(): path.read_text(encoding="utf-8") for path in location.rglob("*.py")
        }
    with zipfile.ZipFile(location) as archive:
        return {name: archive.read(name).decode("utf-8") for name in archive.namelist() if name.endswith(".py")}


def sglang_json(version: str, wheel: Path, transformers_classes: dict[str, str]) -> dict[str, Any]:
    """SGLang `version`'s config-loading facts from its wheel or unpacked folder
    (`transformers_classes`: the model types of transformers' classes, for registry entries
    SGLang takes from transformers)."""
    files = _package_files(wheel)
    sources = {
        name: ast.parse(text)
        for name, text in files.items()
        if name.startswith("sglang/srt/configs/") or name == _SGLANG_COMMON
    }
    config_tree = ast.parse(files[_SGLANG_CONFIG])
    common = sources[_SGLANG_COMMON]
    model_types = {**{cls: mt for mt, cls in transformers_classes.items()}, **_class_model_types(sources)}
    tuples = {
        target.id: _names(node.value)
        for tree in sources.values()
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Tuple | ast.List)
    }
    registry: dict[str, str] = {}
    unresolved: list[str] = []

    def add(names: list[str]) -> None:
        for name in names:
            if name in model_types:
                registry[model_types[name]] = name
            else:
                unresolved.append(name)

    extra: dict[str, str] = {}
    for node in ast.walk(common):
        if isinstance(node, ast.DictComp) and isinstance(node.generators[0].iter, ast.List | ast.Tuple | ast.Name):
            iterable = node.generators[0].iter
            add(tuples.get(iterable.id, []) if isinstance(iterable, ast.Name) else _names(iterable))
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if getattr(target.value, "id", "") == "_CONFIG_REGISTRY" and isinstance(target.slice, ast.Constant):
                registry[str(target.slice.value)] = getattr(node.value, "id", "?")
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            registering = any(
                isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "register" for call in ast.walk(node)
            )
            if registering:
                for name in _names(node.iter):
                    extra[model_types.get(name, name)] = name
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "register"
            and getattr(node.func, "value", None) is not None
            and getattr(node.func.value, "id", "") == "AutoConfig"  # type: ignore[attr-defined]
            and node.args
            and isinstance(node.args[0], ast.Attribute)
            and isinstance(node.args[0].value, ast.Name)
            and node.args[0].value.id in model_types
        ):
            name = node.args[0].value.id
            extra[model_types[name]] = name
    if unresolved:
        raise RuntimeError(f"SGLang {version}: no model_type found for {', '.join(sorted(set(unresolved)))}")
    longcat = _assigned(config_tree, "_LONGCAT_ARCHS")
    architectures = {
        str(element.value): "longcat_flash"
        for element in getattr(longcat, "elts", [])
        if isinstance(element, ast.Constant)
    }
    return {
        "engine": "sglang",
        "version": version,
        "registry": dict(sorted(registry.items())),
        "auto_config_extra": {k: v for k, v in sorted(extra.items()) if k not in registry},
        "architecture_model_types": dict(sorted(architectures.items())),
        "cites": [f"{_SGLANG_COMMON}: _CONFIG_REGISTRY, AutoConfig.register", f"{_SGLANG_CONFIG}: _LONGCAT_ARCHS"],
    }


# --------------------------------------------------------------------------------------------
# All of it
# --------------------------------------------------------------------------------------------


def generate(
    only: set[str], scratch: Path, vllm_roots: list[Path], sglang_wheel: Path | None
) -> tuple[dict[str, str], list[str]]:
    """(file name -> text, what could not be generated here and why)."""
    files: dict[str, str] = {}
    skipped: list[str] = []
    tables: dict[str, dict[str, Any]] = {}
    for loading in loadings():
        if loading.table not in tables and ("transformers" in only or loading.engine == "sglang" and "sglang" in only):
            tables[loading.table] = transformers_json(loading.table, scratch)
            if "transformers" in only:
                files[f"transformers-{loading.table}.json"] = dump(tables[loading.table])
    for rules in ENGINE_RULES.values():
        release = rules.config_loading
        if release is None or release.engine not in only:
            continue
        if release.engine == "vllm":
            root = vllm_root(rules.version, vllm_roots)
            if root is None:
                skipped.append(f"{release.generated}: vLLM {rules.version} is not installed here (--vllm-root DIR)")
                continue
            files[release.generated] = dump(vllm_json(rules.version, root))
        elif release.engine == "sglang":
            wheel = sglang_wheel or fetch_wheel(f"sglang=={rules.version}", scratch / "wheels")
            files[release.generated] = dump(sglang_json(rules.version, wheel, tables[release.table]["model_types"]))
    return files, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_tools.engine_rules.generate_defaults")
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    parser.add_argument("--only", action="append", choices=("transformers", "vllm", "sglang"))
    parser.add_argument("--vllm-root", action="append", type=Path, default=[], help="a folder holding vllm/")
    parser.add_argument("--sglang-wheel", type=Path)
    args = parser.parse_args(argv)
    only = set(args.only or ("transformers", "vllm", "sglang"))
    with tempfile.TemporaryDirectory() as folder:
        files, skipped = generate(only, Path(folder), args.vllm_root, args.sglang_wheel)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    differ = []
    for name, text in files.items():
        path = GENERATED / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                differ.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
    if differ:
        print(f"differ from the released packages: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
