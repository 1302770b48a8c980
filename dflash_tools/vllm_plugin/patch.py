"""The anchor-sampling change for stock vLLM, applied at runtime (docs/tier-vllm.md): the wrappers
and the installers every release shares. Which sites a release wraps, and with what, is that
release's module in `releases/` (`apply`).

An anchor-first DFlash / DFlash2 draft (`dflash_config.sample_from_anchor: true`) predicts from
every one of its K query slots, so the V2 runner must build K query positions per request, not
1 + K. The wrappers change exactly the sites each release's table lists and nothing else:

- the speculator's constructor (`wrap_speculator_init`): instead of raising, run with
  `num_query_per_req = K` and `sample_from_anchor = True` (the input kernel already implements
  both layouts);
- the DFlash2 decoder layer's constructor (`wrap_dflash2_layer_init`): the grouped convolution
  block is the per-request query count, K for an anchor-first draft;
- the lookahead (`wrap_num_lookahead_tokens`): K slots instead of K + 1 (the draft-pass budget
  divides by it), on whichever config owns it in the release;
- the compile-cache key (`wrap_compute_hash`, `wrap_hash_factors`): the layout and K join it,
  because the DFlash2 convolution block is a constant of the compiled graph;
- where the V1 runner still ships (`wrap_v1_unsupported_features`, `wrap_v1_proposer_init`):
  V1 hard-codes the bonus-anchor layout, so it refuses instead of drafting wrongly.

Every wrapper acts only for a `method="dflash"` draft whose `dflash_config.sample_from_anchor` is
true and that is neither XPress nor LiLiCorr (both trained bonus-anchor, both refuse anchor mode
upstream); everything else takes the original code path untouched. The wrappers are built by
plain functions of the original callables so that their logic can be exercised without vLLM.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from dflash_tools.vllm_plugin.markers import write_marker
from dflash_tools.vllm_plugin.site import SiteCheck

# A child of vLLM's logger, so its lines land wherever vLLM's logging configuration sends them.
logger = logging.getLogger("vllm.dflash_tools_plugin")

WRAPPED_ATTR = "__dflash_tools_wrapped__"
EXCLUDED_ARCHITECTURES = frozenset({"LiLiCorrDraftModel", "Qwen3XPressModel", "DFlashQwen3XPressModel"})
# Architectures whose conv block lives in code this plugin does not patch.
UNPATCHED_ANCHOR_ARCHITECTURES = frozenset({"DFlash2BeamDraftModel"})
# The two speculators that take the DFlash query layout as is; subclasses (DSpark, XPress,
# LiLiCorr) set their own after the parent constructor and must keep stock behaviour.
DFLASH_LAYOUT_SPECULATORS = frozenset({"DFlashSpeculator", "DFlash2Speculator"})
V1_FEATURE = "anchor-sampling DFlash drafts (sample_from_anchor=true; serve them on the V2 runner)"


class PluginRefused(RuntimeError):
    """The plugin cannot apply the change in this process, and the launcher required it."""


# --- what the draft asks for ---------------------------------------------------------------


def _dflash_config(speculative_config: Any) -> dict[str, Any] | None:
    draft = getattr(speculative_config, "draft_model_config", None)
    hf_config = getattr(draft, "hf_config", None)
    value = getattr(hf_config, "dflash_config", None)
    return value if isinstance(value, dict) else None


def anchor_first_dflash(speculative_config: Any) -> bool:
    """Whether this speculative config serves an anchor-first DFlash / DFlash2 draft."""
    if speculative_config is None or getattr(speculative_config, "method", None) != "dflash":
        return False
    draft = getattr(speculative_config, "draft_model_config", None)
    architectures = set(getattr(draft, "architectures", None) or [])
    if architectures & EXCLUDED_ARCHITECTURES:
        return False
    config = _dflash_config(speculative_config)
    return bool(config and config.get("sample_from_anchor", False) is True)


def _refuse_unpatched_architecture(speculative_config: Any) -> None:
    draft = getattr(speculative_config, "draft_model_config", None)
    architectures = set(getattr(draft, "architectures", None) or [])
    unpatched = architectures & UNPATCHED_ANCHOR_ARCHITECTURES
    if unpatched and anchor_first_dflash(speculative_config):
        raise ValueError(
            f"dflash-tools plugin: anchor-first {sorted(unpatched)[0]} drafts are not supported "
            "(their convolution block lives in code the plugin does not patch)"
        )


def num_query_tokens(speculative_config: Any) -> int:
    """Query positions per request per draft step: K anchor-first, K + 1 bonus-anchor."""
    k = int(getattr(speculative_config, "num_speculative_tokens", 0) or 0)
    return k if anchor_first_dflash(speculative_config) else k + 1


# --- wrappers --------------------------------------------------------------------------------


def _mark(function: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    setattr(function, WRAPPED_ATTR, original)
    function.__name__ = getattr(original, "__name__", function.__name__)
    function.__qualname__ = getattr(original, "__qualname__", function.__qualname__)
    function.__doc__ = getattr(original, "__doc__", None)
    return function


def wrap_compute_hash(original: Callable[[Any], str]) -> Callable[[Any], str]:
    def compute_hash(self: Any) -> str:
        digest = original(self)
        if not anchor_first_dflash(self):
            # Bonus-anchor drafts keep stock hashes, so existing compile caches stay valid.
            return digest
        return hashlib.sha256(f"{digest}|{anchor_first_hash_factor(self)}".encode()).hexdigest()

    return _mark(compute_hash, original)


def wrap_num_lookahead_tokens(
    original_fget: Callable[[Any], int], speculative_config_attr: str = "speculative_config"
) -> Callable[[Any], int]:
    """K lookahead slots for an anchor-first draft. The owner holds the speculative config under
    `speculative_config_attr` (`VllmConfig.speculative_config`, or a method's config class's
    `spec_config`, depending on the release)."""

    def num_lookahead_tokens(self: Any) -> int:
        speculative_config = getattr(self, speculative_config_attr, None)
        if speculative_config is not None and anchor_first_dflash(speculative_config):
            return int(speculative_config.num_speculative_tokens)
        return original_fget(self)

    return _mark(num_lookahead_tokens, original_fget)


def wrap_hash_factors(original: Callable[[Any], list[Any]]) -> Callable[[Any], list[Any]]:
    """Where a speculator config owns the compile-hash factors: they gain the layout and K for an
    anchor-first draft; a bonus draft gets exactly what the original returns."""

    def hash_factors(self: Any) -> list[Any]:
        factors = original(self)
        speculative_config = getattr(self, "spec_config", None)
        if not anchor_first_dflash(speculative_config):
            return factors
        return [*factors, anchor_first_hash_factor(speculative_config)]

    return _mark(hash_factors, original)


def anchor_first_hash_factor(speculative_config: Any) -> str:
    return (
        f"dflash-tools:anchor-first:queries={num_query_tokens(speculative_config)}"
        f":k={speculative_config.num_speculative_tokens}"
    )


def wrap_v1_unsupported_features(
    original: Callable[[Any], list[str]], feature: str = V1_FEATURE
) -> Callable[[Any], list[str]]:
    def _get_v1_model_runner_unsupported_features(self: Any) -> list[str]:
        unsupported = list(original(self))
        if anchor_first_dflash(getattr(self, "speculative_config", None)):
            unsupported.append(feature)
        return unsupported

    return _mark(_get_v1_model_runner_unsupported_features, original)


def wrap_speculator_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        speculative_config = getattr(vllm_config, "speculative_config", None)
        own_layout = type(self).__name__ in DFLASH_LAYOUT_SPECULATORS
        if not own_layout or not anchor_first_dflash(speculative_config):
            original(self, vllm_config, *args, **kwargs)
            if own_layout:
                _record_speculator(self, "v2")
            return
        _refuse_unpatched_architecture(speculative_config)
        dflash_config = _dflash_config(speculative_config)
        assert dflash_config is not None
        # The stock constructor raises on the flag in the middle of its body; hide it for the
        # duration of the call (the same dict is read later by model construction).
        dflash_config["sample_from_anchor"] = False
        try:
            original(self, vllm_config, *args, **kwargs)
        finally:
            dflash_config["sample_from_anchor"] = True
        self.sample_from_anchor = True
        self.num_query_per_req = self.num_speculative_steps
        _record_speculator(self, "v2")

    return _mark(__init__, original)


def _record_speculator(speculator: Any, runner: str) -> None:
    write_marker(
        "speculator",
        {
            "class": type(speculator).__name__,
            "runner": runner,
            "num_query_per_req": getattr(speculator, "num_query_per_req", None),
            "sample_from_anchor": getattr(speculator, "sample_from_anchor", None),
            "num_speculative_tokens": getattr(speculator, "num_speculative_steps", None),
        },
    )


def wrap_dflash2_layer_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        original(self, vllm_config, *args, **kwargs)
        speculative_config = getattr(vllm_config, "speculative_config", None)
        if anchor_first_dflash(speculative_config):
            _refuse_unpatched_architecture(speculative_config)
            queries = num_query_tokens(speculative_config)
            self.attention_conv.block_size = queries
            self.mlp_conv.block_size = queries
        if kwargs.get("layer_idx", 0) == 0:
            write_marker("dflash2_conv", {"block_size": getattr(self.attention_conv, "block_size", None)})

    return _mark(__init__, original)


V1_PROPOSER_REFUSAL = (
    "dflash-tools plugin: this DFlash draft is anchor-first (sample_from_anchor=true) but reached "
    "the V1 DFlashProposer, which only drafts the bonus-anchor 1 + K layout; relaunch with "
    "VLLM_USE_V2_MODEL_RUNNER=1"
)


def wrap_v1_proposer_init(original: Callable[..., None], refusal: str = V1_PROPOSER_REFUSAL) -> Callable[..., None]:
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        speculative_config = getattr(vllm_config, "speculative_config", None)
        if anchor_first_dflash(speculative_config):
            raise ValueError(refusal)
        original(self, vllm_config, *args, **kwargs)
        write_marker(
            "proposer",
            {
                "class": type(self).__name__,
                "runner": "v1",
                "num_query_per_req": 1 + int(getattr(speculative_config, "num_speculative_tokens", 0) or 0),
                "sample_from_anchor": False,
                "num_speculative_tokens": getattr(speculative_config, "num_speculative_tokens", None),
            },
        )

    return _mark(__init__, original)


# --- installing them -------------------------------------------------------------------------


def check_live(function: Any, check: SiteCheck) -> None:
    """The object about to be wrapped is the function that was fingerprinted, not a replacement."""
    code = getattr(function, "__code__", None)
    location = check.location
    if getattr(function, WRAPPED_ATTR, None) is not None:
        raise PluginRefused(f"{check.site.qualname} is already wrapped by dflash-tools")
    if code is None or location is None:
        raise PluginRefused(f"{check.site.qualname} is not a plain function")
    filename = Path(code.co_filename).as_posix()
    if not filename.endswith(check.site.path) or code.co_firstlineno not in (location.first_line, location.def_line):
        raise PluginRefused(
            f"{check.site.qualname} in this process is not the fingerprinted function "
            f"({filename}:{code.co_firstlineno}, expected {check.site.path}:{location.def_line}); "
            "another plugin may have replaced it"
        )


def replace_method(owner: type, name: str, check: SiteCheck, wrapper: Callable[[Any], Any]) -> None:
    original = owner.__dict__[name]
    check_live(original, check)
    setattr(owner, name, wrapper(original))


def replace_property(owner: type, name: str, check: SiteCheck, wrapper: Callable[[Any], Any]) -> None:
    prop = owner.__dict__[name]
    if not isinstance(prop, property) or prop.fget is None:
        raise PluginRefused(f"{check.site.qualname} is not a property")
    check_live(prop.fget, check)
    setattr(owner, name, property(wrapper(prop.fget), prop.fset, prop.fdel, prop.__doc__))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patch a module right after it executes, so the plugin never imports model code itself.

    Importing the V2 speculator or the DFlash2 model eagerly would pull Triton kernels and custom
    ops into the API-server process (research §5.4 risk 4); this waits until vLLM imports them.
    """

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        callback = self.callbacks.get(fullname)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, callback)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # Hand the module back to its own loader before anything else looks at it.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


_finder: _PatchOnImport | None = None


def when_imported(module_name: str, callback: Callable[[ModuleType], None]) -> None:
    global _finder
    if module_name in sys.modules:
        callback(sys.modules[module_name])
        return
    if _finder is None:
        _finder = _PatchOnImport({})
        sys.meta_path.insert(0, _finder)
    _finder.callbacks[module_name] = callback


def _install_refusal(module: ModuleType, check: SiteCheck, reason: str) -> None:
    class_name, method = check.site.qualname.split(".", 1)
    owner = getattr(module, class_name)
    original = owner.__dict__[method]

    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        if anchor_first_dflash(getattr(vllm_config, "speculative_config", None)):
            raise PluginRefused(f"dflash-tools plugin could not patch {check.site.qualname}: {reason}")
        original(self, vllm_config, *args, **kwargs)

    setattr(owner, method, _mark(__init__, original))


def _guarded(check: SiteCheck, apply: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    """A failure to patch a lazily imported module becomes a refusal only for anchor-first drafts."""

    def callback(module: ModuleType) -> None:
        try:
            apply(module)
        except Exception as exc:  # an import inside vLLM must not fail because of us
            logger.error("dflash-tools plugin: not patching %s: %s", check.site.key, exc)
            write_marker("plugin", {"status": "refused", "reason": str(exc), "site": check.site.key})
            _install_refusal(module, check, str(exc))

    return callback


def defer_constructors(checks: dict[str, SiteCheck], v1_proposer: bool) -> None:
    """The speculator and model constructors, patched when vLLM imports their modules."""

    def speculator(module: ModuleType) -> None:
        replace_method(module.DFlashSpeculator, "__init__", checks["dflash_speculator_init"], wrap_speculator_init)

    def dflash2_model(module: ModuleType) -> None:
        replace_method(
            module.DFlash2Qwen3DecoderLayer, "__init__", checks["dflash2_decoder_layer_init"], wrap_dflash2_layer_init
        )

    def proposer(module: ModuleType) -> None:
        replace_method(module.DFlashProposer, "__init__", checks["v1_dflash_proposer_init"], wrap_v1_proposer_init)

    deferred: dict[str, Callable[[ModuleType], None]] = {
        "dflash_speculator_init": speculator,
        "dflash2_decoder_layer_init": dflash2_model,
    }
    if v1_proposer:
        deferred["v1_dflash_proposer_init"] = proposer
    for key, apply in deferred.items():
        when_imported(checks[key].site.module, _guarded(checks[key], apply))


# --- the V1 refusal alone, for a vLLM the plugin does not patch -------------------------------

V1_PROPOSER_MODULE = "vllm.v1.spec_decode.dflash"


def refusal_only_feature(reason: str) -> str:
    return (
        "anchor-sampling DFlash drafts (sample_from_anchor=true): this runner would draft them in the bonus-anchor "
        f"layout, and the dflash-tools plugin is not patching this vLLM ({reason})"
    )


def _refusable(function: Any) -> bool:
    """A plain function not wrapped yet (by the full patch, or by an earlier call)."""
    return getattr(function, "__code__", None) is not None and getattr(function, WRAPPED_ATTR, None) is None


def install_v1_refusal(reason: str) -> list[str]:
    """Make the V1 runner refuse anchor-first DFlash drafts, on any vLLM that has the hook points.

    Stock V1 (as long as vLLM shipped it) does not read `sample_from_anchor`: it accepts an anchor-first
    DFlash draft and drafts it in the bonus-anchor layout without an error, so acceptance
    collapses while the output stays correct. Whenever the full change is not applied (unknown
    release, changed source, a wrapper that could not be installed), this guard is installed
    alone so that vLLM refuses instead. It needs no fingerprint: appending to the V1 runner's
    list of unsupported features and raising before the V1 proposer is built are right on any
    version whose hook points exist. Returns the hook points found (`[]`: none, the V1 runner of
    this vLLM cannot be guarded); the proposer's is installed when vLLM imports it.
    """
    found: list[str] = []
    try:
        from vllm.config.vllm import VllmConfig
    except ImportError:
        VllmConfig = None
    features = getattr(VllmConfig, "__dict__", {}).get("_get_v1_model_runner_unsupported_features")
    if features is not None and getattr(features, WRAPPED_ATTR, None) is not None:
        found.append("v1_unsupported_features")
    elif features is not None and _refusable(features):
        VllmConfig._get_v1_model_runner_unsupported_features = wrap_v1_unsupported_features(
            features, refusal_only_feature(reason)
        )
        found.append("v1_unsupported_features")
    try:
        has_proposer = importlib.util.find_spec(V1_PROPOSER_MODULE) is not None
    except ModuleNotFoundError:  # a parent package is missing
        has_proposer = False
    if has_proposer:

        def guard_proposer(module: ModuleType) -> None:
            proposer = getattr(module, "DFlashProposer", None)
            init = getattr(proposer, "__dict__", {}).get("__init__")
            if proposer is not None and init is not None and _refusable(init):
                proposer.__init__ = wrap_v1_proposer_init(
                    init,
                    "dflash-tools plugin: this DFlash draft is anchor-first (sample_from_anchor=true); the V1 "
                    "DFlashProposer would draft it in the bonus-anchor layout, and the plugin is not patching this "
                    f"vLLM ({reason})",
                )
            elif proposer is None:
                logger.warning("dflash-tools plugin: %s has no DFlashProposer to guard", V1_PROPOSER_MODULE)

        when_imported(V1_PROPOSER_MODULE, guard_proposer)
        found.append("v1_dflash_proposer_init")
    return found
