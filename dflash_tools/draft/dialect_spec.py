"""What a dialect declares about itself: `DialectSpec`, the one statement of a config format's facts.

Each dialect module (`dflash_tools/dialects/*.py`) exports one `SPEC`; the registry
(`dialects/__init__.py`) lists them. Everything outside `dialects/` that depends on the format
reads the spec instead of branching on a family name: the config-key table (where each scope of
keys sits), geometry (where block_size and every spelling of the layout are declared, the
defaults, what the stored proposal count means), the config checks (where the mask token is
expected, the layer-id convention, causality) and the engine views (the keys that name the
format, what to do when an engine does not read it). docs/adding-a-dialect.md lists the fields.

A `Dialect` is one named variant of a format (`zlab-dflash`, `speculators-dspark`): its JSON
name, the algorithm its drafts are and its default layout; `dialect.spec` is the spec it belongs
to, set once when the spec is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Algorithm(StrEnum):
    DFLASH = "dflash"
    DFLASH2 = "dflash2"
    DSPARK = "dspark"


class Causality(StrEnum):
    """How a format says which draft layers are causal (docs/rules.md, "Decisions")."""

    # z-lab: `is_causal` (or `dflash_config.causal`) sets every layer; absent, sliding layers are
    # causal and full-attention layers bidirectional (vllm/model_executor/models/qwen3_dflash.py).
    IS_CAUSAL = "is_causal"
    # speculators: full-attention layers are always bidirectional; `sliding_window_non_causal`
    # says whether sliding layers are too (speculators/models/dflash/attention.py).
    SLIDING_WINDOW_NON_CAUSAL = "sliding_window_non_causal"


class ProposalCount(StrEnum):
    """What a stored draft-token count (K) means in a format that stores one."""

    NONE = "none"
    # Stored beside block_size (speculators' `proposal_methods[*].speculative_tokens`): it must
    # equal K_max (DFT012); every count equal to B - 1 says bonus-anchor.
    CHECKED = "checked"
    # Stored instead of block_size (Open Spec's `speculative_tokens`): B = K + (not SFA).
    BLOCK_SIZE = "block-size"


# The spellings of the layout declaration. All three mean the same: true is anchor-first (row 0
# predicts anchor + 1), false bonus-anchor (docs/rules.md, "How sample_from_anchor is decided").
LAYOUT_SPELLINGS = ("sample_from_anchor", "query_zero_predicts_next", "shift_label")


@dataclass(frozen=True)
class LayoutKey:
    """One place a format declares the layout: a dotted path ending in one of `LAYOUT_SPELLINGS`.

    `mirror`: a copy the format's engines do not read (z-lab's top level, which vLLM ignores); a
    layout found only in mirrors is inferred, not explicit.
    """

    path: str
    mirror: bool = False

    @property
    def spelling(self) -> str:
        return self.path.rpartition(".")[2]

    @property
    def where(self) -> str:
        """Where the key sits, in words: `in dflash_config`, `at the top level`."""
        parent = self.path.rpartition(".")[0]
        return f"in {parent}" if parent else "at the top level"


@dataclass(frozen=True)
class TrainerRecord:
    """What a config of this format that declares no layout says about how it was trained: what
    the format's trainer wrote at the time (docs/rules.md, "How sample_from_anchor is decided").

    `sample_from_anchor`: the layout such files were trained in; `why`: the history that says so,
    with its source; `version_key`: the key that records the trainer's version (quoted in the
    evidence when the file has it).
    """

    sample_from_anchor: bool
    why: str
    version_key: str | None = None


@dataclass(frozen=True)
class DialectKeys:
    """Where a format keeps its keys. Prefixes end with a dot ("" is the top level).

    `decoder` / `algorithm`: where the decoder fields and the algorithm keys sit, most
    authoritative first (the config-key table checks every one). `block_size`: every path that
    states the block size. `layout`: every declaration of the layout, whatever its spelling,
    the one engines read first. `speculative_tokens`: where a draft-token count is stored
    (`[*]` for one per proposal method), and `proposal_count` what it means.
    """

    decoder: tuple[str, ...]
    algorithm: tuple[str, ...]
    block_size: tuple[str, ...]
    layout: tuple[LayoutKey, ...]
    speculative_tokens: str | None = None
    proposal_count: ProposalCount = ProposalCount.NONE

    def algorithm_path(self, key: str) -> str:
        """Where an algorithm key is expected (the first algorithm location)."""
        return self.algorithm[0] + key

    @property
    def primary_layout(self) -> str:
        return self.layout[0].path

    def is_mirror(self, path: str) -> bool:
        return any(entry.path == path and entry.mirror for entry in self.layout)


@dataclass(frozen=True)
class Dialect:
    """One named variant of a format: its JSON name, its algorithm and the layout it defaults to.

    `algorithm` is what the variant's drafts are (a format that names it in the file, Open Spec's
    `method`, may say otherwise); `sample_from_anchor_default` what a config without any layout
    declaration means (docs/rules.md, "How sample_from_anchor is decided").
    """

    value: str
    algorithm: Algorithm
    sample_from_anchor_default: bool = False
    spec: DialectSpec = field(init=False, compare=False, repr=False)

    @property
    def family(self) -> str:
        return self.spec.family

    def __str__(self) -> str:
        return self.value

    def __deepcopy__(self, memo: dict[int, object]) -> Dialect:
        # A declared constant: copies of a description share it (and its spec).
        return self


# Compared by identity: there is one spec per format, declared in its dialect module.
@dataclass(frozen=True, eq=False)
class DialectSpec:
    """Everything the rest of dflash-tools needs to know about one config format.

    `family` names the format in JSON, the engine tables' `FormatRule`s and `convert --to`;
    `title` in the documentation. `markers`: what detection looks for, in words (DFT002);
    `format_keys`: the keys that name the format, which an engine that does not read it points at
    (DFT070). The rest is read by geometry, the checks and the engine views (see the fields).
    """

    family: str
    title: str
    markers: str
    dialects: tuple[Dialect, ...]
    keys: DialectKeys
    causality: Causality
    format_keys: tuple[str, ...] = ()
    # Whether a config without any layout declaration is malformed (Open Spec's schema requires one).
    layout_required: bool = False
    # What a file without any layout declaration was trained with, by its trainer's history
    # (speculators: a save that predates the flag); None when the format's history says nothing.
    undeclared_layout: TrainerRecord | None = None
    # The algorithms whose trainer once stored the block size in the proposal count by mistake (so
    # that a count equal to B reads either way), with that history in words.
    block_size_in_proposal_count: Mapping[Algorithm, str] = field(default_factory=dict)
    # The block size the format's own loader assumes when the key is absent (speculators: 8).
    block_size_default: int | None = None
    # File layer id = z-lab id + offset (speculators' ids are hidden_states indices: 1).
    layer_id_offset: int = 0
    # The lowest z-lab id a file may name (-1: the embedding output, native DSpark and speculators' aux 0).
    lowest_layer_id: int = 0
    # vLLM turns the format's `sliding_window_non_causal: false` into one causal flag for every
    # layer (vllm/transformers_utils/configs/speculators/algos.py, update_dflash): DFT040.
    one_causal_flag_when_served: bool = False
    # Drafts in this format are trained by speculators, whose sliding window is measured from
    # the anchor (docs/sliding-window.md): DFT055.
    window_trained_from_anchor: bool = False
    # Whether engines pick the loader by `architectures` (false: the engine translates the format).
    loaded_by_architecture: bool = True
    # What to do when an engine reads no config of this format, per algorithm (None: any).
    unread_hints: Mapping[Algorithm | None, str] = field(default_factory=dict)
    # Tensors the format names its own way: the z-lab name -> the format's. Engines load either
    # name (they rename the format's when they load it), so a checkpoint may use both spellings.
    tensor_names: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for dialect in self.dialects:
            # Each Dialect is built inside its spec's declaration and belongs to that spec only.
            object.__setattr__(dialect, "spec", self)

    def __deepcopy__(self, memo: dict[int, object]) -> DialectSpec:
        return self

    def unread_hint(self, algorithm: Algorithm | str | None) -> str:
        """The hint of DFT070 when an engine reads no config of this format."""
        for key, hint in self.unread_hints.items():
            if key is not None and key == algorithm:
                return hint
        return self.unread_hints.get(None, "serve it with an engine that reads this format")
