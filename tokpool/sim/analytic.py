"""Analytic mode, by its first name: the counting backend of the one engine loop.

Kept so that ``tokpool.sim.analytic.run_analytic`` and ``KeptRows`` go on working; the code lives
in ``tokpool.sim.counting`` (integer bookkeeping) and ``tokpool.sim.loop`` (the step loop).
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import SimConfig
from .counting import CountingEngine, run_counting
from .ledger import RequestRecord, StepRecord
from .loop import KeptRows
from .scheduler import ScheduledStep

AnalyticEngine = CountingEngine

__all__ = ["AnalyticEngine", "KeptRows", "run_analytic"]


def run_analytic(
    prompt_lens: Sequence[int], config: SimConfig, steps: Sequence[ScheduledStep], *, source=None
) -> tuple[list[StepRecord], list[RequestRecord], set[int]]:
    """Analytic ledger of a schedule: ``(step records, request records, corrupted)``."""
    records, requests, corrupted, _ = run_counting(prompt_lens, config, steps, source=source)
    return records, requests, corrupted
