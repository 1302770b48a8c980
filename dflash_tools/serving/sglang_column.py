"""SGLang's column of `inspect --engine`: what one SGLang release does with the draft.

SGLang serves DFlash and DFlash2 on its `DFLASH` path and DSpark on `DSPARK`; each key is read
where the release's table says (`dflash_tools.engine_rules`), and the launch line passes the
block (DFLASH: the verify window, drafts + 1; DSPARK: the number of drafts) the draft was
trained with. The steps every engine shares are `column_steps`.
"""

from __future__ import annotations

from dflash_tools.engine_rules import Outcome, WhenMissing
from dflash_tools.serving.column_steps import (
    compare_layer_ids,
    compare_mask,
    feature_outcomes,
    layout_outcome,
    matches_training,
    record_layout_read,
    resolve_layer_ids,
    run_checks,
)
from dflash_tools.serving.config_reads import as_int, lookup, source_name
from dflash_tools.serving.engine_model import DraftFacts, EngineView, layout_for
from dflash_tools.serving.launch import LaunchSettings, sglang_launch


def sglang_column(view: EngineView, facts: DraftFacts, settings: LaunchSettings | None) -> None:
    """Fill in `view` (format and route already checked) for an SGLang release."""
    path = view.path
    assert path is not None
    block, location = _block_size(view, facts, path)
    layout_outcome(view, facts, *_layout(view, facts, path))
    view.draft_tokens = _draft_tokens(facts, path, block)
    _sglang_block_warnings(view, facts, block, location)
    resolve_layer_ids(view, facts)
    ids_match = compare_layer_ids(view, facts)
    _mask_token(view, facts, path)
    mask_match = compare_mask(view, facts)
    run_checks(view, facts)
    feature_outcomes(view, facts)
    view.matches_training = matches_training(view, facts, ids_match, mask_match)
    if view.serves_as_trained and view.draft_tokens:
        view.launch = sglang_launch(
            view.rules,
            draft=facts.draft,
            path=path,
            num_draft_tokens=view.draft_tokens,
            target=facts.target,
            draft_revision=facts.draft_revision,
            settings=settings,
        )


def _block_size(view: EngineView, facts: DraftFacts, path: str) -> tuple[int | None, str | None]:
    """The block the release uses (DFLASH: the verify window; DSPARK: the number of drafts), and
    where it read it (None: its default)."""
    block_rule = view.rules.key("block_size", path)
    value, location = lookup(facts.config, block_rule)
    block = as_int(value)
    if location is not None and value is not None and (block is None or block < 1):
        reason = f"{location} is {value!r}, not a positive block size"
        view.fail(Outcome.REFUSED, reason)
        view.note("DFT074", reason, keys=(location,))
    if block is None and block_rule is not None:
        block, location = int(block_rule.default), None
    view.block_size, view.block_size_source = block, source_name(location)
    return block, location


def _layout(view: EngineView, facts: DraftFacts, path: str) -> tuple[str, str]:
    """Sets the layout the release serves; returns (the table's algorithm key, what it reads)."""
    rules, config = view.rules, facts.config
    if facts.domino and path != "DSPARK":
        shift_rule = rules.key("shift_label", path)
        shift, shift_location = lookup(config, shift_rule)
        view.layout = layout_for(shift is True) if isinstance(shift, bool) else None
        unread = record_layout_read(view, facts, shift_rule.locations if shift_rule else (), shift_location)
        return "dflash-domino", f"it reads {shift_location} = {shift!r}{unread}"
    # The table's reading of sample_from_anchor: DSPARK reads it (absent: true); a DFLASH that
    # reads it nowhere is always bonus, so a release that starts reading it changes this view
    # through its table alone.
    sfa_rule = rules.key("sample_from_anchor", path)
    sfa, sfa_location = lookup(config, sfa_rule)
    default = bool(sfa_rule.default) if sfa_rule is not None else False
    view.layout = layout_for(bool(sfa) if sfa_location is not None and sfa is not None else default)
    algorithm_key = facts.algorithm or ""
    unread = record_layout_read(view, facts, sfa_rule.locations if sfa_rule else (), sfa_location)
    if sfa_location is not None:
        return algorithm_key, f"it reads {sfa_location} = {sfa!r}{unread}"
    if sfa_rule is not None and sfa_rule.locations:
        return algorithm_key, f"sample_from_anchor is absent: {str(default).lower()}{unread}"
    always = "every position always drafts" if default else "position 0 is always the anchor"
    return algorithm_key, f"{path} reads no sample_from_anchor: {always}{unread}"


def _draft_tokens(facts: DraftFacts, path: str, block: int | None) -> int | None:
    """How many tokens the launch line drafts. DFLASH drafts one less than its verify window in
    either layout (Domino's shift_label moves the proposals to positions 0..B-2, it does not
    add one), and the window must not grow past the trained block."""
    if path == "DFLASH":
        block_for_launch = facts.trained_block_size or block
        return facts.requested_tokens or (block_for_launch - 1 if block_for_launch else None)
    return facts.requested_tokens or facts.trained_max_tokens or block


def _mask_token(view: EngineView, facts: DraftFacts, path: str) -> None:
    """The mask token id the release reads, or the token it looks up in the target's tokenizer."""
    rules, config = view.rules, facts.config
    mask_rule = rules.key("mask_token_id", path)
    mask, mask_location = lookup(config, mask_rule)
    if mask_location is not None and mask is not None:
        view.mask_token_id, view.mask_token_id_source = as_int(mask), mask_location
        return
    if mask_rule is None or mask_rule.when_missing is not WhenMissing.LOOKED_UP:
        return
    token_rule = rules.key("mask_token", path)
    token, _ = lookup(config, token_rule)
    if not (isinstance(token, str) and token):
        token = token_rule.default if token_rule is not None else None
    view.mask_token_id_source = "looked-up"
    view.note(
        "DFT075",
        f"the config has no mask_token_id: SGLang looks {token!r} up in the target's tokenizer and adds it when "
        "absent, so the id depends on the target",
        "write the mask_token_id the draft was trained with into dflash_config",
        keys=("mask_token_id",),
        values={"mask_token": token},
    )


def _sglang_block_warnings(view: EngineView, facts: DraftFacts, block: int | None, location: str | None) -> None:
    """DFT072 when SGLang, launched without the flag, would use another block than trained."""
    trained = facts.trained_block_size
    if block is None or view.path is None:
        return
    drafts = block - 1 if view.path == "DFLASH" else block
    flag = view.rules.flag("draft-tokens" if view.path == "DFLASH" else "dspark-block-size")
    flag_name = flag.name if flag is not None else ""
    if location is None:
        passes = (
            f"the launch line below passes {flag_name} {trained if view.path == 'DFLASH' else facts.trained_max_tokens}"
            if trained is not None
            else f"pass {flag_name} with the trained value"
        )
        view.note(
            "DFT072",
            f"the config has no block_size it reads, so without {flag_name} it uses {block}: K = {drafts} drafts "
            "per step",
            f"{passes}; or write it into the config: `dflash-tools convert SRC -o OUT --block-size N`",
            keys=("block_size",),
            values={"block_size": block, "draft_tokens": drafts},
        )
    elif view.path == "DSPARK" and facts.trained_max_tokens is not None and drafts > facts.trained_max_tokens:
        view.note(
            "DFT072",
            f"DSPARK drafts block_size = {block} tokens per step unless {flag_name} is passed, but this bonus-layout "
            f"draft was trained for {facts.trained_max_tokens}",
            f"the launch line below passes {flag_name} {facts.trained_max_tokens}",
            keys=("block_size",),
        )
