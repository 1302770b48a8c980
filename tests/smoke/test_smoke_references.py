"""Protocols and published references: a run states what it measured and how far it is from the card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.errors import UsageError
from dflash_tools.smoke.server import ServerOptions, run_server
from dflash_tools.smoke.workloads.datasets import load_dataset_prompts
from dflash_tools.smoke.workloads.protocols import greedy, load_protocol, parse_protocol, protocols_dir
from dflash_tools.smoke.workloads.references import distance, load_references, parse_references, references_for
from tests.sglang_server import FakeSglangServer

CARD_LENGTHS = {"sglang": {"pooled": 5.3, "mean_per_request": 5.21}, "vllm": {"pooled": 5.1, "mean_per_request": 5.0}}


def test_protocols_state_what_they_decode() -> None:
    card = load_protocol("zlab-card")
    assert card.summary() == "T=1, top-p 0.95, top-k 20, thinking on (reasoning xhigh), max 2048 tokens"
    assert card.sampling_fields() == {"temperature": 1.0, "top_p": 0.95, "top_k": 20}
    assert card.order == "shuffled-42" and card.warmup == 1 and card.num_prompts == 128
    plain = load_protocol("greedy")
    assert plain.summary() == "greedy, thinking off, max 2048 tokens" and plain.sampling_fields() == {
        "temperature": 0.0
    }
    assert greedy(chat=False, enable_thinking=False).summary() == "greedy, raw completions"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "schema_version is 2"),
        ({"temperature": "hot"}, "temperature is 'hot', not a number"),
        ({"top_p": 1.5}, "top_p is 1.5, outside [0, 1]"),
        ({"top_k": -1}, "top_k is -1, not the sampling's top-k (0: off): a whole number from 0 to 2,147,483,647"),
        ({"order": "random"}, "order is 'random'"),
        ({"chat_template_kwargs": []}, "chat_template_kwargs is not an object"),
        ({"name": ""}, "name is missing"),
    ],
)
def test_a_bad_protocol_is_one_line_naming_the_key(change: dict[str, Any], message: str) -> None:
    data = {**json.loads((protocols_dir() / "greedy.json").read_text()), **change}
    with pytest.raises(UsageError) as raised:
        parse_protocol(data, "protocol x.json")
    assert raised.value.message.startswith("protocol x.json: ") and message in raised.value.message


def test_bundled_references() -> None:
    sets = {(r.draft, r.name): r for r in load_references()}
    card = sets[("z-lab/Qwen3.8-27B-DFlash2", "card")]
    assert card.values == {"gsm8k": 5.46, "math500": 5.28, "humaneval": 4.39, "mbpp": 4.79, "mt-bench": 4.10}
    assert (card.protocol, card.definition, card.aggregation) == ("zlab-card", "sglang", "mean_per_request")
    ci = sets[("z-lab/Qwen3-8B-DFlash-b16", "vllm-ci")]
    assert (ci.protocol, ci.definition) == ("greedy", "vllm") and ci.floors["gsm8k"] == 6.06
    for reference in sets.values():
        load_protocol(reference.protocol)  # every protocol a reference names exists
        assert reference.source
    assert references_for("z-lab/Qwen3.8-27B-DFlash2", "gsm8k") == [card]
    assert references_for("z-lab/Qwen3-8B-DFlash-b16", "math500") == []


def test_distance_on_the_same_protocol() -> None:
    (card,) = references_for("z-lab/Qwen3.8-27B-DFlash2", "gsm8k")
    said = distance(CARD_LENGTHS, "gsm8k", load_protocol("zlab-card"), card)
    assert said.sentence == (
        "AL 5.21, 95% of the card's 5.46 on GSM8K, same protocol "
        "(SGLang accept length (completion tokens / verify steps))"
    )
    assert said.same_protocol and said.measured == 5.21 and said.ratio == pytest.approx(5.21 / 5.46)


def test_distance_says_when_the_protocol_differs() -> None:
    (card,) = references_for("z-lab/Qwen3.8-27B-DFlash2", "mt-bench")
    said = distance(CARD_LENGTHS, "mt-bench", greedy(chat=True, enable_thinking=False), card)
    assert not said.same_protocol
    assert said.sentence.startswith(
        "AL 5.21, 127% of the card's 4.10 on MT-Bench, not the same protocol (this run: greedy, thinking off; "
        "card: T=1, top-p 0.95, top-k 20, thinking on (reasoning xhigh), max 2048 tokens): not a like-for-like comparison"
    )


def test_distance_in_the_references_definition_with_its_floor() -> None:
    (ci,) = references_for("z-lab/Qwen3-8B-DFlash-b16", "humaneval")
    pooled_only = {
        "vllm": {"pooled": 6.0, "mean_per_request": None},
        "sglang": {"pooled": 6.3, "mean_per_request": None},
    }
    said = distance(pooled_only, "humaneval", load_protocol("greedy"), ci)
    assert said.sentence == (
        "AL 6.00, 92% of vLLM's DFlash CI target 6.50 on HumanEval, same protocol (pooled over requests; the "
        "reference averages per request; BELOW its floor 6.18; vLLM mean acceptance length (1 + accepted / drafts))"
    )
    assert said.to_dict()["floor"] == 6.18 and said.aggregation_used == "pooled"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"definition": "tokens"}, "definition is 'tokens'"),
        ({"values": {"squad": 3.0}}, "'squad' is not one of"),
        ({"values": {"gsm8k": 0.5}}, "values.gsm8k is 0.5, not an acceptance length"),
        ({"source": ""}, "source is missing"),
    ],
)
def test_a_bad_references_file_is_one_line(change: dict[str, Any], message: str) -> None:
    item = {"name": "x", "label": "x's", "source": "s", "protocol": "greedy", "definition": "vllm", "values": {}}
    data = {"schema_version": 1, "draft": "o/d", "sets": [{**item, **change}]}
    with pytest.raises(UsageError) as raised:
        parse_references(data, "references r.json")
    assert message in raised.value.message and "\n" not in raised.value.message


def test_a_card_protocol_run_on_gsm8k_states_its_distance(tmp_path: Path) -> None:
    rows = tmp_path / "gsm8k.jsonl"
    rows.write_text("".join(json.dumps({"question": f"Question {i}?"}) + "\n" for i in range(20)))
    card_protocol = load_protocol("zlab-card")
    prompts = load_dataset_prompts("gsm8k", 3, order=card_protocol.order, warmup=card_protocol.warmup, path=rows)
    with FakeSglangServer(accept_pattern=(5,)) as server:
        result = run_server(
            ServerOptions(
                url=server.url,
                prompts=prompts.prompts,
                warmup_prompts=prompts.warmup_prompts,
                max_tokens=64,
                protocol=card_protocol,
                dataset=prompts.to_dict(),
            )
        )
        sent = [body for path, body in server.requests]
    # One warm-up request (not measured), then the three prompts; each as the card's protocol sends it.
    assert [body["messages"][0]["content"] for body in sent] == prompts.warmup_prompts + prompts.prompts
    assert sent[0]["max_tokens"] == 64 and all(b["top_k"] == 20 and b["temperature"] == 1 for b in sent)
    assert result["num_drafts"] == 3 * 11 and result["protocol"]["name"] == "zlab-card"
    assert result["dataset"]["name"] == "gsm8k" and result["dataset"]["prompts"] == 3
    assert result["protocol"]["max_tokens"] == 64 and result["protocol"]["num_prompts"] == 3
    (card,) = references_for("z-lab/Qwen3.8-27B-DFlash2", "gsm8k")
    run_protocol = ServerOptions(url=server.url, prompts=prompts.prompts, max_tokens=64, protocol=card_protocol)
    said = distance(result["acceptance_lengths"], "gsm8k", run_protocol.resolved_protocol(), card)
    # 64 tokens, 11 verify steps each: SGLang's 64 / 11 = 5.82, the card's definition.
    assert said.sentence == (
        "AL 5.82, 107% of the card's 5.46 on GSM8K, same protocol (64 tokens per answer, the reference 2048; "
        "SGLang accept length (completion tokens / verify steps))"
    )
