"""Parity with vLLM 0.33.0 itself: its pooling code and its engine rules, run here on a CPU.

The same hidden states and the same random schedules (seeded; the step's hidden states written
into one buffer that is overwritten between steps, rows in MRV2's order) go to vLLM's
``AllPool``/``StepPool``/heads/cursor and to tokpool's; outputs are compared with
``torch.equal``, storage sharing with the buffer and the bytes each side keeps between steps
must agree. vLLM's rule functions are called directly where they run on a CPU, with device facts
supplied through vLLM's platform object, and compared with ``tokpool.sim.vllm_rules``.

Needs vLLM 0.33.0 installed with ``make vllm``; the module skips with the reason otherwise. The
number of compared tensors is printed in the terminal summary (``parity_count``).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from types import SimpleNamespace as NS

import pytest
import torch

import tokpool as tp
from tokpool.pooler.vllm_bridge import (
    VLLM_REFERENCE_VERSION,
    VllmPool,
    vllm_unavailable_reason,
    vllm_version,
)
from tokpool.sim import vllm_rules as R

pytestmark = pytest.mark.parity

_reason = vllm_unavailable_reason()
if _reason is not None:
    pytest.skip(f"vLLM parity layer skipped: {_reason}", allow_module_level=True)
if vllm_version() != VLLM_REFERENCE_VERSION:
    pytest.skip(
        f"vLLM parity layer skipped: vLLM {vllm_version()} is installed, the rules were read "
        f"in {VLLM_REFERENCE_VERSION} (`make vllm` installs it)",
        allow_module_level=True,
    )

import numpy as np  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.config.pooler import PoolerConfig  # noqa: E402
from vllm.model_executor.layers.pooler.activations import (  # noqa: E402
    PoolerClassify,
    PoolerNormalize,
)
from vllm.model_executor.layers.pooler.tokwise import heads as vheads  # noqa: E402
from vllm.model_executor.layers.pooler.tokwise import methods as vmethods  # noqa: E402
from vllm.pooling_params import PoolingParams  # noqa: E402
from vllm.v1.pool.metadata import PoolingMetadata as VMeta  # noqa: E402
from vllm.v1.pool.metadata import PoolingStates as VStates  # noqa: E402

WIDTH = 6
STEP_TAG = 3


@pytest.fixture(scope="module")
def vllm_config():
    return VllmConfig()


def make_vllm_pool(config, pooling_type: str, *, chunked: bool, async_: bool):
    # vLLM's CPU platform forces async_scheduling off inside VllmConfig: set it on the config.
    config.scheduler_config.enable_chunked_prefill = chunked
    config.scheduler_config.async_scheduling = async_
    with set_current_vllm_config(config):
        return vmethods.StepPool() if pooling_type == "STEP" else vmethods.AllPool()


# --- schedules ----------------------------------------------------------------------------


def random_schedule(rng: random.Random, *, chunked: bool):
    """A FCFS chunked-prefill schedule: a list of steps, each a list of
    ``(request, prompt_len, computed_before, scheduled)`` in the scheduler's order."""
    n_req = rng.randint(1, 6)
    prompts = [rng.randint(1, 24) for _ in range(n_req)]
    budget = rng.randint(1, 32) if chunked else max(prompts) + rng.randint(0, 8)
    max_seqs = rng.randint(1, 4)
    done = [0] * n_req
    waiting, running, steps = list(range(n_req)), [], []
    while waiting or running:
        left, step = budget, []
        for r in list(running):
            if left == 0:
                break
            n = min(prompts[r] - done[r], left, rng.randint(1, left))  # random chunk sizes
            step.append((r, prompts[r], done[r], n))
            left -= n
        while waiting and left > 0 and len(running) < max_seqs:
            r = waiting[0]
            remaining = prompts[r] - done[r]
            if not chunked and remaining > left:
                break
            n = min(remaining, left) if not chunked else min(remaining, rng.randint(1, left))
            waiting.pop(0)
            running.append(r)
            step.append((r, prompts[r], done[r], n))
            left -= n
        for r, _, _, n in step:
            done[r] += n
            if done[r] == prompts[r]:
                running.remove(r)
        steps.append(step)
    return prompts, steps


def step_rows(step):
    """The step's requests in MRV2's row order (vllm_rules.step_order)."""
    return [step[i] for i in R.step_order([n for *_, n in step])]


def _owned(tensors) -> int:
    return tp.owned_bytes([t for t in tensors if t is not None])


# --- pooling ------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling_type", ["ALL", "STEP"])
@pytest.mark.parametrize(("chunked", "async_"), list(itertools.product([True, False], repeat=2)))
def test_pooling_matches_vllm_on_random_schedules(
    vllm_config, parity_count, pooling_type, chunked, async_
):
    rng = random.Random(f"{pooling_type}{chunked}{async_}")
    gen = torch.Generator().manual_seed(7)
    vpool = make_vllm_pool(vllm_config, pooling_type, chunked=chunked, async_=async_)
    tcls = tp.StepPool if pooling_type == "STEP" else tp.AllPool
    tpool = tcls(enable_chunked_prefill=chunked, async_scheduling=async_, policy="clone")
    buffer = torch.empty(64, WIDTH)  # the reused hidden-state buffer
    schedules, finished = 120, 0
    for _ in range(schedules):
        prompts, steps = random_schedule(rng, chunked=chunked)
        token_ids = [torch.randint(0, 5, (p,), generator=gen) for p in prompts]
        columns = [rng.choice([None, [], [0, 2], [5, 1, 1]]) for _ in prompts]
        tags = [rng.choice([None, STEP_TAG]) for _ in prompts]
        t_states = {r: tp.PoolingStates() for r in range(len(prompts))}
        v_states = {r: VStates() for r in range(len(prompts))}
        for step in steps:
            rows = step_rows(step)
            reqs = [r for r, *_ in rows]
            n_tokens = sum(n for *_, n in rows)
            buffer[:n_tokens] = torch.randn(n_tokens, WIDTH, generator=gen)
            hidden = buffer[:n_tokens]  # [n_tokens, WIDTH], a view of the buffer
            scheduled = [n for *_, n in rows]
            seq_lens = [c + n for _, _, c, n in rows]
            step_kwargs = {}
            if pooling_type == "STEP":
                step_kwargs = dict(
                    prompt_token_ids=[token_ids[r] for r in reqs],
                    step_tag_id=[tags[r] for r in reqs],
                    returned_token_ids=[columns[r] for r in reqs],
                )
            tmeta = tp.build_metadata(
                [prompts[r] for r in reqs], num_scheduled_tokens=scheduled, seq_lens=seq_lens,
                states=[t_states[r] for r in reqs], **step_kwargs,
            )
            vmeta = vllm_metadata(pooling_type, prompts, reqs, token_ids, tags, columns,
                                  [v_states[r] for r in reqs])
            vmeta.build_pooling_cursor(np.array(scheduled), torch.tensor(seq_lens),
                                       torch.device("cpu"))
            t_out = tpool(hidden, tmeta)
            v_out = vpool(hidden, vmeta)
            assert len(t_out) == len(v_out)
            for t, v in zip(t_out, v_out, strict=True):
                assert (t is None) == (v is None)
                if t is None:
                    continue
                finished += 1
                assert torch.equal(t, v), "pooled outputs differ"
                assert tp.shares_storage(t, buffer) == tp.shares_storage(v, buffer)
                parity_count("pooled outputs (torch.equal)")
            # what each side keeps across the step: same chunks, same ownership, same bytes
            for r in reqs:
                t_cache, v_cache = t_states[r].hidden_states_cache, v_states[r].hidden_states_cache
                assert len(t_cache) == len(v_cache)
                for a, b in zip(t_cache, v_cache, strict=True):
                    assert torch.equal(a, b)
                    assert tp.shares_storage(a, buffer) == tp.shares_storage(b, buffer)
                    parity_count("cached chunks (torch.equal)")
            t_kept = [t for s in t_states.values() for t in s.tensors()]
            v_kept = [t for s in v_states.values() for t in s.hidden_states_cache]
            assert _owned(t_kept) == _owned(v_kept)
            assert _owned(t_out) == _owned(v_out)
            buffer.normal_(generator=gen)  # the next step overwrites the step memory
            for t, v in zip(t_out, v_out, strict=True):
                if t is not None:
                    assert torch.equal(t, v), "outputs diverge once the buffer is overwritten"
                    parity_count("outputs after overwrite (torch.equal)")
    assert finished > schedules  # every schedule finished its requests


def vllm_metadata(pooling_type, prompts, reqs, token_ids, tags, columns, states):
    if pooling_type == "STEP":
        params = [PoolingParams(task="token_classify", step_tag_id=tags[r],
                                returned_token_ids=columns[r]) for r in reqs]
        width = max(prompts[r] for r in reqs)
        ids = torch.zeros((len(reqs), width), dtype=torch.int64)
        for i, r in enumerate(reqs):
            ids[i, : prompts[r]] = token_ids[r]
    else:
        params = [PoolingParams(task="token_embed") for _ in reqs]
        ids = None
    return VMeta(
        prompt_lens=torch.tensor([prompts[r] for r in reqs]),
        prompt_token_ids=None,
        prompt_token_ids_cpu=ids,
        pooling_params=params,
        pooling_states=states,
    )


def test_cursor_matches_vllm_including_slices(parity_count):
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 6)
        prompts = [rng.randint(1, 30) for _ in range(n)]
        before = [rng.randint(0, p - 1) for p in prompts]
        scheduled = [rng.randint(1, p - b) for p, b in zip(prompts, before, strict=True)]
        seq_lens = [b + s for b, s in zip(before, scheduled, strict=True)]
        tmeta = tp.build_metadata(prompts, num_scheduled_tokens=scheduled, seq_lens=seq_lens)
        vmeta = VMeta(prompt_lens=torch.tensor(prompts), prompt_token_ids=None,
                      prompt_token_ids_cpu=None,
                      pooling_params=[PoolingParams(task="token_embed")] * n,
                      pooling_states=[VStates() for _ in range(n)])
        vmeta.build_pooling_cursor(np.array(scheduled), torch.tensor(seq_lens),
                                   torch.device("cpu"))
        a, b = rng.randint(0, n - 1), rng.randint(1, n)
        for tcur, vcur, offset in (
            (tmeta.pooling_cursor, vmeta.pooling_cursor, 0),
            # vLLM's slice keeps batch-absolute token indices (DispatchPooler shifts them);
            # tokpool's slice is relative to the sub-batch: equal after the shift.
            (tmeta[a:b].pooling_cursor, vmeta[a:b].pooling_cursor, sum(scheduled[:a])),
        ):
            for field in ("prompt_lens_cpu", "seq_lens_cpu", "num_scheduled_tokens_cpu"):
                assert torch.equal(getattr(tcur, field).long(), getattr(vcur, field).long())
            for field in ("first_token_indices_gpu", "last_token_indices_gpu"):
                assert torch.equal(getattr(tcur, field), getattr(vcur, field) - offset)
            assert tcur.is_partial_prefill() == vcur.is_partial_prefill()
            assert tcur.get_finished_mask() == vcur.get_finished_mask()
            assert torch.equal(tcur.is_finished(), vcur.is_finished())
            parity_count("cursor fields (torch.equal)", 6)


@pytest.mark.parametrize("head_dtype", [torch.float32, torch.bfloat16, None])
def test_heads_match_vllm(parity_count, head_dtype):
    gen = torch.Generator().manual_seed(1)
    projector = torch.nn.Linear(WIDTH, 4).to(head_dtype or torch.float32)
    classifier = torch.nn.Linear(WIDTH, 3).to(head_dtype or torch.float32)
    one_label = torch.nn.Linear(WIDTH, 1).to(head_dtype or torch.float32)
    for rows, dimensions, act, proj in itertools.product(
        (0, 1, 7), (None, 2), (True, False), (None, projector)
    ):
        data = torch.randn(rows, WIDTH, generator=gen).to(head_dtype or torch.float32)
        vh = vheads.TokenEmbeddingPoolerHead(head_dtype=head_dtype, projector=proj,
                                             activation=PoolerNormalize())
        th = tp.pooler.heads.TokenEmbeddingHead(head_dtype=head_dtype, projector=proj)
        params = PoolingParams(task="token_embed", dimensions=dimensions, use_activation=act)
        with torch.no_grad():
            v = vh.forward_chunk(data, params)
            t = th(data, dimensions=dimensions, use_activation=act)
        assert torch.equal(t, v) and t.dtype == v.dtype
        assert tp.shares_storage(t, data) == tp.shares_storage(v, data)
        parity_count("head outputs (torch.equal)")
    for rows, mean, sigma, act, clf in itertools.product(
        (1, 5), (None, 0.5), (None, 2.0), (True, False), (None, classifier, one_label)
    ):
        data = torch.randn(rows, WIDTH, generator=gen).to(head_dtype or torch.float32)
        vh = vheads.TokenClassifierPoolerHead(classifier=clf, logit_mean=mean, logit_sigma=sigma,
                                              head_dtype=head_dtype, activation=PoolerClassify())
        th = tp.pooler.heads.TokenClassifierHead(
            head_dtype=head_dtype, classifier=clf, logit_mean=mean,
                                    logit_sigma=sigma)
        params = PoolingParams(task="token_classify", use_activation=act)
        with torch.no_grad():
            v = vh.forward_chunk(data, params)
            t = th(data, use_activation=act)
        assert torch.equal(t, v) and t.dtype == v.dtype
        parity_count("head outputs (torch.equal)")


def test_task_sets_match_vllm(vllm_config):
    from vllm.v1.worker.gpu.pool.pooling_runner import _SUPPORTED_TASKS

    all_pool = make_vllm_pool(vllm_config, "ALL", chunked=True, async_=False)
    step_pool = make_vllm_pool(vllm_config, "STEP", chunked=True, async_=False)
    assert set(all_pool.get_supported_tasks()) == R.TOKEN_POOL_METHOD_TASKS
    assert set(step_pool.get_supported_tasks()) == R.TOKEN_POOL_METHOD_TASKS
    assert frozenset(_SUPPORTED_TASKS) == R.RUNNER_TASKS == tp.SUPPORTED_TASKS
    assert set(tp.AllPool().get_supported_tasks()) == R.TOKEN_POOL_METHOD_TASKS


def test_step_pool_task_set_matches_vllm():
    # vLLM's StepPool inherits AllPool's {token_embed, token_classify}; so does tokpool's
    assert tp.StepPool().get_supported_tasks() == R.TOKEN_POOL_METHOD_TASKS


# --- the bridge ---------------------------------------------------------------------------


@pytest.mark.parametrize("pooling_type", ["ALL", "STEP"])
@pytest.mark.parametrize("async_", [False, True])
def test_bridge_equals_tokpool_clone(parity_count, pooling_type, async_):
    rng = random.Random(f"bridge{pooling_type}{async_}")
    gen = torch.Generator().manual_seed(11)
    bridge = VllmPool(pooling_type, async_scheduling=async_)
    tcls = tp.StepPool if pooling_type == "STEP" else tp.AllPool
    clone = tcls(async_scheduling=async_, policy="clone")
    buffer = torch.empty(64, WIDTH)
    for _ in range(60):
        prompts, steps = random_schedule(rng, chunked=True)
        ids = [torch.randint(0, 5, (p,), generator=gen) for p in prompts]
        b_states = {r: tp.PoolingStates() for r in range(len(prompts))}
        c_states = {r: tp.PoolingStates() for r in range(len(prompts))}
        for step in steps:
            rows = step_rows(step)
            reqs = [r for r, *_ in rows]
            n_tokens = sum(n for *_, n in rows)
            buffer[:n_tokens] = torch.randn(n_tokens, WIDTH, generator=gen)
            kwargs = dict(num_scheduled_tokens=[n for *_, n in rows],
                          seq_lens=[c + n for _, _, c, n in rows])
            if pooling_type == "STEP":
                kwargs.update(prompt_token_ids=[ids[r] for r in reqs], step_tag_id=STEP_TAG,
                              returned_token_ids=[1, 4])
            lens = [prompts[r] for r in reqs]
            b_out = bridge(buffer[:n_tokens],
                           tp.build_metadata(lens, states=[b_states[r] for r in reqs], **kwargs))
            c_out = clone(buffer[:n_tokens],
                          tp.build_metadata(lens, states=[c_states[r] for r in reqs], **kwargs))
            for b, c in zip(b_out, c_out, strict=True):
                assert (b is None) == (c is None)
                if b is not None:
                    assert torch.equal(b, c)
                    assert tp.shares_storage(b, buffer) == tp.shares_storage(c, buffer)
                    parity_count("bridge outputs (torch.equal)")
            # the tokpool states seen through the bridge hold exactly what vLLM keeps
            assert _owned(t for s in b_states.values() for t in s.tensors()) == _owned(
                t for s in c_states.values() for t in s.tensors()
            )
            buffer.normal_(generator=gen)
    assert bridge._states == {}  # every request finished and was forgotten


def test_bridge_refuses_wrong_states_and_missing_ids():
    bridge = VllmPool("ALL")
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[4])  # claims 2 computed
    with pytest.raises(ValueError, match="pooling state holds 0"):
        bridge(torch.randn(2, WIDTH), meta)
    step = VllmPool("STEP")
    with pytest.raises(ValueError, match="prompt_token_ids"):
        step(torch.randn(3, WIDTH), tp.build_metadata([3], step_tag_id=STEP_TAG))
    out = step(torch.randn(3, WIDTH), tp.build_metadata([3]))  # no tag: ids not needed
    assert out[0].shape == (3, WIDTH)
    with pytest.raises(ValueError, match="pooling_type"):
        VllmPool("MEAN")


# --- engine rules -------------------------------------------------------------------------


@pytest.fixture
def device(monkeypatch):
    """Make vLLM's platform report the given device facts."""
    from vllm.engine import arg_utils
    from vllm.platforms.interface import DeviceCapability

    # vLLM's checks are classmethods that call cls.get_device_capability: patch the class
    platform = type(arg_utils.current_platform)

    def use(facts: R.Hardware) -> None:
        def fixed(value):
            return classmethod(lambda cls, device_id=0: value)

        # the CPU record has no memory total (vLLM's CPU tier does not read it): report 0,
        # what get_batch_defaults assumes when the query fails
        monkeypatch.setattr(platform, "get_device_total_memory",
                            fixed(facts.total_memory_bytes or 0))
        monkeypatch.setattr(platform, "get_device_name", fixed(facts.driver_name))
        monkeypatch.setattr(platform, "get_device_capability",
                            fixed(DeviceCapability(*facts.capability)))
        monkeypatch.setattr(platform, "is_cpu", lambda self: facts.platform == "cpu")
        monkeypatch.setattr(platform, "is_tpu", lambda self: False)

    return use


def test_capture_sizes_match_vllm(device, parity_count):
    from vllm.config.compilation import CompilationConfig, CUDAGraphMode
    from vllm.config.vllm import VllmConfig as V

    combos = itertools.product(
        ["h200", "b200"], [1, 3, 8, 100, 256, 300, 1024], [1, 7, 100, 512, 600, 2048, 16384],
        [False, True], [None, 300, 2000], [None, [5, 1, 600, 3000]],
    )
    for gpu, seqs, tokens, eager, top, sizes in combos:
        device(R.resolve_device(gpu))
        kwargs = {"cudagraph_mode": CUDAGraphMode.PIECEWISE}
        if top is not None:
            kwargs["max_cudagraph_capture_size"] = top
        if sizes is not None:
            kwargs["cudagraph_capture_sizes"] = sizes
        compilation = CompilationConfig(**kwargs)
        engine = NS(model_config=NS(enforce_eager=eager), compilation_config=compilation,
                    scheduler_config=NS(max_num_seqs=seqs, max_num_batched_tokens=tokens),
                    uniform_decode_query_len=1, performance_mode="balanced",
                    speculative_config=None)
        try:
            V._set_cudagraph_sizes(engine)
            theirs = (compilation.max_cudagraph_capture_size,
                      tuple(compilation.cudagraph_capture_sizes))
        except ValueError:
            theirs = "ValueError"
        try:
            ours = R.resolve_cudagraph_sizes(
                gpu, max_num_seqs=seqs, max_num_batched_tokens=tokens, enforce_eager=eager,
                max_cudagraph_capture_size=top, cudagraph_capture_sizes_override=sizes)
        except ValueError:
            ours = "ValueError"
        assert ours == theirs, (gpu, seqs, tokens, eager, top, sizes)
        parity_count("engine-rule cases")


def test_batch_defaults_and_engine_limits_match_vllm(device, parity_count, tmp_path):
    from vllm.config.scheduler import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    contexts = {"llm": UsageContext.LLM_CLASS, "server": UsageContext.OPENAI_API_SERVER,
                "engine": UsageContext.ENGINE_CONTEXT}
    for gpu in R.DEVICES:
        device(R.resolve_device(gpu))
        tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
        for usage, ctx in contexts.items():
            expected = (tokens.get(ctx, 2048), seqs.get(ctx, 128))
            assert R.batch_defaults(gpu, usage) == expected, (gpu, usage)
            parity_count("engine-rule cases")
        for usage, mml, chunked, given_tokens, given_seqs in itertools.product(
            contexts, [4, 512, 8192, 32768, 131072], [True, False], [None, 2048], [None, 64]
        ):
            # a local path as the model: offline, EngineArgs resolves hub ids to files
            args = EngineArgs(model=str(tmp_path), enable_chunked_prefill=chunked,
                              max_num_batched_tokens=given_tokens, max_num_seqs=given_seqs)
            args._set_default_max_num_seqs_and_batched_tokens_args(
                contexts[usage],
                NS(max_model_len=mml, is_multimodal_model=False, is_mm_prefix_lm=False),
                NS(use_batched_dp_moe=False),
            )
            try:
                SchedulerConfig(max_num_batched_tokens=args.max_num_batched_tokens,
                                max_num_seqs=args.max_num_seqs, enable_chunked_prefill=chunked,
                                max_model_len=mml, is_encoder_decoder=False)
                theirs = (args.max_num_batched_tokens, args.max_num_seqs)
            except ValueError:
                theirs = "ValueError"
            try:
                ours = R.engine_batch_limits(
                    gpu, usage, max_model_len=mml, enable_chunked_prefill=chunked,
                    max_num_batched_tokens=given_tokens, max_num_seqs=given_seqs)
            except ValueError:
                ours = "ValueError"
            assert ours == theirs, (gpu, usage, mml, chunked, given_tokens, given_seqs)
            parity_count("engine-rule cases")


def test_chunking_attn_type_head_dtype_and_activation_match_vllm(parity_count):
    from vllm.config.model import ModelConfig, _get_head_dtype

    for attn, seq, tok in itertools.product(
        ["decoder", "encoder_only", "encoder_decoder", "hybrid", "attention_free"],
        ["CLS", "LAST", "MEAN"], ["ALL", "STEP"],
    ):
        model = NS(attn_type=attn, pooler_config=PoolerConfig(seq_pooling_type=seq,
                                                              tok_pooling_type=tok))
        assert ModelConfig.is_chunked_prefill_supported.fget(model) == (
            R.chunked_prefill_supported(attn, seq_pooling_type=seq, tok_pooling_type=tok))
        generative = NS(attn_type=attn, pooler_config=None)
        assert ModelConfig.is_chunked_prefill_supported.fget(generative) == (
            R.chunked_prefill_supported(attn, pooling=False))
        parity_count("engine-rule cases", 2)
    for default_seq, causal, declared in itertools.product(
        ["CLS", "LAST", "MEAN"], [True, False], ["decoder", "hybrid"]
    ):
        model = NS(pooler_config=PoolerConfig(), hf_config=NS(is_causal=causal),
                   _model_info=NS(default_seq_pooling_type=default_seq, attn_type=declared))
        assert ModelConfig.attn_type.fget(model) == R.pooling_attn_type(
            default_seq, is_causal=causal, declared=declared)
        parity_count("engine-rule cases")
    names = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    for model_dtype, runner, override in itertools.product(
        names, ["pooling", "generate"], [None, "model", "float16", "bfloat16"]
    ):
        theirs = _get_head_dtype(NS(head_dtype=override), names[model_dtype], runner)
        ours = R.default_head_dtype(model_dtype, runner=runner, override=override)
        assert theirs == names[ours]
        parity_count("engine-rule cases")
    for task, configured, requested in itertools.product(
        ["token_embed", "token_classify"], [None, True, False], [None, True, False]
    ):
        params = PoolingParams(task=task, use_activation=requested)
        model = NS(pooler_config=PoolerConfig(use_activation=configured))
        params._merge_default_parameters(model)
        params._set_default_parameters(model)
        expected = R.default_use_activation(requested if requested is not None else configured)
        assert params.use_activation is expected
        parity_count("engine-rule cases")


def test_prompt_length_and_request_task_checks_match_vllm(parity_count):
    from vllm.entrypoints.pooling.offline import PoolingOfflineMixin
    from vllm.exceptions import VLLMError
    from vllm.v1.engine.input_processor import InputProcessor

    for prompt_len, max_model_len in itertools.product([0, 1, 4095, 4096, 4097], [4096]):
        processor = NS(skip_prompt_length_check=False, supports_mm_inputs=False,
                       mm_encoder_cache_size=0,
                       model_config=NS(max_model_len=max_model_len, runner_type="pooling"))
        try:
            InputProcessor._validate_prompt_len(processor, prompt_len, "decoder")
            theirs = None
        except VLLMError as err:  # VLLMValidationError
            theirs = err
        try:
            R.check_prompts_fit([prompt_len], max_model_len)
            ours = None
        except ValueError as err:
            ours = err
        assert (theirs is None) == (ours is None), prompt_len
        if ours is not None and prompt_len:
            assert str(prompt_len) in str(theirs) and str(max_model_len) in str(theirs)
            assert str(prompt_len) in str(ours) and str(max_model_len) in str(ours)
        parity_count("engine-rule cases")
    try:  # the API server's module needs its web stack (orjson, ...), absent on this CPU set-up
        from vllm.entrypoints.pooling.pooling.serving import ServingPooling
        server_check = ServingPooling._verify_pooling_task
    except ImportError:
        server_check = None

    for supported, task in itertools.product(
            [("token_classify", "token_embed"), ("token_classify",), ("embed", "token_embed"),
             ("classify", "token_classify")],
            ["token_embed", "token_classify", "embed", "classify"]):
        selected = supported[-1]
        llm = NS(runner_type="pooling", supported_tasks=supported, pooling_task=selected,
                 pooling_io_processors={selected: None})
        server = NS(supported_tasks=supported, pooling_task=selected, io_processors={})
        request = NS(task=task, dimensions=None)
        checks = (
            (PoolingOfflineMixin._verify_pooling_task, (llm, task), {}),
            (R.check_selected_task, (task,),
             {"selected_task": selected, "supported_tasks": supported}),
        ) + (() if server_check is None else (
            (server_check, (server, request), {}),
            (R.check_selected_task, (task,),
             {"selected_task": selected, "supported_tasks": supported,
              "entrypoint": "server"}),
        ))
        messages = []
        for check, args, kwargs in checks:
            try:
                check(*args, **kwargs)
                messages.append(None)
            except (ValueError, VLLMError) as err:
                # the server's VLLMValidationError adds " (parameter=task)" to its str(): the
                # HTTP error carries the parameter in a field of its own, the message is args[0]
                messages.append(str(err.args[0]) if isinstance(err, VLLMError) else str(err))
        # the LLM class's "Embedding API is not supported ..." too
        assert messages[0] == messages[1] and messages[2:3] == messages[3:], (supported, task)
        parity_count("engine-rule cases")


def test_step_order_matches_vllm(parity_count):
    from vllm.v1.worker.gpu.model_runner import sort_batch_req_ids

    rng = random.Random(5)
    for _ in range(300):
        counts = [rng.choice([1, 1, 2, 3, 8, 8, 40]) for _ in range(rng.randint(0, 8))]
        ids = [f"r{i}" for i in range(len(counts))]
        theirs = sort_batch_req_ids(dict(zip(ids, counts, strict=True)), {}, 1)
        assert [ids[i] for i in R.step_order(counts)] == theirs
        parity_count("engine-rule cases")


def test_cursor_fields_match_vllms():
    from vllm.v1.pool.metadata import PoolingCursor as VCursor

    ours = {f.name for f in dataclasses.fields(tp.PoolingCursor)}
    theirs = {f.name for f in dataclasses.fields(VCursor)}
    assert theirs - ours == {"partial_prefill", "finished_mask"}  # methods in tokpool
    assert ours - theirs == {"index"}


# --- the simulator driving the installed vLLM ---------------------------------------------


@pytest.mark.parametrize("async_", [False, True])
@pytest.mark.parametrize("pooling", ["ALL", "STEP"])
def test_simulator_policy_vllm_runs_the_installed_vllm(parity_count, async_, pooling):
    """policy="vllm": tensor mode pools with vLLM's own AllPool/StepPool inside the engine loop
    (graph replays that rewrite output memory, async copies). It delivers what clone delivers,
    never corrupts, holds the same bytes at the end of every step; the counting engine reads
    clone's table for it. (Peaks inside vLLM's concat are not observed: one probe per step.)"""
    step = {"task": "token_classify", "num_labels": 4, "pooling": "STEP",
            "num_returned_columns": 2, "step_tag_every": 3,
            "enable_chunked_prefill": True} if pooling == "STEP" else {"hidden_size": 8}
    cfg = tp.SimConfig(max_num_batched_tokens=16, async_scheduling=async_, policy="vllm",
                       head_dtype=None, use_activation=False, **step)
    lens = [40, 7, 3, 25]
    ours = tp.simulate(lens, cfg, mode="tensor")
    clone = tp.simulate(lens, cfg.replace(policy="clone"), mode="tensor")
    assert ours.corrupted == clone.corrupted == []
    for a, b in zip(ours.outputs, clone.outputs, strict=True):
        assert torch.equal(a, b)
        parity_count("simulator outputs")
    assert ours.steps["pool_bytes"].tolist() == clone.steps["pool_bytes"].tolist()
    counted = tp.simulate(lens, cfg, mode="analytic")
    assert counted.steps["pool_bytes"].tolist() == ours.steps["pool_bytes"].tolist()


def test_a_split_without_chunked_prefill_matches_vllms_own_allpool(parity_count):
    """Chunked prefill off, prompts split by long_prefill_token_threshold (vLLM's scheduler does
    it): vLLM's own AllPool (policy="vllm", run through the bridge) and tokpool's deliver the
    same tensors — each request's last chunk alone — and the same verdicts; vLLM's StepPool
    with a step tag fails (IndexError), which tokpool refuses up front."""
    rng = random.Random(11)
    for _ in range(12):
        lens = [rng.randint(1, 40) for _ in range(rng.randint(1, 4))]
        base = tp.SimConfig(hidden_size=3, max_num_batched_tokens=max(lens), max_num_seqs=2,
                            long_prefill_token_threshold=rng.randint(1, 16),
                            enable_chunked_prefill=False, head_dtype=None, use_activation=False,
                            async_scheduling=rng.random() < 0.5, dtype="float32")
        ours = tp.simulate(lens, base, mode="tensor")
        theirs = tp.simulate(lens, base.replace(policy="vllm"), mode="tensor")
        assert ours.schedule == theirs.schedule and ours.corrupted == theirs.corrupted
        for a, b in zip(ours.outputs, theirs.outputs, strict=True):
            assert torch.equal(a, b)
            parity_count("pooling outputs (torch.equal)")
    hidden = torch.arange(48, dtype=torch.float32).reshape(24, 2)
    ids = torch.zeros(1, 24, dtype=torch.int64)
    ids[0, 3::4] = 7
    pool = VllmPool("STEP", enable_chunked_prefill=False)
    first = tp.build_metadata([24], num_scheduled_tokens=[16], seq_lens=[16],
                              prompt_token_ids=ids, step_tag_id=7)
    with pytest.raises(IndexError):
        pool(hidden[:16], first)
    parity_count("engine-rule cases")
