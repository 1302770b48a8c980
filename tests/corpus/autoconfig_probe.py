"""What transformers' `AutoConfig.from_pretrained` makes of each corpus file (child process).

Run as `python autoconfig_probe.py CORPUS_DIR` with the transformers release under test first on
the path (the vLLM tier environments pin theirs; the SGLang tier puts SGLang's pin, 5.19.0, in
front with PYTHONPATH). It imports transformers and nothing else of ours or of an engine, because
an engine registers its own config classes with AutoConfig when it is imported. Prints one JSON
document: the transformers version and, per corpus folder ("<class>/<folder>"), either the config
class that loads the file and the defaults it fills that change what a draft computes, or the
error AutoConfig raises (tests/corpus/README.md, "What each engine does").
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# The keys whose class defaults change the draft an engine builds (issue 32, step b): the
# attention kind and window of each layer, the head width, RoPE, and whether the LM head is tied.
FILLED_KEYS = (
    "layer_types",
    "sliding_window",
    "use_sliding_window",
    "head_dim",
    "rope_parameters",
    "tie_word_embeddings",
)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def probe(folder: Path) -> dict[str, Any]:
    from transformers import AutoConfig

    written = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as exc:  # the engine's outcome is this error, whatever its type
        return {"outcome": "wont-load", "error": first_line(exc).replace(str(folder), "<draft>")}
    filled = {}
    for key in FILLED_KEYS:
        try:
            value = getattr(config, key, None)
        except Exception as exc:  # a heterogeneous (per-layer) config refuses a global read
            value = {"unreadable": first_line(exc)[:80]}
        if key not in written and value is not None:
            filled[key] = jsonable(value)
    return {"outcome": "loads", "config_class": type(config).__name__, "filled": filled}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    corpus = Path(sys.argv[1])
    results = {
        str(path.parent.relative_to(corpus)): probe(path.parent) for path in sorted(corpus.glob("*/*/config.json"))
    }
    print(json.dumps({"transformers": transformers.__version__, "entries": results}))


if __name__ == "__main__":
    main()
