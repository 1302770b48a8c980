"""`python -m dflash_tools.testing [FOLDER]`: regenerate the bundled examples (default: dflash_tools/examples)."""

from __future__ import annotations

import sys
from pathlib import Path

from dflash_tools.testing import write_examples

if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    for path in write_examples(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "examples")):
        print(path)
