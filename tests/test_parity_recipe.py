"""Every ``tp.recipe`` request body validates against vLLM 0.33.0's own pydantic request model
for its endpoint (``vllm/entrypoints/pooling/*/protocol.py``), run on the CPU."""

from __future__ import annotations

import importlib

import pytest
from hub_cache import build_hub_cache
from test_recipe import all_recipes

from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"recipe parity skipped: {_reason}", allow_module_level=True)


def _model(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_every_request_body_is_valid_for_vllms_request_models(tmp_path, monkeypatch,
                                                              parity_count):
    monkeypatch.setenv("HF_HUB_CACHE", str(build_hub_cache(tmp_path / "hub")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipes = all_recipes()
    for r in recipes:
        request = _model(r.request_model).model_validate(r.request_body)
        assert request.model == r.model
        if r.kind == "token_classify":
            assert request.task == "token_classify"
        parity_count("recipe request bodies valid for vLLM's request models")
    assert len(recipes) == 10
