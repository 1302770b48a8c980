"""`dflash-tools inspect`'s core entry point: the request in, one report per source out.

    inspect_sources(InspectRequest(sources=("example:zlab-dflash2",), engines=("all",)))  ->  InspectResult

Everything the command does but parse and render: the Hub listing (`author`, `search`), the
target read once, the `--engine` names resolved to tables (`vllm`: the vLLM installed here,
classified from its files, `vllm_capability`), each source read and inspected (several at once
on `jobs` threads) with the engine views (`engine_view.inspect_for_engines`) or without
(`inspect.inspect_loaded`, with each release's verdict from its table: `engine_verdicts`), and
the exit code. `inspect_request(args)` builds the request from
the command line's options; `dflash_tools.inspect_checkpoint` is the call for one source.

It lives beside the engine views because it calls them; nothing here imports typer, rich or an
engine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dflash_tools.draft.target import TargetDescription, target_argument
from dflash_tools.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    DflashToolsError,
    UsageError,
    error_document,
)
from dflash_tools.findings import Severity
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.reading.checkpoint import optional_count
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_verdicts import table_verdicts, verdicts_document
from dflash_tools.serving.engine_view import (
    asks_installed_sglang,
    engine_choices,
    inspect_for_engines,
    resolve_engine_specs,
)
from dflash_tools.serving.installed_sglang import InstalledSglang, detect_sglang
from dflash_tools.serving.k_values import single_k
from dflash_tools.serving.launch import served_model_name
from dflash_tools.serving.vllm_capability import VllmCapability, detect_vllm

COMMAND = "inspect"

# The severities that fail a run, by `--fail-on`.
_FAILING = {
    Severity.ERROR: {Severity.ERROR},
    Severity.WARNING: {Severity.ERROR, Severity.WARNING},
    Severity.INFO: set(Severity),
}


class InspectArguments(Protocol):
    """What `inspect_request` reads from the command line: None (or an empty list) is not given."""

    @property
    def sources(self) -> Sequence[str] | None: ...
    @property
    def target(self) -> str | None: ...
    @property
    def num_speculative_tokens(self) -> str | None: ...  # `-k` as typed: one K here
    @property
    def engines(self) -> Sequence[str] | None: ...
    @property
    def fail_on(self) -> str: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def target_revision(self) -> str | None: ...
    @property
    def token(self) -> str | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def author(self) -> str | None: ...
    @property
    def search(self) -> str | None: ...
    @property
    def limit(self) -> int: ...
    @property
    def jobs(self) -> int: ...


@dataclass(frozen=True)
class InspectRequest:
    """What to inspect, and how. `engines` takes what `--engine` takes (`all`, `sglang`,
    `vllm==0.34.0`, `vllm`: the vLLM installed here); `fail_on` is the lowest severity that
    makes the exit code 1. `author` / `search` add the Hub's models (at most `limit`)."""

    sources: tuple[str | os.PathLike[str], ...] = ()
    target: str | os.PathLike[str] | TargetDescription | None = None
    num_speculative_tokens: int | None = None
    engines: tuple[str, ...] = ()
    fail_on: Severity = Severity.ERROR
    revision: str | None = None
    target_revision: str | None = None
    token: str | None = None
    timeout: float | None = None
    author: str | None = None
    search: str | None = None
    limit: int = 100
    jobs: int = 8


def inspect_request(args: InspectArguments) -> InspectRequest:
    """The request of the command line's options (`-k` parsed: one K)."""
    return InspectRequest(
        sources=tuple(args.sources or ()),
        target=args.target,
        num_speculative_tokens=single_k(args.num_speculative_tokens, COMMAND),
        engines=tuple(args.engines or ()),
        fail_on=Severity(args.fail_on),
        revision=args.revision,
        target_revision=args.target_revision,
        token=args.token,
        timeout=args.timeout,
        author=args.author,
        search=args.search,
        limit=args.limit,
        jobs=args.jobs,
    )


@dataclass
class InspectResult:
    """One report per source, in the order asked (a source that cannot be read: its error)."""

    request: InspectRequest
    sources: list[str]
    reports: list[InspectReport | DflashToolsError]
    target: TargetDescription | None = None
    engines: list[str] = field(default_factory=list)  # the `engine==version` tables applied

    @property
    def exit_code(self) -> int:
        """The command's: 2 when a source cannot be read, else the worst source's (`source_exit_code`)."""
        return max(self.source_exit_code(report) for report in self.reports)

    def source_exit_code(self, report: InspectReport | DflashToolsError) -> int:
        """One source's: 2 when it cannot be read; 1 when a finding reaches `fail_on` (counted
        ones past the report's cap included); else 0."""
        if isinstance(report, DflashToolsError):
            return EXIT_USAGE
        failing = _FAILING[self.request.fail_on]
        counts = report.severity_counts()
        return EXIT_FINDINGS if any(counts[severity] for severity in failing) else EXIT_OK

    def documents(self, *, include_tensors: bool = False) -> list[dict[str, Any]]:
        """Each source's JSON document: its report, with `command`, and `ok` and `exit_code` as
        its own exit code says; or the error document in its place (docs/json.md)."""
        documents = []
        for name, result in zip(self.sources, self.reports, strict=True):
            if isinstance(result, DflashToolsError):
                documents.append(
                    error_document(COMMAND, result.message, result.hint, result.exit_code, result.kind, name)
                )
                continue
            code = self.source_exit_code(result)
            document: dict[str, Any] = {}
            for key, value in result.to_dict(include_tensors=include_tensors).items():
                if key == "ok":  # `ok`, then `exit_code`, where the report has its `ok`
                    document.update(ok=code == EXIT_OK, exit_code=code)
                else:
                    document[key] = value
                if key == "schema_version":
                    document["command"] = COMMAND
            documents.append(document)
        return documents

    # Not a declaration: one source's document, or an array of them, each with its own exit code.
    def to_dict(self, *, include_tensors: bool = False) -> dict[str, Any] | list[dict[str, Any]]:
        """The `--json` document: one source's, or an array of them."""
        documents = self.documents(include_tensors=include_tensors)
        return documents[0] if len(documents) == 1 else documents


def inspect_sources(request: InspectRequest) -> InspectResult:
    """Inspect every source of the request. With one source, the error that keeps it from being
    read is raised (SourceError, UsageError); with several, it takes that source's place.
    Raises UsageError for no source at all, or an `engines` name `--engine` does not take."""
    k = optional_count(request.num_speculative_tokens, "num_speculative_tokens")
    names = [os.fspath(source) if isinstance(source, os.PathLike) else source for source in request.sources]
    if request.author or request.search:
        from dflash_tools.reading.hub import list_hub_models

        names += list_hub_models(
            request.author, request.search, token=request.token, limit=request.limit, timeout=request.timeout
        )
        if not names:
            raise UsageError(
                f"no Hub models match author={request.author!r} search={request.search!r}",
                "check the spelling, or pass sources directly",
            )
    if not names:
        raise UsageError("no SOURCE given", "pass a folder, a repo id, example:zlab-dflash2, or --author")
    target = target_argument(
        request.target, revision=request.target_revision, token=request.token, timeout=request.timeout
    )
    target_name = target_launch_name(target)
    specs, installed_vllm = engine_specs(request.engines)
    vllm = detect_vllm() if installed_vllm else None
    sglang = detect_sglang() if asks_installed_sglang(list(request.engines)) else None

    def inspect_one(name: str) -> InspectReport | DflashToolsError:
        try:
            return _inspect_source(name, request, k, specs, vllm, sglang, target, target_name)
        except DflashToolsError as exc:
            return exc

    if len(names) == 1:
        reports = [inspect_one(names[0])]
        if isinstance(reports[0], DflashToolsError):
            raise reports[0]
    else:
        with ThreadPoolExecutor(max_workers=min(request.jobs, len(names))) as pool:
            reports = list(pool.map(inspect_one, names))
    return InspectResult(request, [str(name) for name in names], reports, target, specs)


def _inspect_source(
    name: str,
    request: InspectRequest,
    k: int | None,
    specs: list[str],
    vllm: VllmCapability | None,
    sglang: InstalledSglang | None,
    target: TargetDescription | None,
    target_name: str | None,
) -> InspectReport:
    loaded = load_checkpoint(name, revision=request.revision, token=request.token, timeout=request.timeout)
    if specs or vllm is not None:
        return inspect_for_engines(
            loaded,
            specs,
            installed_vllm=vllm,
            installed_sglang=sglang,
            target=target,
            target_name=target_name,
            num_speculative_tokens=k,
        )
    report = inspect_loaded(loaded, target=target, num_speculative_tokens=k)
    # Without --engine: each release's verdict from its table, no findings added (the columns,
    # their findings and the launch lines are --engine's).
    report.extra["engine_verdicts"] = verdicts_document(table_verdicts(report, target_name))
    return report


def target_launch_name(target: TargetDescription | None) -> str | None:
    """What the launch lines name for the target, as `plan` names it (`launch.served_model_name`):
    the folder of a local target's config.json, resolved, else the Hub repo id."""
    if target is None:
        return None
    location = Path(target.location)
    local = location.is_absolute() and location.is_file()  # a Hub target's location is `repo@revision`
    return served_model_name(target.source, location.parent if local else None)


def engine_specs(values: Sequence[str]) -> tuple[list[str], bool]:
    """(`engine==version` tables, whether the installed vLLM was asked for) of `--engine` values;
    UsageError for a name it does not take, an empty one included (an unset shell variable)."""
    hint = f"choose from: {', '.join(engine_choices())}"
    for value in values:
        if not isinstance(value, str):
            raise UsageError(f"--engine {value!r}: not an engine name", hint)
        if not value.strip() or any(not part.strip() for part in value.split(",")):
            raise UsageError(f"--engine {value!r}: an empty engine name", hint)
    try:
        return resolve_engine_specs(list(values))
    except ValueError as exc:
        raise UsageError(f"--engine {exc}", hint) from None


def inspect_checkpoint(
    source: str | os.PathLike[str],
    *,
    target: str | os.PathLike[str] | TargetDescription | None = None,
    num_speculative_tokens: int | None = None,
    engines: Sequence[str] = (),
    revision: str | None = None,
    token: str | None = None,
    target_revision: str | None = None,
    timeout: float | None = None,
) -> InspectReport:
    """Inspect one checkpoint, as `dflash-tools inspect SOURCE` does: `engines` takes what
    `--engine` takes, and the report's `to_dict()["engines"]` holds the columns the command prints.
    Raises SourceError when the draft or target cannot be reached, and UsageError for an argument
    of the wrong type (a source that is not a str or a path, ...)."""
    if isinstance(engines, str):
        engines = (engines,)
    request = InspectRequest(
        sources=(source,),
        target=target,
        num_speculative_tokens=num_speculative_tokens,
        engines=tuple(engines),
        revision=revision,
        token=token,
        target_revision=target_revision,
        timeout=timeout,
    )
    report = inspect_sources(request).reports[0]
    assert isinstance(report, InspectReport)  # one source: its error is raised
    return report
