"""Issue 39's public functions (token pooling, index size, the MaxSim picture): one hostile
value per parameter."""

from __future__ import annotations

import math

import torch

import tokpool as tp
from tokpool.late_interaction import multivector_index_bytes, pool_tokens

from .runner import Case


def token_pooling_and_index(a: str, sweep) -> list[Case]:
    """``sweep`` is ``surface._sweep`` (passed in: this module is imported by it)."""
    x = torch.nn.functional.normalize(torch.randn(6, 4), dim=-1)
    rows = {"None": None, "'x'": "x", "[6, 2, 2]": torch.ones(6, 2, 2),
            "int64": torch.ones(6, 4, dtype=torch.int64), "nan": torch.full((3, 4), math.nan),
            "[x, 5]": [x, 5]}
    counts = {"None": None, "-1": -1, "1.5": 1.5, "True": True, "'2'": "2"}
    cases = sweep(a, "pool_tokens", pool_tokens, {"embs": x}, {
        "embs": rows, "pool_factor": {**counts, "0": 0},
        "protected_tokens": {k: v for k, v in counts.items() if v is not None},  # None: default
        "method": {"'ward'": "ward", "None": None, "5": 5},
    })
    cases += sweep(a, "multivector_index_bytes", multivector_index_bytes,
                   {"doc_lens": [10, 20], "dim": 128}, {
        "doc_lens": {"None": None, "[]": [], "[0]": [0], "[1.5]": [1.5], "'12'": "12",
                     "{10}": {10}},
        "dim": {**counts, "0": 0},
        "dtype": {"'int8'": "int8", "5": 5, "None": None},
        "pool_factor": {**counts, "0": 0},
        "nbits": {"0": 0, "3": 3, "1.5": 1.5, "'two'": "two", "16": 16},
        "protected_tokens": counts,
    })
    cases += sweep(a, "multivector_index_bytes(nbits=2)", multivector_index_bytes,
                   {"doc_lens": [10, 20], "dim": 128, "nbits": 2}, {
        "layout": {"'faiss'": "faiss", "None": None, "5": 5},
        "dim": {"100": 100, "8 with nbits 2 (colbert)": 8},
    }, names={"layout": ("layout",), "dim": ("dim",)})
    q, d = torch.randn(2, 4), torch.randn(3, 4)
    cases += sweep(a, "plot_maxsim_alignment", tp.viz.plot_maxsim_alignment,
                   {"q_emb": q, "d_emb": d, "q_tokens": ["a", "b"],
                    "d_tokens": ["x", "y", "z"]}, {
        "q_emb": {"None": None, "[4]": torch.ones(4), "[2, 5]": torch.ones(2, 5)},
        "d_emb": {"[0, 4]": torch.ones(0, 4), "'x'": "x"},
        "q_tokens": {"['a']": ["a"], "'ab'": "ab", "[5, 6]": [5, 6]},
        "d_tokens": {"None": None, "['x']": ["x"]},
        "vmax": {"0": 0, "nan": math.nan, "'1'": "1"},
        "cmap": {"'nope'": "nope", "5": 5},
        "ax": {"5": 5},
    }, names={"q_emb": ("q",), "d_emb": ("d",)})
    cases += sweep(a, "rerank_explorer", tp.rerank_explorer, {"documents": 4, "doc_len": 64}, {
        "documents": {"0": 0, "1.5": 1.5, "'4'": "4", "10^6": 10**6, "True": True},
        "doc_len": {"0": 0, "-1": -1, "None": None, "40000": 40_000},
        "query_len": {"0": 0, "nan": math.nan},
        "output_width": {"-1": -1, "None": None, "1.5": 1.5, "10^5": 10**5},
        "stages": {"'three'": "three", "None": None, "2": 2},
        "config": {"'SmolLM2'": "SmolLM2", "5": 5},
    }, names={"documents": ("documents",), "doc_len": ("document length",),
              "query_len": ("query length",), "output_width": ("output width",)})
    return cases
