"""The plugin's part of vLLM 0.33.0: the functions it wraps or relies on, with the sha256 of each
one's source, and the wrappers it installs (docs/tier-vllm.md).

On 0.33.0 the sizing lives in the generic configs and the V1 runner still ships:

- `VllmConfig.num_lookahead_tokens`: K lookahead slots instead of K + 1 (the draft-pass budget
  divides by it).
- `VllmConfig._get_v1_model_runner_unsupported_features` and `DFlashProposer.__init__`: the V1
  runner hard-codes the bonus-anchor layout, so it refuses instead of drafting wrongly.
- `SpeculativeConfig.compute_hash`: the layout and K join the compile-cache key.
- the speculator and DFlash2 layer constructors, when vLLM imports their modules.

Paths are relative to the folder holding the `vllm` package; line numbers for readers are in
docs/tier-vllm.md.
"""

from __future__ import annotations

from dflash_tools.vllm_plugin.patch import (
    defer_constructors,
    replace_method,
    replace_property,
    wrap_compute_hash,
    wrap_num_lookahead_tokens,
    wrap_v1_unsupported_features,
)
from dflash_tools.vllm_plugin.site import Site, SiteCheck

VERSION = "0.33.0"

_DFLASH_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
_DFLASH2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"

SITES: tuple[Site, ...] = (
    Site(
        key="speculative_compute_hash",
        path="vllm/config/speculative.py",
        qualname="SpeculativeConfig.compute_hash",
        sha256="328c3382b5207027cbc7e924291ebe5097fd5bf93f2d08854550c8b8d3a9a44d",
        patched=True,
        why="adds the layout and K to the compile-cache key (the DFlash2 conv block is a graph constant)",
        must_contain=("factors.append(self.draft_model_config.compute_hash())",),
    ),
    Site(
        key="num_lookahead_tokens",
        path="vllm/config/vllm.py",
        qualname="VllmConfig.num_lookahead_tokens",
        sha256="9e2913f5c2f657583c5747bcff20d197f2e6b0b3650e26a2b8a5e904abc84075",
        patched=True,
        why="reserves K (not K + 1) KV lookahead slots for anchor-first DFlash",
        must_contain=("return self.num_speculative_tokens + 1",),
    ),
    Site(
        key="v1_unsupported_features",
        path="vllm/config/vllm.py",
        qualname="VllmConfig._get_v1_model_runner_unsupported_features",
        sha256="675c586beb189a4a6f24c0e25e98b9f01078155c32509404dc7c97b18cd88de8",
        patched=True,
        why="makes the V1 runner refuse anchor-first DFlash instead of drafting it in the wrong layout",
        must_contain=('unsupported.append("DFlash candidate-head drafts")',),
    ),
    Site(
        key="dflash_speculator_init",
        path="vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
        qualname="DFlashSpeculator.__init__",
        sha256="bda2c3b5752ed06f78dfc23efb04833ca3df434e0cf5642e265d888e0b7eb4ae",
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
        path="vllm/model_executor/models/qwen3_dflash2.py",
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
    Site(
        key="v1_dflash_proposer_init",
        path="vllm/v1/spec_decode/dflash.py",
        qualname="DFlashProposer.__init__",
        sha256="f93118f5083d8b2c73395048e756e7e4a5e2577923a4c5306945e0f7ca3d8212",
        patched=True,
        why="fails loudly if an anchor-first draft reaches the V1 proposer (hard-coded 1 + K layout)",
        must_contain=("self.max_batch_size * (1 + self.num_speculative_tokens)",),
    ),
    Site(
        key="dflash2_speculator_init",
        path="vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py",
        qualname="DFlash2Speculator.__init__",
        sha256="8350a60956cc17bfb1cf294ea3f3f63f85fe99764546ce3e48647e0095f61d78",
        patched=False,
        why="inherits the query layout from DFlashSpeculator.__init__ without resetting it",
        must_contain=("super().__init__(vllm_config, device)",),
    ),
    Site(
        key="grouped_conv_init",
        path="vllm/model_executor/models/qwen3_dflash2.py",
        qualname="DFlashGroupedConv.__init__",
        sha256="e2f4a4f280d115e32e82faf6a8c9bcbd74f062c4179da9c6d147120256153a57",
        patched=False,
        why="stores block_size as a plain attribute that the wrapper may reset after construction",
        must_contain=("self.block_size = block_size",),
    ),
    Site(
        key="grouped_conv_convolve",
        path="vllm/model_executor/models/qwen3_dflash2.py",
        qualname="DFlashGroupedConv._convolve",
        sha256="3a5acbf7210cf2577ed214f6ffd8af60e0e1211ae283b46b1da11c6b76d94b1d",
        patched=False,
        why="reads block_size at forward time, so resetting the attribute takes effect",
        must_contain=("self.block_size,",),
    ),
    Site(
        key="init_speculator",
        path="vllm/v1/worker/gpu/spec_decode/__init__.py",
        qualname="init_speculator",
        sha256="bad8b92d97584fbef965258ab8b5f9182308fe7dca66ec8a49acdb72d5878003",
        patched=False,
        why="routes DFlash / DFlash2 drafts to the two speculator classes the wrapper acts on",
    ),
    # The code that implements the query layout itself. The plugin wraps none of it, but the
    # wrappers only flip `num_query_per_req` and `sample_from_anchor` and trust this code to
    # honour both; a change here upstream must refuse, not serve.
    Site(
        key="dflash_prepare_inputs_kernel",
        path=_DFLASH_SPECULATOR,
        qualname="_prepare_dflash_inputs_kernel",
        sha256="77d5e8a1ea798b5c664670ed4109bed11ea3acbbde2d23c5efa1c19c258196c6",
        patched=False,
        why="lays out the K or 1 + K query slots and the sampled positions per request (SAMPLE_FROM_ANCHOR)",
        must_contain=("SAMPLE_FROM_ANCHOR: tl.constexpr", "num_query_per_req"),
    ),
    Site(
        key="dflash_prepare_inputs",
        path=_DFLASH_SPECULATOR,
        qualname="prepare_dflash_inputs",
        sha256="85265096f19142fe24a1bddf6a27bfa4775cbc9ccf16f7fc0e356f35ff0840c4",
        patched=False,
        why="passes the query count and the layout flag to the input kernel",
        must_contain=("SAMPLE_FROM_ANCHOR=sample_from_anchor",),
    ),
    Site(
        key="dflash_propose",
        path=_DFLASH_SPECULATOR,
        qualname="DFlashSpeculator.propose",
        sha256="5235d37ca2cffe0cd70cde4aabd8be829f56da016b2ca06af0f75d9b1faa9f1f",
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
        sha256="ca6a9009f1b43646f26e28f6e81984d796cec5d81f80a34527e08c5954d9eef3",
        patched=False,
        why="walks the DFlash2 candidates step by step",
    ),
    Site(
        key="candidate_sampler_cache_draft_logits",
        path=_DFLASH2_SPECULATOR,
        qualname="CandidateSampler._cache_draft_logits",
        sha256="cee446ee061124521238504b167a14e24c40106c30c5651b494235a8461e3f7e",
        patched=False,
        why="caches the realized DFlash2 proposals per step",
    ),
)


def apply(checks: dict[str, SiteCheck]) -> None:
    """Install this release's wrappers; `checks` are its sites, every one matched."""
    from vllm.config.speculative import SpeculativeConfig
    from vllm.config.vllm import VllmConfig

    replace_method(SpeculativeConfig, "compute_hash", checks["speculative_compute_hash"], wrap_compute_hash)
    replace_property(VllmConfig, "num_lookahead_tokens", checks["num_lookahead_tokens"], wrap_num_lookahead_tokens)
    replace_method(
        VllmConfig,
        "_get_v1_model_runner_unsupported_features",
        checks["v1_unsupported_features"],
        wrap_v1_unsupported_features,
    )
    defer_constructors(checks, v1_proposer=True)
