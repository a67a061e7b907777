"""Late interaction's public functions (issue 38): one hostile value per parameter."""

from __future__ import annotations

import math

import torch

import tokpool as tp

from .runner import Case


def late_interaction(a: str, sweep) -> list[Case]:
    """``sweep`` is ``surface._sweep`` (passed in: this module is imported by it)."""
    q, d = torch.ones(2, 4), torch.ones(3, 4)
    tensors = {"None": None, "list": [[1.0] * 4] * 2, "[4]": torch.ones(4),
               "[2, 5]": torch.ones(2, 5), "complex": torch.ones(2, 4, dtype=torch.complex64)}
    limits = {"None": None, "0": 0, "-1": -1, "1.5": 1.5, "True": True, "'8'": "8",
              "nan": math.nan}
    cases = sweep(a, "maxsim", tp.maxsim, {"q": q, "d": d}, {
        "q": tensors, "d": {**tensors, "[0, 4]": torch.ones(0, 4)}})
    cases += sweep(a, "maxsim_batched", tp.maxsim_batched, {"q_embs": [q], "d_embs": [d]}, {
        "q_embs": {"None": None, "'ab'": "ab", "5": 5, "[None]": [None], "[[4]]": [torch.ones(4)],
                   "{q}": {q}, "[q, q]": [q, q]},
        "d_embs": {"None": None, "[5]": [5], "[[0, 4]]": [torch.ones(0, 4)],
                   "[[3, 5]]": [torch.ones(3, 5)]},
        "max_batch_size": limits, "max_score_matrix_elements": limits,
    }, names={"q_embs": ("q_embs",), "d_embs": ("d_embs",)})
    cases += sweep(a, "maxsim_plan", tp.maxsim_plan,
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
    return cases
