"""Mixed-task batches: tokpool's ``DispatchPooler`` against vLLM 0.33.0's, run here.

One model serving two tasks (``token_embed`` with ``embed``, or ``token_classify`` with
``classify``) gets requests of both in the same step: vLLM's ``DispatchPooler.forward``
(vllm/model_executor/layers/pooler/special.py; vLLM PR 36614) groups consecutive requests of
one task, slices the step's hidden states per group by the CPU ``num_scheduled_tokens`` and
shifts the group's token indices, and each task's pooler runs on its rows alone: ``AllPool``
keeps (clones) the chunks of its unfinished token requests across steps, the sequence pooler
gathers the last row. On seeded random chunked schedules, sync and async, each request's task
drawn at random, both sides get the same hidden states in one reused buffer; compared:
every finished request's output (``torch.equal``, dtype), whether it shares the buffer, and per
task the chunks each side keeps and the bytes they own (``tp.owned_bytes``). The counts go to the
terminal summary (``parity_count``).

Needs vLLM 0.33.0 (``make vllm``); the module skips with the reason otherwise.
"""

from __future__ import annotations

import random

import pytest
import torch
from sweep_sizes import sample_size
from test_parity_vllm import make_vllm_pool, random_schedule, step_rows

import tokpool as tp
from tokpool.pooler import heads, poolers

pytestmark = pytest.mark.parity

import numpy as np  # noqa: E402
from vllm.model_executor.layers.pooler.activations import (  # noqa: E402
    PoolerClassify,
    PoolerNormalize,
)
from vllm.model_executor.layers.pooler.seqwise import heads as vseqheads  # noqa: E402
from vllm.model_executor.layers.pooler.seqwise.methods import get_seq_pooling_method  # noqa: E402
from vllm.model_executor.layers.pooler.seqwise.poolers import SequencePooler  # noqa: E402
from vllm.model_executor.layers.pooler.special import DispatchPooler as VDispatch  # noqa: E402
from vllm.model_executor.layers.pooler.tokwise import heads as vtokheads  # noqa: E402
from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler  # noqa: E402
from vllm.pooling_params import PoolingParams  # noqa: E402
from vllm.v1.pool.metadata import PoolingMetadata as VMeta  # noqa: E402
from vllm.v1.pool.metadata import PoolingStates as VStates  # noqa: E402

WIDTH = 6
LABELS = 3
NUM_SCHEDULES = sample_size(full=400, sample=200)
PAIRS = {"embed": ("token_embed", "embed"), "classify": ("token_classify", "classify")}


def _poolers(vllm_config, family: str, *, async_: bool, classifier):
    """vLLM's dispatch pooler for the family and tokpool's, built alike (float32 heads)."""
    token_task, seq_task = PAIRS[family]
    f32 = torch.float32
    if family == "embed":
        v_tok = vtokheads.TokenEmbeddingPoolerHead(head_dtype=f32, projector=None,
                                                   activation=PoolerNormalize())
        v_seq = vseqheads.EmbeddingPoolerHead(head_dtype=f32, projector=None,
                                              activation=PoolerNormalize())
        t_tok = heads.TokenEmbeddingHead(head_dtype=f32)
        t_seq = heads.TokenEmbeddingHead(head_dtype=f32)
    else:
        v_tok = vtokheads.TokenClassifierPoolerHead(classifier=classifier, head_dtype=f32,
                                                    activation=PoolerClassify())
        v_seq = vseqheads.ClassifierPoolerHead(classifier=classifier, head_dtype=f32,
                                               activation=PoolerClassify())
        t_tok = heads.TokenClassifierHead(head_dtype=f32, classifier=classifier)
        t_seq = heads.TokenClassifierHead(head_dtype=f32, classifier=classifier)
    vdispatch = VDispatch({
        token_task: TokenPooler(pooling=make_vllm_pool(vllm_config, "ALL", chunked=True,
                                                       async_=async_), head=v_tok),
        seq_task: SequencePooler(pooling=get_seq_pooling_method("LAST"), head=v_seq),
    })
    tdispatch = poolers.DispatchPooler({
        token_task: poolers.Pooler(
            tp.AllPool(async_scheduling=async_, policy="clone"), t_tok),
        seq_task: poolers.Pooler(tp.LastPool(), t_seq, tasks=frozenset({seq_task})),
    })
    return vdispatch, tdispatch


def vllm_metadata(prompt_lens, tasks, states, scheduled, seq_lens) -> VMeta:
    """vLLM's ``PoolingMetadata`` of one step: each request's task (activation on), its
    pooling state, and the cursor of its scheduled tokens."""
    vmeta = VMeta(prompt_lens=torch.tensor(prompt_lens), prompt_token_ids=None,
                  prompt_token_ids_cpu=None,
                  pooling_params=[PoolingParams(task=t, use_activation=True) for t in tasks],
                  pooling_states=list(states))
    vmeta.build_pooling_cursor(np.array(scheduled), torch.tensor(seq_lens), torch.device("cpu"))
    return vmeta


@pytest.fixture(scope="module")
def vllm_config():
    from vllm.config import VllmConfig

    return VllmConfig()


@pytest.mark.parametrize("family", ["embed", "classify"])
@pytest.mark.parametrize("async_", [False, True])
def test_mixed_task_batches_match_vllms_dispatch_pooler(vllm_config, parity_count, family,
                                                        async_):
    rng = random.Random(f"mixed{family}{async_}")
    gen = torch.Generator().manual_seed(36614)
    classifier = torch.nn.Linear(WIDTH, LABELS)
    vdispatch, tdispatch = _poolers(vllm_config, family, async_=async_, classifier=classifier)
    token_task, _ = PAIRS[family]
    buffer = torch.empty(64, WIDTH)
    n_schedules = NUM_SCHEDULES // 4
    mixed_steps = finished = 0
    for _ in range(n_schedules):
        prompts, steps = random_schedule(rng, chunked=True)
        tasks = [rng.choice(PAIRS[family]) for _ in prompts]
        t_states = {r: tp.PoolingStates() for r in range(len(prompts))}
        v_states = {r: VStates() for r in range(len(prompts))}
        for step in steps:
            rows = step_rows(step)
            reqs = [r for r, *_ in rows]
            n_tokens = sum(n for *_, n in rows)
            buffer[:n_tokens] = torch.randn(n_tokens, WIDTH, generator=gen)
            hidden = buffer[:n_tokens]  # [n_tokens, WIDTH], a view of the reused buffer
            scheduled = [n for *_, n in rows]
            seq_lens = [c + n for _, _, c, n in rows]
            mixed_steps += len({tasks[r] for r in reqs}) > 1
            tmeta = tp.build_metadata([prompts[r] for r in reqs], num_scheduled_tokens=scheduled,
                                      seq_lens=seq_lens, states=[t_states[r] for r in reqs],
                                      task=[tasks[r] for r in reqs])
            vmeta = vllm_metadata([prompts[r] for r in reqs], [tasks[r] for r in reqs],
                                  [v_states[r] for r in reqs], scheduled, seq_lens)
            with torch.no_grad():
                t_out = tdispatch(hidden, tmeta)
                v_out = vdispatch(hidden, vmeta)
            assert len(t_out) == len(v_out) == len(reqs)
            for r, (_, p, c, n), t, v in zip(reqs, rows, t_out, v_out, strict=True):
                if c + n != p:
                    continue  # unfinished: the runner takes no output (sequence rows too)
                assert t is not None and v is not None, (tasks[r], p, c, n)
                assert torch.equal(t, v) and t.dtype == v.dtype, tasks[r]
                assert tp.shares_storage(t, buffer) == tp.shares_storage(v, buffer)
                finished += 1
                parity_count("mixed-task outputs (torch.equal)")
            for r in reqs:  # what each task keeps across the step, and owns
                t_cache = t_states[r].hidden_states_cache
                v_cache = v_states[r].hidden_states_cache
                assert len(t_cache) == len(v_cache), tasks[r]
                for a, b in zip(t_cache, v_cache, strict=True):
                    assert torch.equal(a, b)
                    assert tp.shares_storage(a, buffer) == tp.shares_storage(b, buffer)
                assert tp.owned_bytes(list(t_cache)) == tp.owned_bytes(list(v_cache))
                if tasks[r] != token_task:
                    assert not t_cache  # a sequence task keeps nothing across steps
            buffer.normal_(generator=gen)  # the next step rewrites the step memory
    parity_count("mixed-task random schedules (equal outputs and held bytes)", n_schedules)
    parity_count("mixed-task steps (two tasks in one step)", mixed_steps)
    assert mixed_steps >= n_schedules // 2 and finished > n_schedules
