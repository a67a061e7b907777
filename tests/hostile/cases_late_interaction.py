"""Late interaction's public functions (issue 38): one hostile value per parameter."""

from __future__ import annotations

import math

import torch

import tokpool as tp
from tokpool.late_interaction import maxsim, maxsim_batched, maxsim_plan

from .runner import Case


def late_interaction(a: str, sweep) -> list[Case]:
    """``sweep`` is ``surface._sweep`` (passed in: this module is imported by it)."""
    q, d = torch.ones(2, 4), torch.ones(3, 4)
    tensors = {"None": None, "list": [[1.0] * 4] * 2, "[4]": torch.ones(4),
               "[2, 5]": torch.ones(2, 5), "complex": torch.ones(2, 4, dtype=torch.complex64)}
    limits = {"None": None, "0": 0, "-1": -1, "1.5": 1.5, "True": True, "'8'": "8",
              "nan": math.nan}
    cases = sweep(a, "maxsim", maxsim, {"q": q, "d": d}, {
        "q": tensors, "d": {**tensors, "[0, 4]": torch.ones(0, 4)}})
    cases += sweep(a, "maxsim_batched", maxsim_batched, {"q_embs": [q], "d_embs": [d]}, {
        "q_embs": {"None": None, "'ab'": "ab", "5": 5, "[None]": [None], "[[4]]": [torch.ones(4)],
                   "{q}": {q}, "[q, q]": [q, q]},
        "d_embs": {"None": None, "[5]": [5], "[[0, 4]]": [torch.ones(0, 4)],
                   "[[3, 5]]": [torch.ones(3, 5)]},
        "max_batch_size": limits, "max_score_matrix_elements": limits,
    }, names={"q_embs": ("q_embs",), "d_embs": ("d_embs",)})
    cases += sweep(a, "maxsim_plan", maxsim_plan,
                   {"q_lens": [2, 3], "d_lens": [5, 6], "dim": 8}, {
        "q_lens": {"None": None, "[-1, 3]": [-1, 3], "[1.5, 3]": [1.5, 3], "'23'": "23",
                   "[2]": [2], "{2, 3}": {2, 3}},
        "d_lens": {"None": None, "[5, nan]": [5, math.nan], "[5, True]": [5, True]},
        "dim": {"0": 0, "1.5": 1.5, "None": None, "'8'": "8"},
        "max_batch_size": limits, "max_score_matrix_elements": limits,
        "dtype": {"None": None, "'int8'": "int8", "torch.int64": torch.int64, "5": 5},
        "device": {"'tpu'": "tpu", "None": None, "5": 5},
        "path": {"'fast'": "fast", "None": None, "'flash' on cpu": "flash"},
    }, names={"q_lens": ("q_lens",), "d_lens": ("d_lens",), "path": ("path",)})
    ints = {"1.5": 1.5, "True": True, "'8'": "8", "-5": -5}
    cases += sweep(a, "PoolingParams", tp.PoolingParams, {}, {
        "late_chunking_size": {"0": 0, "2**63": 2**63, "1.5": 1.5, "True": True, "'8'": "8"},
        "dimensions": {"1.5": 1.5, "True": True, "'8'": "8"},
        "use_activation": {"'no'": "no", "1": 1},
        "step_tag_id": ints, "truncate_prompt_tokens": {**ints, "-2": -2},
        "returned_token_ids": {"'ab'": "ab", "[]": [], "[1.5]": [1.5], "5": 5},
        "truncation_side": {"'middle'": "middle", "5": 5},
        "late_interaction_mode": {"'x'": "x", "5": 5},
        "task": {"'nope'": "nope", "5": 5, "True": True, "['embed']": ["embed"]},
    })
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16)
    cases += sweep(a, "simulate[pooling_params]", tp.simulate,
                   {"prompt_lens": [20, 6], "config": cfg, "mode": "analytic"}, {
        "pooling_params": {"{}": {}, "5": 5, "[PoolingParams()]": [tp.PoolingParams()],
                           "[5, None]": [5, None]},
    }, names={"pooling_params": ("pooling_params",)})
    cases += sweep(a, "simulate[pooling_params refused]", tp.simulate,
                   {"prompt_lens": [20, 6], "config": cfg, "mode": "analytic"}, {
        "pooling_params": {"dimensions on a bare model": tp.PoolingParams(dimensions=4),
                           "late chunking and truncation": tp.PoolingParams(
                               late_chunking_size=4, truncate_prompt_tokens=10),
                           "step tags without STEP": tp.PoolingParams(step_tag_id=3)},
    }, names={"pooling_params": ("request 0",)})
    cases += sweep(a, "simulate[pooling_params task]", tp.simulate,
                   {"prompt_lens": [20, 6], "config": cfg, "mode": "analytic"}, {
        "pooling_params": {"a task the model does not serve": tp.PoolingParams(task="classify"),
                           "plugin": [tp.PoolingParams(task="plugin"), None]},
    }, names={"pooling_params": ("task",)})
    cases += sweep(a, "simulate[mixed tasks refused]", tp.simulate,
                   {"prompt_lens": [20, 6], "mode": "analytic",
                    "pooling_params": [tp.PoolingParams(task="embed"), None]}, {
        "config": {"offload": cfg.replace(policy="offload"),
                   "STEP pooling": tp.SimConfig(task="token_classify", pooling="STEP",
                                                hidden_size=8, max_num_batched_tokens=64)},
    }, names={"config": ("task",)})
    return cases
