"""Config-level checks that need neither tensors nor a target.

What depends on the format (where the mask token is expected, how the file numbers layers, how
causality is stated) is read from the draft's dialect spec (`desc.spec`), never from its name.
"""

from __future__ import annotations

from collections import Counter

from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.findings import Finding, brief_list, make_finding


def check_config(desc: DraftDescription) -> list[Finding]:
    findings: list[Finding] = []
    findings.extend(check_layer_id_order(desc))
    findings.extend(check_mask_token(desc))
    findings.extend(check_causality(desc))
    findings.extend(check_dflash2_vocabulary(desc))
    return findings


def _raw_ids(desc: DraftDescription) -> list[int]:
    """Layer ids as the file writes them (for messages that quote the file)."""
    offset = desc.spec.layer_id_offset
    return [i + offset for i in desc.target_layer_ids]


def check_layer_id_order(desc: DraftDescription) -> list[Finding]:
    ids = desc.target_layer_ids
    key = desc.target_layer_ids_key
    findings: list[Finding] = []
    if not ids:
        findings.append(
            make_finding("DFT030", f"{key} is empty: the draft captures no target layer", f"set {key}", keys=(key,))
        )
        return findings
    # Linear: a config may list a million ids (ids.count(i) per id took minutes at 80,000).
    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    if duplicates:
        findings.append(
            make_finding(
                "DFT030",
                f"{key} repeats layer ids {brief_list(duplicates)}: {brief_list(_raw_ids(desc))}",
                "each captured layer must appear once, in the order the draft was trained with",
                keys=(key,),
                values={key: _raw_ids(desc)},
            )
        )
    elif any(later < earlier for earlier, later in zip(ids, ids[1:], strict=False)):
        findings.append(
            make_finding(
                "DFT030",
                f"{key} is not increasing: {brief_list(_raw_ids(desc))}; vLLM sorts the ids, which silently permutes the fc input",
                "list the ids in increasing order, and permute fc.weight's input blocks to match if training used this order",
                keys=(key,),
                values={key: _raw_ids(desc)},
            )
        )
    spec = desc.spec
    if spec.layer_id_offset == 1 and -1 in ids:  # raw id 0 (hidden_states indices are z-lab id + 1)
        findings.append(
            make_finding(
                "DFT033",
                f"{key} contains 0, the embedding output: {spec.title} ids are hidden_states indices (z-lab id + 1), "
                "so these ids look written in the z-lab convention",
                "if the ids were copied from a z-lab config, add 1 to each (`dflash-tools convert --to speculators` does it)",
                keys=(key,),
                values={key: _raw_ids(desc)},
            )
        )
    lowest = spec.lowest_layer_id
    negative = [i for i in ids if i < lowest]
    if negative:
        findings.append(
            make_finding(
                "DFT030",
                f"{key} has ids below {lowest}: {brief_list(_raw_ids(desc))}",
                "layer ids are 0-based target layer indices",
                keys=(key,),
                values={key: _raw_ids(desc)},
            )
        )
    return findings


def check_mask_token(desc: DraftDescription) -> list[Finding]:
    if desc.mask_token_id is None:
        where = desc.spec.keys.algorithm_path("mask_token_id")
        return [
            make_finding(
                "DFT032",
                f"{where} is missing: vLLM refuses to load a DFlash draft without a mask token",
                f"set {where} to the mask token the draft was trained with",
                keys=(where,),
            )
        ]
    if desc.mask_token_id >= desc.decoder.vocab_size:
        return [
            make_finding(
                "DFT032",
                f"{desc.mask_token_id_key} = {desc.mask_token_id} is outside the vocabulary (vocab_size {desc.decoder.vocab_size})",
                "use the mask token id of the target tokenizer",
                keys=(desc.mask_token_id_key or "mask_token_id", "vocab_size"),
                values={"mask_token_id": desc.mask_token_id, "vocab_size": desc.decoder.vocab_size},
            )
        ]
    return []


def check_causality(desc: DraftDescription) -> list[Finding]:
    """vLLM maps speculators `sliding_window_non_causal` to one causal flag for every layer."""
    spec = desc.spec
    if (
        not spec.one_causal_flag_when_served
        or desc.algorithm is Algorithm.DSPARK
        or desc.sliding_window_non_causal is not False
    ):
        return []
    layer_types = desc.decoder.layer_types
    full = (
        [i for i, t in enumerate(layer_types) if t == "full_attention"]
        if layer_types is not None
        else list(range(desc.decoder.num_hidden_layers))
    )
    if not full:
        return []
    return [
        make_finding(
            "DFT040",
            f"sliding_window_non_causal is false: vLLM sets dflash_config.causal = true for every layer, so "
            f"full-attention layers {brief_list(full)} run causally although speculators trained them bidirectional",
            "serve a z-lab conversion (`dflash-tools convert SRC -o OUT --to zlab`) or a vLLM that honours per-layer causality",
            keys=("sliding_window_non_causal", f"{spec.keys.decoder[0]}layer_types"),
            values={"full_attention_layers": full},
        )
    ]


def check_dflash2_vocabulary(desc: DraftDescription) -> list[Finding]:
    if desc.algorithm is not Algorithm.DFLASH2 or not desc.reduced_vocabulary:
        return []
    return [
        make_finding(
            "DFT032",
            f"DFlash2 needs the full vocabulary, but draft_vocab_size {desc.draft_vocab_size} != vocab_size "
            f"{desc.decoder.vocab_size}: the candidate selector scores over the target head without a d2t map",
            "retrain or export the draft with the full target vocabulary",
            keys=("draft_vocab_size", "vocab_size"),
            values={"draft_vocab_size": desc.draft_vocab_size, "vocab_size": desc.decoder.vocab_size},
        )
    ]
