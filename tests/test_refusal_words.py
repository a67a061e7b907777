"""Notebook 06's refusal column and the rerank explorer's refusal say vLLM's refusal in words,
without the private vLLM function it follows (issue 48); the function stays in ``follows``."""

from __future__ import annotations

import re

import pytest

import tokpool as tp
from tokpool.late_interaction.rerank_cost import rerank_sweep

#: A private vLLM name in a sentence: ``Class._method`` or ``_function``.
PRIVATE = re.compile(r"\b[A-Za-z]+\._[a-z_]+|(?<![\w.])_[a-z][a-z_]+\b")


def test_notebook_06_refusal_column_is_in_words():
    engine = tp.SimConfig.for_model("SmolLM2-135M", hardware="H100", task="token_embed")
    sweep = rerank_sweep([4], [512, 16384], engine, query_len=32)  # 16K: past the context
    refusals = sweep.loc[sweep["refused"], "refusal"].tolist()
    assert refusals and all("longer than" in r for r in refusals), refusals
    assert not any(PRIVATE.search(r) for r in refusals), refusals


def test_rerank_explorer_refusal_is_in_words():
    with pytest.raises(ValueError) as err:
        tp.viz.render_rerank(documents=2, doc_len=9000)
    assert not PRIVATE.search(str(err.value)), str(err.value)
    assert err.value.follows == "InputProcessor._validate_prompt_len"  # kept, not said
