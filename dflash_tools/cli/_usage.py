"""A command line the parser rejected, said in one line with a next step (not click's usage block).

click prints four lines (`Usage: ...`, `Try ... for help.`, a blank line, `Error: ...`) and names
neither the value it refused nor why a pasted command fails: a fix printed with a placeholder
(`--block-size N`) and pasted as is said only "Input should be a valid integer". Here the message
names the option and the value given, and a placeholder is called one. Imported on a usage error
only; nothing here imports rich.
"""

from __future__ import annotations

from typing import Any

# Words printed commands use for a value the user must choose (docs/inspect.md, "Fix commands").
PLACEHOLDERS = ("N", "K", "SRC", "OUT", "REPO", "PATH", "TARGET", "GIB")


def given_value(param: Any, argv: list[str]) -> str | None:
    """The value the command line gave option `param` (`--opt VALUE` or `--opt=VALUE`), if any."""
    names = [name for name in getattr(param, "opts", []) + getattr(param, "secondary_opts", []) if name]
    for index, word in enumerate(argv):
        for name in names:
            if word == name and index + 1 < len(argv):
                return argv[index + 1]
            if word.startswith(name + "=") and name.startswith("--"):
                return word[len(name) + 1 :]
    return None


def usage_error(exc: Exception, argv: list[str]) -> tuple[str, str]:
    """(message, hint) for a command line the parser rejected."""
    format_message = getattr(exc, "format_message", None)
    message = format_message() if callable(format_message) else str(exc)
    # pydantic's wording of a refused value: "Value error, 'x' is not one of ..."
    message = " ".join(message.replace("Value error, ", "").split())
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", None) or "dflash-tools"
    hint = f"see `{command} --help`"
    param = getattr(exc, "param", None)
    value = given_value(param, argv) if param is not None else None
    if value is not None and repr(value) not in message and value not in message.split():
        message = f"{message} (given: {value!r})"
    placeholder = next((word for word in argv if word in PLACEHOLDERS), None) if value is None else None
    if value in PLACEHOLDERS or placeholder is not None:
        word = value if value in PLACEHOLDERS else placeholder
        opts = getattr(param, "opts", None) or []
        option = f" for {opts[0]}" if value is not None and opts else ""
        hint = (
            f"{word} is a placeholder from a printed command: replace it with the value to use{option}; "
            f"see `{command} --help`"
        )
    return message, hint
