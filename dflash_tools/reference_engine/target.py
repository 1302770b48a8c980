"""The target ("verifier") side: greedy logits plus the hidden states the draft captures.

Two implementations behind one small interface:

- `TransformersTarget`: any Hugging Face causal LM through `AutoModelForCausalLM` with
  `output_hidden_states`, keeping its KV cache between calls and cropping it after a rejection.
  Caches that cannot be cropped (recurrent / hybrid models) fall back to recomputing the sequence.
- `BuiltinTarget`: a self-contained Qwen3 / Qwen2 / Llama-style decoder that reads the same
  Hugging Face folder (config.json + safetensors), so the demo and the tests need no transformers.

Hidden states follow the Hugging Face convention the z-lab drafts were trained on: index 0 is the
embedding output, index i the output of layer i - 1, the last index the final-normed output. A
z-lab `target_layer_ids` value t reads index t + 1.
"""

from __future__ import annotations

import inspect
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch

from dflash_tools.errors import TORCH_INSTALL_HINT, OperationError, SourceError
from dflash_tools.reading.local import examples_dir
from dflash_tools.reading.source import EXAMPLE_PREFIX, looks_like_repo_id
from dflash_tools.reference_engine import ops
from dflash_tools.reference_engine.draft import Fetch, need_tensor

BUILTIN_ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")


class TargetModel(ABC):
    """A causal LM decoding one sequence, with a cache of the tokens it has seen."""

    name: str
    implementation: str
    eos_token_ids: frozenset[int]

    @property
    @abstractmethod
    def length(self) -> int:
        """Tokens in the cache (the next token goes at this position)."""

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def forward(
        self, token_ids: Sequence[int], capture: Sequence[int] = ()
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run `token_ids` after the cache. Returns logits [n, V] and, when `capture` names hidden-state
        indices, their concatenation [n, len(capture) * H] (else None)."""

    @abstractmethod
    def crop(self, length: int) -> None:
        """Forget every token at position >= length."""

    @abstractmethod
    def embedding_weight(self) -> torch.Tensor: ...

    @abstractmethod
    def lm_head_weight(self) -> torch.Tensor: ...


def resolve_target_folder(source: str) -> Path | None:
    """The local folder of a target source (`example:NAME` included), or None for a Hub id."""
    if source.startswith(EXAMPLE_PREFIX):
        folder = examples_dir() / source[len(EXAMPLE_PREFIX) :]
        if not (folder / "config.json").is_file():
            raise SourceError(f"no bundled example named {source[len(EXAMPLE_PREFIX) :]!r}", "")
        return folder
    path = Path(source).expanduser()
    if path.exists():
        return path if path.is_dir() else path.parent
    if looks_like_repo_id(source):
        return None
    raise SourceError(
        f"target {source}: no such folder and not a Hugging Face repo id", "pass --target with a folder or owner/name"
    )


def _eos_ids(*configs: dict[str, Any]) -> frozenset[int]:
    ids: set[int] = set()
    for config in configs:
        value = config.get("eos_token_id")
        if isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int) and not isinstance(v, bool))
    return frozenset(ids)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SourceError(f"{path}: cannot read ({exc})", "") from None
    return value if isinstance(value, dict) else {}


class _TargetLayer:
    """One decoder layer; q/k norms (Qwen3) and q/k/v/o biases (Qwen2) are used when present."""

    def __init__(self, prefix: str, get: Fetch) -> None:
        def need(name: str) -> torch.Tensor:
            return need_tensor(get, prefix + name, "target")

        self.input_layernorm = need("input_layernorm.weight")
        self.post_attention_layernorm = need("post_attention_layernorm.weight")
        self.q_proj, self.q_bias = need("self_attn.q_proj.weight"), get(prefix + "self_attn.q_proj.bias")
        self.k_proj, self.k_bias = need("self_attn.k_proj.weight"), get(prefix + "self_attn.k_proj.bias")
        self.v_proj, self.v_bias = need("self_attn.v_proj.weight"), get(prefix + "self_attn.v_proj.bias")
        self.o_proj, self.o_bias = need("self_attn.o_proj.weight"), get(prefix + "self_attn.o_proj.bias")
        self.q_norm = get(prefix + "self_attn.q_norm.weight")
        self.k_norm = get(prefix + "self_attn.k_norm.weight")
        self.gate = need("mlp.gate_proj.weight")
        self.up = need("mlp.up_proj.weight")
        self.down = need("mlp.down_proj.weight")


class BuiltinTarget(TargetModel):
    """Qwen3-style decoder (q/k norms and q/k/v biases used when present), full causal attention."""

    implementation = "builtin"

    def __init__(self, folder: Path, *, device: torch.device, dtype: torch.dtype, name: str | None = None) -> None:
        from safetensors.torch import load_file

        self.name = name or str(folder)
        config = _read_json(folder / "config.json")
        if not config:
            raise SourceError(f"target {folder}: no config.json", "pass the target model's folder")
        archs = config.get("architectures") or []
        if isinstance(config.get("text_config"), dict) or not any(a in BUILTIN_ARCHITECTURES for a in archs):
            raise OperationError(
                f"target {folder}: architecture {archs} is not one the built-in target implements "
                f"({', '.join(BUILTIN_ARCHITECTURES)})",
                f"install transformers ({TORCH_INSTALL_HINT}) to run any Hugging Face causal LM",
            )
        if config.get("use_sliding_window") and "sliding_attention" in (config.get("layer_types") or []):
            raise OperationError(
                f"target {folder}: sliding-window layers are not implemented by the built-in target",
                "install transformers",
            )
        self.eos_token_ids = _eos_ids(config, _read_json(folder / "generation_config.json"))
        self.device, self.dtype = device, dtype
        self.hidden_size = int(config["hidden_size"])
        self.num_heads = int(config["num_attention_heads"])
        self.num_kv_heads = int(config.get("num_key_value_heads") or self.num_heads)
        self.head_dim = int(config.get("head_dim") or self.hidden_size // self.num_heads)
        self.num_layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("rms_norm_eps") or 1e-6)
        rope = dict(config.get("rope_parameters") or {})
        for key in ("rope_theta", "rope_scaling", "partial_rotary_factor"):
            if key in config and key not in rope and config[key] is not None:
                rope[key] = config[key]
        self.inverse_frequencies, self.position_scale = ops.rope_inverse_frequencies(
            self.head_dim, rope, f"target {folder}"
        )
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise SourceError(f"target {folder}: no *.safetensors weights", "download the target's weights")
        raw: dict[str, torch.Tensor] = {}
        for file in files:
            raw.update(load_file(str(file), device="cpu"))

        def get(name: str) -> torch.Tensor | None:
            value = raw.get(name)
            return None if value is None else value.to(device=device, dtype=dtype)

        self.embed = need_tensor(get, "model.embed_tokens.weight", "target")
        head = get("lm_head.weight")
        self.head = head if head is not None else self.embed
        self.final_norm = need_tensor(get, "model.norm.weight", "target")
        self.layers = [_TargetLayer(f"model.layers.{index}.", get) for index in range(self.num_layers)]
        self.reset()

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[1]) if self.keys else 0

    def reset(self) -> None:
        empty = torch.zeros(self.num_kv_heads, 0, self.head_dim, device=self.device, dtype=self.dtype)
        self.keys = [empty for _ in range(self.num_layers)]
        self.values = [empty for _ in range(self.num_layers)]

    def crop(self, length: int) -> None:
        self.keys = [k[:, :length] for k in self.keys]
        self.values = [v[:, :length] for v in self.values]

    def embedding_weight(self) -> torch.Tensor:
        return self.embed

    def lm_head_weight(self) -> torch.Tensor:
        return self.head

    def _heads(self, x: torch.Tensor, count: int) -> torch.Tensor:
        return x.view(x.shape[0], count, self.head_dim).transpose(0, 1)

    def forward(
        self, token_ids: Sequence[int], capture: Sequence[int] = ()
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        start = self.length
        count = len(token_ids)
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + count, device=self.device)
        cos, sin = ops.rope_cos_sin(positions, self.inverse_frequencies, self.position_scale, self.dtype)
        key_positions = torch.arange(0, start + count, device=self.device)
        allowed = key_positions[None, :] <= positions[:, None]
        hidden = self.embed[ids]
        wanted = set(capture)
        states: dict[int, torch.Tensor] = {0: hidden} if 0 in wanted else {}
        scale = self.head_dim**-0.5
        for index, layer in enumerate(self.layers):
            rows = ops.rms_norm(hidden, layer.input_layernorm, self.eps)
            queries = self._heads(ops.linear(rows, layer.q_proj, layer.q_bias), self.num_heads)
            keys = self._heads(ops.linear(rows, layer.k_proj, layer.k_bias), self.num_kv_heads)
            values = self._heads(ops.linear(rows, layer.v_proj, layer.v_bias), self.num_kv_heads)
            if layer.q_norm is not None:
                queries = ops.rms_norm(queries, layer.q_norm, self.eps)
            if layer.k_norm is not None:
                keys = ops.rms_norm(keys, layer.k_norm, self.eps)
            queries, keys = ops.apply_rope(queries, cos, sin), ops.apply_rope(keys, cos, sin)
            self.keys[index] = torch.cat((self.keys[index], keys), dim=1)
            self.values[index] = torch.cat((self.values[index], values), dim=1)
            attended = ops.attention(queries, self.keys[index], self.values[index], allowed, scale)
            hidden = hidden + ops.linear(attended, layer.o_proj, layer.o_bias)
            rows = ops.rms_norm(hidden, layer.post_attention_layernorm, self.eps)
            hidden = hidden + ops.silu_mlp(rows, layer.gate, layer.up, layer.down)
            if index + 1 in wanted and index + 1 < self.num_layers:
                states[index + 1] = hidden
        hidden = ops.rms_norm(hidden, self.final_norm, self.eps)
        if self.num_layers in wanted:
            states[self.num_layers] = hidden
        logits = ops.linear(hidden, self.head).to(torch.float32)
        return logits, _concat(states, capture)


def _concat(states: dict[int, torch.Tensor] | Sequence[torch.Tensor], capture: Sequence[int]) -> torch.Tensor | None:
    if not capture:
        return None
    try:
        return torch.cat([states[index] for index in capture], dim=-1)
    except (KeyError, IndexError):
        raise OperationError(
            f"the draft captures hidden states {list(capture)} but the target has only "
            f"{len(states) if isinstance(states, Sequence) else 'fewer'} of them",
            "check target_layer_ids against this target",
        ) from None


class TransformersTarget(TargetModel):
    """Any causal LM transformers can load; cache cropped in place when the cache type allows it."""

    implementation = "transformers"

    def __init__(
        self,
        source: str,
        *,
        device: torch.device,
        dtype: torch.dtype,
        revision: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        try:
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise OperationError("the target needs transformers, which is not installed", TORCH_INSTALL_HINT) from None
        self.name = source
        print(f"loading target {source} with transformers ...", file=sys.stderr)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                source, revision=revision, dtype=dtype, trust_remote_code=trust_remote_code
            )
        except (OSError, ValueError) as exc:
            raise OperationError(
                f"target {source}: transformers cannot load it: {str(exc).splitlines()[0]}", ""
            ) from None
        self.model: Any = cast(Any, model)
        self.model.to(device)
        self.model.eval()
        self.device, self.dtype = device, dtype
        parameters = inspect.signature(self.model.forward).parameters
        self._cache_keyword = "cache" if "cache" in parameters else "past_key_values"
        configs = [self.model.config.to_dict()]
        generation = getattr(self.model, "generation_config", None)
        if generation is not None:
            configs.append(generation.to_dict())
        self.eos_token_ids = _eos_ids(*configs)
        self.reset()

    @property
    def length(self) -> int:
        return len(self._tokens)

    def reset(self) -> None:
        self._cache: Any = None
        self._cached = 0
        self._tokens: list[int] = []

    def crop(self, length: int) -> None:
        del self._tokens[length:]
        if self._cache is None or self._cached <= length:
            return
        croppable = getattr(self._cache, "is_croppable", True)
        if callable(croppable):
            croppable = croppable()
        if croppable and hasattr(self._cache, "crop"):
            try:
                self._cache.crop(length)
                self._cached = length
                return
            except (NotImplementedError, ValueError, AttributeError, RuntimeError):
                pass
        # Recurrent state cannot be rewound: recompute the kept prefix on the next call.
        self._cache, self._cached = None, 0

    def embedding_weight(self) -> torch.Tensor:
        weight: torch.Tensor = self.model.get_input_embeddings().weight.detach()
        return weight

    def lm_head_weight(self) -> torch.Tensor:
        head = self.model.get_output_embeddings()
        if head is None:
            raise OperationError(f"target {self.name}: no output embeddings (LM head)", "")
        weight: torch.Tensor = head.weight.detach()
        return weight

    @torch.inference_mode()
    def forward(
        self, token_ids: Sequence[int], capture: Sequence[int] = ()
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        new = list(token_ids)
        pending = self._tokens[self._cached :] + new
        start = self._cached
        ids = torch.tensor([pending], dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + len(pending), device=self.device)[None, :]
        outputs = self.model(
            input_ids=ids,
            position_ids=positions,
            use_cache=True,
            output_hidden_states=bool(capture),
            **{self._cache_keyword: self._cache},
        )
        self._cache = getattr(outputs, self._cache_keyword, None)
        if self._cache is None:
            self._cache = getattr(outputs, "past_key_values", None) or getattr(outputs, "cache", None)
        self._tokens.extend(new)
        self._cached = len(self._tokens)
        count = len(new)
        logits = outputs.logits[0, -count:].to(torch.float32)
        if not capture:
            return logits, None
        states = [state[0, -count:] for state in outputs.hidden_states]
        return logits, _concat(states, capture)


def load_target(
    source: str,
    *,
    device: torch.device,
    dtype: torch.dtype,
    implementation: str = "auto",
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> TargetModel:
    """`implementation`: "transformers", "builtin", or "auto" (transformers when installed)."""
    if implementation not in ("auto", "builtin", "transformers"):
        raise OperationError(f"engine_args.target_impl {implementation!r} is not auto, builtin or transformers", "")
    folder = resolve_target_folder(source)
    if implementation == "auto":
        try:
            import transformers  # noqa: F401

            implementation = "transformers"
        except ImportError:
            implementation = "builtin"
    if implementation == "transformers":
        return TransformersTarget(
            str(folder) if folder is not None else source.removeprefix("hf://"),
            device=device,
            dtype=dtype,
            revision=revision,
            trust_remote_code=trust_remote_code,
        )
    if folder is None:
        from huggingface_hub import snapshot_download

        folder = Path(
            snapshot_download(
                source.removeprefix("hf://"), revision=revision, allow_patterns=["*.json", "*.safetensors"]
            )
        )
    return BuiltinTarget(folder, device=device, dtype=dtype, name=source)
