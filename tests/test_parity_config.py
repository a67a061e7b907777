"""Configuration parity: tokpool's resolution step against vLLM 0.33.0's own code on the CPU,
for model folders of every family tokpool reads.

Two layers, the same folders:

- ``test_resolution_matches_create_engine_config``: ``SimConfig.from_hf_config`` (a pooling
  runner) against ``EngineArgs(runner="pooling", ...).create_engine_config()`` over a grid of
  flag sets, in both usage contexts (the ``LLM`` class and the API server).
- ``test_serve_lines_match_vllm_serve``: whole ``vllm serve`` lines from a seeded generator that
  draws from vLLM's own flag list (``serve_flags``, read from its parser) — the flags tokpool
  models with values that make vLLM run or refuse, and the API server's own flags tokpool lists
  as ignored — against what ``vllm serve`` does with the same line: vLLM's serve parser,
  ``AsyncEngineArgs.from_cli_args`` and ``create_engine_config`` (``vllm_run.config.
  vllm_serve_facts``). A refusal must be refused by both, for the same reason (a phrase of
  vLLM's message that tokpool's quotes); a generative runner (``--runner auto`` on a bare
  ``*ForCausalLM``) is refused by tokpool with vLLM's pointer.

Fields compared: runner, model dtype, max_model_len, max_num_batched_tokens and max_num_seqs (on
vLLM's CPU tier: tokpool's ``hardware="CPU"``, world size included), chunked-prefill
eligibility, prefix caching, head dtype, attention type, the model's token pooling, the
optimization level and the selected pooling task (vLLM's ``ModelConfig.get_pooling_task`` over
the tasks the model declares for the conversion vLLM resolved). Capture sizes are compared with
vLLM's platform patched in ``test_parity_vllm.py``; device memory stays tokpool's input.
"""

from __future__ import annotations

import itertools
import json
import random
import shlex

import pytest
from sweep_sizes import sample_cases, sample_size

from tokpool.sim import SimConfig
from tokpool.sim.vllm_rules import select_pooling_task
from tokpool.sim.vllm_rules.args import parse_vllm_args
from tokpool.sim.vllm_rules.hf_config import declared_tasks, preset_from_hf_config
from tokpool.sim.vllm_rules.serve_flags import FRONTEND_OPTIONS, SERVE_OPTIONS
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"configuration parity skipped: {_reason}", allow_module_level=True)

from tokpool.sim.vllm_run.config import (  # noqa: E402
    vllm_engine_facts,
    vllm_parse_serve_line,
    vllm_serve_facts,
)

DECODER = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "vocab_size": 1000, "torch_dtype": "bfloat16"}
ENCODER = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 2, "vocab_size": 1000, "torch_dtype": "float32"}
BERT = {**ENCODER, "architectures": ["BertModel"], "model_type": "bert",
        "max_position_embeddings": 512, "type_vocab_size": 2}
XLMR = {**ENCODER, "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
        "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
        "position_embedding_type": "absolute"}
_ST_LAST = {"modules.json": [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
], "1_Pooling/config.json": {"pooling_mode_lasttoken": True}}
_ST_MEAN = {**_ST_LAST, "1_Pooling/config.json": {"pooling_mode_mean_tokens": True},
            "sentence_bert_config.json": {"max_seq_length": 256}}

#: name -> (config.json, other files of the folder)
FOLDERS = {
    # a bare *ForCausalLM: vLLM's --runner auto serves it as a generative model
    "qwen3-embedding": ({**DECODER, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                         "max_position_embeddings": 40960}, {}),
    # the same with its sentence-transformers files, as Qwen3-Embedding ships: pooling
    "qwen3-embedding-st": ({**DECODER, "architectures": ["Qwen3ForCausalLM"],
                            "model_type": "qwen3", "max_position_embeddings": 40960}, _ST_LAST),
    "llama-rope-linear": ({**DECODER, "architectures": ["LlamaForCausalLM"],
                           "model_type": "llama", "max_position_embeddings": 4096,
                           "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, {}),
    "llama-rope-yarn": ({**DECODER, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                         "max_position_embeddings": 4096,
                         "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 4096}}, {}),
    "qwen2-prm": ({**DECODER, "architectures": ["Qwen2ForProcessRewardModel"],
                   "model_type": "qwen2", "max_position_embeddings": 4096}, {}),
    "llama-seq-classify": ({**DECODER, "architectures": ["LlamaForSequenceClassification"],
                            "model_type": "llama", "max_position_embeddings": 2048,
                            "num_labels": 3}, {}),
    "llama-token-classify": ({**DECODER, "architectures": ["LlamaForTokenClassification"],
                              "model_type": "llama", "max_position_embeddings": 2048,
                              "num_labels": 2}, {}),
    "bert": (BERT, {}),
    "sentence-transformers": (BERT, _ST_MEAN),
    # sliding-window decoders (Mistral; Gemma-2 and Gemma-3's local/global layers)
    "mistral-sliding-window": ({**DECODER, "architectures": ["MistralForCausalLM"],
                                "model_type": "mistral", "max_position_embeddings": 32768,
                                "sliding_window": 4096}, {}),
    "gemma2-float32": ({**DECODER, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                        "max_position_embeddings": 8192, "sliding_window": 4096,
                        "torch_dtype": "float32"}, {}),
    "gemma3-text": ({**DECODER, "architectures": ["Gemma3ForCausalLM"],
                     "model_type": "gemma3_text", "max_position_embeddings": 32768,
                     "sliding_window": 512}, {}),
    # EmbeddingGemma: Gemma3TextModel with bidirectional attention, a float32 checkpoint
    "embeddinggemma": ({**DECODER, "architectures": ["Gemma3TextModel"],
                        "model_type": "gemma3_text", "max_position_embeddings": 2048,
                        "sliding_window": 257, "use_bidirectional_attention": True,
                        "torch_dtype": "float32"}, {}),
    # LongRoPE (Phi-3 128K): defaults to original_max_position_embeddings
    "phi3-longrope": ({**DECODER, "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
                       "max_position_embeddings": 131072,
                       "original_max_position_embeddings": 4096, "sliding_window": 262144,
                       "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 32,
                                        "short_factor": [1.0] * 32}}, {}),
    # XLM-R: 514 positions; its tokenizer_config.json caps the length at 512
    "xlm-roberta": (XLMR, {"tokenizer_config.json": {"model_max_length": 512}}),
    "xlm-roberta-no-tokenizer": (XLMR, {}),
    "modernbert": ({**ENCODER, "architectures": ["ModernBertModel"], "model_type": "modernbert",
                    "max_position_embeddings": 8192}, {}),
    "qwen3-moe": ({**DECODER, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                   "max_position_embeddings": 32768, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 128}, {}),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("configs")
    out = {}
    for name, (cfg, files) in FOLDERS.items():
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
        for path, content in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(json.dumps(content))
        out[name] = folder
    return out


def _kind_task(folder) -> str:
    return preset_from_hf_config(folder).default_task


# --- from_hf_config against EngineArgs(runner="pooling") --------------------------------------

# make test: 16 of the 64 flag sets (a seeded draw); CI (TOKPOOL_FULL=1): all 64
FLAGS = sample_cases(list(itertools.product(
    ("llm", "server"),            # usage context
    (None, 512),                  # --max-num-batched-tokens
    (None, 64),                   # --max-num-seqs
    (None, False),                # --enable-chunked-prefill / --no-...
    (None, 1000),                 # --max-model-len
    (None, "configured"),         # --pooler-config task
)), 16)


@pytest.mark.parametrize("name", list(FOLDERS))
def test_resolution_matches_create_engine_config(name, folders, parity_count):
    folder = folders[name]
    # the tasks the model declares as a pooling model: vLLM's get_pooling_task selects among
    # them (its model class, which would need weights, declares the same)
    declared = SimConfig.from_hf_config(folder, hardware="CPU").model.declared_tasks
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
        selected = select_pooling_task(declared, configured=task,
                                       architectures=[FOLDERS[name][0]["architectures"][0]])
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


# --- whole vllm serve lines against vllm serve -----------------------------------------------

#: The flags tokpool models, each with values that make vLLM run or refuse (its refusals:
#: budget below max_num_seqs or below max_model_len without chunking, a threshold above
#: max_model_len, -pp without SupportsPP, float16 on Gemma, an undeclared task, ...).
MODELLED = {
    "--max-num-batched-tokens": ["256", "2048", "8k", "16K"],
    "--max-num-seqs": ["8", "64", "300"],
    "--max-model-len": ["512", "1000", "4096", "32k", "auto"],
    "chunked": ["--enable-chunked-prefill", "--no-enable-chunked-prefill",
                "--disable-chunked-prefill"],
    "prefix": ["--enable-prefix-caching", "--no-enable-prefix-caching"],
    "--long-prefill-token-threshold": ["0", "128", "100000"],
    "--dtype": ["auto", "half", "bfloat16", "float32"],
    "--tensor-parallel-size": ["1", "2"],
    "-pp": ["2"],
    "--convert": ["embed", "classify", "auto"],
    "--pooler-config.task": ["embed", "token_embed", "classify", "token_classify"],
    "-O": ["-O0", "-O1", "-O3", "-O 2", "--optimization-level 1"],
    "--enforce-eager": [None],
}
#: A refusal's reason: a phrase of vLLM's message that tokpool's message must quote too.
REASONS = (
    "Pipeline parallelism is not supported for this model",
    "does not support float16",
    "User-specified max_model_len",
    "is smaller than max_model_len",
    "must be greater than or equal to max_num_seqs",
    "cannot be greater than the max_model_len",
    "Unsupported task:",
    "does not support `--runner pooling`",
    "must be divisible by tensor parallel size",
)


def _ignored_value(parser, option: str, rng: random.Random) -> list[str]:
    """A value vLLM's parser takes for one of its options (from the option's own action)."""
    action = parser._option_string_actions[option]
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(rng.choice(sorted(map(str, action.choices))))]
    default = action.default
    if isinstance(default, bool) or default is None or isinstance(default, str):
        value = rng.choice(["0.0.0.0", "x", "/tmp/tokpool-x", "8000"])
    elif isinstance(default, (int, float)):
        value = str(default)
    elif isinstance(default, list):
        value = json.dumps(default) if action.type is json.loads else "x"
    else:
        value = "x"
    return [value] * (2 if action.nargs == "+" and rng.random() < 0.3 else 1)


#: make test: the first 10 lines of the seeded stream; CI (TOKPOOL_FULL=1): 40
NUM_SERVE_LINES = sample_size(full=40, sample=10)


def serve_lines(n: int = NUM_SERVE_LINES, seed: int = 27) -> list[list[str]]:
    """``n`` seeded ``vllm serve`` flag lists: 2-6 modelled flags (a runner on most), and 0-3
    of the API server's own flags with values vLLM's parser accepts."""
    from tokpool.sim.vllm_run.config import _serve_parser

    parser = _serve_parser()._subparsers._group_actions[0].choices["serve"]
    rng = random.Random(seed)
    frontend = sorted(o for o in FRONTEND_OPTIONS if o.startswith("--") and o != "--config")
    lines = []
    while len(lines) < n:
        flags: list[str] = []
        runner = rng.choice(["--runner pooling"] * 3 + ["--runner auto", ""])
        flags += runner.split()
        for flag in rng.sample(sorted(MODELLED), rng.randint(2, 6)):
            value = rng.choice(MODELLED[flag])
            if flag in ("chunked", "prefix", "-O"):
                flags += value.split()
            elif value is None:
                flags.append(flag)
            elif flag.startswith("--") and rng.random() < 0.2:
                flags.append(f"{flag}={value}")
            else:
                flag = flag.replace("-", "_").replace("__", "--", 1) if (
                    flag.startswith("--max") and rng.random() < 0.3) else flag
                flags += [flag, value]
        for option in rng.sample(frontend, rng.randint(0, 3)):
            candidate = [option, *_ignored_value(parser, option, rng)]
            try:
                vllm_parse_serve_line(["m", *flags, *candidate])
            except ValueError:
                continue  # a value vLLM refuses, or a frontend check: not an engine case
            flags += candidate
        lines.append(flags)
    return lines


#: vLLM's pointer for a generative model (PoolingOfflineMixin._verify_pooling_task), quoted by
#: tokpool's refusal (engine_checks.check_pooling_runner).
_POINTER = "Try passing `--runner pooling`"


def _runner_flags(flags: list[str]) -> list[str]:
    """The line's --runner and --convert (with their values) alone."""
    out = []
    for i, token in enumerate(flags):
        if token.split("=")[0] in ("--runner", "--convert"):
            out += [token] if "=" in token else [token, flags[i + 1]]
    return out


def _tokpool_facts(folder, flags):
    cfg = SimConfig.from_vllm_args(["vllm", "serve", str(folder), *flags], hardware="CPU",
                                   gpu_memory_utilization=None)
    kind = cfg.pooling_kind
    return {
        "runner_type": "pooling",
        "dtype": str(cfg.dtype).removeprefix("torch."),
        "max_model_len": cfg.max_model_len,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_num_seqs": cfg.max_num_seqs,
        "enable_chunked_prefill": cfg.enable_chunked_prefill,
        "head_dtype": str(cfg.head_dtype).removeprefix("torch."),
        "attn_type": cfg.model.attn_type,
        "tok_pooling_type": kind.tok_pooling_type if kind.token_level and cfg.pooling
        is not None else cfg.model.tok_pooling_type,
        "optimization_level": cfg.optimization_level,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "selected_task": cfg.task,
    }, cfg


def test_the_generated_lines_use_vllms_own_flags():
    lines = serve_lines()
    assert len(lines) == NUM_SERVE_LINES
    for flags in lines:
        for token in flags:
            name = token.split("=")[0].replace("_", "-")
            if token.startswith("--") and "." not in name:
                assert name in SERVE_OPTIONS, token


def _as_vllm(name: str, value):
    """tokpool's parsed value as vLLM's namespace holds it."""
    if name == "max_model_len" and value is None:
        return -1  # human_readable_int_or_auto: auto
    if name == "long_prefill_token_threshold" and value is None:
        return 0  # 0: no limit
    if name == "optimization_level":
        return str(value)  # vLLM keeps the string until VllmConfig
    return value


def test_the_generated_lines_parse_as_vllms_parser_parses_them(parity_count):
    """vllm/utils/argparse_utils.py, FlexibleArgumentParser.parse_args (-O, dotted keys,
    underscores, human-readable ints) and make_arg_parser's options: every value tokpool
    reads from a line is the value vLLM's parser reads."""
    dtypes = {"float16": ("half", "float16"), "bfloat16": ("bfloat16",),
              "float32": ("float32", "float")}
    for flags in serve_lines():
        ours = parse_vllm_args(["m", *flags])
        theirs = vllm_parse_serve_line(["m", *flags])
        ignored = ours.pop("ignored", ())
        assert len(ignored) == sum(f in FRONTEND_OPTIONS for f in flags), flags
        for key, value in ours.items():
            if key == "task":
                assert theirs.pooler_config.task == value, (flags, key)
            elif key == "dtype":
                assert theirs.dtype in dtypes[value], (flags, key)
            elif key != "model":
                assert getattr(theirs, key) == _as_vllm(key, value), (flags, key)
            parity_count("serve-line values (vLLM's parser)")


@pytest.mark.parametrize("name", list(FOLDERS))
def test_serve_lines_match_vllm_serve(name, folders, parity_count):
    folder = folders[name]
    kind_task = _kind_task(folder)
    differences = []
    for flags in serve_lines():
        line = shlex.join(["vllm", "serve", str(folder), *flags])
        try:
            theirs = vllm_serve_facts([str(folder), *flags],
                                      declared_tasks=lambda c: declared_tasks(kind_task, c))
        except ValueError as err:
            theirs = str(err)
        try:
            mine, cfg = _tokpool_facts(folder, flags)
        except ValueError as err:
            mine, cfg = str(err), None
        if isinstance(theirs, dict) and theirs["runner_type"] != "pooling":
            # vLLM runs a generative model: tokpool refuses with vLLM's pointer
            if not (isinstance(mine, str) and _POINTER in mine):
                differences.append((line, theirs, mine))
            parity_count("serve lines: generative, refused by tokpool with vLLM's pointer")
            continue
        theirs = {k: v for k, v in theirs.items() if k != "convert_type"} if isinstance(
            theirs, dict) else theirs
        if isinstance(theirs, str) and isinstance(mine, str) and _POINTER in mine:
            # tokpool refuses the generative runner before vLLM's other start-up checks run:
            # vLLM must resolve this line's --runner/--convert to a generative runner
            runner_flags = _runner_flags(flags)
            alone = vllm_serve_facts([str(folder), *runner_flags])
            if alone["runner_type"] == "pooling":
                differences.append((line, theirs, mine))
            parity_count("serve lines: refused by both (tokpool: the generative runner)")
            continue
        if isinstance(theirs, str) or isinstance(mine, str):
            reason = next((r for r in REASONS if r in str(theirs)), None)
            if not (isinstance(theirs, str) and isinstance(mine, str) and reason is not None
                    and reason in mine):
                differences.append((line, theirs, mine))
            parity_count("serve lines: refused by both, same reason")
            continue
        if theirs != mine:
            differences.append((line, theirs, mine))
        # the API server's own flags: accepted, and said (ignored), never dropped
        ours = parse_vllm_args(flags)
        given = {f for f in flags if f in FRONTEND_OPTIONS}
        assert {i.split()[0] for i in cfg.ignored_flags} == given, line
        assert ours.get("ignored", ()) == cfg.ignored_flags
        parity_count("serve lines: run by both, equal")
    assert not differences, "\n\n".join(map(str, differences[:4]))
