"""Configuration parity: tokpool's resolution step (``SimConfig.from_hf_config`` and the rules
it asks) against vLLM 0.33.0's own ``EngineArgs(...).create_engine_config()`` on the CPU, for
model folders of every family tokpool reads and many flag combinations.

Fields compared: max_model_len, max_num_batched_tokens and max_num_seqs (by usage context, on
vLLM's CPU tier: tokpool's ``hardware="CPU"``), chunked-prefill eligibility, head dtype, and the
selected pooling task (vLLM's ``ModelConfig.get_pooling_task`` over the tasks tokpool says the
model declares). Capture sizes are compared with vLLM's platform patched in
``test_parity_vllm.py``; device memory stays tokpool's input.
"""

from __future__ import annotations

import itertools
import json

import pytest

from tokpool.sim import SimConfig
from tokpool.sim.vllm_rules import select_pooling_task
from tokpool.sim.vllm_rules.serve_line import declared_tasks
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"configuration parity skipped: {_reason}", allow_module_level=True)

from tokpool.sim.vllm_run.config import vllm_engine_facts  # noqa: E402

DECODER = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "vocab_size": 1000, "torch_dtype": "bfloat16"}
BERT = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 512, "type_vocab_size": 2,
        "torch_dtype": "float32"}
FOLDERS = {
    "qwen3-embedding": {**DECODER, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                        "max_position_embeddings": 40960},
    "llama-rope-linear": {**DECODER, "architectures": ["LlamaForCausalLM"],
                          "model_type": "llama", "max_position_embeddings": 4096,
                          "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "llama-rope-yarn": {**DECODER, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                        "max_position_embeddings": 4096,
                        "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 4096}},
    "qwen2-prm": {**DECODER, "architectures": ["Qwen2ForProcessRewardModel"],
                  "model_type": "qwen2", "max_position_embeddings": 4096},
    "llama-seq-classify": {**DECODER, "architectures": ["LlamaForSequenceClassification"],
                           "model_type": "llama", "max_position_embeddings": 2048,
                           "num_labels": 3},
    "llama-token-classify": {**DECODER, "architectures": ["LlamaForTokenClassification"],
                             "model_type": "llama", "max_position_embeddings": 2048,
                             "num_labels": 2},
    "bert": BERT,
    "sentence-transformers": BERT,
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("configs")
    out = {}
    for name, cfg in FOLDERS.items():
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
        if name == "sentence-transformers":
            (folder / "modules.json").write_text(json.dumps([
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models."
                 "Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers."
                 "models.Pooling"}]))
            (folder / "1_Pooling").mkdir()
            (folder / "1_Pooling" / "config.json").write_text(json.dumps(
                {"pooling_mode_mean_tokens": True}))
            (folder / "sentence_bert_config.json").write_text(json.dumps(
                {"max_seq_length": 256}))
        out[name] = folder
    return out


FLAGS = list(itertools.product(
    ("llm", "server"),            # usage context
    (None, 512),                  # --max-num-batched-tokens
    (None, 64),                   # --max-num-seqs
    (None, False),                # --enable-chunked-prefill / --no-...
    (None, 1000),                 # --max-model-len
    (None, "configured"),         # --pooler-config task
))


@pytest.mark.parametrize("name", list(FOLDERS))
def test_resolution_matches_create_engine_config(name, folders, parity_count):
    folder = folders[name]
    natural = SimConfig.from_hf_config(folder, hardware="CPU")
    declared = declared_tasks(natural.task, None)
    differences = []
    for usage, tokens, seqs, chunked, max_len, pooler in FLAGS:
        if tokens is not None and seqs is not None and tokens < seqs:
            continue
        task = declared[-1] if pooler else None  # a configured task: the token task
        engine = {k: v for k, v in {
            "max_num_batched_tokens": tokens, "max_num_seqs": seqs,
            "enable_chunked_prefill": chunked, "max_model_len": max_len}.items()
            if v is not None}
        try:
            theirs = vllm_engine_facts(folder, usage=usage, declared_tasks=declared,
                                       pooler_config={"task": task} if task else None,
                                       **engine)
        except ValueError as err:
            theirs = f"refused: {err}"[:80]
        selected = select_pooling_task(declared, configured=task)
        try:
            ours = SimConfig.from_hf_config(folder, hardware="CPU", usage=usage, task=selected,
                                            allow_long_max_model_len=False, **engine)
            mine = {
                "max_model_len": ours.max_model_len,
                "max_num_batched_tokens": ours.max_num_batched_tokens,
                "max_num_seqs": ours.max_num_seqs,
                "enable_chunked_prefill": ours.enable_chunked_prefill,
                "head_dtype": str(ours.head_dtype).removeprefix("torch."),
                "selected_task": selected,
            }
        except ValueError as err:
            mine = f"refused: {err}"[:80]
        if isinstance(theirs, str) or isinstance(mine, str):
            if isinstance(theirs, str) != isinstance(mine, str):
                differences.append((usage, engine, task, theirs, mine))
        elif theirs != mine:
            differences.append((usage, engine, task, theirs, mine))
        parity_count("configuration cases (create_engine_config)")
    assert not differences, "\n".join(map(str, differences[:5]))
