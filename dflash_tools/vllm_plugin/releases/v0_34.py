"""The plugin's part of vLLM 0.34.0: the functions it wraps or relies on, with the sha256 of each
one's source, and the wrappers it installs (docs/tier-vllm.md).

0.34.0 moved the per-method sizing into config classes (`vllm/v1/worker/gpu/spec_decode/
speculator_config.py`): the lookahead, the draft-pass budget and the speculator's compile-hash
factors of a DFlash draft are `DFlashSpeculatorConfig`'s, and there is no V1 runner. The plugin
wraps two members of that class and the two constructors that fix the query layout, as on
0.33.0; why this route and not a custom speculative method is in docs/tier-vllm.md ("vLLM
0.34.0"):

- `DFlashSpeculatorConfig.num_lookahead_tokens`: K instead of K + 1 (its `max_num_draft_seqs`
  divides by it; DFlash2's config inherits both).
- `DFlashSpeculatorConfig.hash_factors` (inherited from `SpeculatorConfig`, empty): the layout
  and K for an anchor-first draft, so the compile-cache key differs; bonus drafts keep [].

Paths are relative to the folder holding the `vllm` package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dflash_tools.vllm_plugin.patch import (
    check_live,
    defer_constructors,
    replace_property,
    wrap_hash_factors,
    wrap_num_lookahead_tokens,
)
from dflash_tools.vllm_plugin.site import Site, SiteCheck

VERSION = "0.34.0"

_CONFIG = "vllm/v1/worker/gpu/spec_decode/dflash/config.py"
_DFLASH2_CONFIG = "vllm/v1/worker/gpu/spec_decode/dflash2/config.py"
_SPECULATOR_CONFIG = "vllm/v1/worker/gpu/spec_decode/speculator_config.py"
_DFLASH_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
_DFLASH2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"
_DFLASH2_MODEL = "vllm/model_executor/models/qwen3_dflash2.py"

SITES: tuple[Site, ...] = (
    # --- wrapped ---------------------------------------------------------------------------
    Site(
        key="dflash_config_num_lookahead_tokens",
        path=_CONFIG,
        qualname="DFlashSpeculatorConfig.num_lookahead_tokens",
        sha256="2c1f4499755c9ce75d530df53f5eda663f939e6bb0598b3be9066a1c226f0697",
        patched=True,
        why="reserves K (not K + 1) KV lookahead slots for anchor-first DFlash; the draft-pass budget follows it",
        must_contain=("return self.num_speculative_tokens + 1",),
    ),
    Site(
        key="speculator_config_hash_factors",
        path=_SPECULATOR_CONFIG,
        qualname="SpeculatorConfig.hash_factors",
        sha256="22893c68f5197ce7a08e86b5d2cb17fbd0aec46554d26fabe62df19cbc7d4436",
        patched=True,
        why="DFlashSpeculatorConfig inherits it; the wrapper installed on that class adds the layout and K to the "
        "compile-cache key (the DFlash2 convolution block is a graph constant)",
        must_contain=("return []",),
    ),
    Site(
        key="dflash_speculator_init",
        path=_DFLASH_SPECULATOR,
        qualname="DFlashSpeculator.__init__",
        sha256="7080234e035e56ac1bd3fc13342a50787dec8d69256c5941f6637b523ea09cc5",
        patched=True,
        why="serves K query positions per request for anchor-first drafts instead of raising",
        must_contain=(
            "self.num_query_per_req = 1 + self.num_speculative_steps",
            "sample_from_anchor=True is not supported for DFlash. ",
            "self.sample_from_anchor = False",
            'dflash_config.get("sample_from_anchor", False)',
        ),
    ),
    Site(
        key="dflash2_decoder_layer_init",
        path=_DFLASH2_MODEL,
        qualname="DFlash2Qwen3DecoderLayer.__init__",
        sha256="9794aef6e47b0dfed8ae3a3332da044179eac7def04994948936560f8d05135a",
        patched=True,
        why="sizes the DFlash2 convolution block to the K query positions of an anchor-first draft",
        must_contain=(
            "block_size=1 + speculative_config.num_speculative_tokens",
            "self.attention_conv = DFlashGroupedConv(",
            "self.mlp_conv = DFlashGroupedConv(",
        ),
    ),
    # --- relied upon: the sizing and routing the wrappers above feed --------------------------
    Site(
        key="dflash_config_class",
        path=_CONFIG,
        qualname="DFlashSpeculatorConfig",
        sha256="4677aeea75c731e72003294c0edee1080a866d4a32876c6623be87de8d09da91",
        patched=False,
        why="the whole class: max_num_draft_seqs divides by num_lookahead_tokens, and it defines no hash_factors "
        "of its own for the wrapper to replace",
        must_contain=("return max_num_batched_tokens // self.num_lookahead_tokens",),
        kind="class",
    ),
    Site(
        key="dflash2_config_class",
        path=_DFLASH2_CONFIG,
        qualname="DFlash2SpeculatorConfig",
        sha256="823a16000d58f246332c4f7272143cc3e59fdde38eca05bd92a8ff9e1c59047e",
        patched=False,
        why="the whole class: DFlash2 drafts inherit the lookahead, budget and hash factors of DFlash",
        kind="class",
    ),
    Site(
        key="vllm_num_lookahead_tokens",
        path="vllm/config/vllm.py",
        qualname="VllmConfig.num_lookahead_tokens",
        sha256="46d1f1b4d7b2509f5db9902c280c8a37fa16efebd487084fd064fc17cb7ea181",
        patched=False,
        why="the scheduler and warm-up read the lookahead here; it delegates to the speculator config",
        must_contain=("return speculative_config.speculator_config.num_lookahead_tokens",),
    ),
    Site(
        key="vllm_draft_budget",
        path="vllm/config/vllm.py",
        qualname="VllmConfig._set_max_num_scheduled_tokens",
        sha256="0ccee1a41b3fbead7876aa0c7eae629d8d0b773b98881297bf88db173862c168",
        patched=False,
        why="caps max_num_active_seqs by the speculator config's max_num_draft_seqs",
        must_contain=("spec.speculator_config.max_num_draft_seqs(",),
    ),
    Site(
        key="speculative_compile_factors",
        path="vllm/config/speculative.py",
        qualname="SpeculativeConfig.compile_factors",
        sha256="575d47a00df81ab63a10b959b803b4448bbd428f21b82fe98664da42000912c2",
        patched=False,
        why="puts the speculator config's hash factors into the compile-cache key",
        must_contain=('factors["speculator"] = normalize_value(self.speculator_config.hash_factors())',),
    ),
    Site(
        key="speculative_speculator_config",
        path="vllm/config/speculative.py",
        qualname="SpeculativeConfig.speculator_config",
        sha256="219f2a7b75cb113463e2db751ff620e432a3871962c49d841dce6968246eb44a",
        patched=False,
        why="builds the speculator config the wrappers act on from the declared class, on every access",
    ),
    Site(
        key="get_speculator_config_class",
        path=_SPECULATOR_CONFIG,
        qualname="get_speculator_config_class",
        sha256="888b319413948337dbc9f4ded91ed98b0621b62c5db623e7462d2059e311e8de",
        patched=False,
        why="picks DFlashSpeculatorConfig / DFlash2SpeculatorConfig, the classes the model declares",
    ),
    Site(
        key="init_speculator",
        path="vllm/v1/worker/gpu/spec_decode/__init__.py",
        qualname="init_speculator",
        sha256="419cea81cd364accb2e0e3b073b7e149c476c0be6688f8a17d71ccf96fc7f31a",
        patched=False,
        why="builds the speculator class the config names (DFlashSpeculator, DFlash2Speculator)",
    ),
    Site(
        key="dflash2_speculator_init",
        path=_DFLASH2_SPECULATOR,
        qualname="DFlash2Speculator.__init__",
        sha256="8350a60956cc17bfb1cf294ea3f3f63f85fe99764546ce3e48647e0095f61d78",
        patched=False,
        why="inherits the query layout from DFlashSpeculator.__init__ without resetting it",
        must_contain=("super().__init__(vllm_config, device)",),
    ),
    Site(
        key="dflash_init_cudagraph_manager",
        path=_DFLASH_SPECULATOR,
        qualname="DFlashSpeculator.init_cudagraph_manager",
        sha256="1b1dec783318c546e6836e6911e6c993e9e9e239d3a19068a0bc5e82f35c8a09",
        patched=False,
        why="sizes the CUDA-graph decode query lengths from num_query_per_req, read after the constructor",
        must_contain=("decode_query_lens={self.num_query_per_req: self.max_num_reqs}",),
    ),
    Site(
        key="grouped_conv_init",
        path=_DFLASH2_MODEL,
        qualname="DFlashGroupedConv.__init__",
        sha256="e2f4a4f280d115e32e82faf6a8c9bcbd74f062c4179da9c6d147120256153a57",
        patched=False,
        why="stores block_size as a plain attribute that the wrapper may reset after construction",
        must_contain=("self.block_size = block_size",),
    ),
    Site(
        key="grouped_conv_convolve",
        path=_DFLASH2_MODEL,
        qualname="DFlashGroupedConv._convolve",
        sha256="3a5acbf7210cf2577ed214f6ffd8af60e0e1211ae283b46b1da11c6b76d94b1d",
        patched=False,
        why="reads block_size at forward time, so resetting the attribute takes effect",
        must_contain=("self.block_size,",),
    ),
    # The code that implements the query layout itself: the wrappers only flip num_query_per_req
    # and sample_from_anchor and trust it to honour both.
    Site(
        key="dflash_prepare_inputs_kernel",
        path=_DFLASH_SPECULATOR,
        qualname="_prepare_dflash_inputs_kernel",
        sha256="b8d4bd01d03ea02b005e7f947b38095988d04c5e100b344f6a96890126c9ad37",
        patched=False,
        why="lays out the K or 1 + K query slots and the sampled positions per request (SAMPLE_FROM_ANCHOR)",
        must_contain=("SAMPLE_FROM_ANCHOR: tl.constexpr", "num_query_per_req"),
    ),
    Site(
        key="dflash_pad_inputs_kernel",
        path=_DFLASH_SPECULATOR,
        qualname="_pad_dflash_inputs",
        sha256="5dbe71cdb73a85ad6a48998c3b73e400cf0700962750011083857064004f80d3",
        patched=False,
        why="pads the query rows past the last request by num_query_per_req",
        must_contain=("num_query_per_req",),
    ),
    Site(
        key="dflash_prepare_inputs",
        path=_DFLASH_SPECULATOR,
        qualname="prepare_dflash_inputs",
        sha256="2ff0c30df09dbf874b77fc0fc71087c35058d90d07059d19eb14285f75474957",
        patched=False,
        why="passes the query count and the layout flag to the input kernel",
        must_contain=("SAMPLE_FROM_ANCHOR=sample_from_anchor",),
    ),
    Site(
        key="dflash_propose",
        path=_DFLASH_SPECULATOR,
        qualname="DFlashSpeculator.propose",
        sha256="397b1352604851a847992955073275da35dacb72b38522ff1a68508eb23b6fe7",
        patched=False,
        why="reads num_query_per_req and sample_from_anchor from the speculator for every draft step",
        must_contain=("self.num_query_per_req", "self.sample_from_anchor"),
    ),
    Site(
        key="dflash_generate_draft",
        path=_DFLASH_SPECULATOR,
        qualname="DFlashSpeculator._generate_draft",
        sha256="3e95cbdeaa5465f5c4b1e68ddf9005a3452094eb5eb23744f78a882887f49f24",
        patched=False,
        why="samples the draft tokens from the positions the input kernel marked",
    ),
    Site(
        key="dflash2_generate_draft",
        path=_DFLASH2_SPECULATOR,
        qualname="DFlash2Speculator._generate_draft",
        sha256="3f1f638eac3e48f85b4a7dae898611150bbbef21120b5a0306ad5c0c8e5c4ba6",
        patched=False,
        why="the DFlash2 candidate walk over the sampled positions",
    ),
    Site(
        key="dflash2_score_candidates",
        path=_DFLASH2_SPECULATOR,
        qualname="DFlash2Speculator._score_candidates",
        sha256="25c9c0791a968565aedc529371618e3aa6a663e68323ab2b0a89056d104b812a",
        patched=False,
        why="strides the per-request hidden states by num_query_per_req",
        must_contain=("self.num_query_per_req",),
    ),
    Site(
        key="candidate_sampler_init",
        path=_DFLASH2_SPECULATOR,
        qualname="CandidateSampler.__init__",
        sha256="bf008130242954c796c0e6df47320afb32aca284dc853f6ec705c8377571b287",
        patched=False,
        why="sizes the DFlash2 candidate scores per draft step",
    ),
    Site(
        key="candidate_sampler_sample",
        path=_DFLASH2_SPECULATOR,
        qualname="CandidateSampler.sample",
        sha256="9e1ff355f72ebbde4c78cff40357056cf747080d6fd46c4f8b9df70ec0d4f407",
        patched=False,
        why="walks the DFlash2 candidates step by step",
    ),
    Site(
        key="candidate_sampler_cache_draft_logits",
        path=_DFLASH2_SPECULATOR,
        qualname="CandidateSampler._cache_draft_logits",
        sha256="ab6f6f3c8e3a3eb1d01a840f2855e121abfa8c2e9afb59f5a6e5825aad77a943",
        patched=False,
        why="caches the realized DFlash2 proposals per step",
    ),
)


def apply(checks: dict[str, SiteCheck]) -> None:
    """Install this release's wrappers; `checks` are its sites, every one matched."""
    # A config module: vLLM imports it in every process anyway, and it imports no speculator
    # (vllm/v1/worker/gpu/spec_decode/speculator_config.py says so), so importing it here is cheap.
    from vllm.v1.worker.gpu.spec_decode.dflash.config import DFlashSpeculatorConfig

    def lookahead(fget: Callable[[Any], int]) -> Callable[[Any], int]:
        return wrap_num_lookahead_tokens(fget, "spec_config")

    replace_property(
        DFlashSpeculatorConfig, "num_lookahead_tokens", checks["dflash_config_num_lookahead_tokens"], lookahead
    )
    # DFlashSpeculatorConfig inherits hash_factors (its fingerprinted class body defines none):
    # the wrapper of the inherited function goes on the DFlash class, so only DFlash and DFlash2
    # configs see it.
    inherited = DFlashSpeculatorConfig.hash_factors
    check_live(inherited, checks["speculator_config_hash_factors"])
    DFlashSpeculatorConfig.hash_factors = wrap_hash_factors(inherited)
    defer_constructors(checks, v1_proposer=False)
