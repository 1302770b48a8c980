"""The shape of an engine table: what one engine release reads, defaults, refuses and sizes.

Plain frozen dataclasses (not pydantic): the tables are constants read in every vLLM process by
the plugin and on every `inspect --engine`, and they are rendered into `docs/engines.md`.

Vocabulary. A *path* is how the engine serves a draft: SGLang's `--speculative-algorithm`
(`DFLASH`, `DSPARK`) or vLLM's `method` (`dflash`, `dspark`). A *location* is a dotted key path
in the draft's config.json as the dialect family writes it (`dflash_config.block_size`, the
top-level `block_size`); an engine tries the locations of a key in order and the first present
wins. Every rule cites the engine file (and function) it comes from, relative to the root of the
released wheel, so that a test can find it there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dflash_tools.engine_rules.config_loading import ConfigLoading


class Layout(StrEnum):
    """Which query slot predicts what (docs/inspect.md, "Geometry")."""

    BONUS = "bonus"  # slot 0 is the last verified token; K + 1 query positions for K drafts
    ANCHOR_FIRST = "anchor-first"  # slot j predicts anchor + j + 1; K query positions


class Outcome(StrEnum):
    """What an engine release does with drafts of one algorithm in one layout."""

    SERVED = "served"  # as trained, by the engine itself
    SERVED_WITH_PLUGIN = "served-with-plugin"  # as trained, only with the dflash-tools vLLM plugin
    REFUSED = "refused"  # the engine fails loudly (at start-up or when it builds the drafter)
    MISALIGNED = "misaligned"  # served without an error in the wrong layout: acceptance collapses
    UNSUPPORTED = "unsupported"  # the engine has no loader for it at all
    SERVED_WRONG = "served-wrong"  # served without an error, but not as trained (keys ignored, weights dropped)
    # The release has a loader for the draft's architecture, but dflash-tools reads no config of it:
    # nothing about how it is served is checked (DFT008).
    UNCHECKED = "unchecked"
    # The engine cannot load the config at all: config resolution raises before any draft code
    # runs (an unknown or missing model_type; `config_loading`, DFT078).
    WONT_LOAD = "wont-load"


@dataclass(frozen=True)
class LayoutRule:
    """The engine's outcome for one algorithm ("dflash", "dflash2", "dspark") in one layout.

    `hint`: what a user does instead when the release does not serve such drafts as trained
    (empty: the generic advice, write the layout where the engine reads it).
    """

    algorithm: str
    layout: Layout
    outcome: Outcome
    cite: str
    note: str = ""
    hint: str = ""


@dataclass(frozen=True)
class QueryCountSite:
    """A place where the engine sizes draft work from the per-request query count.

    `stock` is what the release computes there; `plugin` what the dflash-tools plugin makes it
    compute for an anchor-first draft (empty for an engine the plugin does not patch).
    """

    name: str
    cite: str  # engine file and function, e.g. "vllm/config/vllm.py: VllmConfig.num_lookahead_tokens"
    stock: str
    plugin: str = ""


class WhenMissing(StrEnum):
    """What an engine does when none of a key's locations is present."""

    DEFAULT = "default"  # uses `default`
    DERIVED = "derived"  # computes a value from other keys (how: the rule's note)
    LOOKED_UP = "looked-up"  # looks it up elsewhere at start-up (the target's tokenizer)
    REFUSED = "refused"  # fails at start-up
    NOT_READ = "not read"  # the path never reads the key (`locations` is empty)


@dataclass(frozen=True)
class KeyRead:
    """One config key an engine path reads: where (in precedence order), the default, the cite.

    `shift` is added to a value read at a location to bring layer ids into the z-lab convention
    (0-based index of the target layer whose output is captured): a `hidden_states` index such as
    speculators' `aux_hidden_state_layer_ids` is one more than the z-lab id.
    """

    key: str
    path: str
    locations: tuple[str, ...]
    cite: str
    default: Any = None
    when_missing: WhenMissing = WhenMissing.DEFAULT
    note: str = ""
    shift: tuple[tuple[str, int], ...] = ()
    # A rule for configs of one dialect family only (the engine translates that format first);
    # it takes precedence over the rule for every family (None).
    family: str | None = None
    # The engine reads a null or empty value as absent and tries the next location (vLLM's
    # `x or ...` and `if not x:` chains); else a location present with null stops the search, as
    # `dict.get(key, fallback)` does (SGLang).
    empty_is_absent: bool = False

    def shift_for(self, location: str) -> int:
        return dict(self.shift).get(location, 0)


@dataclass(frozen=True)
class FormatRule:
    """Whether the release reads configs of one dialect family ("zlab", "speculators", ...)."""

    family: str
    read: bool
    cite: str
    note: str = ""


@dataclass(frozen=True)
class Route:
    """Drafts of one algorithm are served on `path`; `architectures` lists the `architectures[0]`
    values the release has a loader for (a speculators config is translated by the engine, which
    writes its own architecture, so only z-lab and native forms are checked against the list)."""

    algorithm: str
    path: str
    architectures: tuple[str, ...]
    cite: str


@dataclass(frozen=True)
class Architecture:
    """One DFlash-family `architectures[0]` value the release registers a loader for.

    `algorithm` is what its drafts are ("dflash", "dflash2", "dspark"; the route gives the path);
    `loader` the model class the release builds for it, as its registry names it; `cite` the file
    (and the name in it) that registers it, which the tiers compare with the release's own
    registry. `family`: the dialect family dflash-tools reads such configs with (None: no dialect
    reads them, and inspect says so by name, DFT008). `note`: what the release's class reads or
    does beyond the shapes dflash-tools knows; for an architecture no dialect reads, what goes
    unchecked.
    """

    name: str
    algorithm: str
    loader: str
    cite: str
    family: str | None = None
    note: str = ""


@dataclass(frozen=True)
class FeatureRule:
    """What the release does with a draft that uses one config feature (`dialects.features`).

    `locations`: where the release reads the feature's key, first found wins (empty: the release
    does not implement the feature). A draft that states the feature where the release reads it
    gets `outcome`; one that states it only elsewhere, or that misses what `requires` names (a
    condition `dialects.features.CONDITIONS` implements by name), gets `ignored`: what the release
    does with the weights and math it does not build. `path`: the engine path the rule is for
    (None: every path).
    """

    feature: str
    locations: tuple[str, ...]
    outcome: Outcome
    cite: str
    note: str = ""
    ignored: Outcome = Outcome.SERVED_WRONG
    requires: str = ""
    path: str | None = None
    # The outcome depends on the target's model class, which the draft does not name: the engine
    # column warns (DFT075) instead of deciding the outcome.
    target_dependent: bool = False


@dataclass(frozen=True)
class Check:
    """A rule the engine enforces when it loads a draft, stated in our words.

    `name` is stable: `serving.engine_view` implements each name once and a test keeps every
    table's names implemented. `outcome` is what breaking the rule leads to.
    """

    name: str
    path: str
    keys: tuple[str, ...]
    rule: str
    cite: str
    outcome: Outcome = Outcome.REFUSED


@dataclass(frozen=True)
class LaunchFlag:
    """One piece of the launch line: `role` says what `serving.launch` puts there.

    Roles: "program" (the command), "target", "algorithm", "draft", "draft-revision",
    "draft-tokens" (SGLang DFLASH: the verify window), "dspark-block-size" (SGLang DSPARK: the
    number of drafts), "speculative-config" (vLLM: the JSON with method, model and K), "env"
    (an environment variable, `name=value`). The serving plan's settings, each a flag with a
    value: "target-revision", "max-num-seqs", "max-num-batched-tokens", "max-model-len",
    "tensor-parallel-size", "decode-context-parallel-size", "dtype", "kv-cache-dtype",
    "gpu-memory-utilization"; and "draft-dcp" (vLLM: a key of the speculative-config JSON).
    """

    role: str
    name: str
    meaning: str
    cite: str


class DraftTrait(StrEnum):
    """What about a draft makes one model runner of a release the only one that serves it."""

    EVERY = "every"  # every draft on the path
    DFLASH2 = "dflash2"  # a DFlash2 draft (its candidate selector)
    ANCHOR_FIRST = "anchor-first"  # served in the anchor-first layout
    MIXED_ATTENTION = "mixed-attention"  # some decoder layers sliding-window, the others not


@dataclass(frozen=True)
class RunnerRule:
    """Drafts on `path` with `trait` that only the release's V2 model runner serves as trained.

    Only a release that still ships the V1 runner has such rules; its launch line then selects V2
    with the table's `env` flags. `reason` says what V1 does with them; `v1_refuses` is the phrase
    V1 refuses them with, where it refuses them at start-up (the tiers find it in the cited
    function), empty where V1 drafts them wrongly without an error.
    """

    path: str
    trait: DraftTrait
    reason: str
    cite: str
    v1_refuses: str = ""


@dataclass(frozen=True)
class ServingDefault:
    """A launch setting the release picks when the launch line leaves it out.

    `setting` is the setting's name in the serving plan (`max_num_seqs`, `max_num_batched_tokens`,
    `gpu_memory_utilization`, `max_running_requests`). A default that depends on the GPU applies
    from `min_gpu_memory_gib` of memory per GPU up (the largest threshold reached wins); `note`
    says what else the release looks at. `paths`: the speculative paths it applies to (empty:
    every path).
    """

    setting: str
    value: int | float
    cite: str
    min_gpu_memory_gib: float = 0.0
    paths: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class ServingRule:
    """A rule the release enforces on the launch settings of a plan, stated in our words.

    `name` is stable: the serving plan (`plan.rules`) implements each name once and a test keeps
    every table's names implemented. `broken` says what the release does when the rule is broken.
    """

    name: str
    rule: str
    broken: str
    cite: str


@dataclass(frozen=True)
class EngineRules:
    """One engine release: the rules `inspect --engine`, `convert`, the plan and the plugin share."""

    engine: str  # "vllm" | "sglang"
    version: str
    released: str  # the date the release was published (PyPI upload)
    summary: str
    layouts: tuple[LayoutRule, ...] = ()
    query_count_sites: tuple[QueryCountSite, ...] = ()
    # vLLM: the release still ships the V1 model runner (removed in 0.34.0).
    has_v1_runner: bool = False
    # vLLM with a V1 runner: the drafts only its V2 runner serves (the launch line then sets `env`).
    v2_only: tuple[RunnerRule, ...] = ()
    # vLLM: the module of the dflash-tools plugin that patches this release (dotted, imported only
    # by the plugin); empty where the plugin does not patch it.
    plugin_module: str = ""
    # How the plugin does it on this release, in a sentence (docs/tier-vllm.md explains why).
    plugin_route: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Where the dflash-tools engine view is built from (added with the SGLang table).
    formats: tuple[FormatRule, ...] = ()
    routes: tuple[Route, ...] = ()
    # Every DFlash-family architecture the release registers (the tiers keep the list complete).
    architectures: tuple[Architecture, ...] = ()
    # What the release does with each config feature engines treat differently.
    features: tuple[FeatureRule, ...] = ()
    keys: tuple[KeyRead, ...] = ()
    checks: tuple[Check, ...] = ()
    launch: tuple[LaunchFlag, ...] = ()
    # What the serving plan needs: the settings the release defaults, the rules on those settings.
    serving_defaults: tuple[ServingDefault, ...] = ()
    serving_rules: tuple[ServingRule, ...] = ()
    # The target layers the release captures for a draft whose config names none, as z-lab ids,
    # from (target layers, draft layers); None where it has no rule for that.
    derive_target_layer_ids: Callable[[int, int], list[int]] | None = None
    # The release captures the ids sorted and without duplicates, whatever order the config uses.
    captures_sorted: bool = False
    # How the release loads a draft's config.json before any of the rules above apply: its config
    # registries, the transformers it pins (`config_loading.ConfigLoading`).
    config_loading: ConfigLoading | None = None

    @property
    def plugin_supported(self) -> bool:
        """vLLM: the dflash-tools plugin applies the anchor-sampling change on this release."""
        return bool(self.plugin_module)

    @property
    def spec(self) -> str:
        """`vllm==0.34.0`: how the release is named on the command line and in JSON."""
        return f"{self.engine}=={self.version}"

    def outcome(self, algorithm: str, layout: Layout) -> LayoutRule | None:
        for rule in self.layouts:
            if rule.algorithm == algorithm and rule.layout is layout:
                return rule
        return None

    @property
    def format_rules(self) -> tuple[FormatRule, ...]:
        """`formats`, and a format that its own architecture names (the Muse Glimmer assistant
        format): read wherever an architecture row of that family is registered, citing the row.
        Such a format needs no row of its own: a dialect identified by its architecture is added
        to a release through its architecture rows only (docs/adding-a-dialect.md)."""
        explicit = {rule.family for rule in self.formats}
        derived: dict[str, FormatRule] = {}
        for row in self.architectures:
            if row.family and row.family not in explicit and row.family not in derived:
                derived[row.family] = FormatRule(row.family, True, row.cite, row.note)
        return (*self.formats, *derived.values())

    def reads_format(self, family: str) -> FormatRule | None:
        return next((rule for rule in self.format_rules if rule.family == family), None)

    def route(self, algorithm: str) -> Route | None:
        return next((route for route in self.routes if route.algorithm == algorithm), None)

    def architecture(self, name: str | None) -> Architecture | None:
        return next((row for row in self.architectures if row.name == name), None)

    def feature(self, feature: str, path: str | None) -> FeatureRule | None:
        """The rule for `feature` on `path` (a rule for that path wins over one for every path)."""
        rules = [rule for rule in self.features if rule.feature == feature and rule.path in (path, None)]
        rules.sort(key=lambda rule: rule.path is None)
        return rules[0] if rules else None

    def key(self, key: str, path: str, family: str | None = None) -> KeyRead | None:
        """How `path` reads `key`; a rule for the config's dialect family wins over the general one."""
        candidates = [rule for rule in self.keys if rule.key == key and rule.path == path]
        specific = [rule for rule in candidates if family is not None and rule.family == family]
        general = [rule for rule in candidates if rule.family is None]
        found = specific or general
        return found[0] if found else None

    def checks_on(self, path: str) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.path == path)

    def flag(self, role: str) -> LaunchFlag | None:
        return next((flag for flag in self.launch if flag.role == role), None)

    def flags(self, role: str) -> tuple[LaunchFlag, ...]:
        return tuple(flag for flag in self.launch if flag.role == role)

    def serving_default(
        self, setting: str, gpu_memory_gib: float | None = None, path: str | None = None
    ) -> ServingDefault | None:
        """The release's default for `setting` on a GPU of `gpu_memory_gib` (None: the smallest
        tier) when serving on `path`; None when the table has none."""
        memory = 0.0 if gpu_memory_gib is None else gpu_memory_gib
        candidates = [
            default
            for default in self.serving_defaults
            if default.setting == setting
            and default.min_gpu_memory_gib <= memory
            and (not default.paths or path is None or path in default.paths)
        ]
        return max(candidates, key=lambda default: default.min_gpu_memory_gib, default=None)

    def serving_rule(self, name: str) -> ServingRule | None:
        return next((rule for rule in self.serving_rules if rule.name == name), None)

    def cites(self) -> list[str]:
        """Every citation in the table (the tiers check each against the released files)."""
        items: list[Any] = [
            *self.layouts,
            *self.formats,
            *self.routes,
            *self.architectures,
            *self.features,
            *self.keys,
            *self.checks,
            *self.launch,
            *self.query_count_sites,
            *self.serving_defaults,
            *self.serving_rules,
            *self.v2_only,
        ]
        loading = self.config_loading.cites() if self.config_loading is not None else []
        return [*(item.cite for item in items), *loading]


def routes_of(architectures: tuple[Architecture, ...], paths: dict[str, str]) -> tuple[Route, ...]:
    """The release's routes, one per algorithm: the architectures registered for it, citing the
    files that register them."""
    out = []
    for algorithm, path in paths.items():
        rows = [row for row in architectures if row.algorithm == algorithm]
        cite = "; ".join(dict.fromkeys(row.cite for row in rows))
        out.append(Route(algorithm, path, tuple(row.name for row in rows), cite))
    return tuple(out)
