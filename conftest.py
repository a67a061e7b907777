"""Docstring examples are tests (``make test`` runs ``--doctest-modules tokpool``): every
example sees ``tp`` (``import tokpool as tp``), ``np`` and ``torch``, as a reader's notebook
would."""

import os

import numpy as np
import pytest
import torch

import tokpool as tp

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
