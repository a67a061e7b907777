"""The keep rule is DESIGN.md's ownership table, cell by cell, and AllPool obeys it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import tokpool as tp
from tokpool.pooler.keep_rule import KeepRule, keep_rule, ownership_table

# (policy, async, situation) -> (keep, returns), written from DESIGN.md's table by hand.
# situations: U = unfinished chunk, O = one shot, F = final chunk after earlier ones.
EXPECTED = {
    ("clone", False, "U"): ("clone", None), ("clone", True, "U"): ("clone", None),
    ("clone", False, "O"): ("view", "chunk"), ("clone", True, "O"): ("clone", "chunk"),
    ("clone", False, "F"): ("view", "cat"), ("clone", True, "F"): ("view", "cat"),
    ("legacy", False, "U"): ("view", None), ("legacy", True, "U"): ("view", None),
    ("legacy", False, "O"): ("view", "chunk"), ("legacy", True, "O"): ("view", "chunk"),
    ("legacy", False, "F"): ("view", "cat"), ("legacy", True, "F"): ("view", "cat"),
    ("prealloc", False, "U"): ("buffer", None), ("prealloc", True, "U"): ("buffer", None),
    ("prealloc", False, "O"): ("view", "chunk"), ("prealloc", True, "O"): ("clone", "chunk"),
    ("prealloc", False, "F"): ("buffer", "buffer"), ("prealloc", True, "F"): ("buffer", "buffer"),
    ("offload", False, "U"): ("host", None), ("offload", True, "U"): ("host", None),
    ("offload", False, "O"): ("host", "buffer"), ("offload", True, "O"): ("host", "buffer"),
    ("offload", False, "F"): ("host", "buffer"), ("offload", True, "F"): ("host", "buffer"),
}
SITUATIONS = {"U": (False, True), "O": (True, True), "F": (True, False)}


@pytest.mark.parametrize(("policy", "async_scheduling", "situation"), sorted(EXPECTED))
def test_every_cell_of_the_table(policy, async_scheduling, situation):
    finished, first = SITUATIONS[situation]
    rule = keep_rule(policy, async_scheduling=async_scheduling, finished=finished,
                     first_chunk=first)
    assert (rule.keep, rule.returns) == EXPECTED[policy, async_scheduling, situation]
    if situation == "O":  # chunked prefill off: every request is one shot, same answer
        assert keep_rule(policy, chunked=False, async_scheduling=async_scheduling,
                         finished=True, first_chunk=True) == rule


def test_a_split_without_chunked_prefill_keeps_nothing_and_hands_each_chunk_over():
    """vLLM 0.33.0's AllPool with enable_chunked_prefill=False returns every request's split,
    finished or not (cloned under async): a prompt the long-prefill threshold split keeps no
    chunk (tests/test_parity_vllm.py runs vLLM's own AllPool on such a split)."""
    for policy in ("legacy", "clone", "prealloc", "offload"):
        for finished, first in ((False, True), (False, False), (True, False)):
            sync = keep_rule(policy, chunked=False, async_scheduling=False, finished=finished,
                             first_chunk=first)
            late = keep_rule(policy, chunked=False, async_scheduling=True, finished=finished,
                             first_chunk=first)
            assert (sync.keep, sync.returns) == ("view", "chunk")
            assert (late.keep, late.returns) == (
                ("view" if policy == "legacy" else "clone"), "chunk")
    with pytest.raises(ValueError, match="unknown retention policy 'copy'"):
        keep_rule("copy", async_scheduling=False, finished=True, first_chunk=True)


def test_ownership_table_lists_every_cell_once():
    rows = ownership_table()
    assert len(rows) == 4 * 2 * (3 + 3)  # policies × async × (3 chunked + 3 unchunked cells)
    assert {(r["policy"], r["chunked"], r["async_scheduling"], r["situation"]) for r in rows} \
        .__len__() == len(rows)
    assert KeepRule("view", "cat").label == "view + cat"


@pytest.mark.parametrize("policy", tp.RETENTION_POLICIES)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_allpool_storage_follows_the_rule(policy, async_scheduling):
    """Run AllPool over a 3-chunk and a one-shot request and check each kept tensor's storage
    against what the rule says (view = shares the step's buffer)."""
    pool = tp.AllPool(policy=policy, async_scheduling=async_scheduling)
    hidden = torch.arange(24.0).reshape(12, 2)
    state = tp.PoolingStates()
    for start, stop in ((0, 4), (4, 8)):
        meta = tp.build_metadata([10], num_scheduled_tokens=[stop - start], seq_lens=[stop],
                                 states=[state])
        step = hidden[start:stop]
        assert pool(step, meta) == [None]
        rule = keep_rule(policy, async_scheduling=async_scheduling, finished=False,
                         first_chunk=start == 0)
        kept = state.hidden_states_cache[-1] if rule.keep in ("view", "clone") else state.buffer
        assert tp.shares_storage(kept, step) == (rule.keep == "view")
        assert kept.device.type == "cpu"
    meta = tp.build_metadata([10, 2], num_scheduled_tokens=[2, 2], seq_lens=[10, 2],
                             states=[state, tp.PoolingStates()])
    step = hidden[8:12]
    out_long, out_one = pool(step, meta)
    assert torch.equal(out_long, hidden[:10]) and torch.equal(out_one, hidden[10:12])
    final = keep_rule(policy, async_scheduling=async_scheduling, finished=True,
                      first_chunk=False)
    one = keep_rule(policy, async_scheduling=async_scheduling, finished=True, first_chunk=True)
    assert not tp.shares_storage(out_long, step)  # cat or buffer: owned in every policy
    assert final.returns in ("cat", "buffer")
    assert tp.shares_storage(out_one, step) == (one.keep == "view")


def test_no_second_copy_of_the_rule():
    """Only keep_rule.py decides from a policy NAME what a chunk gets: no engine, closed form,
    plot or widget compares a policy with a policy name (``policy == "clone"``, ``policy in
    (...)``); they ask the rule."""
    root = Path(tp.__file__).parent
    names = set(tp.RETENTION_POLICIES)
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path.name in ("keep_rule.py", "tasks.py"):  # tasks.py: the gate's old name "legacy"
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            mentions_policy = any("policy" in (ast.get_source_segment(source, o) or "")
                                  for o in operands)
            constants = {c.value for o in operands for c in ast.walk(o)
                         if isinstance(c, ast.Constant)}
            if mentions_policy and constants & names:
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []
