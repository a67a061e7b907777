"""Shared fixtures; tests run offline."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKPOOL_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module: on a shared machine a descheduled second OpenMP thread
    stalls every op at its barrier (10x swings seen); restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
