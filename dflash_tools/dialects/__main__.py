"""`python -m dflash_tools.dialects > docs/config-keys.md`: the config-key table for the registered dialects."""

from __future__ import annotations

import sys

from dflash_tools.dialects import SPECS
from dflash_tools.draft.config_keys import render_markdown

if __name__ == "__main__":  # pragma: no cover - documentation generator
    sys.stdout.write(render_markdown(SPECS))
