"""The largest numbers a real model's config holds, by key: the caps on numbers read from a config
before they are used in layer or memory arithmetic.

A config from a stranger may say `num_hidden_layers: 1000000000`. Whatever reads it counts layers
(one layer kind per layer, expected tensors, layer ids derived per draft layer) or multiplies it
into bytes, so an uncapped number takes minutes and gigabytes, or overflows a float. Every
command reads the target's numbers (`draft.target`), the draft's (the dialect readers) and the
numbers the engine views read from a draft config (`serving.config_reads`) through these caps.

Each cap is far above every published model (the largest have 126 layers, a hidden size of
25,600, 128 heads, a head size of 512, a vocabulary of 262,144 and 10 million positions), so a
real config never meets one; a number beyond it is a broken config.
"""

from __future__ import annotations

import math
from typing import Any

# key -> the largest value any real model has, with a wide margin.
MODEL_LIMITS: dict[str, int] = {
    "num_hidden_layers": 1024,  # the dialect readers' cap too (dialects._common.MAX_DECODER_LAYERS)
    "num_target_layers": 1024,
    "hidden_size": 1 << 20,
    "intermediate_size": 1 << 24,
    "vocab_size": 1 << 24,
    "num_attention_heads": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "head_dim": 1 << 16,
    "max_position_embeddings": 1 << 40,
    "sliding_window": 1 << 40,
}


def over_limit(key: str, value: Any) -> str | None:
    """Why `value` of config key `key` (the last part of a dotted path) is beyond what any model
    has ("1000000000, more than any model has (at most 1,024)"), or None when it is within the cap
    or not an integer at all (the readers say what is wrong with those)."""
    limit = MODEL_LIMITS.get(key.rsplit(".", 1)[-1])
    if limit is None or isinstance(value, bool) or not isinstance(value, int) or value <= limit:
        return None
    return f"{shown_integer(value)}, more than any model has (at most {limit:,})"


def shown_integer(value: int) -> str:
    """An integer in a message: its digits up to 30 of them, else how many it has (Python will not
    even write one of more than 4,300 digits as text)."""
    if abs(value) < 10**30:
        return str(value)
    return f"an integer of {math.floor(math.log10(abs(value))) + 1:,} digits"


def within_limit(key: str, value: Any) -> Any:
    """`value`, or None when it is an integer beyond the cap of `key`: for the readers that treat a
    number they cannot use as not stated (an engine view's fallback count of layers)."""
    return None if over_limit(key, value) else value
