"""Hostile input to the readers and arguments added last round: protocol files, dataset files and the
dataset cache, parquet, secrets a server echoes, the new API arguments, `examples --copy-to`,
published-release matching and `convert --to`.

Each case is one call of a public entry point (the Python API or the CLI, in process), in a fresh
temporary folder; `isolated` cases run in a process of their own under a timeout, since the code
before this round hung or ran out of memory on them. A case ends cleanly when:

- its exit code is the one expected (2: UsageError / SourceError; 1: OperationError or a refused
  run; 0: a usable result), and no other exception escaped;
- its one-line message (and hint) names the cause (`expect`);
- it ended within BOUND_SECONDS;
- its own check holds (nothing written into the bundled examples, no secret in any output, the
  prompt read back unchanged, ...).

`python -m tests.hostile.reader_cases` runs every case and prints the table of docs/reliability.md
(`--only NAME` runs one case and prints its outcome as JSON: how isolated cases run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BOUND_SECONDS = 20.0
ISOLATED_TIMEOUT = 60.0
KEY = "sk-reader-secret-9f8e7d"
COOKIE = "cookie-secret-4b3a2c1d"
MIB = 1024 * 1024


@dataclass
class Outcome:
    exit_code: int
    message: str = ""
    hint: str = ""
    internal: str = ""
    seconds: float = 0.0
    check: str = ""  # what its own check found wrong ("" when it holds)


@dataclass
class Case:
    name: str
    surface: str
    call: Callable[[Path], Any]  # raises a DflashToolsError, or returns (exit code, message) or a result
    exit_code: int
    expect: str = ""
    check: Callable[[Path, Outcome, Any], str | None] | None = None
    isolated: bool = False
    needs: str = ""  # a module the case needs (skipped without it)
    outcome: Outcome | None = field(default=None, repr=False)


# --- running ---------------------------------------------------------------------------------------


def run_in_process(case: Case) -> Outcome:
    from dflash_tools.errors import DflashToolsError

    with tempfile.TemporaryDirectory(prefix="reader-case-") as tmp:
        folder = Path(tmp)
        started = time.monotonic()
        value: Any = None
        try:
            value = case.call(folder)
        except DflashToolsError as exc:
            outcome = Outcome(exc.exit_code, exc.message, exc.hint)
        except BaseException as exc:  # what must never happen
            outcome = Outcome(-1, internal=f"{type(exc).__name__}: {exc}"[:300])
        else:
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):
                outcome = Outcome(value[0], str(value[1]))
            else:
                outcome = Outcome(0)
        outcome.seconds = time.monotonic() - started
        if case.check is not None and not outcome.internal:
            try:
                outcome.check = case.check(folder, outcome, value) or ""
            except BaseException as exc:
                outcome.check = f"the check raised {type(exc).__name__}: {exc}"[:300]
    return outcome


def run_isolated(case: Case) -> Outcome:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.hostile.reader_cases", "--only", case.name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=ISOLATED_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return Outcome(-1, internal=f"did not end within {ISOLATED_TIMEOUT:g} s", seconds=ISOLATED_TIMEOUT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return Outcome(-1, internal=f"no outcome (exit {done.returncode}): {done.stderr[-300:]}")
    outcome = Outcome(**json.loads(lines[-1]))
    outcome.seconds = time.monotonic() - started
    return outcome


def run_case(case: Case) -> Outcome:
    case.outcome = run_isolated(case) if case.isolated else run_in_process(case)
    return case.outcome


def problems(case: Case) -> list[str]:
    outcome = case.outcome
    assert outcome is not None
    found = []
    if outcome.internal:
        found.append(outcome.internal)
    if outcome.exit_code != case.exit_code:
        found.append(f"exit {outcome.exit_code}, expected {case.exit_code} ({outcome.message[:200]})")
    if "\n" in outcome.message:
        found.append("the message is more than one line")
    if case.expect and case.expect not in f"{outcome.message} {outcome.hint}":
        found.append(f"{case.expect!r} is not in {outcome.message[:300]!r} / {outcome.hint[:200]!r}")
    if outcome.seconds > BOUND_SECONDS and not case.isolated:
        found.append(f"took {outcome.seconds:.1f} s, bound {BOUND_SECONDS:g} s")
    if outcome.check:
        found.append(f"check: {outcome.check}")
    return found


# --- protocol files ------------------------------------------------------------------------------------


def protocol_file(folder: Path, **fields: Any) -> Path:
    document = {"schema_version": 1, "name": "hostile", "temperature": 0.0, "chat": False, **fields}
    path = folder / "hostile.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def load_protocol_file(**fields: Any) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        from dflash_tools.smoke.workloads.protocols import load_protocol

        return load_protocol(str(protocol_file(folder, **fields)))

    return call


def sparse_protocol(folder: Path) -> Any:
    from dflash_tools.smoke.workloads.protocols import load_protocol

    path = folder / "sparse.json"
    with open(path, "wb") as handle:
        handle.truncate(10 * 1024**3)
    return load_protocol(str(path))


def gsm8k_file(folder: Path, rows: int = 3, question: str = "What is 2 + 2?", raw: bytes | None = None) -> Path:
    path = folder / "gsm8k.jsonl"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(
            "".join(json.dumps({"question": f"{question} ({i})"}, ensure_ascii=False) + "\n" for i in range(rows)),
            encoding="utf-8",
        )
    return path


def smoke_arguments(**given: Any) -> Any:
    """The command line's options as `resolve_options` reads them (`smoke.arguments.SmokeArguments`),
    with the checks these tests do not exercise off."""
    from dflash_tools.smoke.arguments import SmokeArguments

    return SmokeArguments(**{**{"prefix_caching_check": True, "cross_check": False, "dry_run": True}, **given})


def protocol_through_options(**fields: Any) -> Callable[[Path], Any]:
    """A protocol file with a dataset file, resolved as `smoke-test --protocol F --dataset gsm8k
    --dataset-file D` resolves them."""

    def call(folder: Path) -> Any:
        from dflash_tools.smoke.options import resolve_options

        path = protocol_file(folder, order="shuffled-42", **fields)
        return resolve_options(
            smoke_arguments(protocol=str(path), dataset="gsm8k", dataset_file=str(gsm8k_file(folder)))
        )

    return call


def options_with(**given: Any) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        from dflash_tools.smoke.options import resolve_options

        return resolve_options(smoke_arguments(**given))

    return call


# --- datasets and the cache ----------------------------------------------------------------------------


def load_file(text_or_bytes: str | bytes, **arguments: Any) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        from dflash_tools.smoke.workloads.datasets import load_dataset_prompts

        raw = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) else text_or_bytes
        path = gsm8k_file(folder, raw=raw)
        return load_dataset_prompts("gsm8k", arguments.pop("count", 1), path=path, **arguments)

    return call


def prompt_is(expected: str) -> Callable[[Path, Outcome, Any], str | None]:
    def check(folder: Path, outcome: Outcome, value: Any) -> str | None:
        if outcome.exit_code != 0:
            return None
        first = value.prompts[0] if value is not None else None
        return None if first is not None and first.startswith(expected) else f"the prompt read back is {first!r}"

    return check


def cache_round_trip(question: str) -> Callable[[Path], Any]:
    """The cache as the tool writes it (after a `datasets` load), then read back as the next run does."""

    def call(folder: Path) -> Any:
        from dflash_tools.smoke.workloads import datasets

        spec = datasets.dataset_spec("gsm8k")
        turns = [spec.turns({"question": question}, "row 1"), spec.turns({"question": "plain"}, "row 2")]
        datasets._write_cache(folder / "gsm8k.jsonl", turns)
        return datasets.load_dataset_prompts("gsm8k", 2, cache=folder)

    return call


def unreadable_cache(folder: Path) -> Any:
    from dflash_tools.smoke.workloads.datasets import load_dataset_prompts

    (folder / "gsm8k.jsonl").write_bytes(b'{"turns": ["ok"]}\n{"turns": [\xff\n')
    return load_dataset_prompts("gsm8k", 1, cache=folder)


def dataset_api(*args: Any, file: bool = True, **kwargs: Any) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        from dflash_tools.smoke.workloads.datasets import load_dataset_prompts

        if file and "path" not in kwargs:
            kwargs["path"] = gsm8k_file(folder)
        return load_dataset_prompts(*args, **kwargs)

    return call


# --- parquet -------------------------------------------------------------------------------------------


def parquet_file(build: Callable[[Any], Any]) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from dflash_tools.smoke.workloads.datasets import load_dataset_prompts

        path = folder / "test-00000-of-00001.parquet"
        table = build(pa)
        pq.write_table(table, path, compression="zstd", use_dictionary=True)
        del table
        return load_dataset_prompts("gsm8k", 1, path=path)

    return call


def many_dictionary_rows(pa: Any) -> Any:
    indices = pa.array([0] * 2_000_000, type=pa.int8())
    column = pa.DictionaryArray.from_arrays(indices, pa.array(["What is 2 + 2?"]))
    return pa.table({"question": column})


def one_huge_row(pa: Any) -> Any:
    return pa.table({"question": pa.array(["x" * (70 * MIB)])})


def amplified_rows(pa: Any) -> Any:
    indices = pa.array([0] * 500, type=pa.int16())
    column = pa.DictionaryArray.from_arrays(indices, pa.array(["y" * (512 * 1024)]))
    return pa.table({"question": column})


def long_prompt_row(pa: Any) -> Any:
    return pa.table({"question": pa.array(["z" * (2 * MIB), "short"])})


# --- secrets -------------------------------------------------------------------------------------------


def server_case(setup: Callable[[Any, Any], None], **options: Any) -> Callable[[Path], Any]:
    """`run_server` against tests/hostile/smoke_server.py (a healthy vLLM unless `setup` changes it);
    the outcome's value is (server, elsewhere, result, message) for the checks."""

    def call(folder: Path) -> Any:
        from dflash_tools.errors import DflashToolsError
        from dflash_tools.smoke.server import ServerOptions, run_server
        from tests.hostile.smoke_server import HostileServer

        with HostileServer() as server, HostileServer() as elsewhere:
            setup(server, elsewhere)
            settings = ServerOptions(
                url=server.url, prompts=["a"], max_tokens=8, timeout_s=1.0, run_timeout_s=5.0, api_key=KEY
            )
            for key, value in options.items():
                setattr(settings, key, value)
            try:
                result = run_server(settings)
            except DflashToolsError as exc:
                folder.joinpath("seen.json").write_text(json.dumps(_seen(server, elsewhere)), encoding="utf-8")
                raise exc
            folder.joinpath("seen.json").write_text(
                json.dumps({**_seen(server, elsewhere), "result": result}), encoding="utf-8"
            )
            return result

    return call


def _seen(server: Any, elsewhere: Any) -> dict[str, Any]:
    return {
        "server": [r.headers for r in server.requests],
        "elsewhere": [r.headers for r in elsewhere.requests],
    }


def no_secret(folder: Path, outcome: Outcome, value: Any) -> str | None:
    shown = json.dumps([outcome.message, outcome.hint, json.loads((folder / "seen.json").read_text()).get("result")])
    leaked = [name for name, secret in (("the API key", KEY), ("a cookie value", COOKIE)) if secret in shown]
    return f"{' and '.join(leaked)} shown" if leaked else None


def cookie_stays_home(folder: Path, outcome: Outcome, value: Any) -> str | None:
    seen = json.loads((folder / "seen.json").read_text())
    if not seen["elsewhere"]:
        return "the redirect was not followed"
    leaked = [h for h in seen["elsewhere"] if "cookie" in h or "authorization" in h]
    return f"credentials went to another origin: {leaked}" if leaked else None


def echo(status: int, path: str) -> Callable[[Any, Any], None]:
    def setup(server: Any, elsewhere: Any) -> None:
        def handler(connection: Any, request: Any) -> None:
            echoed = f"bad request, headers: authorization={request.headers.get('authorization')}"
            connection.respond(status, echoed.encode(), "text/plain")

        server.routes[path] = handler

    return setup


def cookie_then(then: str) -> Callable[[Any, Any], None]:
    """/v1/models sets a cookie; then `then`: a redirect to another port, or a 500 echoing it."""

    def setup(server: Any, elsewhere: Any) -> None:
        models = {"data": [{"id": "m", "owned_by": "vllm"}]}
        cookie = {"Set-Cookie": f"session={COOKIE}; Path=/"}
        if then == "redirect":
            server.routes["/v1/models"] = lambda c, r: c.respond(
                302, b"", headers={**cookie, "Location": f"{elsewhere.url}/v1/models"}
            )
            elsewhere.routes["/v1/models"] = lambda c, r: c.json(models)
            server.routes["/version"] = lambda c, r: c.json({"detail": "no"}, 404)
        else:
            server.routes["/v1/models"] = lambda c, r: c.respond(200, json.dumps(models).encode(), headers=cookie)
            server.routes["/v1/completions"] = lambda c, r: c.respond(
                500, f"upstream refused session {COOKIE}".encode(), "text/plain"
            )

    return setup


def key_in_completion(server: Any, elsewhere: Any) -> None:
    def handler(connection: Any, request: Any) -> None:
        document = server.completion(request)
        document["choices"][0]["text"] = f"the key is {KEY}"
        connection.json(document)

    server.routes["/v1/completions"] = handler


def cli_echoed_key(folder: Path) -> Any:
    from typer.testing import CliRunner

    from dflash_tools.cli import app
    from tests.hostile.smoke_server import HostileServer

    with HostileServer() as server:
        echo(401, "/v1/models")(server, None)
        done = CliRunner().invoke(
            app, ["smoke-test", "--server", server.url, "--api-key", KEY, "--num-prompts", "1", "--json"]
        )
    (folder / "seen.json").write_text(json.dumps({"result": done.stdout + done.stderr}), encoding="utf-8")
    document = json.loads(done.stdout)
    return done.exit_code, document["error"]["message"]


# --- the API's arguments -------------------------------------------------------------------------------


def convert_with(**flags: Any) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        import dflash_tools_testing as testing
        from dflash_tools import convert_checkpoint

        draft = testing.write_checkpoint(folder / "draft", "zlab-dflash", testing.TINY)
        return convert_checkpoint(draft, folder / "out", **flags)

    return call


def nothing_written(name: str) -> Callable[[Path, Outcome, Any], str | None]:
    def check(folder: Path, outcome: Outcome, value: Any) -> str | None:
        return f"{name} was written" if (folder / name).exists() else None

    return check


# --- examples --copy-to -------------------------------------------------------------------------------

BUNDLED_MARK = "zz-hostile-copy"


def copy_to(destination: Callable[[Path], str]) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        from typer.testing import CliRunner

        from dflash_tools.cli import app

        done = CliRunner().invoke(app, ["examples", "zlab-dflash", "--copy-to", destination(folder), "--json"])
        document = json.loads(done.stdout)
        return done.exit_code, (document.get("error") or {}).get("message", "")

    return call


def bundled_untouched(folder: Path, outcome: Outcome, value: Any) -> str | None:
    from dflash_tools.reading.local import examples_dir

    made = [p for p in examples_dir().iterdir() if p.name.startswith(BUNDLED_MARK)]
    for path in made:  # the old code wrote there: put the package back as it was
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    return f"the bundled examples were modified: {[p.name for p in made]}" if made else None


def names_the_destination(folder: Path, outcome: Outcome, value: Any) -> str | None:
    if ".dflash-tools-" in outcome.message:
        return "the message names the hidden staging folder"
    return None


def link_to_empty(folder: Path) -> str:
    (folder / "empty").mkdir()
    (folder / "link").symlink_to(folder / "empty")
    return str(folder / "link")


def dangling_link(folder: Path) -> str:
    (folder / "link").symlink_to(folder / "nowhere")
    return str(folder / "link")


def under_a_file(folder: Path) -> str:
    (folder / "file.txt").write_text("x")
    return str(folder / "file.txt" / "copy")


def into_examples_through_a_link(folder: Path) -> str:
    from dflash_tools.reading.local import examples_dir

    (folder / "shortcut").symlink_to(examples_dir())
    return str(folder / "shortcut" / BUNDLED_MARK)


def into_examples(folder: Path) -> str:
    from dflash_tools.reading.local import examples_dir

    return str(examples_dir() / BUNDLED_MARK)


# --- published releases, convert --to ---------------------------------------------------------------


def published_with(**changes: Any) -> Callable[[Path], Any]:
    """z-lab/Qwen3-8B-DFlash-b16's published config.json with `changes`: (exit 0, how it matched)."""

    def call(folder: Path) -> Any:
        from dflash_tools.draft.profiles import load_profiles, match_profile

        release = next(r for p in load_profiles() for r in p.releases if r.repo == "z-lab/Qwen3-8B-DFlash-b16")
        config = {**release.config, **changes}
        match = match_profile(str(folder / "draft"), None, config=config)
        return 0, f"matched by {match.matched_by}" if match is not None else "no published release"

    return call


def matched_as(expected: str) -> Callable[[Path, Outcome, Any], str | None]:
    def check(folder: Path, outcome: Outcome, value: Any) -> str | None:
        return None if outcome.message == expected else f"{outcome.message!r}, expected {expected!r}"

    return check


def convert_to(dialect: str) -> Callable[[Path], Any]:
    def call(folder: Path) -> Any:
        from typer.testing import CliRunner

        from dflash_tools.cli import app

        done = CliRunner().invoke(app, ["convert", "example:zlab-dflash", "--to", dialect, "--dry-run", "--json"])
        try:
            document = json.loads(done.stdout)
        except ValueError:
            return done.exit_code, " ".join((done.stdout + done.stderr).split())[:300]
        return done.exit_code, (document.get("error") or {}).get("message", "")

    return call


# --- the cases -----------------------------------------------------------------------------------------

P, D, Q, S, A, E, R = (
    "protocol files",
    "datasets and the cache",
    "parquet",
    "secrets",
    "API arguments",
    "examples --copy-to",
    "release matching and convert --to",
)

CASES: list[Case] = [
    # protocol files
    Case("a sparse 10 GB protocol file", P, sparse_protocol, 2, "larger than 1 MiB", isolated=True),
    Case("schema_version true", P, load_protocol_file(schema_version=True), 2, "schema_version is True"),
    Case("schema_version 1.0", P, load_protocol_file(schema_version=1.0), 2, "schema_version is 1.0"),
    Case(
        "num_prompts 10^12 (never returned once)",
        P,
        protocol_through_options(num_prompts=10**12),
        2,
        "num_prompts is 1000000000000",
        isolated=True,
    ),
    Case(
        "warmup 10^12 (never returned once)",
        P,
        protocol_through_options(warmup=10**12),
        2,
        "warmup is 1000000000000",
        isolated=True,
    ),
    Case("max_tokens 0 (the default silently once)", P, load_protocol_file(max_tokens=0), 2, "max_tokens is 0"),
    Case("top_k 2^70", P, load_protocol_file(top_k=2**70), 2, "top_k is"),
    Case(
        "temperature null (TypeError once; found by the fuzz)",
        P,
        load_protocol_file(temperature=None),
        2,
        "temperature is None",
    ),
    Case("a protocol named by an int (TypeError once)", P, options_with(protocol=7), 2, "protocol is 7"),
    # datasets and the cache
    Case("U+2028 inside a question", D, load_file('{"question": "a\u2028b"}\n'), 0, check=prompt_is("a\u2028b")),
    Case("U+0085 inside a question", D, load_file('{"question": "a\u0085b"}\n'), 0, check=prompt_is("a\u0085b")),
    Case("a UTF-8 BOM", D, load_file(b'\xef\xbb\xbf{"question": "bom"}\n'), 0, check=prompt_is("bom")),
    Case(
        "CRLF line ends", D, load_file(b'{"question": "crlf"}\r\n{"question": "two"}\r\n'), 0, check=prompt_is("crlf")
    ),
    Case(
        "the cache written with a U+2028 row reads back",
        D,
        cache_round_trip("x\u2028y"),
        0,
        check=prompt_is("x\u2028y"),
    ),
    Case(
        "the cache written with a lone surrogate reads back",
        D,
        cache_round_trip("x\ud800y"),
        0,
        check=prompt_is("x\ud800y"),
    ),
    Case("a cache that cannot be read is named, with the command that clears it", D, unreadable_cache, 2, "rm '"),
    Case("a prompt of 2 MiB", D, load_file(json.dumps({"question": "q" * (2 * MIB)}) + "\n"), 2, "MAX_PROMPT_CHARS"),
    # parquet
    Case(
        "2,000,000 dictionary-encoded rows in a few KB",
        Q,
        parquet_file(many_dictionary_rows),
        2,
        "from the file's metadata",
        isolated=True,
        needs="pyarrow",
    ),
    Case(
        "one row of 70 MiB compressed to a few KB",
        Q,
        parquet_file(one_huge_row),
        2,
        "uncompressed",
        isolated=True,
        needs="pyarrow",
    ),
    Case(
        "500 rows of one 512 KiB dictionary string (250 MiB decoded)",
        Q,
        parquet_file(amplified_rows),
        2,
        "MiB of text",
        isolated=True,
        needs="pyarrow",
    ),
    Case("a prompt of 2 MiB", Q, parquet_file(long_prompt_row), 2, "MAX_PROMPT_CHARS", needs="pyarrow"),
    # secrets
    Case(
        "HTTP 401 whose body echoes the API key",
        S,
        server_case(echo(401, "/v1/models")),
        2,
        "(HTTP 401)",
        check=no_secret,
    ),
    Case(
        "HTTP 500 on a completion whose body echoes the API key",
        S,
        server_case(echo(500, "/v1/completions")),
        1,
        "HTTP 500",
        check=no_secret,
    ),
    Case("a completion whose text holds the API key", S, server_case(key_in_completion), 0, check=no_secret),
    Case(
        "a cookie set, then a redirect to another port",
        S,
        server_case(cookie_then("redirect")),
        0,
        check=cookie_stays_home,
    ),
    Case("a cookie value echoed in an error body", S, server_case(cookie_then("echo")), 1, "HTTP 500", check=no_secret),
    Case(
        "the CLI's JSON document and stderr on a 401 that echoes the key",
        S,
        cli_echoed_key,
        2,
        "(HTTP 401)",
        check=no_secret,
    ),
    # the API's arguments
    Case("dataset=7 (AttributeError once)", A, options_with(dataset=7), 2, "dataset is 7"),
    Case("dataset_file=7 (TypeError once)", A, options_with(dataset="gsm8k", dataset_file=7), 2, "dataset_file is 7"),
    Case("load_dataset_prompts(7, 1) (AttributeError once)", A, dataset_api(7, 1), 2, "dataset is 7"),
    Case("load_dataset_prompts count=True", A, dataset_api("gsm8k", True), 2, "count True"),
    Case("load_dataset_prompts warmup=-5", A, dataset_api("gsm8k", 1, warmup=-5), 2, "warmup -5"),
    Case(
        "load_dataset_prompts count=10^12 (never returned once)",
        A,
        dataset_api("gsm8k", 10**12, order="shuffled-42"),
        2,
        "count 1000000000000",
        isolated=True,
    ),
    Case(
        "load_dataset_prompts path=b'...' (TypeError once)",
        A,
        dataset_api("gsm8k", 1, path=b"/tmp/x.jsonl"),
        2,
        "dataset_file is b'/tmp/x.jsonl'",
    ),
    Case("load_dataset_prompts refresh='no'", A, dataset_api("gsm8k", 1, refresh="no"), 2, "refresh is 'no'"),
    Case(
        "convert_checkpoint backup='no'",
        A,
        convert_with(backup="no"),
        2,
        "backup is 'no'",
        check=nothing_written("out"),
    ),
    Case(
        "convert_checkpoint force='no'", A, convert_with(force="no"), 2, "force is 'no'", check=nothing_written("out")
    ),
    # examples --copy-to
    Case(
        "into the bundled examples",
        E,
        copy_to(into_examples),
        2,
        "inside the bundled examples",
        check=bundled_untouched,
    ),
    Case(
        "into the bundled examples through a link",
        E,
        copy_to(into_examples_through_a_link),
        2,
        "inside the bundled examples",
        check=bundled_untouched,
    ),
    Case(
        "a link to an empty folder",
        E,
        copy_to(link_to_empty),
        2,
        "a link, not a new folder",
        check=names_the_destination,
    ),
    Case("a dangling link", E, copy_to(dangling_link), 2, "a link, not a new folder", check=names_the_destination),
    Case(
        "under a file (cannot be written)",
        E,
        copy_to(under_a_file),
        2,
        "file.txt/copy: cannot write there",
        check=names_the_destination,
    ),
    # release matching and convert --to
    Case("the published config (reference)", R, published_with(), 0, check=matched_as("matched by config content")),
    Case(
        "the published config with attention_bias 0 for false",
        R,
        published_with(attention_bias=0),
        0,
        check=matched_as("no published release"),
    ),
    Case(
        "the published config with block_size 16.0 for 16",
        R,
        published_with(block_size=16.0),
        0,
        check=matched_as("no published release"),
    ),
    Case("convert --to muse-glimmer (the API writes it)", R, convert_to("muse-glimmer"), 0),
]


def table(cases: list[Case]) -> str:
    rows = ["| surface | case | exit | message or outcome |", "|---|---|---|---|"]
    for case in cases:
        outcome = case.outcome
        assert outcome is not None
        shown = outcome.internal or outcome.message or ("skipped" if outcome.exit_code == -2 else "ok")
        shown = shown.replace("|", "\\|").replace(tempfile.gettempdir(), "TMP")
        rows.append(f"| {case.surface} | {case.name} | {outcome.exit_code} | {shown[:140]} |")
    return "\n".join(rows)


def available(case: Case) -> bool:
    if not case.needs:
        return True
    try:
        __import__(case.needs)
    except ImportError:
        return False
    return True


def main(argv: list[str]) -> int:
    if argv[:1] == ["--only"]:
        (case,) = [c for c in CASES if c.name == argv[1]]
        print(json.dumps(asdict(run_in_process(case))))
        return 0
    ran = [case for case in CASES if available(case)]
    for case in ran:
        run_case(case)
    print(table(ran))
    bad = [case for case in ran if problems(case)]
    print(f"\n{len(ran)} cases: {len(ran) - len(bad)} ended cleanly, {len(bad)} did not")
    for surface in dict.fromkeys(case.surface for case in ran):
        cases = [c for c in ran if c.surface == surface]
        print(f"  {surface}: {len(cases)} cases, {sum(1 for c in cases if problems(c))} did not")
    for case in bad:
        print(f"- {case.name}: {problems(case)}")
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main(sys.argv[1:]))
