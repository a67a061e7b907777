"""Docstring examples are tests (``make test`` runs ``--doctest-modules tokpool``): every
example sees ``tp`` (``import tokpool as tp``), ``np`` and ``torch``, as a reader's notebook
would."""

import os
import tempfile

import numpy as np
import pytest
import torch

import tokpool as tp

# No test touches the Hugging Face Hub: the Hub client runs offline on an empty cache of the
# session's own (a test that needs a model's files builds a cache: tests/hub_cache.py), so a
# Hub id that is also a preset is answered by the preset, as offline users see it.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="tokpool-empty-hub-")

os.environ.setdefault("TOKPOOL_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

# Not modules to import for their examples: a script run inside vLLM's own venv, and the
# package's ``python -m`` entry point.
collect_ignore = ["tokpool/engine/driver.py", "tokpool/prm/__main__.py"]


@pytest.fixture(autouse=True)
def _doctest_names(request, doctest_namespace):
    doctest_namespace.update(tp=tp, np=np, torch=torch)
    if isinstance(request.node, pytest.DoctestItem):
        # an example that saves a file writes it in a fresh folder, not in the checkout
        request.getfixturevalue("monkeypatch").chdir(request.getfixturevalue("tmp_path"))
