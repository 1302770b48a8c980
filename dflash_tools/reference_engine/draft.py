"""The DFlash / DFlash2 draft in plain torch: one forward drafts a whole block.

Per request the draft keeps a context of per-layer keys and values, one row per token the target
has committed. A row is built from the target's captured hidden states alone:
`feat = hidden_norm(fc(concat(captured layers)))`, then `k = RoPE(k_norm(k_proj(feat)))` and
`v = v_proj(feat)` at the token's absolute position. No input norm and no convolution touch the
context, and rejected tokens never reach it.

A draft step runs Q query rows at positions P .. P + Q - 1 (P = position of the anchor, the last
verified token not yet run through the target): row 0 holds the anchor's embedding, the others the
mask token's, all taken from the target's embedding table (times `input_embedding_scale`). Queries
attend over [context; block] with the layer's own causality (`layer_attention`) and the sliding
window as vLLM serves it (`served_key_mask`). A layer is

    x = input_layernorm(h);          (x, kernel) = attention_conv.prepare(x)     # DFlash2 only
    a = o_proj(attention(x));        h = h + attention_conv.finish(a, kernel)
    x = post_attention_layernorm(h); (x, kernel) = mlp_conv.prepare(x)
    m = down(silu(gate(x)) * up(x)); h = h + mlp_conv.finish(m, kernel)

and the block's final `norm` feeds the target's LM head. Bonus-anchor (sample_from_anchor false)
reads rows 1 .. K (row j predicts position P + j); anchor-first reads rows 0 .. K - 1 (row j
predicts P + j + 1). Either way the K drafts are the tokens at positions P + 1 .. P + K.

DFlash2 grouped dynamic convolution over the block's rows l (taps o, channel c, side s: 0 on the
sublayer input, 1 on its output; both sides' dynamic kernels come from `prepare`'s input):

    dyn = kernel_projection(x) viewed [2 sides, T taps, H / group_size groups]
    out[l, c] = sum over o <= l of (base_kernel[s, o, c] + dyn[l, s, o, c // group_size]) * y[l - o, c]

Taps never reach across the block boundary: row 0 has no predecessor.

DFlash2 candidate selector: per draft row, the top-k of the (scaled, soft-capped) logits are the
candidates with their logits as unary scores, `h = hidden_projection(row)`, and the walk starts at
the anchor: `score(c) = unary(c) + sum_r predecessor_codebook[prev, r] * h[r] *
successor_codebook[c, r]`; the first maximum is the draft and becomes `prev`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.draft.dialect_spec import Causality
from dflash_tools.errors import OperationError
from dflash_tools.reference_engine import ops

DEFAULT_RMS_NORM_EPS = 1e-6


@dataclass(frozen=True)
class LayerAttention:
    causal: bool
    window: int | None


def layer_attention(desc: DraftDescription) -> list[LayerAttention]:
    """Each layer's causality and sliding window, as the draft was trained (docs/rules.md, "Decisions").

    z-lab: top-level `is_causal` for every layer, else `dflash_config.causal` for every layer, else
    sliding layers causal and full-attention layers bidirectional. speculators / Open Spec:
    full-attention layers are always bidirectional; sliding layers are bidirectional when
    `sliding_window_non_causal` is true (class default: true for DFlash2, false for DFlash).
    vLLM 0.33.0's all-layer mapping of the speculators flag (DFT040) is deliberately not copied.
    """
    decoder = desc.decoder
    count = decoder.num_hidden_layers
    dflash_config = desc.raw_config.get("dflash_config")
    dflash_config = dflash_config if isinstance(dflash_config, dict) else {}
    types = decoder.layer_types
    window = decoder.sliding_window
    if types is None:
        if dflash_config.get("use_swa") is True:
            types = ["sliding_attention"] * count
            swa = dflash_config.get("swa_window_size")
            window = swa if isinstance(swa, int) and not isinstance(swa, bool) else window
        else:
            types = ["full_attention"] * count
    if len(types) < count:
        raise OperationError(
            f"layer_types has {len(types)} entries for {count} layers", "list one type per draft layer"
        )
    is_causal_format = desc.spec.causality is Causality.IS_CAUSAL
    all_layers = desc.is_causal if is_causal_format else None
    if all_layers is None and is_causal_format and isinstance(dflash_config.get("causal"), bool):
        all_layers = dflash_config["causal"]
    non_causal_sliding = desc.sliding_window_non_causal
    if non_causal_sliding is None:
        non_causal_sliding = desc.algorithm is Algorithm.DFLASH2
    out = []
    for index in range(count):
        sliding = types[index] == "sliding_attention"
        if sliding and window is None:
            raise OperationError(
                f"layer {index} is sliding_attention but no sliding_window is set", "add sliding_window to the config"
            )
        if all_layers is not None:
            causal = all_layers
        elif is_causal_format:
            causal = sliding
        else:
            causal = sliding and not non_causal_sliding
        out.append(LayerAttention(causal=causal, window=window if sliding else None))
    return out


def served_key_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, mode: LayerAttention) -> torch.Tensor:
    """[Q, N] bool: which keys each block row sees when vLLM 0.33.0 serves the draft.

    The window is measured from each query row, both ways for a bidirectional layer: the query at q
    sees the key at p iff |q - p| < W (and p <= q when causal). This is the rule of
    `draft.sliding_window.served_key_visible`, not speculators' training rule (window measured from the
    anchor, block keys never windowed); docs/sliding-window.md has the derivation and the gap.
    """
    offsets = query_positions[:, None] - key_positions[None, :]
    allowed = torch.ones_like(offsets, dtype=torch.bool)
    if mode.causal:
        allowed &= offsets >= 0
    if mode.window is not None:
        allowed &= offsets.abs() < mode.window
    return allowed


@dataclass
class DraftState:
    """One request's context: per layer, keys and values of every committed token."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    positions: torch.Tensor
    query_positions: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.positions.shape[0])


Fetch = Callable[[str], "torch.Tensor | None"]


def need_tensor(get: Fetch, name: str, owner: str = "draft") -> torch.Tensor:
    value = get(name)
    if value is None:
        raise OperationError(f"{owner} tensor {name} is missing", f"run `dflash-tools inspect` on the {owner}")
    return value


class _Layer:
    def __init__(self, prefix: str, get: Fetch, has_conv: bool) -> None:
        def need(name: str) -> torch.Tensor:
            return need_tensor(get, prefix + name)

        def maybe(name: str) -> torch.Tensor | None:
            return get(prefix + name)

        self.input_layernorm = need("input_layernorm.weight")
        self.post_attention_layernorm = need("post_attention_layernorm.weight")
        self.q_proj, self.q_bias = need("self_attn.q_proj.weight"), maybe("self_attn.q_proj.bias")
        self.k_proj, self.k_bias = need("self_attn.k_proj.weight"), maybe("self_attn.k_proj.bias")
        self.v_proj, self.v_bias = need("self_attn.v_proj.weight"), maybe("self_attn.v_proj.bias")
        self.o_proj, self.o_bias = need("self_attn.o_proj.weight"), maybe("self_attn.o_proj.bias")
        self.q_norm = need("self_attn.q_norm.weight")
        self.k_norm = need("self_attn.k_norm.weight")
        self.gate = need("mlp.gate_proj.weight")
        self.up = need("mlp.up_proj.weight")
        self.down = need("mlp.down_proj.weight")
        self.convs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        if has_conv:
            for conv in ("attention_conv", "mlp_conv"):
                self.convs[conv] = (need(conv + ".base_kernel"), need(conv + ".kernel_projection.weight"))


def grouped_conv(rows: torch.Tensor, base: torch.Tensor, dynamic: torch.Tensor, group_size: int) -> torch.Tensor:
    """One side of the DFlash2 convolution over one block.

    rows [Q, H]; base [T, H]; dynamic [Q, T, G] with G = H / group_size. Row l reads rows l - o for
    taps o <= l only: nothing crosses the block boundary.
    """
    num_rows = rows.shape[0]
    out = torch.zeros_like(rows)
    for tap in range(min(base.shape[0], num_rows)):
        coefficients = base[tap][None, :] + dynamic[:, tap, :].repeat_interleave(group_size, dim=-1)
        shifted = torch.zeros_like(rows)
        shifted[tap:] = rows[: num_rows - tap]
        out = out + coefficients * shifted
    return out


class DraftModel:
    """The draft's weights on one device and dtype, with the target's embeddings and head."""

    def __init__(
        self,
        desc: DraftDescription,
        tensors: dict[str, torch.Tensor],
        *,
        target_embeddings: torch.Tensor,
        target_lm_head: torch.Tensor,
        device: torch.device,
        dtype: torch.dtype,
        use_selector: bool | None = None,
    ) -> None:
        if desc.algorithm is Algorithm.DSPARK:
            raise OperationError(
                "DSpark drafts are not implemented in the torch engine (its Markov head chains the slots)",
                "use --runtime vllm for DSpark drafts",
            )
        self.desc = desc
        self.device, self.dtype = device, dtype
        decoder = desc.decoder
        self.hidden_size = decoder.hidden_size
        self.num_heads, self.num_kv_heads = decoder.num_attention_heads, decoder.num_key_value_heads
        self.head_dim = decoder.head_dim
        self.eps = float(decoder.rms_norm_eps or DEFAULT_RMS_NORM_EPS)
        self.mask_token_id = desc.mask_token_id
        if self.mask_token_id is None:
            raise OperationError(
                "the draft config has no mask_token_id", "add mask_token_id where the dialect keeps it"
            )
        self.attention = layer_attention(desc)
        self.inverse_frequencies, self.position_scale = ops.rope_inverse_frequencies(
            self.head_dim, decoder.rope, "draft"
        )
        self.scale = self.head_dim**-0.5

        def get(name: str) -> torch.Tensor | None:
            value = tensors.get(name)
            return None if value is None else value.to(device=device, dtype=dtype)

        self.spec2 = desc.dflash2
        is_dflash2 = desc.algorithm is Algorithm.DFLASH2
        self.layers = [_Layer(f"layers.{i}.", get, is_dflash2) for i in range(decoder.num_hidden_layers)]
        self.fc = need_tensor(get, "fc.weight")
        self.hidden_norm = need_tensor(get, "hidden_norm.weight")
        self.norm = need_tensor(get, "norm.weight")

        own_embed = get("embed_tokens.weight")
        self.embeddings = own_embed if own_embed is not None else target_embeddings.to(device=device, dtype=dtype)
        own_head = get("lm_head.weight")
        d2t = tensors.get("d2t")
        self.draft_to_target: torch.Tensor | None = None
        if own_head is not None and d2t is not None:
            self.lm_head = own_head
            self.draft_to_target = torch.arange(d2t.shape[0], device=device) + d2t.to(device=device, dtype=torch.long)
        elif own_head is not None and own_head.shape[0] == target_lm_head.shape[0]:
            self.lm_head = own_head
        elif own_head is not None:
            raise OperationError(
                f"lm_head.weight has {own_head.shape[0]} rows, the target's vocabulary {target_lm_head.shape[0]}, "
                "and there is no d2t to map draft ids to target ids",
                "restore the draft's d2t tensor",
            )
        else:
            self.lm_head = target_lm_head.to(device=device, dtype=dtype)
        if self.embeddings.shape[1] != self.hidden_size or self.lm_head.shape[1] != self.hidden_size:
            raise OperationError(
                f"draft hidden_size {self.hidden_size} but the target's embeddings are {self.embeddings.shape[1]} wide",
                "pair the draft with the target it was trained for",
            )
        if self.mask_token_id >= self.embeddings.shape[0]:
            raise OperationError(
                f"mask_token_id {self.mask_token_id} is outside the {self.embeddings.shape[0]}-token embedding table",
                "pair the draft with the target it was trained for",
            )

        self.selector: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.input_scale = 1.0
        self.output_multiplier = 1.0
        self.softcap: float | None = None
        if is_dflash2:
            spec = self.spec2
            assert spec is not None
            if self.hidden_size % spec.conv_group_size:
                raise OperationError(
                    f"conv_group_size={spec.conv_group_size} must divide hidden_size={self.hidden_size}", ""
                )
            self.input_scale = float(spec.input_embedding_scale if spec.input_embedding_scale is not None else 1.0)
            self.output_multiplier = float(spec.output_multiplier if spec.output_multiplier is not None else 1.0)
            cap = spec.final_logit_softcapping
            self.softcap = float(cap) if cap else None
            if use_selector is None or use_selector:
                if self.draft_to_target is not None:
                    raise OperationError(
                        "DFlash2 needs the full target vocabulary; this draft has a reduced one (d2t)", ""
                    )
                self.selector = (
                    need_tensor(get, "candidate_selector.predecessor_codebook"),
                    need_tensor(get, "candidate_selector.successor_codebook"),
                    need_tensor(get, "candidate_selector.hidden_projection.weight"),
                )
        elif use_selector:
            raise OperationError("algorithm dflash2 requested, but the draft is a plain DFlash draft", "")

    @property
    def fc_input_width(self) -> int:
        return int(self.fc.shape[1])

    def new_state(self) -> DraftState:
        empty = torch.zeros(self.num_kv_heads, 0, self.head_dim, device=self.device, dtype=self.dtype)
        return DraftState(
            keys=[empty for _ in self.layers],
            values=[empty for _ in self.layers],
            positions=torch.zeros(0, dtype=torch.long, device=self.device),
        )

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.rope_cos_sin(positions, self.inverse_frequencies, self.position_scale, self.dtype)

    def _heads(self, x: torch.Tensor, count: int) -> torch.Tensor:
        return x.view(x.shape[0], count, self.head_dim).transpose(0, 1)

    def append_context(self, state: DraftState, captured: torch.Tensor, positions: torch.Tensor) -> None:
        """Add committed tokens: captured [n, fc input width] target hidden states at `positions`."""
        if captured.shape[1] != self.fc_input_width:
            raise OperationError(
                f"the draft's fc expects {self.fc_input_width} captured features per token, the target gave "
                f"{captured.shape[1]}",
                "check target_layer_ids and the target's hidden size against this target",
            )
        features = ops.rms_norm(ops.linear(captured.to(self.dtype), self.fc), self.hidden_norm, self.eps)
        cos, sin = self._rope(positions)
        for index, layer in enumerate(self.layers):
            keys = self._heads(ops.linear(features, layer.k_proj, layer.k_bias), self.num_kv_heads)
            keys = ops.apply_rope(ops.rms_norm(keys, layer.k_norm, self.eps), cos, sin)
            values = self._heads(ops.linear(features, layer.v_proj, layer.v_bias), self.num_kv_heads)
            state.keys[index] = torch.cat((state.keys[index], keys), dim=1)
            state.values[index] = torch.cat((state.values[index], values), dim=1)
        state.positions = torch.cat((state.positions, positions.to(self.device)))

    def _conv_prepare(self, layer: _Layer, name: str, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not layer.convs:
            return rows, None
        base, projection = layer.convs[name]
        taps, group_size = base.shape[1], self.hidden_size // (projection.shape[0] // (2 * base.shape[1]))
        dynamic = ops.linear(rows, projection).view(rows.shape[0], 2, taps, -1)
        return grouped_conv(rows, base[0], dynamic[:, 0], group_size), dynamic[:, 1]

    def _conv_finish(self, layer: _Layer, name: str, rows: torch.Tensor, dynamic: torch.Tensor | None) -> torch.Tensor:
        if dynamic is None:
            return rows
        base, _ = layer.convs[name]
        return grouped_conv(rows, base[1], dynamic, self.hidden_size // dynamic.shape[-1])

    def block_hidden(self, state: DraftState, anchor: int, position: int, num_query_tokens: int) -> torch.Tensor:
        """Final-norm hidden states [Q, H] of the block [anchor, mask * (Q - 1)] at position P."""
        assert self.mask_token_id is not None
        token_ids = torch.full((num_query_tokens,), self.mask_token_id, dtype=torch.long, device=self.device)
        token_ids[0] = anchor
        hidden = self.embeddings[token_ids]
        if self.input_scale != 1.0:
            hidden = hidden * self.input_scale
        query_positions = torch.arange(position, position + num_query_tokens, device=self.device)
        cos, sin = self._rope(query_positions)
        key_positions = torch.cat((state.positions, query_positions))
        masks: dict[LayerAttention, torch.Tensor] = {}
        for index, layer in enumerate(self.layers):
            mode = self.attention[index]
            allowed = masks.get(mode)
            if allowed is None:
                allowed = masks[mode] = served_key_mask(query_positions, key_positions, mode)
            rows = ops.rms_norm(hidden, layer.input_layernorm, self.eps)
            rows, kernel = self._conv_prepare(layer, "attention_conv", rows)
            queries = self._heads(ops.linear(rows, layer.q_proj, layer.q_bias), self.num_heads)
            queries = ops.apply_rope(ops.rms_norm(queries, layer.q_norm, self.eps), cos, sin)
            keys = self._heads(ops.linear(rows, layer.k_proj, layer.k_bias), self.num_kv_heads)
            keys = ops.apply_rope(ops.rms_norm(keys, layer.k_norm, self.eps), cos, sin)
            values = self._heads(ops.linear(rows, layer.v_proj, layer.v_bias), self.num_kv_heads)
            attended = ops.attention(
                queries,
                torch.cat((state.keys[index], keys), dim=1),
                torch.cat((state.values[index], values), dim=1),
                allowed,
                self.scale,
            )
            out = self._conv_finish(layer, "attention_conv", ops.linear(attended, layer.o_proj, layer.o_bias), kernel)
            hidden = hidden + out
            rows = ops.rms_norm(hidden, layer.post_attention_layernorm, self.eps)
            rows, kernel = self._conv_prepare(layer, "mlp_conv", rows)
            out = self._conv_finish(layer, "mlp_conv", ops.silu_mlp(rows, layer.gate, layer.up, layer.down), kernel)
            hidden = hidden + out
        return ops.rms_norm(hidden, self.norm, self.eps)

    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Draft logits in float32 over the head's vocabulary (draft vocabulary when reduced)."""
        logits = ops.linear(rows, self.lm_head).to(torch.float32)
        if self.output_multiplier != 1.0:
            logits = logits * self.output_multiplier
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def propose(
        self, state: DraftState, anchor: int, position: int, num_speculative_tokens: int, sample_from_anchor: bool
    ) -> list[int]:
        """K draft tokens for positions P + 1 .. P + K; runs K (anchor-first) or K + 1 query rows."""
        num_query_tokens = num_speculative_tokens if sample_from_anchor else num_speculative_tokens + 1
        hidden = self.block_hidden(state, anchor, position, num_query_tokens)
        state.query_positions.append(num_query_tokens)
        first = 0 if sample_from_anchor else 1
        rows = hidden[first : first + num_speculative_tokens]
        logits = self.logits(rows)
        if self.selector is None:
            choice = logits.argmax(dim=-1)
            if self.draft_to_target is not None:
                choice = self.draft_to_target[choice]
            return [int(t) for t in choice.tolist()]
        return self._walk(rows, logits, anchor)

    def _walk(self, rows: torch.Tensor, logits: torch.Tensor, anchor: int) -> list[int]:
        assert self.selector is not None and self.spec2 is not None
        predecessor, successor, projection = self.selector
        top_k = min(self.spec2.selector_top_k, logits.shape[-1])
        unary, candidates = torch.topk(logits, top_k, dim=-1)
        context = ops.linear(rows, projection).to(torch.float32)
        predecessor = predecessor.to(torch.float32)
        successor = successor.to(torch.float32)
        previous = anchor
        path: list[int] = []
        # Sequential by nature: each position's predecessor is the previous position's choice.
        for index in range(rows.shape[0]):
            transition = successor[candidates[index]] @ (predecessor[previous] * context[index])
            score = unary[index] + transition
            previous = int(candidates[index, int(torch.argmax(score))])
            path.append(previous)
        return path
