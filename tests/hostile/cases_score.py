"""``tp.simulate_score``'s and ``listwise_prompts``' parameters (issue 38, the
scoring flow):
one hostile value each."""

from __future__ import annotations

import math

import tokpool as tp
from tokpool.late_interaction import listwise_prompts

from .runner import Case


def score(a: str, sweep) -> list[Case]:
    """``sweep`` is ``surface._sweep`` (passed in: this module is imported by it)."""
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=64, task="token_embed")
    return sweep(a, "simulate_score", tp.simulate_score,
                 {"queries": [5], "docs": [7, 9], "config": cfg, "mode": "analytic"}, {
        "queries": {"None": None, "'abc'": "abc", "{5}": {5}, "[-1]": [-1], "[True]": [True],
                    "[1.5]": [1.5], "[5, 6, 7]": [5, 6, 7], "[]": []},
        "docs": {"None": None, "[0]": [0], "[[]]": [[]], "[nan]": [math.nan], "[]": []},
        "config": {"None-task": tp.SimConfig(hidden_size=8, task="token_classify",
                                             num_labels=2), "5": 5},
        "mode": {"'nope'": "nope", "'closed_form'": "closed_form", "None": None},
        "flash_late_interaction": {"'no'": "no", "1": 1},
        "query_keys": {"5": 5, "['a', 'b']": ["a", "b"], "['']": [""], "'key'": "key"},
        "num_engines": {"0": 0, "1.5": 1.5, "True": True, "'2'": "2"},
        "flash_maxsim_kernel": {"'yes'": "yes", "None": None},
        "head": {"5": 5, "'colbert'": "colbert"},
        "tokenize": {"5": 5},
        "template_tokens": {"-1": -1, "1.5": 1.5},
        "scheduler": {"'nope'": "nope"},
        "pooling_params": {"5": 5, "[None]": [None]},
        "cancel_step": {"-1": -1, "1.5": 1.5, "'3'": "3", "True": True},
    }, names={"queries": ("quer",), "docs": ("doc",), "config": ("config",),
              "query_keys": ("quer",)}
    ) + sweep(a, "simulate_score", tp.simulate_score,  # refused in vLLM's words
              {"queries": [5], "docs": [7, 9], "config": cfg, "mode": "analytic"},
              {"pooling_params": {"late chunking": tp.PoolingParams(late_chunking_size=4)}},
              names={"pooling_params": ("Late chunking", "late-interaction")}
    ) + sweep(a, "listwise_prompts", listwise_prompts, {"queries": [5], "docs": [7, 9]}, {
        "queries": {"None": None, "'abc'": "abc", "[0]": [0], "[True]": [True], "[1.5]": [1.5],
                    "[[]]": [[]], "[5, 6, 7]": [5, 6, 7], "[]": [], "['q']": ["q"]},
        "docs": {"None": None, "[0]": [0], "[[]]": [[]], "[nan]": [math.nan], "[]": [],
                 "5": 5},
        "tokenize": {"5": 5},
        "template_tokens": {"-1": -1, "1.5": 1.5, "True": True},
    }, names={"queries": ("quer",), "docs": ("doc",)})
