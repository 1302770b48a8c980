"""Expected tensor table from a draft description (docs/rules.md, "Tensors"), compared with the stored headers.

No tensor shape depends on K: these are completeness and consistency checks. vLLM's DFlash
loaders do not report missing tensors (a missing conv kernel serves uninitialized memory), which
is why every required tensor is checked by name and shape.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from enum import StrEnum

from dflash_tools.documents import JsonDocument
from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.safetensors_header import TensorHeader


class Requirement(StrEnum):
    REQUIRED = "required"
    OPTIONAL = "optional"
    FORBIDDEN = "forbidden"


@dataclass(frozen=True)
class ExpectedTensor:
    name: str
    shape: tuple[int, ...]
    requirement: Requirement
    dtype: str | None = None  # None: any floating dtype
    why: str = ""


def expected_tensors(desc: DraftDescription) -> list[ExpectedTensor]:
    d = desc.decoder
    hidden, head_dim = d.hidden_size, d.head_dim
    q_out, kv_out = d.num_attention_heads * head_dim, d.num_key_value_heads * head_dim
    req, opt, forbidden = Requirement.REQUIRED, Requirement.OPTIONAL, Requirement.FORBIDDEN
    out: list[ExpectedTensor] = []
    for i in range(d.num_hidden_layers):
        p = f"layers.{i}."
        out += [
            ExpectedTensor(p + "self_attn.q_proj.weight", (q_out, hidden), req),
            ExpectedTensor(p + "self_attn.k_proj.weight", (kv_out, hidden), req),
            ExpectedTensor(p + "self_attn.v_proj.weight", (kv_out, hidden), req),
            ExpectedTensor(p + "self_attn.o_proj.weight", (hidden, q_out), req),
            ExpectedTensor(p + "self_attn.q_norm.weight", (head_dim,), req),
            ExpectedTensor(p + "self_attn.k_norm.weight", (head_dim,), req),
            ExpectedTensor(p + "mlp.gate_proj.weight", (d.intermediate_size, hidden), req),
            ExpectedTensor(p + "mlp.up_proj.weight", (d.intermediate_size, hidden), req),
            ExpectedTensor(p + "mlp.down_proj.weight", (hidden, d.intermediate_size), req),
            ExpectedTensor(p + "input_layernorm.weight", (hidden,), req),
            ExpectedTensor(p + "post_attention_layernorm.weight", (hidden,), req),
        ]
        bias_need = req if d.attention_bias else forbidden
        why = "attention_bias is false: engines drop it" if not d.attention_bias else ""
        for proj, size in (("q", q_out), ("k", kv_out), ("v", kv_out), ("o", hidden)):
            out.append(ExpectedTensor(f"{p}self_attn.{proj}_proj.bias", (size,), bias_need, why=why))
        if desc.algorithm is Algorithm.DFLASH2 and desc.dflash2 is not None:
            taps = desc.dflash2.conv_kernel_size
            groups = hidden // desc.dflash2.conv_group_size if desc.dflash2.conv_group_size else 0
            for conv in ("attention_conv", "mlp_conv"):
                out.append(ExpectedTensor(f"{p}{conv}.base_kernel", (2, taps, hidden), req))
                out.append(ExpectedTensor(f"{p}{conv}.kernel_projection.weight", (2 * taps * groups, hidden), req))
    out += [
        ExpectedTensor("fc.weight", (hidden, desc.fc_input_width), req),
        ExpectedTensor("hidden_norm.weight", (hidden,), req),
        ExpectedTensor("norm.weight", (hidden,), req),
        ExpectedTensor("embed_tokens.weight", (d.vocab_size, hidden), opt),
    ]
    if desc.reduced_vocabulary:
        out += [
            ExpectedTensor(
                "lm_head.weight", (desc.draft_vocab_size, hidden), req, why="draft_vocab_size != vocab_size"
            ),
            ExpectedTensor("d2t", (desc.draft_vocab_size,), req, dtype="I64", why="draft_vocab_size != vocab_size"),
            ExpectedTensor("t2d", (d.vocab_size,), opt, dtype="BOOL"),
        ]
    else:
        out += [
            ExpectedTensor("lm_head.weight", (d.vocab_size, hidden), opt),
            ExpectedTensor(
                "d2t",
                (desc.draft_vocab_size,),
                forbidden,
                dtype="I64",
                why="full vocabulary: vLLM has no draft_id_to_target_id to load it into",
            ),
            ExpectedTensor("t2d", (d.vocab_size,), opt, dtype="BOOL"),
        ]
    if desc.algorithm is Algorithm.DFLASH2 and desc.dflash2 is not None:
        rank = desc.dflash2.selector_rank
        out += [
            ExpectedTensor("candidate_selector.hidden_projection.weight", (rank, hidden), req),
            ExpectedTensor("candidate_selector.predecessor_codebook", (d.vocab_size, rank), req),
            ExpectedTensor("candidate_selector.successor_codebook", (d.vocab_size, rank), req),
        ]
    if desc.algorithm is Algorithm.DSPARK and desc.dspark is not None:
        out += _dspark_tensors(desc)
    renamed = desc.spec.tensor_names
    if renamed:
        out = [replace(t, name=renamed.get(t.name, t.name)) for t in out]
    return out


def _canonical_view(desc: DraftDescription, tensors: dict[str, TensorHeader]) -> dict[str, TensorHeader]:
    """Stored tensors keyed by the names the format expects: a format that names some tensors its
    own way (`DialectSpec.tensor_names`) may store the z-lab name instead, which engines load too."""
    renamed = desc.spec.tensor_names
    if not renamed:
        return tensors
    view = dict(tensors)
    for zlab_name, own in renamed.items():
        if zlab_name in view and own not in view:
            view[own] = view.pop(zlab_name)
    return view


def _dspark_tensors(desc: DraftDescription) -> list[ExpectedTensor]:
    spec = desc.dspark
    assert spec is not None
    hidden, rank = desc.decoder.hidden_size, spec.markov_rank
    req = Requirement.REQUIRED
    out: list[ExpectedTensor] = []
    if rank > 0:
        out += [
            ExpectedTensor("markov_head.markov_w1.weight", (desc.decoder.vocab_size, rank), req),
            ExpectedTensor("markov_head.markov_w2.weight", (desc.draft_vocab_size, rank), req),
        ]
        if spec.markov_head_type == "gated":
            out += [
                ExpectedTensor("markov_head.gate_proj.weight", (rank, hidden + rank), req),
                ExpectedTensor("markov_head.gate_proj.bias", (rank,), req),
            ]
        elif spec.markov_head_type == "rnn":
            out += [
                ExpectedTensor("markov_head.joint_proj.weight", (3 * rank, 2 * rank + hidden), req),
                ExpectedTensor("markov_head.joint_proj.bias", (3 * rank,), req),
            ]
    if spec.enable_confidence_head:
        width = hidden + (rank if spec.confidence_head_with_markov else 0)
        # vLLM does not load the confidence head yet, so its absence is harmless.
        out += [
            ExpectedTensor("confidence_head.proj.weight", (1, width), Requirement.OPTIONAL),
            ExpectedTensor("confidence_head.proj.bias", (1,), Requirement.OPTIONAL),
        ]
    return out


@dataclass(frozen=True)
class TensorSummary(JsonDocument):
    count: int
    parameters: int
    bytes: int
    dtypes: dict[str, int]


def summarize(tensors: dict[str, TensorHeader]) -> TensorSummary:
    """Parameters count floating-point elements only (d2t/t2d are index maps, not weights)."""
    return TensorSummary(
        count=len(tensors),
        parameters=sum(t.num_elements for t in tensors.values() if t.is_floating),
        bytes=sum(t.num_bytes for t in tensors.values()),
        dtypes=dict(sorted(Counter(t.dtype for t in tensors.values()).items())),
    )


def expected_totals(expected: list[ExpectedTensor]) -> tuple[int, int]:
    """Count and parameters of the required tensors: what a complete checkpoint must hold."""
    required = [t for t in expected if t.requirement is Requirement.REQUIRED]
    parameters = sum(math.prod(t.shape) for t in required if t.dtype is None)
    return len(required), parameters


# Bounded: int() refuses numbers of more than 4300 digits, and a tensor name may hold one.
_LAYER = re.compile(r"^layers\.(\d{1,18})\.")
_PREFIXES = ("model.", "draft_model.", "model.draft_model.")


# Names quantizers store beside (or instead of) `X.weight`: compressed-tensors / llm-compressor
# (FP8, INT8, NVFP4, W4A16 packed), GPTQ and AWQ.
_QUANT_COMPANIONS = (
    "weight_scale",
    "weight_scale_2",
    "weight_zero_point",
    "weight_g_idx",
    "weight_shape",
    "weight_global_scale",
    "input_scale",
    "input_global_scale",
    "input_zero_point",
    "output_scale",
    "k_scale",
    "v_scale",
    "scales",
    "qzeros",
    "g_idx",
)
_QUANT_PACKED = ("weight_packed", "qweight")
# Same-shape quantized weights (FP8, INT8) are still shape-checked; other encodings pack elements.
_SAME_SHAPE_QUANT_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "I8", "U8"})


def quantization_method(desc: DraftDescription) -> str | None:
    """The `quant_method` / `format` of a quantized checkpoint's config, or None when unquantized."""
    for holder in (desc.raw_config, desc.raw_config.get("transformer_layer_config")):
        if not isinstance(holder, dict):
            continue
        for key in ("quantization_config", "compression_config"):
            config = holder.get(key)
            if isinstance(config, dict):
                parts = [str(config[k]) for k in ("quant_method", "format") if isinstance(config.get(k), str)]
                return " / ".join(parts) or key
    return None


def _quantized_view(
    tensors: dict[str, TensorHeader], expected: dict[str, ExpectedTensor]
) -> tuple[dict[str, TensorHeader], set[str], list[str]]:
    """Tensors as the checks should see them in a quantized checkpoint.

    Returns the weights keyed by the name they stand for (a packed `X.weight_packed` / `X.qweight`
    stands for `X.weight`), the names whose packed shape cannot be compared, and the companion
    tensors (scales, zero points, group indices) that belong to an expected weight.
    """
    view = dict(tensors)
    unshaped: set[str] = set()
    companions: list[str] = []
    for name, tensor in tensors.items():
        base, _, suffix = name.rpartition(".")
        weight = f"{base}.weight"
        if weight not in expected:
            continue
        if suffix in _QUANT_PACKED and weight not in tensors:
            view.pop(name)
            view[weight] = tensor
            unshaped.add(weight)
            companions.append(name)
        elif suffix in _QUANT_COMPANIONS:
            view.pop(name)
            companions.append(name)
    for name, tensor in view.items():
        if name in expected and not tensor.is_floating and tensor.dtype not in _SAME_SHAPE_QUANT_DTYPES:
            unshaped.add(name)
    return view, unshaped, companions


def compare(desc: DraftDescription, tensors: dict[str, TensorHeader]) -> list[Finding]:
    """DFT020 missing, DFT021 unexpected, DFT022 wrong shape, DFT023 dtype oddities (DFT024 quantized)."""
    findings: list[Finding] = []
    expected = {t.name: t for t in expected_tensors(desc)}
    tensors = _canonical_view(desc, tensors)
    method = quantization_method(desc)
    unshaped: set[str] = set()
    if method is not None:
        tensors, unshaped, companions = _quantized_view(tensors, expected)
        findings.append(
            make_finding(
                "DFT024",
                f"quantized checkpoint ({method}): {len(companions)} scale / packed tensors belong to its weights; "
                f"{len(unshaped)} packed weights were checked by name only, not by shape",
                "the shapes of unquantized tensors and of same-shape FP8 / INT8 weights are still checked",
                keys=("quantization_config",),
                values={"method": method, "companions": len(companions), "packed": len(unshaped)},
            )
        )
    missing: list[ExpectedTensor] = []
    for tensor in expected.values():
        actual = tensors.get(tensor.name)
        if actual is None:
            if tensor.requirement is Requirement.REQUIRED:
                missing.append(tensor)
            continue
        if tensor.name in unshaped:
            continue
        if tensor.requirement is Requirement.FORBIDDEN:
            findings.append(
                make_finding(
                    "DFT021",
                    f"{tensor.name} is stored but not expected ({tensor.why})",
                    "remove the tensor from the checkpoint (engines drop it or fail to load it)",
                    keys=(tensor.name,),
                    file=actual.file,
                )
            )
            continue
        if actual.shape != tensor.shape:
            findings.append(
                make_finding(
                    "DFT022",
                    f"{tensor.name} has shape {list(actual.shape)}, the config implies {list(tensor.shape)}",
                    _shape_hint(tensor.name),
                    keys=(tensor.name,),
                    values={"actual": list(actual.shape), "expected": list(tensor.shape)},
                    file=actual.file,
                )
            )
        if tensor.dtype is not None and actual.dtype != tensor.dtype:
            findings.append(
                make_finding(
                    "DFT022",
                    f"{tensor.name} is {actual.dtype}, expected {tensor.dtype}",
                    "re-export the index map with the expected integer type",
                    keys=(tensor.name,),
                    values={"actual": actual.dtype, "expected": tensor.dtype},
                    file=actual.file,
                )
            )
    findings.extend(_missing_findings(desc, missing, tensors))
    unexpected = {name: actual for name, actual in tensors.items() if name not in expected}
    findings.extend(_prefixed_findings(unexpected, expected))
    for name, actual in unexpected.items():
        findings.append(_unexpected(desc, name, actual))
    if method is None:
        # Quantization mixes dtypes by design; the scheme is reported as DFT024 instead.
        findings.extend(_dtype_findings(tensors, expected))
    return findings


def _shape_hint(name: str) -> str:
    if name == "fc.weight":
        return "fc input width is len(target_layer_ids) x target hidden size: check target_layer_ids and hidden_size"
    if "codebook" in name or name in ("lm_head.weight", "embed_tokens.weight", "d2t", "t2d"):
        return "check vocab_size / draft_vocab_size against the tensor"
    return "the config does not describe these weights: check hidden_size, heads, head_dim and intermediate_size"


def _missing_findings(
    desc: DraftDescription, missing: list[ExpectedTensor], tensors: dict[str, TensorHeader]
) -> list[Finding]:
    if not missing:
        return []
    prefixed = [n for n in tensors if n.startswith(_PREFIXES)]
    hint = "the loader serves uninitialized or default values for missing tensors: re-export the checkpoint"
    if prefixed:
        hint = f"tensor names carry a prefix ({prefixed[0]!r}); {_PREFIX_FIX}"
    # One finding per missing layer-family keeps a checkpoint with 5 missing layers readable.
    if len(missing) > 12:
        names = [t.name for t in missing]
        return [
            make_finding(
                "DFT020",
                f"{len(missing)} required tensors are missing, e.g. {', '.join(names[:5])}",
                hint,
                keys=tuple(names),
            )
        ]
    return [
        make_finding(
            "DFT020",
            f"required tensor {t.name} {list(t.shape)} is missing" + (f" ({t.why})" if t.why else ""),
            hint,
            keys=(t.name,),
            values={"expected": list(t.shape)},
        )
        for t in missing
    ]


# The fix of every prefixed name (`convert` renames NAME when PREFIX + NAME is stored and NAME is
# expected); its hint is one runnable command, filled in for the source by the report.
_PREFIX_FIX = "strip the prefix: `dflash-tools convert SRC -o OUT` renames them"


def _prefixed_findings(unexpected: dict[str, TensorHeader], expected: dict[str, ExpectedTensor]) -> list[Finding]:
    """One DFT021 per prefix for the stored names that are an expected name behind a prefix
    (`model.layers.0...`), which convert renames; they are taken out of `unexpected`. A checkpoint
    saved with `model.` names gave one finding per tensor, 25 alike, and none said how to fix it."""
    groups: dict[str, list[str]] = {}
    for name in unexpected:
        prefix = next((p for p in sorted(_PREFIXES, key=len, reverse=True) if name.startswith(p)), None)
        if prefix is not None and name[len(prefix) :] in expected:
            groups.setdefault(prefix, []).append(name)
    findings = []
    for prefix, names in groups.items():
        first = unexpected[names[0]]
        for name in names:
            del unexpected[name]
        examples = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        findings.append(
            make_finding(
                "DFT021",
                f"{len(names)} tensor(s) are stored under the prefix {prefix!r} ({examples}); DFlash loaders "
                "expect un-prefixed names and fail on them",
                _PREFIX_FIX,
                keys=tuple(names),
                values={"prefix": prefix, "count": len(names)},
                file=first.file,
            )
        )
    return findings


def _unexpected(desc: DraftDescription, name: str, actual: TensorHeader) -> Finding:
    layer = _LAYER.match(name)
    if layer and int(layer.group(1)) >= desc.decoder.num_hidden_layers:
        why = f"layer {layer.group(1)} but num_hidden_layers is {desc.decoder.num_hidden_layers}"
        hint = "num_hidden_layers is too small for these weights, or extra layers were saved"
    elif name.startswith(_PREFIXES):
        # Not an expected name behind its prefix (those are `_prefixed_findings`): convert keeps it.
        why = "prefixed name; DFlash loaders expect un-prefixed names and fail on it"
        hint = "check the dialect and algorithm keys, or remove the tensor"
    elif name in ("mask_hidden",):
        why = "vLLM asserts on it when loading"
        hint = "remove it"
    elif name.startswith("verifier_"):
        why = "older speculators saves; vLLM cannot load it"
        hint = "remove it: `dflash-tools convert SRC -o OUT` drops it"
    else:
        why = "not part of this architecture; the loader drops it or fails"
        hint = "check the dialect and algorithm keys, or remove the tensor"
    return make_finding("DFT021", f"unexpected tensor {name} ({why})", hint, keys=(name,), file=actual.file)


_UNUSUAL_FLOATS = {"F64", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"}


def _dtype_findings(tensors: dict[str, TensorHeader], expected: dict[str, ExpectedTensor]) -> list[Finding]:
    floats = Counter(
        t.dtype for n, t in tensors.items() if t.is_floating and not n.endswith(("weight_scale", "input_scale"))
    )
    findings: list[Finding] = []
    if len(floats) > 1:
        main, _ = floats.most_common(1)[0]
        others = {dtype: count for dtype, count in floats.items() if dtype != main}
        examples = [n for n, t in tensors.items() if t.is_floating and t.dtype in others][:3]
        findings.append(
            make_finding(
                "DFT023",
                f"mixed floating dtypes: {dict(floats)}; e.g. {', '.join(examples)} differ from {main}",
                "engines cast everything to the serving dtype; make sure the odd ones out are intentional",
                keys=tuple(examples),
                values={"dtypes": dict(floats)},
            )
        )
    unusual = sorted({t.dtype for t in tensors.values() if t.dtype in _UNUSUAL_FLOATS})
    if unusual:
        findings.append(
            make_finding(
                "DFT023",
                f"unusual floating dtypes for a draft: {', '.join(unusual)}",
                "drafts are normally saved in bf16 (or fp16 / fp32)",
                values={"dtypes": unusual},
            )
        )
    for name, tensor in tensors.items():
        spec = expected.get(name)
        if spec is not None and spec.dtype is None and not tensor.is_floating:
            findings.append(
                make_finding(
                    "DFT022",
                    f"{name} is {tensor.dtype}, expected a floating dtype",
                    "re-export the weights in a floating dtype",
                    keys=(name,),
                    file=tensor.file,
                )
            )
    return findings
