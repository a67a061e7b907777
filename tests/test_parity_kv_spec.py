"""KV-spec and block-count parity: tokpool's reading of a config.json against vLLM 0.33.0's own
attention layers, spec and planning functions, run here.

For each generated model folder (Llama, Mistral, Mixtral, Qwen2/3 and their MoEs, Gemma, Gemma-2,
Gemma-3, Phi-3; sliding windows given, omitted, null, 0, per layer, by pattern, gated), vLLM
builds the model's modules on the meta device and ``tokpool.sim.vllm_run.kv_spec.
vllm_kv_cache_facts`` asks its ``get_kv_cache_spec``, ``get_global_kv_cache_groups``,
``get_kv_cache_configs`` (blocks, the start-up check with its message) and
``get_max_concurrency_for_kv_cache_config``, for several engine settings (tensor- and
pipeline-parallel sizes, KV-cache dtypes with and without per-token-head scales, budgets,
async scheduling, ``max_model_len``, memory from "one block short" to plenty). tokpool's
``kv_cache.kv_cache_spec`` and ``engine_checks.check_kv_cache_holds_one_sequence`` (what the
resolution step calls) must give the same layers, groups, blocks, refusals and numbers. The
counts go to the terminal summary (``parity_count``).

Needs vLLM 0.33.0 (``make vllm``); the module skips with the reason otherwise.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from sweep_sizes import sample_size, scaled

from tokpool.pooler.vllm_bridge import VLLM_REFERENCE_VERSION
from tokpool.sim.vllm_rules.engine_checks import check_kv_cache_holds_one_sequence
from tokpool.sim.vllm_rules.hf_config import preset_from_hf_config
from tokpool.sim.vllm_rules.kv_cache import kv_cache_spec
from tokpool.sim.vllm_rules.kv_spec import max_in_flight_tokens
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"KV-spec parity skipped: {_reason}", allow_module_level=True)

import vllm  # noqa: E402

if vllm.__version__ != VLLM_REFERENCE_VERSION:
    pytest.skip(f"KV-spec parity skipped: vLLM {vllm.__version__} is installed, tokpool follows "
                f"{VLLM_REFERENCE_VERSION} (`make vllm` installs it)", allow_module_level=True)

from tokpool.sim.vllm_run.kv_spec import vllm_kv_cache_facts  # noqa: E402

NUM_MODELS = sample_size(full=40, sample=20)  # make test: the first 20 (one both refuse); CI: 40
CASES_PER_MODEL = 6
FAMILIES = (("LlamaForCausalLM", "llama"), ("MistralForCausalLM", "mistral"),
            ("MixtralForCausalLM", "mixtral"), ("Qwen2ForCausalLM", "qwen2"),
            ("Qwen3ForCausalLM", "qwen3"), ("Qwen2MoeForCausalLM", "qwen2_moe"),
            ("Qwen3MoeForCausalLM", "qwen3_moe"), ("GemmaForCausalLM", "gemma"),
            ("Gemma2ForCausalLM", "gemma2"), ("Gemma3ForCausalLM", "gemma3_text"),
            ("Phi3ForCausalLM", "phi3"))
KV_DTYPES = ("auto", "auto", "fp8", "fp8_e5m2", "bfloat16", "int8_per_token_head",
             "fp8_per_token_head", "int4_per_token_head")


def random_model(rng: random.Random) -> dict:
    """A small config.json of a family, with its sliding-window keys drawn."""
    arch, model_type = rng.choice(FAMILIES)
    heads = rng.choice((4, 8))
    layers = rng.randint(2, 14)
    cfg = {"architectures": [arch], "model_type": model_type, "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": heads,
           "num_key_value_heads": rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0]),
           "head_dim": rng.choice((16, 32)), "num_hidden_layers": layers, "vocab_size": 128,
           "max_position_embeddings": 8192, "torch_dtype": rng.choice(("bfloat16", "float16"))}
    window = rng.choice((32, 100, 512, 4096))
    draw = rng.random()
    if model_type in ("llama", "mistral", "mixtral", "phi3"):
        if draw < 0.3:
            cfg["sliding_window"] = window
        elif draw < 0.45:
            cfg["sliding_window"] = None
        elif draw < 0.55:
            cfg["sliding_window"] = 0
        if model_type == "llama" and rng.random() < 0.4:
            cfg["sliding_window"] = window
            cfg["layer_types"] = [rng.choice(("sliding_attention", "full_attention"))
                                  for _ in range(layers)]
    elif model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        cfg["use_sliding_window"] = draw < 0.6
        cfg["sliding_window"] = window
        cfg["max_window_layers"] = rng.choice((0, layers, rng.randint(0, layers)))
    elif model_type in ("gemma2", "gemma3_text"):
        if draw < 0.7:
            cfg["sliding_window"] = window
        if model_type == "gemma3_text" and rng.random() < 0.5:
            cfg["sliding_window_pattern"] = rng.randint(2, 7)
        if rng.random() < 0.2:
            cfg["layer_types"] = [rng.choice(("sliding_attention", "full_attention"))
                                  for _ in range(layers)]
    if model_type in ("mixtral",):
        cfg.update(num_local_experts=4, num_experts_per_tok=2)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        cfg.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    return cfg


def random_cases(rng: random.Random, spec_of, layers: int) -> list[dict]:
    cases = []
    for _ in range(CASES_PER_MODEL):
        case = {"tp": rng.choice((1, 1, 2, 4, 8)), "pp": rng.choice((1, 1, 2, 3)),
                "kv_cache_dtype": rng.choice(KV_DTYPES),
                "max_num_batched_tokens": rng.choice((64, 256, 2048)),
                "max_model_len": rng.choice((100, 1000, 5000, 8192)),
                "async_scheduling": rng.random() < 0.3}
        case["pp"] = min(case["pp"], layers)
        spec = spec_of(case)
        flight = max_in_flight_tokens(case["max_num_batched_tokens"],
                                      async_scheduling=case["async_scheduling"],
                                      pipeline_parallel_size=case["pp"])
        need = spec.max_memory_blocks(max_model_len=case["max_model_len"],
                                      max_in_flight_tokens=flight)
        # from no block at all, through "one block short" (the null block), to plenty
        blocks = rng.choice((0, need, need + 1, need + rng.randint(2, 200)))
        case["available_bytes"] = blocks * spec.bytes_per_block + rng.randint(
            0, spec.bytes_per_block - 1)
        cases.append(case)
    return cases


def _tokpool(preset, case: dict, block_size: int) -> dict:
    spec = kv_cache_spec(preset, tp=case["tp"], pp=case["pp"],
                         kv_cache_dtype=case["kv_cache_dtype"], block_size=block_size)
    flight = max_in_flight_tokens(case["max_num_batched_tokens"],
                                  async_scheduling=case["async_scheduling"],
                                  pipeline_parallel_size=case["pp"])
    blocks = spec.num_blocks(case["available_bytes"])
    facts = {"layers": [(x.sliding_window, x.num_kv_heads, x.page_size_bytes(block_size))
                        for x in spec.layers],
             "groups": [(g.sliding_window, g.layers) for g in spec.groups],
             "max_in_flight_tokens": flight, "num_blocks": blocks, "error": None,
             "max_concurrency": spec.max_concurrency(blocks, max_model_len=case["max_model_len"],
                                                     max_in_flight_tokens=flight)}
    try:
        check_kv_cache_holds_one_sequence(
            name="m", spec=spec, kv_cache_blocks=blocks, max_model_len=case["max_model_len"],
            max_in_flight_tokens=flight, available_bytes=case["available_bytes"])
    except ValueError as err:
        facts.update(error=str(err), num_blocks=None, max_concurrency=None)
    return facts


def _same_refusal(theirs: str, ours: str) -> bool:
    """vLLM's message, its numbers (GiB, the estimated length) inside tokpool's."""
    if theirs.startswith("No available memory"):
        return "No available memory for the cache blocks" in ours
    head = re.match(r"(To serve at least one request with the model's max seq len \(\d+\), "
                    r"\([\d.]+ GiB KV cache is needed, which is larger than the available KV "
                    r"cache memory \([\d.]+ GiB\)\. (Based on the available memory, the "
                    r"estimated maximum model length is \d+\. )?)", theirs)
    return head is not None and head.group(1) in ours


def test_kv_spec_and_blocks_are_vllms(tmp_path, parity_count):
    rng = random.Random(27)
    totals = {"models": 0, "both refuse the model": 0, "cases": 0, "layers": 0,
              "sliding layers": 0, "hybrid": 0, "start-up refusals": 0, "scaled dtypes": 0}
    failures = []
    for i in range(NUM_MODELS):
        cfg = random_model(rng)
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
        block_size = rng.choice((16, 16, 32))
        try:
            preset = preset_from_hf_config(folder)
        except ValueError as err:
            ours_error = err
        else:
            ours_error = None
        cases = [] if ours_error else random_cases(
            rng, lambda c, p=preset, b=block_size: kv_cache_spec(
                p, tp=c["tp"], pp=c["pp"], kv_cache_dtype=c["kv_cache_dtype"], block_size=b),
            cfg["num_hidden_layers"])
        try:
            theirs = vllm_kv_cache_facts(folder, cases or [], block_size=block_size)
        except (AssertionError, ValueError) as err:  # vLLM refuses to build the model
            if ours_error is None:
                failures.append(f"model {i} {cfg}: vLLM refuses ({err}), tokpool does not")
            else:
                totals["both refuse the model"] += 1
            continue
        if ours_error is not None:
            failures.append(f"model {i} {cfg}: tokpool refuses ({ours_error}), vLLM does not")
            continue
        totals["models"] += 1
        for case, vllm_facts in zip(cases, theirs, strict=True):
            ours = _tokpool(preset, case, block_size)
            same = all(ours[k] == vllm_facts[k] for k in
                       ("layers", "groups", "max_in_flight_tokens", "num_blocks",
                        "max_concurrency"))
            if vllm_facts["error"] is not None or ours["error"] is not None:
                same = same and ours["error"] is not None and vllm_facts["error"] is not None \
                    and _same_refusal(vllm_facts["error"], ours["error"])
                totals["start-up refusals"] += 1
            if not same:
                failures.append(f"model {i} {cfg}\ncase {case}\nvLLM    {vllm_facts}\n"
                                f"tokpool {ours}")
            totals["cases"] += 1
            totals["layers"] += len(ours["layers"])
            totals["sliding layers"] += sum(x[0] is not None for x in ours["layers"])
            totals["hybrid"] += len(ours["groups"]) > 1
            totals["scaled dtypes"] += case["kv_cache_dtype"].endswith("per_token_head")
    for kind, n in totals.items():
        parity_count(f"kv spec: {kind}", n)
    parity_count("kv spec differences", len(failures))
    assert not failures, f"{len(failures)} differ:\n" + "\n\n".join(failures[:3])
    # the generator reaches every rule (a vacuous run fails)
    n = NUM_MODELS  # the floors are the full run's (40 models), scaled to the sample
    assert totals["sliding layers"] >= scaled(100, 40, n), totals
    assert totals["hybrid"] >= scaled(20, 40, n), totals
    assert totals["start-up refusals"] >= scaled(20, 40, n), totals
    assert totals["scaled dtypes"] >= scaled(20, 40, n), totals
    assert totals["both refuse the model"] >= 1, totals
