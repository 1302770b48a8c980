"""Translate between the formats with a writer (z-lab, speculators, the Muse Glimmer assistant):
refuse what would change behaviour, then render.

The writers live in `dialects` (one per format, each saying which formats it renders from and
what it cannot render: `dialects.render_refusal`); this module adds convert's side: which drafts
may cross (`check_cross_dialect`), the restore record that makes a round trip exact, and the
decisions that tell the user what was mapped.
"""

from __future__ import annotations

import json
from typing import Any

from dflash_tools import dialects
from dflash_tools._version import __version__
from dflash_tools.convert.decide import Decision
from dflash_tools.convert.json_edit import detect_style, dumps_like, embed_text, embedded_text, same_json
from dflash_tools.dialects import speculators as speculators_dialect
from dflash_tools.dialects import zlab as zlab_dialect
from dflash_tools.draft.description import RESTORE_KEY, Algorithm, DraftDescription
from dflash_tools.draft.geometry import Geometry
from dflash_tools.draft.target import TargetDescription
from dflash_tools.errors import OperationError
from dflash_tools.findings import brief_list

# Cross-dialect outputs carry the source config under RESTORE_KEY, so converting back restores it
# exactly (key order, auto_map, token ids, versions...). Engines and both dialects' loaders
# ignore unknown top-level keys.
TARGET_FAMILIES = tuple(dialects.WRITERS)  # the dialects with a writer


def check_cross_dialect(desc: DraftDescription, destination: str) -> None:
    """Refuse every translation that would change behaviour without saying so (docs/rules.md, "Dialects")."""
    if desc.algorithm not in (Algorithm.DFLASH, Algorithm.DFLASH2):
        raise OperationError(
            f"--to {destination}: cross-dialect conversion covers DFlash and DFlash2 drafts, "
            f"and this is a {desc.dialect.value} draft",
            "drop --to to normalize it in its own dialect",
        )
    refusal = dialects.render_refusal(destination, desc)
    if refusal is not None:
        raise OperationError(
            f"--to {destination}: cross-dialect conversion covers the pairs of formats with a writer that map without "
            f"loss, and {refusal}; this is a {desc.dialect.value} draft",
            "drop --to to normalize it in its own dialect",
        )
    vocab, draft_vocab = desc.decoder.vocab_size, desc.draft_vocab_size
    if desc.algorithm is Algorithm.DFLASH2 and desc.reduced_vocabulary:
        raise OperationError(
            f"DFlash2 needs the full target vocabulary, but draft_vocab_size {draft_vocab} != vocab_size {vocab}: "
            "no dialect can serve this draft as it stands",
            "re-export the draft with the full vocabulary (or, if it is full, set draft_vocab_size to vocab_size)",
        )
    if destination == "zlab" and desc.reduced_vocabulary:
        absent = "draft_vocab_size" not in desc.raw_config
        raise OperationError(
            f"reduced vocabulary (draft_vocab_size {draft_vocab}"
            + (" by speculators' class default, the key is absent" if absent else "")
            + f", vocab_size {vocab}, d2t map) has no z-lab equivalent: z-lab drafts predict the full vocabulary",
            f'if the draft predicts the full vocabulary, add "draft_vocab_size": {vocab} first; '
            "otherwise keep it in speculators form (drop --to zlab)"
            if absent
            else "keep it in speculators form (drop --to zlab)",
        )
    if desc.dflash2 is not None:
        for key in zlab_dialect.DFLASH2_SCALARS:
            value = getattr(desc.dflash2, key)
            if zlab_dialect.scalar_is_default(key, value):
                continue
            if destination == "speculators":
                raise OperationError(
                    f"dflash_config.{key} = {value} has no speculators equivalent (speculators and vLLM's "
                    "speculators path ignore it): the converted draft would behave differently",
                    "keep it in z-lab form (drop --to speculators)",
                )
            raise OperationError(
                f"{key} = {value} is stored but speculators never applied it, and z-lab would: "
                "the converted draft would behave differently",
                f"remove {key} from config.json if the draft was trained without it, then convert again",
            )
    if destination == "speculators" and desc.is_causal is True:
        layer_types = desc.decoder.layer_types
        if layer_types is None or "full_attention" in layer_types:
            raise OperationError(
                "is_causal: true makes every layer causal, and speculators has no form for causal "
                "full-attention layers (its full-attention layers are always bidirectional)",
                "keep it in z-lab form (drop --to speculators)",
            )


def _verifier_record(target: TargetDescription | None) -> dict[str, Any] | None:
    if target is None:
        return None
    return {"architectures": list(target.architectures), "name_or_path": target.source}


def fill_missing_verifier(config: dict[str, Any], target: TargetDescription, decisions: list[Decision]) -> None:
    spec = config.get("speculators_config")
    if not isinstance(spec, dict):
        return
    verifier = spec.get("verifier")
    if isinstance(verifier, dict) and verifier.get("name_or_path"):
        return
    spec["verifier"] = _verifier_record(target)
    decisions.append(
        Decision(
            "speculators_config.verifier", target.source, "flag", f"verifier recorded from --target {target.source}"
        )
    )


def restore_record(source_config: dict[str, Any], destination: str) -> tuple[str, dict[str, Any]] | None:
    """The dialect and config an earlier conversion kept under RESTORE_KEY, when that dialect is
    of the `destination` family (None: no usable record)."""
    record = source_config.get(RESTORE_KEY)
    if not (isinstance(record, dict) and isinstance(record.get("config"), dict)):
        return None
    dialect = record.get("dialect")
    recorded = dialects.by_name(dialect) if isinstance(dialect, str) else None
    if recorded is None or recorded.family != destination:
        return None
    return record["dialect"], record["config"]


def cross_text(config: dict[str, Any], source_config: dict[str, Any], source_text: str | None, destination: str) -> str:
    """The translated config as text, in the source file's style.

    Restored from a record, it is written as an edit of the kept config (itself written out in
    that style), the way normalizing the original edits the original: a key the writer adds
    (the explicit layout flag, say) lands where normalization puts it, so the round trip gives
    the normalized bytes back, not only its keys and values.
    The record itself keeps the source's bytes (re-indented: `embed_text`), so that converting
    back edits the source's own text, one-line lists and all.
    """
    restored = restore_record(source_config, destination)
    if restored is None:
        fresh = dumps_like(config, None, style_from=source_text)
        record = config.get(RESTORE_KEY)
        if source_text is None or not isinstance(record, dict) or RESTORE_KEY in source_config:
            return fresh
        return embed_text(fresh, (RESTORE_KEY, "config"), source_text)
    style = detect_style(source_text) if source_text is not None else None
    kept = embedded_text(source_text, (RESTORE_KEY, "config")) if source_text is not None else None
    if kept is None or style is None or not same_json(json.loads(kept), restored[1]):
        return dumps_like(config, dumps_like(restored[1], None, style_from=source_text))
    return dumps_like(config, kept + style.trailing)


def render_cross(
    source_config: dict[str, Any],
    desc: DraftDescription,
    destination: str,
    geometry: Geometry,
    target: TargetDescription | None,
    decisions: list[Decision],
    warnings: list[str],
) -> dict[str, Any]:
    stripped = {k: v for k, v in source_config.items() if k != RESTORE_KEY}
    plain = dialects.read(stripped)
    restored = restore_record(source_config, destination)
    record_dialect, base = restored if restored is not None else ("", None)
    config = dialects.render(
        destination,
        plain,
        geometry,
        base_config=base,
        verifier=_verifier_record(target),
        num_target_layers=target.num_hidden_layers if target is not None else None,
    )
    if base is not None:
        decisions.append(
            Decision(
                RESTORE_KEY,
                None,
                "mapped",
                f"restored the original {record_dialect} config kept by an earlier conversion",
            )
        )
    else:
        config[RESTORE_KEY] = {
            "dialect": desc.dialect.value,
            "written_by": f"dflash-tools {__version__}",
            "config": stripped,
        }
        decisions.append(
            Decision(
                RESTORE_KEY,
                desc.dialect.value,
                "mapped",
                f"the source config is kept under {RESTORE_KEY}, so converting back restores it exactly",
            )
        )
    source_spec, destination_spec = desc.spec, dialects.WRITERS[destination].SPEC
    offset = destination_spec.layer_id_offset - source_spec.layer_id_offset
    if offset:
        shifted = [i + destination_spec.layer_id_offset for i in desc.target_layer_ids]
        decisions.append(
            Decision(
                "layer ids",
                shifted,
                "mapped",
                f"layer ids shifted by {offset:+d}: {source_spec.title} "
                f"{brief_list([i + source_spec.layer_id_offset for i in desc.target_layer_ids])} -> "
                f"{destination_spec.title} {brief_list(shifted)}",
            )
        )
    if source_spec.causality is destination_spec.causality:
        # Both formats state causality with is_causal (z-lab, the Muse Glimmer assistant): the
        # writer spells it the way its format defaults it.
        causal = desc.is_causal
        decisions.append(
            Decision(
                "is_causal",
                causal,
                "mapped",
                f"is_causal = {str(causal).lower()} ({source_spec.title}), written as {destination_spec.title} states it"
                if causal is not None
                else "no is_causal (sliding layers causal, full-attention layers bidirectional), written as "
                f"{destination_spec.title} states it",
            )
        )
        if target is not None:
            decisions.append(
                Decision(
                    "num_target_layers",
                    target.num_hidden_layers,
                    "flag",
                    f"num_target_layers from --target {target.source}",
                )
            )
    elif destination == "speculators":
        non_causal = desc.is_causal is False
        origin = (
            "is_causal: false"
            if desc.is_causal is False
            else "no is_causal (sliding layers causal, full layers bidirectional)"
        )
        decisions.append(
            Decision(
                "sliding_window_non_causal",
                non_causal,
                "mapped",
                f"sliding_window_non_causal = {str(non_causal).lower()} from z-lab {origin}",
            )
        )
        layer_types = desc.decoder.layer_types
        if not non_causal and (layer_types is None or "full_attention" in layer_types):
            warnings.append(
                "the speculators form has sliding_window_non_causal = false with full-attention layers: "
                "vLLM runs those layers causally (DFT040); serve the z-lab form to keep them bidirectional"
            )
        if target is None:
            warnings.append("no --target: speculators_config.verifier is left empty; pass --target to record it")
        else:
            decisions.append(
                Decision(
                    "speculators_config.verifier",
                    target.source,
                    "flag",
                    f"verifier recorded from --target {target.source}",
                )
            )
    else:
        non_causal = speculators_dialect.sliding_window_non_causal(desc)
        how = (
            "explicit" if desc.sliding_window_non_causal is not None else f"speculators {desc.algorithm.value} default"
        )
        decisions.append(
            Decision(
                "is_causal",
                False if non_causal else None,
                "mapped",
                f"sliding_window_non_causal = {str(non_causal).lower()} ({how}) -> "
                + (
                    "is_causal: false (every layer bidirectional)" if non_causal else "no is_causal (per-layer default)"
                ),
            )
        )
        if target is not None:
            decisions.append(
                Decision(
                    "num_target_layers",
                    target.num_hidden_layers,
                    "flag",
                    f"num_target_layers from --target {target.source}",
                )
            )
    return config
