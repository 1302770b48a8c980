"""Findings: the stable, documented result of every check.

Codes are public contract (docs/findings.md): JSON output, docs and tests refer to them. A code never
changes meaning; new codes may be added.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class CodeInfo:
    """One code: its severity, the short `title` JSON findings carry, when it is raised
    (`condition`, markdown: the column of docs/findings.md) and what to do (`action`, what
    `dflash-tools explain CODE` says)."""

    code: str
    severity: Severity
    title: str
    condition: str = ""
    action: str = ""


_CATALOGUE: tuple[CodeInfo, ...] = (
    CodeInfo("DFT001", Severity.ERROR, "config.json missing or not valid JSON"),
    CodeInfo("DFT002", Severity.ERROR, "dialect not recognized"),
    CodeInfo("DFT003", Severity.ERROR, "safetensors header corrupt, out of bounds, overlapping or with holes"),
    CodeInfo("DFT004", Severity.ERROR, "shard index names a file that is missing or escapes the checkpoint folder"),
    CodeInfo("DFT005", Severity.INFO, "weights not inspected (config-only source, or shards not available offline)"),
    CodeInfo("DFT007", Severity.INFO, "the Hub was unreachable: the draft was read from the local cache"),
    CodeInfo("DFT006", Severity.ERROR, "config value has the wrong type or is out of range"),
    CodeInfo(
        "DFT008",
        Severity.WARNING,
        "architecture an engine release serves that dflash-tools reads no config of: nothing about it is checked",
    ),
    CodeInfo("DFT009", Severity.WARNING, "config keys dflash-tools does not know (they may change the draft's math)"),
    CodeInfo(
        "DFT010",
        Severity.ERROR,
        "block_size missing, not a positive int, or two locations disagree (or two declarations of the layout)",
    ),
    CodeInfo(
        "DFT011",
        Severity.WARNING,
        "sample_from_anchor not declared where engines read it (a note when the evidence settles the layout)",
    ),
    CodeInfo(
        "DFT012",
        Severity.ERROR,
        "proposal count is not the trained K_max (a warning when only an inferred layout makes it wrong)",
    ),
    CodeInfo("DFT013", Severity.ERROR, "requested K incompatible with the trained geometry (DFlash2: K != K_max)"),
    CodeInfo("DFT014", Severity.WARNING, "requested K above K_max (positions never trained)"),
    CodeInfo("DFT015", Severity.ERROR, "conv taps exceed block_size / group size does not divide hidden"),
    CodeInfo("DFT016", Severity.INFO, "requested K below K_max (valid, drafts fewer positions than trained)"),
    CodeInfo("DFT017", Severity.WARNING, "conv taps exceed the query positions (unused taps)"),
    CodeInfo("DFT018", Severity.WARNING, "the trained layout is unknown: its evidence disagrees (both readings shown)"),
    CodeInfo("DFT019", Severity.WARNING, "weaker layout evidence says the other layout than the evidence that decides"),
    CodeInfo("DFT020", Severity.ERROR, "required tensor missing"),
    CodeInfo("DFT021", Severity.WARNING, "unexpected tensor (will be dropped or will break loading)"),
    CodeInfo("DFT022", Severity.ERROR, "tensor shape differs from the config's expectation"),
    CodeInfo("DFT023", Severity.WARNING, "mixed or unusual floating dtypes"),
    CodeInfo("DFT024", Severity.INFO, "quantized checkpoint: packed weights checked by name, not by shape"),
    CodeInfo("DFT030", Severity.ERROR, "target layer id out of range, duplicated or unsorted"),
    CodeInfo("DFT031", Severity.ERROR, "hidden size mismatch with the target (fc width, draft hidden)"),
    CodeInfo("DFT032", Severity.ERROR, "vocabulary mismatch with the target, or mask_token_id out of range"),
    CodeInfo("DFT033", Severity.WARNING, "layer ids look shifted by one (z-lab / speculators convention mixed up)"),
    CodeInfo("DFT034", Severity.WARNING, "RoPE settings differ from the target's"),
    CodeInfo(
        "DFT035",
        Severity.INFO,
        "config feature engine releases treat differently (warning where one ignores or refuses it)",
    ),
    CodeInfo("DFT040", Severity.WARNING, "speculators draft whose full-attention layers vLLM will run causally"),
    CodeInfo("DFT041", Severity.WARNING, "layout or algorithm the selected vLLM runner cannot serve as declared"),
    CodeInfo(
        "DFT055", Severity.INFO, "sliding layers see other context keys served by vLLM than speculators' trainer shows"
    ),
    CodeInfo("DFT050", Severity.INFO, "departs from the published profile of a known checkpoint"),
    CodeInfo(
        "DFT056", Severity.INFO, "the Hub could not answer: config.json was read from the bundled published profile"
    ),
    CodeInfo(
        "DFT054", Severity.WARNING, "named like a published draft, but its config.json is none of the known revisions"
    ),
    CodeInfo(
        "DFT051",
        Severity.ERROR,
        "vLLM's V1 runner would serve an anchor-first DFlash draft in the bonus layout, silently",
    ),
    CodeInfo("DFT052", Severity.WARNING, "--engine vllm given but vLLM is not installed: serving not checked"),
    CodeInfo(
        "DFT053", Severity.INFO, "the installed vLLM serves this anchor-first draft (natively or with the plugin)"
    ),
    CodeInfo("DFT058", Severity.WARNING, "config value an engine reads is far outside what real checkpoints use"),
    CodeInfo(
        "DFT070", Severity.ERROR, "the engine reads no config of this format, or has no loader for its architecture"
    ),
    CodeInfo(
        "DFT071", Severity.ERROR, "the engine would serve the draft without an error, but not as trained (layout, keys)"
    ),
    CodeInfo(
        "DFT072",
        Severity.WARNING,
        "the engine falls back to a block size or draft count the draft was not trained with",
    ),
    CodeInfo("DFT073", Severity.ERROR, "the target layers the engine captures differ from the trained ones"),
    CodeInfo("DFT074", Severity.ERROR, "the engine refuses the draft when it loads it"),
    CodeInfo(
        "DFT075", Severity.WARNING, "what the engine uses depends on the target, and cannot be checked from the draft"
    ),
    CodeInfo("DFT076", Severity.INFO, "served as trained only with the dflash-tools vLLM plugin on the serving host"),
    CodeInfo(
        "DFT077",
        Severity.WARNING,
        "the engine installed here could not be asked what it builds from the draft (or one of its steps)",
    ),
    CodeInfo(
        "DFT078", Severity.ERROR, "the engine cannot load the config (an unknown or missing model_type, at config load)"
    ),
    CodeInfo(
        "DFT079",
        Severity.WARNING,
        "the config class its model_type selects fills keys the config leaves out, and they change the draft",
    ),
    CodeInfo(
        "DFT080",
        Severity.ERROR,
        "max_num_batched_tokens is below max_num_seqs x the draft's query positions (the draft pass runs fewer "
        "requests at once)",
    ),
    CodeInfo(
        "DFT081",
        Severity.WARNING,
        "the engine's default for a serving setting breaks a check: the launch line sets the value that holds",
    ),
    CodeInfo("DFT082", Severity.ERROR, "the weights and one request of max_model_len do not fit in the GPU memory"),
    CodeInfo(
        "DFT083",
        Severity.ERROR,
        "tensor or decode context parallelism cannot split the target or the draft (heads, KV heads, vocabulary)",
    ),
    CodeInfo("DFT084", Severity.INFO, "the launch line pins a draft setting the release needs (the draft's DCP)"),
    CodeInfo("DFT085", Severity.INFO, "the launch line selects the model runner that serves the draft"),
    CodeInfo("DFT086", Severity.INFO, "the engine caps the running requests lower than asked unless told otherwise"),
    CodeInfo("DFT087", Severity.WARNING, "the memory check is incomplete (weights unknown, or state not counted)"),
    CodeInfo("DFT088", Severity.ERROR, "a setting on the launch line that the engine refuses at start-up"),
    CodeInfo(
        "DFT089",
        Severity.WARNING,
        "the installed engine reads the draft differently from dflash-tools' table for its release",
    ),
    CodeInfo(
        "DFT090",
        Severity.WARNING,
        "the target's config.json could not be read offline: the checks that need it are not made",
    ),
    CodeInfo(
        "DFT091",
        Severity.ERROR,
        "a draft's config.json could not be read offline and none is bundled: nothing of it is checked",
    ),
    CodeInfo("DFT059", Severity.ERROR, "duplicated JSON key with different values (readers disagree on which wins)"),
    CodeInfo("DFT060", Severity.WARNING, "duplicated JSON key repeating the same value"),
    CodeInfo("DFT061", Severity.ERROR, "string with a lone surrogate: not Unicode, refused by strict JSON readers"),
    CodeInfo("DFT062", Severity.ERROR, "JSON nested deeper than any config (64 levels)"),
)

# When each code is raised and what to do about it: `CODE | condition | action`, one line a code.
# docs/findings.md is rendered from this and the catalogue above (`render_markdown`, kept equal by
# tests/draft/test_findings_catalogue.py), and `dflash-tools explain` prints it: one source.
_TEXTS = """
DFT001 | config.json missing or not valid JSON | restore config.json from the original checkpoint, or download it again
DFT002 | dialect not recognized (the message names the markers looked for) | check that SOURCE is a draft checkpoint (a target or another kind of model is not one); the message lists the markers looked for
DFT003 | safetensors header corrupt, out of bounds, overlapping or with holes | download the shard again; if the header is still broken, the upload is damaged: tell its publisher
DFT004 | shard index names a file that is missing or escapes the checkpoint folder (or disagrees with the shards) | upload or download the missing shard, or rebuild model.safetensors.index.json from the shards
DFT005 | weights not inspected (config-only source, or shards not available offline) | pass the checkpoint folder, or read the Hub repo online, to check the tensors too
DFT006 | a config value has the wrong type or is out of range (also: speculators `draft_vocab_size` absent, read as 32000) | fix the value the message names; `dflash-tools convert` writes the values it decides
DFT007 | the Hub was unreachable: the draft was read from the local Hugging Face cache (may be stale) | read it again online (HF_HUB_OFFLINE unset) to make sure the cached copy is current
DFT008 | `architectures` names a DFlash-family draft an engine release registers (docs/engines.md, "Architectures") that dflash-tools reads no config of: the message names the architecture, the releases that serve it and what their class reads; nothing else is checked (an architecture no release registers stays DFT002). In an engine column: that release's outcome is `unchecked` | check acceptance on the serving host with `dflash-tools smoke-test`: nothing else about this draft is checked
DFT009 | config keys dflash-tools does not know: they may change the draft's math, and no check covers them (the rule: "DFT009: keys dflash-tools does not know" below) | find out what the keys do; where they change the draft's math, measure acceptance with `dflash-tools smoke-test`
DFT010 | block_size missing, not a positive int, or two locations disagree (also two declarations of the layout that disagree: `sample_from_anchor`, `query_zero_predicts_next`, `shift_label`, wherever each sits; the layout is then `unknown` and the hint names `smoke-test --compare-layouts`, never a layout to write) | write one block_size and one layout declaration where every engine reads them: `dflash-tools convert SRC -o OUT` (with --block-size N where the values disagree)
DFT011 | sample_from_anchor not declared where engines read it. A **note** (info) when the evidence settles the layout (the proposal count, the published release, the trainer's record or markers: [rules.md](rules.md#how-sample_from_anchor-is-decided)); a warning when it is declared only in a mirror engines ignore, or only the dialect's default says it. One sentence of cause, one of action | declare the layout the draft was trained with: `dflash-tools convert SRC -o OUT --sample-from-anchor` (anchor-first) or `--no-sample-from-anchor` (bonus-anchor)
DFT012 | a proposal count (speculators `speculative_tokens`) is not the trained K_max: an error when the file contradicts its own declaration or the count fits no layout of the block size; a **warning** when only an inferred layout makes it wrong (an older speculators save that stored block_size there). Never reported for an `unknown` layout whose readings the count fits | decide which of the two readings the message names is right, and run the `dflash-tools convert` line it gives for that one
DFT013 | requested K incompatible with the trained geometry (DFlash2: K != K_max) | serve a DFlash2 draft at its trained K (leave -k out)
DFT014 | requested K above K_max (positions never trained) | lower K to K_max or below: the positions past K_max were never trained
DFT015 | conv taps exceed block_size / group size does not divide hidden | fix conv_kernel_size or conv_group_size: the draft cannot run as configured
DFT016 | requested K below K_max (valid; DSpark: below block_size, which some engines refuse) | nothing to fix: a smaller K drafts fewer positions; `dflash-tools smoke-test -k` measures whether it pays
DFT017 | conv taps exceed the query positions (unused taps) | nothing to fix unless you meant a larger K: those taps meet no query position
DFT020 | required tensor missing | download the checkpoint again, or export it with every tensor: engines load a checkpoint with a missing tensor without an error
DFT021 | unexpected tensor (will be dropped or will break loading) | check that config.json describes these weights; `dflash-tools convert` drops the tensors it knows engines cannot load
DFT022 | tensor shape (or index-map dtype) differs from the config's expectation | check that config.json belongs to these weights, and export the checkpoint again if it does
DFT023 | mixed or unusual floating dtypes | export the weights in one floating dtype, unless the mix is intended
DFT024 | quantized checkpoint (`quantization_config`): scale / zero-point / packed tensors accepted beside their weights; packed weights checked by name, not by shape; dtype mixing not reported | nothing to fix: packed tensors are checked by name, not by shape
DFT030 | target layer id out of range, duplicated or unsorted; `num_target_layers` != target layers | write the target layer ids the draft was trained on: 0-based, sorted, unique and below the target's layer count
DFT031 | hidden size mismatch with the target (fc width, draft hidden) | pair the draft with the target it was trained for (--target)
DFT032 | vocabulary mismatch with the target, mask_token_id missing or out of range, DFlash2 with a reduced vocabulary | pair the draft with the target it was trained for, or fix mask_token_id
DFT033 | layer ids look shifted by one (the z-lab / speculators convention mixed up) | write the ids in the dialect's convention; `dflash-tools convert --to` shifts them when it translates
DFT034 | RoPE settings differ from the target's | serve the draft with the target it was trained for, whose RoPE settings it learned
DFT035 | a config feature engine releases treat differently (an MoE MLP, own embeddings or LM head, quantized weights, attention sinks, a value scale, `use_swa`, partial rotary, a tap on the target's last layer, NoPE layers, layer fusion): the message names where the config states it and what each release that reads the format does (docs/engines.md, "Config features"); a warning where one ignores or refuses it, or where what it does depends on the target's model | serve it with a release that treats the feature as the draft was trained (the message names what each does)
DFT040 | speculators draft whose full-attention layers vLLM will run causally | write sliding_window_non_causal: true, or keep the z-lab form: `dflash-tools convert SRC -o OUT --to zlab`
DFT041 | layout or algorithm the selected vLLM runner cannot serve as declared (smoke-test preflight) | serve it with a vLLM that serves the layout (a release the dflash-tools plugin patches, with the plugin installed), or drop the setting the message names
DFT050 | departs from the published profile of a known checkpoint | nothing to fix for a fine-tune or a re-export; otherwise compare the config with the published one
DFT051 | `inspect --engine vllm`: vLLM's V1 runner would serve an anchor-first DFlash draft in the bonus layout, silently ([tier-vllm.md](tier-vllm.md)) | serve it with the V2 model runner and the dflash-tools plugin: the launch lines of `dflash-tools plan` set both
DFT052 | `inspect --engine vllm` given but vLLM is not installed: serving not checked | install vLLM in this environment, or name the release to check: --engine vllm==VERSION
DFT053 | `inspect --engine vllm`: the installed vLLM serves this anchor-first draft, natively or through the plugin (on the releases it patches), and with how many query positions | nothing to fix: keep the plugin installed with this vLLM
DFT054 | named like a published draft (its Hub repo id, a Hub cache snapshot of it, or a folder of the repo's name) but its config.json is none of the published revisions dflash-tools knows (`configs/profiles/`, `releases`): the message names the nearest revision and the keys that differ from it; a checkpoint that only has a published draft's dimensions gets the same comparison in its JSON `profile`, without this finding | check which revision you serve (--revision pins one); a re-export or an edited copy is expected to differ
DFT055 | sliding layers of a speculators-format draft: vLLM measures each draft row's window from the row, speculators' trainer from the anchor, so a draft trained there sees fewer context keys per row when served ([sliding-window.md](sliding-window.md)); not raised for a draft `convert --to` translated from another format (its `dflash_tools_restore` record), which was trained elsewhere | expect lower acceptance on long contexts than in training; docs/sliding-window.md gives the rule
DFT056 | a Hub repo id read offline (`HF_HUB_OFFLINE`) or with the Hub unreachable, not in the local Hugging Face cache, whose published config.json a bundled profile stores (`configs/profiles/releases/`): it was answered from that file, and the message names its revision and sha256; weights not inspected ([inspect.md](inspect.md#offline-the-bundled-published-configs)) | rerun online, or with the repo in the Hugging Face cache, to read its current revision and its safetensors headers
DFT058 | config value an engine reads is far outside what real checkpoints use ([config-keys.md](config-keys.md)) | check the value against the published config: the engine uses it as written
DFT059 | duplicated JSON key with different values (readers disagree on which wins) | keep one copy of the key: JSON readers disagree on which copy wins
DFT060 | duplicated JSON key repeating the same value | remove the repeated key
DFT061 | string with a lone surrogate: not Unicode, refused by strict JSON readers | rewrite the string as valid Unicode
DFT062 | JSON nested deeper than any config (64 levels) | restore config.json from the original checkpoint: no real config nests that deep
DFT070 | `inspect --engine`: the engine reads no config of this format (SGLang: speculators), or has no loader for the draft's architecture ([engines.md](engines.md)) | convert the draft to a form the engine reads (the hint names the command), or serve it with another engine
DFT071 | `inspect --engine`: the engine would serve the draft without an error but not as trained: another layout (an anchor-first DFlash draft on SGLang; a layout stated where the engine does not read it), or keys it ignores | serve it with a release whose column says served or served-with-plugin, or write the trained layout where this one reads it (`dflash-tools convert`)
DFT072 | `inspect --engine`: the engine falls back to a block size or draft count the draft was not trained with (SGLang: 16 when no block_size is written; vLLM: block_size drafts for a DSpark launched without num_speculative_tokens, one past a bonus-anchor draft's K_max); the launch line passes the trained one | keep the trained value on the launch line (the printed line does), or write block_size into the config with `dflash-tools convert`
DFT073 | `inspect --engine`: the target layers the engine captures (from the config, or derived when it has none) differ from the trained ones (a warning where the trained ones are unknown) | write the trained target_layer_ids into the config: `dflash-tools convert SRC -o OUT`
DFT074 | `inspect --engine`: the engine refuses the draft when it loads it (a rule from [engines.md](engines.md): missing mask token, unpaired DFlash2 keys, no sliding window, DSPARK without a Markov head, ...) | fix what the message names, or serve the draft with a release that loads it
DFT075 | `inspect --engine`: what the engine uses depends on the target (SGLang: the mask token looked up in the target's tokenizer; derived layer ids without `--target`) | pass --target to check what it depends on, and measure acceptance on that target with `dflash-tools smoke-test`
DFT076 | `inspect --engine vllm==...`: served as trained only with the dflash-tools vLLM plugin installed with vLLM on the serving host | install dflash-tools with its vllm extra where vLLM runs; the launch line's DFLASH_TOOLS_REQUIRE_PLUGIN=1 stops vLLM if the plugin is missing
DFT080 | `plan`: `max_num_batched_tokens` is below `max_num_seqs` × the draft's query positions (K + 1 bonus, K anchor-first): the vLLM releases with a table then lower `max_num_active_seqs` to `max_num_batched_tokens // Q` (fewer requests at once; vllm-project/vllm#53970 reports an out-of-bounds crash for this case) ([plan.md](plan.md)) | raise --max-num-batched-tokens to max_num_seqs × the query positions, or lower --max-num-seqs
DFT081 | `plan`: the engine's own default for a setting (vLLM's `max_num_batched_tokens` for the GPU) would break a check; the launch line passes the value that holds | keep --max-num-batched-tokens on the launch line when you edit it
DFT082 | `plan`: the weights, or the weights and the KV of one request of `max_model_len`, do not fit in `--gpu-memory` × `gpu_memory_utilization` on one rank (vLLM refuses to start) | use the larger --tensor-parallel-size the hint names, a shorter --max-model-len, or a smaller dtype
DFT083 | `plan`: `--tensor-parallel-size` does not split the target's or the draft's attention heads, KV heads or padded vocabulary; or `--decode-context-parallel-size` breaks vLLM's DCP rules | choose a --tensor-parallel-size that divides the heads, the KV heads and the padded vocabulary
DFT084 | `plan`: the launch line pins `draft_decode_context_parallel_size` to 1 (a vLLM release whose drafter cannot run a sliding-window draft at DCP > 1; docs/engines.md) | keep the pinned setting on the launch line
DFT085 | `plan`: the launch line selects vLLM's V2 model runner (a release that still has the V1 runner, for DFlash2, anchor-first or mixed-attention drafts) | keep VLLM_USE_V2_MODEL_RUNNER=1 on the launch line
DFT086 | `plan`: SGLang runs at most 48 requests at once with DFLASH or DSPARK unless `--max-running-requests` is given | pass --max-num-seqs to the plan to put the same limit on every launch line
DFT087 | `plan`: the memory check is incomplete: no safetensors headers for the target or draft, or layers (linear attention) whose per-request state is not counted | run the plan online or on folders that hold the .safetensors files; leave memory for the state it does not count
DFT088 | `plan`: a setting on the launch line that the engine refuses at start-up: a `max_model_len` longer than the target's context (`max_position_embeddings`, with its RoPE scaling; vLLM and SGLang refuse it unless `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` / `SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`), or a number beyond a 64-bit integer ([plan.md](plan.md)) | lower the setting to what the engine accepts (the message names the limit), or set the variable that allows it
DFT018 | the trained layout is unknown: evidence of one rank disagrees (geometry), or an engine column cannot say whether it serves the draft as trained; the message gives both readings, the hint `smoke-test --compare-layouts`. The engine column's outcome is then `unchecked` | settle it on the target: `dflash-tools smoke-test --compare-layouts` serves both layouts, and the one trained wins clearly; then write it with `dflash-tools convert SRC -o OUT --sample-from-anchor` (or `--no-sample-from-anchor`)
DFT019 | weaker layout evidence says the other layout than the evidence that decides (a marker, the trainer's record or a published release against a declaration or a proposal count) | check the draft's card or training config; if the deciding evidence is right, nothing to do, else write the layout with `dflash-tools convert` (`--sample-from-anchor` or `--no-sample-from-anchor`)
DFT077 | `inspect --engine vllm`: the engine installed here could not be asked what it builds from the draft (its child process did not import it, crashed or ran past its time limit: the message says which), so the release's table answers alone (a release without a table gets no column); or one step of its load path cannot run in this environment (it fails on a bundled draft every release serves too), and what that step reads comes from the table ([inspect.md](inspect.md#the-installed-engine-has-the-last-word)) | run inspect where the engine imports (its own environment, `pip install` it there), or read the message for the step that failed; the table's column stands meanwhile
DFT078 | `inspect --engine`: the engine cannot load the config at all (outcome `wont-load`): its config resolution raises before any draft code runs. A `model_type` the transformers the release requires does not know (TorchSpec's `dflash`, `dspark`, `domino`), a missing one (vLLM: unless the config has `speculators_config`), a config class only the repository's code supplies (`auto_map.AutoConfig`: needs `--trust-remote-code`), or a `speculators_model_type` vLLM does not translate. The finding names the key (`model_type`) and the engine's error; the fix is the model_type of the draft's decoder layers (a Qwen3-layer DFlash draft: `"qwen3"`), or for a format the engine reads nowhere, the conversion ([engines.md](engines.md), "Loading the config") | set `model_type` to the model_type of the draft's decoder layers (a Qwen3-layer DFlash draft: `"qwen3"`), or convert the draft to a format the engine reads (`dflash-tools convert --to`)
DFT079 | `inspect --engine`: the config class the draft's `model_type` selects (named: "transformers' GptOssConfig") fills keys the config leaves out, and the values change what the draft computes: sliding-window layers (`layer_types`, with `sliding_window`), a RoPE scaling (`rope_parameters`), attention biases, a `head_dim` other than hidden_size / num_attention_heads. z-lab's gpt-oss-20b DFlash config, quoted without `layer_types`, gets alternating sliding (window 128) / full layers and YaRN × 32 from `GptOssConfig`. Write the values the draft was trained with into config.json ([engines.md](engines.md), "transformers' defaults") | write the values the draft was trained with into config.json (for a draft trained with full attention: `layer_types` all `full_attention`), so that no class default decides them
DFT089 | `inspect --engine vllm`: the installed engine's own config code reads the draft differently from dflash-tools' table for that release (whether it loads and builds it, the method, the layout, the drafts, the query positions, the mask token, the captured layers); the column shows the engine's reading, and JSON `disagreements` names the engine's file and function for each field. The table is wrong there: report it ([inspect.md](inspect.md#the-installed-engine-has-the-last-word)) | trust the column, which shows what the installed engine does; report the table's mistake to dflash-tools with the JSON `disagreements`
DFT090 | `plan`, `smoke-test --dry-run`: the target is a Hub repo id the Hub could not be asked about (`HF_HUB_OFFLINE=1`, no connection, no answer within `--timeout`) and the local Hugging Face cache does not hold its config.json (dflash-tools bundles drafts' published configs, not targets'). What needs no target is answered (each release's outcome, K and query positions, the token budget, the launch lines naming the target as given); the memory fit, TP/DCP against its heads, `max_model_len` against its `max_position_embeddings` and the draft's pairing with it (hidden size, vocabulary, layer count against the taps) are not checked, and JSON `not_checked` names them ([plan.md](plan.md#offline-a-target-that-cannot-be-read)). A repo the Hub says does not exist, a local path or a broken config stays an error (exit 2) | fetch the target's config (`hf download REPO --include '*.json'`), or plan online (the memory fit needs its safetensors headers too, which are read online by range request)
DFT091 | `plan`, `smoke-test`: a draft is a Hub repo id the Hub could not be asked about (`HF_HUB_OFFLINE=1`, no connection, no answer within `--timeout`), the local Hugging Face cache does not hold its config.json, and no bundled profile stores it (DaoCloud's Qwen3.8-27B-DFlash2-Exp: its profile records the layout from its model card, not the file). The message names why and what the profile records (algorithm, layout, block_size, K, query positions, target); JSON `draft.not_read` has it too. Nothing of the draft is checked and no launch line is written for it; the other drafts are planned as they are, and the command exits 2, as for a source that cannot be read ([plan.md](plan.md#offline-a-draft-that-cannot-be-read)). A local path that does not exist, a repo the Hub says does not exist or a broken config stays an error | run online, or fetch the draft's config into the Hugging Face cache (`hf download REPO config.json`)
"""


def _texts() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for line in _TEXTS.strip().splitlines():
        code, condition, action = line.split(" | ")
        rows[code] = (condition, action)
    return rows


def _with_texts(infos: tuple[CodeInfo, ...]) -> dict[str, CodeInfo]:
    texts = _texts()
    assert set(texts) == {info.code for info in infos}, "every code has one line in _TEXTS"
    return {
        info.code: CodeInfo(info.code, info.severity, info.title, *texts[info.code])
        for info in sorted(infos, key=lambda info: info.code)
    }


CATALOGUE: dict[str, CodeInfo] = _with_texts(_CATALOGUE)


@dataclass(frozen=True)
class Finding(JsonDocument):
    """One problem (or note) about a checkpoint.

    `keys` names the exact config keys or tensor names involved and `values` their values, so a
    script can act on a finding without parsing the message.
    """

    code: str
    severity: Severity
    message: str
    hint: str = ""
    keys: tuple[str, ...] = ()
    values: dict[str, Any] = field(
        default_factory=dict, metadata=json_rules(omit_empty=True, encode=lambda values: _strict_json(values))
    )
    file: str | None = field(default=None, metadata=json_rules(omit_none=True))

    json_keys: ClassVar[tuple[str, ...]] = ("code", "severity", "title", "message", "hint", "keys", "values", "file")
    json_properties: ClassVar[dict[str, str]] = {"title": "title"}

    @property
    def title(self) -> str:
        """The catalogue's title of the code ("" for a code it does not list)."""
        return CATALOGUE[self.code].title if self.code in CATALOGUE else ""


def brief_list(values: Sequence[Any], shown: int = 12) -> str:
    """A list as a message quotes it: whole when short, else its first and last entries and its length.

    A config may carry a million layer ids; a message (and the terminal) gets a line, and the
    whole list stays in the finding's `values`.
    """
    if len(values) <= shown:
        return "[" + ", ".join(repr(v) for v in values) + "]"
    head = ", ".join(repr(v) for v in values[: shown - 2])
    tail = ", ".join(repr(v) for v in values[-2:])
    return f"[{head}, ..., {tail}] ({len(values):,} entries)"


def _strict_json(value: Any, depth: int = 0) -> Any:
    """`values` quote the config exactly, except what strict JSON cannot carry.

    NaN and the infinities become strings spelled as the file spells them; structures nested
    deeper than any real config are summarized, so a hostile value cannot exhaust the encoder.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list | tuple) and set(map(type, value)) <= _PLAIN:
        return list(value)  # a million layer ids: nothing to change, checked at C speed
    if isinstance(value, dict | list | tuple):
        if depth >= _MAX_VALUE_DEPTH:
            return f"<{type(value).__name__} nested deeper than {_MAX_VALUE_DEPTH} levels>"
        if isinstance(value, dict):
            return {key: _strict_json(item, depth + 1) for key, item in value.items()}
        return [_strict_json(item, depth + 1) for item in value]
    return value


_MAX_VALUE_DEPTH = 32
_PLAIN = frozenset({int, str, bool, type(None)})


def make_finding(
    code: str,
    message: str,
    hint: str = "",
    *,
    severity: Severity | None = None,
    keys: tuple[str, ...] | list[str] = (),
    values: dict[str, Any] | None = None,
    file: str | None = None,
) -> Finding:
    """Build a finding; the severity comes from the catalogue unless a check overrides it."""
    info = CATALOGUE[code]
    return Finding(
        code=code,
        severity=severity or info.severity,
        message=message,
        hint=hint,
        keys=tuple(keys),
        values=dict(values or {}),
        file=file,
    )


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)


_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by code, keeping discovery order inside a code."""
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], f.code))


# --------------------------------------------------------------------------------------------
# docs/findings.md, rendered from the catalogue
# --------------------------------------------------------------------------------------------

_DOCS_HEAD = """# Finding codes

Rendered from the catalogue in `dflash_tools/findings.py` by
`python -m dflash_tools.findings > docs/findings.md`; a test fails when the two differ.
`dflash-tools explain CODE` prints one row in a terminal, and `dflash-tools explain` all of them.

Codes are a public contract: they never change meaning; new ones may be added.

| code | severity | condition | what to do |
|---|---|---|---|
"""

_DOCS_TAIL = """
## DFT009: keys dflash-tools does not know

A key at the top level of a draft's config, or in the objects its format keeps decoder and
algorithm keys in (`dflash_config`, `transformer_layer_config`, `speculative_config`), is known
when docs/config-keys.md documents it, when an engine table reads or checks it (docs/engines.md,
including its "Config features"), when a dialect names it (where the block size and the layout
are declared, the format's own keys), or when it cannot change what the draft computes
(provenance such as `transformers_version` and `auto_map`, training-only settings such as
`num_anchors`, the token ids engines take from the target's tokenizer, convert's
`dflash_tools_restore`). A key set to null declares nothing. Every other key is named in one
DFT009 warning: it may change the draft's math, no check covers it, and an engine without a rule
for it serves the draft without it. `dflash_tools/dialects/key_census.py` holds the rule.
"""


def render_markdown() -> str:
    """docs/findings.md: the catalogue as a table, then the rules some codes need in full."""
    rows = [
        f"| {info.code} | {info.severity.value} | {info.condition} | {info.action} |" for info in CATALOGUE.values()
    ]
    return _DOCS_HEAD + "\n".join(rows) + "\n" + _DOCS_TAIL


if __name__ == "__main__":  # pragma: no cover - documentation generator
    import sys

    sys.stdout.write(render_markdown())
