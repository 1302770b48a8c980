"""Read a checkpoint from the local file system: a folder, a lone shard or config, a bundled example.

Folders are read through their shard index when they have one; every shard's header is parsed,
never its data. Files that resolve outside the folder are reported (DFT004) and skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflash_tools.errors import SourceError
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
    NotRegularFile,
    add_shard,
    check_index_against_shards,
    parse_config_text,
    parse_index,
    path_exists,
    read_small_file,
)
from dflash_tools.reading.safetensors_header import read_local_header


def configs_dir() -> Path:
    """configs/ in a checkout, or its copy inside the installed wheel (`dflash_tools/_configs`)."""
    package = Path(__file__).parent.parent
    packaged = package / "_configs"
    return packaged if packaged.is_dir() else package.parent / "configs"


def examples_dir() -> Path:
    return Path(__file__).parent.parent / "examples"


def list_examples() -> list[str]:
    root = examples_dir()
    if not root.is_dir():
        return []
    # Only drafts: a folder with weights (the bundled targets have a config.json alone).
    return sorted(p.name for p in root.iterdir() if (p / CONFIG_NAME).is_file() and any(p.glob("*.safetensors")))


def read_config_file(path: Path, file: str = CONFIG_NAME) -> tuple[dict[str, Any] | None, str | None, list[Finding]]:
    if not path_exists(path):
        return (
            None,
            None,
            [
                make_finding(
                    "DFT001",
                    f"{file} is missing",
                    "a draft checkpoint needs its config.json next to the weights",
                    file=file,
                )
            ],
        )
    try:
        raw = read_small_file(path)
        text = raw.decode("utf-8")
    except NotRegularFile as exc:
        # A folder, FIFO or device where the config belongs is there, but it is not a config.
        return None, None, [make_finding("DFT001", f"{file} is {exc}", f"restore {file}", file=file)]
    except FileNotFoundError:  # a dangling link
        return None, None, [make_finding("DFT001", f"{file} is a link to nothing", f"restore {file}", file=file)]
    except OSError as exc:
        return None, None, [make_finding("DFT001", f"{file} cannot be read: {exc.strerror or exc}", file=file)]
    except UnicodeDecodeError as exc:
        return (
            None,
            None,
            [make_finding("DFT001", f"{file} is not UTF-8 text: {exc}", f"restore {file}", file=file)],
        )
    except ValueError as exc:
        return None, None, [make_finding("DFT001", f"{file} is {exc}: not a config", f"restore {file}", file=file)]
    config, findings = parse_config_text(text, file)
    return config, text, findings


def load_local(path: Path, *, source: str) -> LoadedCheckpoint:
    """A folder, a single .safetensors file (config.json beside it) or a config.json alone."""
    if not path.is_dir() and not path.is_file():
        raise SourceError(f"{source}: not a regular file or folder", "pass a checkpoint folder or file")
    if path.is_file() and path.suffix not in (".safetensors", ".json"):
        raise SourceError(
            f"{source}: expected a checkpoint folder, a .safetensors file or a config.json",
            "pass the folder that holds config.json and the weights",
        )
    folder = path if path.is_dir() else path.parent
    config_path = path if path.suffix == ".json" and path.is_file() else folder / CONFIG_NAME
    config, text, findings = read_config_file(config_path, config_path.name)
    loaded = LoadedCheckpoint(
        source=source,
        kind="local",
        location=str(path.resolve()),
        config=config,
        config_text=text,
        findings=findings,
        local_dir=folder,
    )
    if path.is_dir():
        read_local_weights(folder, loaded)
    elif path.suffix == ".safetensors":
        add_shard(loaded, lambda: read_local_header(path, path.name))
    else:
        loaded.weights_inspected = False
        loaded.findings.append(
            make_finding(
                "DFT005",
                f"{path.name} given alone: tensor shapes were not checked",
                "pass the checkpoint folder to check tensors too",
            )
        )
    return loaded


def read_index(folder: Path, loaded: LoadedCheckpoint, file: str = INDEX_NAME) -> dict[str, str] | None:
    """The weight map of a local shard index, validated; problems become DFT004 findings."""
    try:
        data = read_small_file(folder / file)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        loaded.findings.append(
            make_finding("DFT004", f"{file} cannot be read: {reason}", "re-download the index", file=file)
        )
        return None
    return parse_index(data, loaded, file)


def _is_regular_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name longer than the file system allows
        return False


def _inside(folder: Path, candidate: Path) -> bool:
    """Whether `candidate` stays in the checkpoint: in the folder, or in its Hub cache blob store.

    A Hugging Face cache snapshot (`models--org--name/snapshots/<commit>/`) holds links into the
    repo's own `blobs/` folder; those are the checkpoint's files, not an escape.
    """
    try:
        resolved = candidate.resolve()
        root = folder.resolve()
    except (OSError, RuntimeError):
        return False
    if resolved.is_relative_to(root):
        return True
    if root.parent.name == "snapshots":
        return resolved.is_relative_to(root.parent.parent / "blobs")
    return False


def read_local_weights(folder: Path, loaded: LoadedCheckpoint) -> None:
    index_path = folder / INDEX_NAME
    if path_exists(index_path):  # a folder or FIFO there is a finding (read_index), not "no index"
        weight_map = read_index(folder, loaded)
        if weight_map is None:
            # The index is unusable (already a DFT004); the shards themselves can still be checked.
            _read_all_shards(folder, loaded)
            return
        shard_names = sorted(set(weight_map.values()))
        reported: set[str] = set()
        for shard_name in shard_names:
            shard_path = folder / shard_name
            if not _inside(folder, shard_path):
                loaded.findings.append(
                    make_finding(
                        "DFT004",
                        f"{INDEX_NAME} names {shard_name}, which resolves outside the checkpoint folder",
                        "replace the link with the real file",
                        file=shard_name,
                    )
                )
                reported.add(shard_name)
                continue
            if not _is_regular_file(shard_path):
                what = "is not a regular file" if path_exists(shard_path) else "does not exist"
                loaded.findings.append(
                    make_finding(
                        "DFT004",
                        f"{INDEX_NAME} names {shard_name}, which {what}",
                        "download the missing shard",
                        file=shard_name,
                    )
                )
                reported.add(shard_name)
                continue
            add_shard(loaded, lambda p=shard_path, n=shard_name: read_local_header(p, n))
        check_index_against_shards(loaded, weight_map, reported)
        return
    _read_all_shards(folder, loaded)


def _read_all_shards(folder: Path, loaded: LoadedCheckpoint) -> None:
    files = []
    for path in sorted(folder.glob("*.safetensors")):
        if _is_regular_file(path):
            files.append(path)
        else:  # a folder, a device or FIFO (reading would never end), or a broken link
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{path.name} is not a regular file: not read",
                    "replace it with the real file",
                    file=path.name,
                )
            )
    if not files:
        loaded.weights_inspected = False
        loaded.findings.append(
            make_finding(
                "DFT005", f"no *.safetensors files in {folder}", "download the weights to check tensor shapes too"
            )
        )
        return
    for path in files:
        if not _inside(folder, path):
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{path.name} links outside the checkpoint folder",
                    "replace the link with the real file",
                    file=path.name,
                )
            )
            continue
        add_shard(loaded, lambda p=path: read_local_header(p, p.name))


def load_following_links(folder: Path, source: str, linked: set[str] | None = None) -> LoadedCheckpoint:
    """`load_local`, reading the shards that are symlinks out of the folder through their links.

    `linked` names the files to follow (None: every symlinked file), for folders whose links are
    known to be sound: a cache snapshot this run downloaded, or links this run made.
    """
    loaded = load_local(folder, source=source)
    if linked is None:
        linked = {p.name for p in folder.iterdir() if p.is_symlink()}
    if not linked:
        return loaded
    loaded.findings = [f for f in loaded.findings if not (f.code == "DFT004" and f.file in linked)]
    have = {s.file for s in loaded.shards}
    reread = sorted(n for n in linked if n.endswith(".safetensors") and n not in have and (folder / n).is_file())
    for name in reread:
        add_shard(loaded, lambda name=name: read_local_header(folder / name, name))
    if reread:
        loaded.weights_inspected = True
        loaded.findings = [f for f in loaded.findings if f.code != "DFT005"]
        if (folder / INDEX_NAME).is_file():
            weight_map = read_index(folder, LoadedCheckpoint(source, "local", str(folder), None, None))
            if weight_map is not None:
                check_index_against_shards(loaded, weight_map, set())
    return loaded
