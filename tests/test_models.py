"""tokpool.models on tiny in-process models: loading, tasks, chunked prefill, errors, sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub at run time

import pytest
import torch
import torch.nn.functional as F

import tokpool as tp
from tokpool.models.forward import resolve_layer
from tokpool.models.gguf_cache import MARKER, _is_complete, gguf_cache_key

IDS = [1024 + i for i in range(37)]
IDS2 = [2000 + i for i in range(20)]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def decoder() -> tp.models.PoolingModel:
    return tp.load_model("tiny-decoder")


@pytest.fixture(scope="module")
def encoder() -> tp.models.PoolingModel:
    return tp.load_model("tiny-encoder")


@pytest.fixture(scope="module")
def classifier() -> tp.models.PoolingModel:
    return tp.load_model("tiny-token-classifier")


# --- import and registry ----------------------------------------------------------------------


def test_import_tokpool_does_not_import_transformers():
    code = "import sys, tokpool; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_list_models_names_the_builtins():
    table = tp.models.list_models()
    assert {"smollm2-135m", "minilm-l6", "tiny-decoder", "tiny-encoder"} <= set(table.index)
    assert table.loc["minilm-l6", "kind"] == "encoder"


def test_unknown_name_lists_builtin_names():
    with pytest.raises(ValueError, match="tiny-decoder") as info:
        tp.load_model("smollm3")
    assert isinstance(info.value, tp.models.ModelNotFoundError)
    assert "smollm2-135m" in str(info.value)


def test_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(tp.models.ModelNotFoundError, match="HF_HUB_OFFLINE"):
        tp.load_model("nobody-tokpool/no-such-model")


def test_missing_path_is_an_unknown_model(tmp_path):
    with pytest.raises(ValueError, match="Built-in names"):
        tp.load_model(tmp_path / "nothing-here")


def test_local_directory_loads_like_the_builtin(decoder, tmp_path):
    decoder.hf_model.save_pretrained(tmp_path)
    decoder.tokenizer.save_pretrained(tmp_path)
    local = tp.load_model(tmp_path)
    assert local.supported_tasks == decoder.supported_tasks and local.attn_type == "decoder"
    assert local.source_path == tmp_path.resolve()
    (a,) = decoder.encode([IDS], task="token_embed")
    (b,) = local.encode([IDS], task="token_embed")
    assert torch.equal(a, b)


def _st_dir(encoder, path, modules, pooling):
    encoder.hf_model.save_pretrained(path)
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))


def test_sentence_transformers_directory_sets_pooling_and_length(encoder, tmp_path):
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
    ]
    _st_dir(encoder, tmp_path, modules, {"pooling_mode_cls_token": True})
    local = tp.load_model(tmp_path)
    assert local.attn_type == "encoder_only" and local.sequence_pooling == "CLS"
    assert local.max_length == 32 and local.tokenizer is None  # ids only
    (raw,) = local.encode([IDS[:10]], task="token_embed", use_activation=False)
    (emb,) = local.encode([IDS[:10]], task="embed")
    assert torch.allclose(emb, F.normalize(raw[0], dim=-1), atol=1e-6)
    with pytest.raises(ValueError, match="no tokenizer"):
        local.encode("text", task="embed")


def test_unsupported_sentence_transformers_module(encoder, tmp_path):
    modules = [{"idx": 0, "name": "0", "path": "2_Dense",
                "type": "sentence_transformers.models.Dense"}]
    _st_dir(encoder, tmp_path, modules, {"pooling_mode_mean_tokens": True})
    with pytest.raises(ValueError, match="Dense"):
        tp.load_model(tmp_path)


@pytest.mark.parametrize("dtype", ["int8", torch.int64, "float8"])
def test_bad_dtype(dtype):
    with pytest.raises(ValueError, match="dtype"):
        tp.load_model("tiny-decoder", dtype=dtype)


def test_model_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKPOOL_CACHE", str(tmp_path))
    assert tp.models.model_cache_dir() == tmp_path


def test_gguf_cache_key_tracks_the_file(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x" * 10)
    key = gguf_cache_key(f)
    assert key == gguf_cache_key(f)
    f.write_bytes(b"x" * 11)
    assert gguf_cache_key(f) != key
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "config.json").write_text("{}")
    assert not _is_complete(entry)  # no marker: an interrupted conversion
    (entry / MARKER).write_text("{}")
    assert not _is_complete(entry)  # no manifest: a pre-manifest entry (checked files: see
    # tests/test_bad_input_models.py)


# --- what the pooler declares ----------------------------------------------------------------


def test_decoder_declares_embed_and_token_embed(decoder):
    assert decoder.supported_tasks == frozenset({"embed", "token_embed"})
    assert decoder.attn_type == "decoder"
    assert decoder.sequence_pooling == "LAST"
    assert decoder.pooler.get_supported_tasks() == decoder.supported_tasks
    assert decoder.hidden_size == 64 and decoder.max_length == 256
    assert type(decoder.hf_model).__name__ == "LlamaForCausalLM"


def test_encoder_declares_mean_embed(encoder):
    assert encoder.supported_tasks == frozenset({"embed", "token_embed"})
    assert encoder.attn_type == "encoder_only"
    assert encoder.sequence_pooling == "MEAN"


def test_token_classifier_adds_token_classify(classifier):
    assert classifier.supported_tasks == frozenset({"embed", "token_embed", "token_classify"})
    assert classifier.task == "token_classify"  # *ForTokenClassification prefers it


def test_load_with_task(decoder):
    assert tp.load_model("tiny-decoder", task="token_embed").task == "token_embed"
    with pytest.raises(ValueError, match="token_classify"):
        tp.load_model("tiny-decoder", task="token_classify")


def test_legacy_gate_refuses_decoder_token_embed(decoder):
    with pytest.raises(tp.UnsupportedTaskError, match="selects 'token_embed'"):
        decoder.served_tasks(policy="pre_50931", requested="token_embed")
    assert "token_embed" in decoder.served_tasks(policy="current", requested="token_embed")
    with pytest.raises(tp.UnsupportedTaskError, match="Unsupported task: 'token_embed'"):
        decoder.encode([IDS], task="token_embed", gate_policy="pre_50931")


def test_legacy_gate_serves_encoder_token_embed(encoder):
    assert "token_embed" in encoder.served_tasks(policy="pre_50931", requested="token_embed")


def test_unsupported_task_raises_the_gate_error(decoder):
    with pytest.raises(tp.UnsupportedTaskError, match="Supported tasks"):
        decoder.encode([IDS], task="token_classify")


# --- outputs --------------------------------------------------------------------------------


def test_output_shapes_and_normalisation(decoder):
    emb = decoder.encode([IDS, IDS2], task="embed")
    tok = decoder.encode([IDS, IDS2], task="token_embed")
    assert [e.shape for e in emb] == [(64,), (64,)]
    assert [t.shape for t in tok] == [(37, 64), (20, 64)]
    assert all(t.dtype == torch.float32 for t in emb + tok)
    assert torch.allclose(tok[0].norm(dim=-1), torch.ones(37))
    # LAST pooling = the last token's embedding
    assert torch.allclose(emb[0], tok[0][-1], atol=1e-6)


def test_batch_equals_single_prompts(decoder):
    both = decoder.encode([IDS, IDS2], task="token_embed")
    assert torch.equal(both[1], decoder.encode([IDS2], task="token_embed")[0])


def test_hidden_states_match_transformers(decoder):
    (raw,) = decoder.encode([IDS], task="token_embed", use_activation=False)
    with torch.inference_mode():
        ref = decoder.hf_model.model(torch.tensor([IDS])).last_hidden_state[0]
    assert torch.allclose(raw, ref, atol=1e-6)


def test_layer_zero_is_the_embedding(decoder):
    (raw,) = decoder.encode([IDS], task="token_embed", use_activation=False, layer=0)
    assert torch.equal(raw, decoder.hf_model.model.embed_tokens.weight[IDS].detach())


def test_dimensions_truncate_then_normalise(decoder):
    (full,) = decoder.encode([IDS], task="token_embed", use_activation=False)
    (cut,) = decoder.encode([IDS], task="token_embed", dimensions=16)
    assert cut.shape == (37, 16)
    assert torch.allclose(cut, F.normalize(full[:, :16], dim=-1), atol=1e-6)


def test_text_prompts_use_the_tokenizer(decoder):
    (tok,) = decoder.encode("token level pooling", task="token_embed")
    ids = decoder.tokenizer("token level pooling")["input_ids"]
    assert tok.shape == (len(ids), 64)


def test_token_classify_matches_the_hf_head(classifier):
    (probs,) = classifier.encode([IDS], task="token_classify")
    with torch.inference_mode():
        logits = classifier.hf_model(torch.tensor([IDS])).logits[0]
    assert probs.shape == (37, 3)
    assert torch.allclose(probs, logits.softmax(-1), atol=1e-6)


def test_encoder_embed_is_the_normalised_mean(encoder):
    (raw,) = encoder.encode([IDS[:30]], task="token_embed", use_activation=False)
    (emb,) = encoder.encode([IDS[:30]], task="embed")
    assert torch.allclose(emb, F.normalize(raw.mean(0), dim=-1), atol=1e-6)


def test_bfloat16_model_returns_float32_close_to_float32(decoder):
    bf16 = decoder.with_dtype("bfloat16")
    assert bf16.dtype == torch.bfloat16 and decoder.dtype == torch.float32
    (a,) = decoder.encode([IDS], task="token_embed")
    (b,) = bf16.encode([IDS], task="token_embed")
    assert b.dtype == torch.float32
    assert F.cosine_similarity(a, b, dim=-1).min() > 0.99
    assert decoder.with_dtype(torch.bfloat16) is bf16  # one cached copy per dtype
    assert bf16.with_dtype("float32") is decoder  # back to the original weights


# --- chunked prefill ------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 5, 10, 36, 37, 100])
def test_chunked_equals_full(decoder, chunk_size):
    full = decoder.encode([IDS, IDS2], task="token_embed", use_activation=False)
    chunked = decoder.encode([IDS, IDS2], task="token_embed", use_activation=False,
                             chunk_size=chunk_size)
    for f, c in zip(full, chunked, strict=True):
        assert torch.allclose(f, c, atol=1e-5, rtol=1e-4)


def test_chunked_embed_is_the_last_token(decoder):
    (full,) = decoder.encode([IDS], task="embed")
    (chunked,) = decoder.encode([IDS], task="embed", chunk_size=8)
    assert torch.allclose(full, chunked, atol=1e-5)


def test_chunked_intermediate_layer_equals_full(decoder):
    (full,) = decoder.encode([IDS], task="token_embed", use_activation=False, layer=1)
    (chunked,) = decoder.encode([IDS], task="token_embed", use_activation=False, layer=1,
                                chunk_size=7)
    assert torch.allclose(full, chunked, atol=1e-5)


def test_step_times_count_the_steps(decoder):
    times = tp.models.StepTimes()
    decoder.encode([IDS, IDS2], task="token_embed", chunk_size=10, times=times)
    assert times.n_steps == 4  # ceil(37 / 10); the 20-token prompt finishes in step 2
    assert times.forward_s > 0 and times.pooling_s > 0


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_owning_policies_give_identical_outputs_and_legacy_says_it_corrupts(
        decoder, async_scheduling):
    """encode runs the simulator's engine loop: 12-token steps replay CUDA graphs into memory
    the next step rewrites, so legacy's kept views break, and encode says which prompts."""
    from tokpool.models import CorruptedOutputWarning

    def encode(policy):
        return decoder.encode([IDS, IDS2], task="token_embed", chunk_size=6, policy=policy,
                              async_scheduling=async_scheduling)

    reference = encode("clone")
    for policy in ("prealloc", "offload"):
        out = encode(policy)
        assert all(torch.equal(a, b) for a, b in zip(out, reference, strict=True)), policy
    with pytest.warns(CorruptedOutputWarning, match=r"policy='legacy'.*prompts \[0, 1\]"):
        legacy = encode("legacy")
    assert not torch.equal(legacy[0], reference[0])


def test_compare_chunked_frame(decoder):
    df = tp.models.compare_chunked(decoder, IDS, chunk_sizes=(4, 16),
                                   dtypes=("float32", "bfloat16"))
    assert len(df) == 2 * 2 * len(IDS)
    assert {"dtype", "chunk_size", "position", "chunk", "max_abs_err", "rel_rms", "cosine",
            "cosine_vs_fp32"} <= set(df.columns)
    assert df[df.dtype == "float32"].cosine.min() > 0.9999
    summary = tp.models.summarize_chunked(df)
    assert len(summary) == 4 and (summary.n_tokens == len(IDS)).all()


def test_compare_chunked_refuses_encoders(encoder):
    with pytest.raises(ValueError, match="bidirectional"):
        tp.models.compare_chunked(encoder, IDS[:10], chunk_sizes=(4,))


# --- validation -----------------------------------------------------------------------------


def test_encoder_cannot_be_chunked(encoder):
    with pytest.raises(ValueError, match="bidirectional"):
        encoder.encode([IDS[:10]], task="token_embed", chunk_size=4)


def test_too_long_prompt_names_both_numbers(encoder):
    with pytest.raises(ValueError, match=r"65 tokens.*at most 64"):
        encoder.encode([[1000] * 65], task="embed")


@pytest.mark.parametrize("prompt", ["", [[]], [torch.tensor([], dtype=torch.long)]])
def test_empty_prompt(decoder, prompt):
    with pytest.raises(ValueError, match="empty"):
        decoder.encode(prompt, task="embed")


def test_token_ids_outside_vocabulary(decoder):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decoder.encode([[5, 10**6]], task="embed")


def test_non_integer_ids(decoder):
    with pytest.raises(TypeError, match="ints"):
        decoder.encode([[1.5, 2]], task="embed")


@pytest.mark.parametrize("dimensions", [0, 65])
def test_dimensions_out_of_range(decoder, dimensions):
    with pytest.raises(ValueError, match="dimensions"):
        decoder.encode([IDS], task="token_embed", dimensions=dimensions)


def test_dimensions_need_an_embedding_task(classifier):
    with pytest.raises(ValueError, match="dimensions"):
        classifier.encode([IDS], task="token_classify", dimensions=2)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"chunk_size": 0}, ValueError),
        ({"chunk_size": 2.5}, TypeError),
        ({"policy": "copy"}, ValueError),
        ({"layer": 3}, ValueError),
        ({"task": "nonsense"}, ValueError),
    ],
)
def test_bad_options(decoder, kwargs, error):
    options = {"task": "token_embed", **kwargs}
    with pytest.raises(error):
        decoder.encode([IDS], **options)


def test_resolve_layer():
    assert resolve_layer(-1, 2) is None and resolve_layer(2, 2) is None
    assert resolve_layer(0, 2) == 0 and resolve_layer(-3, 2) == 0
    with pytest.raises(ValueError, match="outside"):
        resolve_layer(-4, 2)


def test_empty_batch(decoder):
    assert decoder.encode([], task="embed") == []


# --- ModelSource ----------------------------------------------------------------------------


def _engine(source: tp.ModelSource, *, budget: int, policy: str, async_scheduling: bool):
    """A minimal engine: one persistent hidden-state buffer, a shared token budget per step,
    and (async) outputs collected only after the next step has written the buffer."""
    lens = source.prompt_lens
    source.prepare(lens)
    buffer = torch.empty((budget, source.width), dtype=source.dtype)  # reused every step
    pool = tp.AllPool(async_scheduling=async_scheduling, policy=policy)
    states = [tp.PoolingStates() for _ in lens]
    computed, delivered, pending = [0] * len(lens), {}, []
    while any(c < n for c, n in zip(computed, lens, strict=True)):
        chunks, left = [], budget
        for r, (c, n) in enumerate(zip(computed, lens, strict=True)):
            if c < n and left:
                take = min(left, n - c)
                chunks.append((r, c, c + take))
                left -= take
        rows = buffer[: budget - left]  # [n_step_tokens, hidden], a view of the buffer
        source.fill(rows, chunks)
        for r, out in pending:  # async: the previous step is collected only now
            delivered[r] = out.clone()
        pending = []
        meta = tp.build_metadata(
            [lens[r] for r, _, _ in chunks],
            num_scheduled_tokens=[b - a for _, a, b in chunks],
            seq_lens=[b for _, _, b in chunks],
            states=[states[r] for r, _, _ in chunks],
        )
        for (r, _, stop), out in zip(chunks, pool(rows, meta), strict=True):
            computed[r] = stop
            if out is not None:
                pending.append((r, out))
        if not async_scheduling:
            for r, out in pending:
                delivered[r] = out.clone()
            pending = []
    for r, out in pending:
        delivered[r] = out.clone()
    return [r for r in range(len(lens)) if not torch.equal(delivered[r], source.reference(r))]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_model_source_clone_is_exact_and_legacy_corrupts(decoder, async_scheduling):
    source = tp.ModelSource(decoder, [IDS, IDS2, IDS[:9]])
    assert _engine(source, budget=16, policy="clone", async_scheduling=async_scheduling) == []
    assert _engine(source, budget=16, policy="legacy", async_scheduling=async_scheduling)


def test_model_source_rows_are_the_models_hidden_states(decoder):
    source = tp.ModelSource(decoder, [IDS, IDS2])
    source.prepare(source.prompt_lens)
    out = torch.empty((30, decoder.hidden_size))
    source.fill(out[:30], [(0, 0, 20), (1, 0, 10)])  # two requests in one step
    out2 = torch.empty((27, decoder.hidden_size))
    source.fill(out2, [(0, 20, 37), (1, 10, 20)])
    full = decoder.encode([IDS, IDS2], task="token_embed", use_activation=False)
    assert torch.allclose(torch.cat([out[:20], out2[:17]]), full[0], atol=1e-5)
    assert torch.equal(source.reference(0), torch.cat([out[:20], out2[:17]]))
    assert torch.equal(source.token_ids(1), torch.tensor(IDS2))


def test_model_source_errors(decoder, encoder):
    source = tp.ModelSource(decoder, [IDS, IDS2])
    assert source.prompt_lens == [37, 20]
    with pytest.raises(ValueError, match="prompt_lens"):
        source.prepare([37, 21])
    source.prepare([37, 20])
    with pytest.raises(ValueError, match="does not continue"):
        source.fill(torch.empty((5, 64)), [(0, 5, 10)])
    with pytest.raises(ValueError, match="shape"):
        source.fill(torch.empty((4, 64)), [(0, 0, 5)])
    with pytest.raises(ValueError, match="dtype"):
        source.fill(torch.empty((5, 64), dtype=torch.bfloat16), [(0, 0, 5)])
    source.fill(torch.empty((5, 64)), [(0, 0, 5)])
    with pytest.raises(ValueError, match="computed"):
        source.reference(0)
    source.reset(0)  # preemption: restart from token 0
    source.fill(torch.empty((37, 64)), [(0, 0, 37)])
    assert source.reference(0).shape == (37, 64)
    with pytest.raises(ValueError, match="does not exist"):
        source.reset(2)
    enc = tp.ModelSource(encoder, [IDS[:10]])
    with pytest.raises(ValueError, match="bidirectional"):
        enc.fill(torch.empty((4, 64)), [(0, 0, 4)])


def test_model_source_token_classify_delivers_logits(classifier, decoder):
    source = tp.ModelSource(classifier, [IDS], task="token_classify")
    assert source.width == 3
    source.prepare(source.prompt_lens)
    out = torch.empty((37, 3))
    source.fill(out, [(0, 0, 37)])
    with torch.inference_mode():
        logits = classifier.hf_model(torch.tensor([IDS])).logits[0]
    assert torch.allclose(out, logits, atol=1e-5)
    with pytest.raises(ValueError, match="token-classification head"):
        tp.ModelSource(decoder, [IDS], task="token_classify")


# --- model-backed simulation ----------------------------------------------------------------


def _simulate():
    sim = pytest.importorskip("tokpool.sim", reason="the step simulator is not in this tree")
    return getattr(tp, "simulate", None) or sim.simulate, sim.SimConfig


@pytest.mark.parametrize(
    ("lens", "async_scheduling", "head", "legacy_corrupts"),
    [
        ((8, 8, 8), False, "identity", False),  # one-shot prompts, sync: collected in time
        ((8, 8, 8), True, "identity", True),  # async: the next step overwrites the views
        # vLLM's default head (float32 cast, activation) copies a one-shot output within its
        # step, so the async copy never reads hidden-state memory
        ((8, 8, 8), True, "vllm", False),
        ((37, 20, 9), False, "vllm", True),  # chunked: unfinished chunk views outlive a step
        ((37, 20, 9), True, "identity", True),
    ],
)
def test_simulate_with_model_source(decoder, lens, async_scheduling, head, legacy_corrupts):
    simulate, SimConfig = _simulate()
    source = tp.ModelSource(decoder, [[1024 + 50 * r + i for i in range(n)]
                                      for r, n in enumerate(lens)])
    results = {}
    for policy in tp.RETENTION_POLICIES:
        identity = {"head_dtype": None, "use_activation": False} if head == "identity" else {}
        config = SimConfig(hidden_size=source.width, dtype=source.dtype,
                           max_num_batched_tokens=8 if lens[0] == 8 else 16,
                           async_scheduling=async_scheduling, policy=policy, **identity)
        results[policy] = simulate(source.prompt_lens, config, source=source)
    assert all(not results[p].corrupted for p in ("clone", "prealloc", "offload"))
    assert bool(results["legacy"].corrupted) == legacy_corrupts
