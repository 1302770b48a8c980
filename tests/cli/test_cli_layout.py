"""Human output under a real pseudo-terminal at 80 and 120 columns: nothing a user reads or copies
is split.

Each command runs in a child process whose stdout is a pty sized with TIOCSWINSZ (no COLUMNS in
the environment), as in a terminal; colour stays on and is stripped here. The tokens that must
appear whole on one line come from the same command's JSON document, not from constants: every
source name, every number the summary shows, every finding code and every fix command. A command
line wider than the terminal continues on the next line after ` \\`, between two words: joined
back as a shell joins them (`shell_joined`), it is the command, byte for byte.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

import pytest

from dflash_tools.cli._layout import hint_commands
from dflash_tools.engine_rules import ENGINE_RULES
from tests.torch_extra import require_torch_extra

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
WIDTHS = (80, 120)
SEVERAL = [
    "example:zlab-dflash2",
    "example:zlab-dflash2-anchor-first",
    "example:speculators-dflash-legacy",
    "example:dspark-native",
]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "DFLASH_TOOLS_FORMAT")}
    env.update(TERM="xterm-256color", HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8")
    return env


def run_in_pty(args: list[str], columns: int, cwd: Path) -> tuple[int, list[str]]:
    """Run `dflash-tools ARGS` with stdout on a pty of `columns` columns; the lines it printed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "dflash_tools", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=child_env(),
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            process.kill()
            raise AssertionError(f"no output for 120 s from {args}")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = process.wait(timeout=120)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8"))
    return code, text.replace("\r\n", "\n").split("\n")


def json_of(args: list[str], cwd: Path) -> object:
    result = subprocess.run(
        [sys.executable, "-m", "dflash_tools", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env(),
        timeout=120,
    )
    return json.loads(result.stdout)


def shell_joined(lines: list[str]) -> list[str]:
    """The lines as a shell reads them: one ending in ` \\` goes on with the next, whose indent is
    a word separator only; commented-out command lines (`# ...`) are joined the same way."""
    out: list[str] = []
    pending: str | None = None
    for line in lines:
        if pending is not None:
            continued = line[2:] if pending.startswith("# ") and line.startswith("# ") else line
            line = pending + " " + continued.strip()
            pending = None
        if line.endswith(" \\"):
            pending = line[:-2]
            continue
        out.append(line)
    if pending is not None:
        out.append(pending)
    return out


def assert_whole(lines: list[str], tokens: set[str], columns: int) -> None:
    missing = sorted(token for token in tokens if not any(token in line for line in lines))
    assert not missing, f"split or missing at {columns} columns: {missing}\n" + "\n".join(lines)


def one_word(text: str) -> bool:
    """Whether `text` is a single word to a shell (a quoted JSON with spaces inside is one)."""
    try:
        return len(shlex.split(text)) == 1
    except ValueError:
        return " " not in text


def assert_fits(lines: list[str], columns: int, allowed: set[str]) -> None:
    """Only a single unbreakable item (a fix command, a path, one long word) may be wider."""
    for line in lines:
        if len(line) <= columns:
            continue
        stripped = line.strip().removeprefix("# ").removesuffix(" \\").strip()
        assert stripped in allowed or one_word(stripped) or any(stripped.endswith(a) for a in allowed), (
            f"{len(line)} > {columns}: {line!r}"
        )


def assert_fixes_carried(lines: list[str], fixes: set[str]) -> set[str]:
    """Every hint's command is carried whole by a printed line of its own (converts of one source
    into one folder share one line with the union of their flags), continued with ` \\` where it is
    wider than the terminal; returns those lines, joined as a shell joins them."""
    fix_lines = {line for line in shell_joined(lines) if line.startswith("dflash-tools ")}
    for command in fixes:
        words = command.split()
        assert any(line.split()[:5] == words[:5] and set(words) <= set(line.split()) for line in fix_lines), (
            f"{command!r} is not carried by a line of its own:\n" + "\n".join(lines)
        )
    return fix_lines


def finding_tokens(report: dict[str, object]) -> tuple[set[str], set[str]]:
    findings = report["findings"]
    assert isinstance(findings, list)
    codes = {str(f["code"]) for f in findings}
    fixes = {command for f in findings for command in hint_commands(str(f["hint"]))}
    return codes, fixes


@pytest.mark.parametrize("columns", WIDTHS)
def test_several_sources(columns: int, tmp_path: Path) -> None:
    code, lines = run_in_pty(["inspect", *SEVERAL], columns, tmp_path)
    assert code == 0  # warnings only: the legacy example's DFT012 rests on an inferred layout
    reports = json_of(["inspect", *SEVERAL], tmp_path)
    assert isinstance(reports, list)
    tokens = set(SEVERAL)
    for report in reports:
        geometry = report["geometry"]
        tokens |= {f"{report['tensors']['parameters']:,}", report["dialect"], geometry["layout"]}
        # The summary names the codes that need action; info codes stay in each source's own report.
        findings = report["findings"]
        assert isinstance(findings, list)
        tokens |= {str(f["code"]) for f in findings if f["severity"] != "info"}
    assert_whole(lines, tokens, columns)
    assert_fits(lines, columns, set())
    if columns == 120:  # wide enough for the table: one row per source
        rows = [line for line in lines if line.startswith("example:")]
        assert len(rows) == 4 and all("DFT0" in row for row in rows if "legacy" in row)


@pytest.mark.parametrize("columns", WIDTHS)
# dspark-native's only fix was writing the layout its dialect assumes: no fix line writes a layout
# that no evidence supports (issue 32), so it has none now.
@pytest.mark.parametrize("source", ["example:speculators-dflash-legacy"])
def test_one_source_with_fixes(columns: int, source: str, tmp_path: Path) -> None:
    code, lines = run_in_pty(["inspect", source], columns, tmp_path)
    report = json_of(["inspect", source], tmp_path)
    assert isinstance(report, dict)
    codes, fixes = finding_tokens(report)
    assert fixes, "this example is chosen because its findings carry a fix command"
    decoder = report["model"]
    tokens = {source, *codes, f"vocab {decoder['vocab_size']}", f"hidden {decoder['hidden_size']}"}
    tokens.add(f"{report['tensors']['parameters']:,} params")
    assert_whole(lines, tokens, columns)
    # Each fix command is a line of its own, whole, with nothing around it to copy by mistake;
    # converts of one source into one folder stand as one line carrying every hint's flags; every
    # line of it fits the terminal (the command continues with ` \\` between words).
    assert_fixes_carried(lines, fixes)
    assert_fits(lines, columns, set())
    # The verdict is the first line and the last one.
    verdict = "OK" if report["ok"] else "FAIL"
    non_empty = [line for line in lines if line.strip()]
    assert non_empty[0].startswith(verdict + ":") and non_empty[-1].startswith(verdict + ":")
    assert code == (0 if report["ok"] else 1)
    # Not a bordered table cell anywhere.
    assert not any("│" in line for line in lines)


@pytest.mark.parametrize("columns", WIDTHS)
def test_smoke_test_dry_run_plan(columns: int, tmp_path: Path) -> None:
    args = [
        "smoke-test",
        "--dry-run",
        "--runtime",
        "torch",
        "-t",
        "example:engine-demo/target",
        "-d",
        "example:engine-demo/zlab-dflash2",
        "-d",
        "example:engine-demo/zlab-dflash-anchor-first",
    ]
    code, lines = run_in_pty(args, columns, tmp_path)
    assert code == 0
    document = json_of(args, tmp_path)
    assert isinstance(document, dict)
    tokens = set()
    for draft in document["drafts"]:
        for run in draft["runs"]:
            tokens |= {run["label"], run["layout"]}
    assert_whole(lines, tokens, columns)
    assert_fits(lines, columns, set())


@pytest.mark.parametrize("columns", WIDTHS)
def test_plan_launch_lines_and_numbers(columns: int, tmp_path: Path) -> None:
    """Every launch line whole on a line of its own (the JSON's `launch_command`), every number and
    finding code whole; only those lines may be wider than the terminal."""
    args = [
        "plan",
        "-t",
        "example:vllm-cpu-demo/target",
        "-d",
        "example:vllm-cpu-demo/zlab-dflash",
        "-d",
        "example:vllm-cpu-demo/zlab-dflash-anchor-first",
        "--gpu-memory",
        "1",
        "--max-num-seqs",
        "300",
        "--max-num-batched-tokens",
        "2000",
    ]
    code, lines = run_in_pty(args, columns, tmp_path)
    document = json_of(args, tmp_path)
    assert isinstance(document, dict)
    assert code == document["exit_code"] == 1
    commands: list[str] = []
    tokens: set[str] = set()
    for plan in document["plans"]:
        memory = plan["memory"]
        tokens |= {plan["draft"]["source"], f"{memory['kv_tokens']:,} tokens", f"{memory['max_sequences']:,} requests"}
        for engine in plan["engines"].values():
            if engine["launch_command"]:
                commands.append(engine["launch_command"])
            tokens |= {f["code"] for f in engine["findings"]}
            for finding in engine["findings"]:
                tokens |= set(re.findall(r"--[\w-]+ \d+", finding["hint"]))
    # Every vLLM release for each draft, SGLang's for the bonus one only.
    vllm_releases = sum(rules.engine == "vllm" for rules in ENGINE_RULES.values())
    assert len(commands) == 2 * vllm_releases + sum(rules.engine == "sglang" for rules in ENGINE_RULES.values())
    programs = ("vllm ", "python ", "DFLASH_TOOLS_", "VLLM_")
    joined = shell_joined(lines)
    runnable = [line for line in joined if line.startswith(programs)]
    commented = [line[2:] for line in joined if line.startswith(tuple("# " + p for p in programs))]
    # Every launch line is printed whole, in order: runnable, or commented out where the plan or
    # its engine has an error (no pasteable line then).
    assert sorted(runnable + commented) == sorted(commands), "\n".join(lines)
    expected_commented = [
        engine["launch_command"]
        for plan in document["plans"]
        for engine in plan["engines"].values()
        if engine["launch_command"]
        and (
            any(f["severity"] == "error" for f in plan["findings"])
            or any(f["severity"] == "error" for f in engine["findings"])
        )
    ]
    assert sorted(commented) == sorted(expected_commented), "\n".join(lines)
    assert_whole(lines, tokens, columns)
    assert_fits(lines, columns, set())


@pytest.mark.parametrize("columns", WIDTHS)
def test_smoke_test_results_and_log_paths(columns: int, tmp_path: Path) -> None:
    require_torch_extra()
    work = tmp_path / "work"
    args = [
        "smoke-test",
        "--runtime",
        "torch",
        "--device",
        "cpu",
        "-t",
        "example:engine-demo/target",
        "-d",
        "example:engine-demo/zlab-dflash2",
        "--num-prompts",
        "1",
        "--max-tokens",
        "8",
        "--output-dir",
        str(work),
    ]
    code, lines = run_in_pty(args, columns, tmp_path)
    assert code == 0, "\n".join(lines)
    logs = {str(p) for p in work.glob("*.log")}
    assert logs
    # The bundled drafts are trained: the number is the run's own (its result file), not a constant.
    (result,) = (json.loads(p.read_text(encoding="utf-8")) for p in work.glob("*.result.json"))
    length = f"{result['mean_acceptance_length']:.2f}"
    tokens = {*logs, "example:engine-demo/zlab-dflash2", f"mean acceptance length {length}"}
    if columns == 120:
        tokens.discard(f"mean acceptance length {length}")  # a table column there
        tokens.add(length)
    assert_whole(lines, tokens, columns)
    assert_fits(lines, columns, logs | {str(work)})


@pytest.mark.parametrize("columns", WIDTHS)
def test_convert_output(columns: int, tmp_path: Path) -> None:
    code, lines = run_in_pty(
        ["convert", "example:speculators-dflash-legacy", "-o", "./legacy-fixed"], columns, tmp_path
    )
    assert code == 0
    assert_whole(lines, {"speculators_config.proposal_methods[0].speculative_tokens", "model.safetensors"}, columns)
    assert_fits(lines, columns, {str(tmp_path / "legacy-fixed")})


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "example:speculators-dflash-legacy"],
        ["inspect", *SEVERAL],
        ["convert", "example:speculators-dflash-legacy", "-o", "out"],
        ["smoke-test", "--dry-run", "-t", "example:engine-demo/target", "-d", "example:engine-demo/zlab-dflash2"],
        ["plan", "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash", "--gpu-memory", "1"],
    ],
)
def test_piped_output_is_not_padded(args: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dflash_tools", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env(),
        timeout=120,
    )
    lines = result.stdout.splitlines()
    assert lines and not [line for line in lines if line.endswith(" ")]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_80_columns_shows_fix_commands_whole(tmp_path: Path) -> None:
    """The same check in tmux, as a user would look at it: join wrapped lines (-J) and find each
    fix command and source whole."""
    session = f"dflash-layout-{os.getpid()}"
    env = child_env()
    # A Unix socket's path must fit in 108 bytes; pytest's tmp_path under a long TMPDIR does not.
    socket_dir = Path(tempfile.mkdtemp(prefix="dft-tmux-", dir="/tmp"))
    socket = socket_dir / "tmux.sock"
    command = f"{sys.executable} -m dflash_tools inspect example:speculators-dflash-legacy; sleep 30"
    try:  # from the session start on: the socket folder is removed whatever fails
        subprocess.run(
            [
                "tmux",
                "-S",
                str(socket),
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "80",
                "-y",
                "60",
                "-c",
                str(tmp_path),
                command,
            ],
            check=True,
            env=env,
            timeout=30,
        )
        screen = ""
        for _ in range(100):
            screen = subprocess.run(
                ["tmux", "-S", str(socket), "capture-pane", "-p", "-J", "-t", session],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            if re.search(r"^FAIL:.*\n(?:.*\n)*FAIL:", screen, flags=re.M):
                break
            subprocess.run(["sleep", "0.1"], check=True)
        report = json_of(["inspect", "example:speculators-dflash-legacy"], tmp_path)
        assert isinstance(report, dict)
        codes, fixes = finding_tokens(report)
        lines = screen.splitlines()
        assert_fixes_carried([line.rstrip() for line in lines], fixes)
        assert_whole(lines, {*codes, "example:speculators-dflash-legacy", "82,368"}, 80)
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], timeout=30, check=False)
        shutil.rmtree(socket_dir, ignore_errors=True)


def test_a_path_longer_than_the_terminal_stands_whole_on_its_own_line(tmp_path: Path) -> None:
    # CI and users check out into deep folders: the location must never share a line it overflows.
    import dflash_tools

    example = Path(dflash_tools.__file__).parent / "examples" / "speculators-dflash-legacy"
    deep = tmp_path / ("a-folder-name-long-enough-to-overflow-eighty-columns-" * 2) / "draft"
    shutil.copytree(example, deep)
    _, lines = run_in_pty(["inspect", str(deep)], 80, tmp_path)
    report = json_of(["inspect", str(deep)], tmp_path)
    assert isinstance(report, dict)
    assert str(deep) in lines, "the path is not a line of its own"
    # The fix command names the folder too: that word on a line of its own, the command whole.
    assert_fixes_carried(lines, finding_tokens(report)[1])
    assert_fits(lines, 80, set())


@pytest.mark.parametrize("columns", WIDTHS)
def test_a_long_verdict_wraps_at_words_without_losing_or_repeating_any(columns: int) -> None:
    # A vLLM refusal is a long verdict; its first line once kept two characters of the next word.
    import io

    from rich.console import Console
    from rich.text import Text

    from dflash_tools.cli.smoke_test_render import _print_wrapped

    reason = (
        "vLLM refused the anchor-first draft: vLLM did not start: ValidationError: Model Runner V1 "
        "does not support: anchor-sampling DFlash drafts (sample_from_anchor=true): this runner would "
        "draft them in the bonus-anchor layout"
    )
    line = Text.assemble(("FAIL", "bold red"), f" example:vllm-cpu-demo/zlab-dflash-anchor-first: {reason}")
    buffer = io.StringIO()
    _print_wrapped(Console(file=buffer, width=columns, no_color=True), line, columns)
    printed = buffer.getvalue().splitlines()
    assert len(printed) > 1 and all(len(row) <= columns for row in printed)
    assert " ".join(row.strip() for row in printed).split() == line.plain.split()
