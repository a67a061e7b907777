"""``SimResult``: what ``tp.simulate`` returns — plain data (DataFrames, ints), no plotting."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from torch import Tensor

from ..._args import writable_file
from ..config import SimConfig
from ..schedule.scheduler import ScheduledStep
from .analysis import explain
from .responses import response_table
from .trace import write_chrome_trace


@dataclass
class SimResult:
    """One simulated run.

    Attributes:
        config: the configuration.
        mode: ``"tensor"``, ``"analytic"`` or ``"closed_form"``.
        prompt_lens: the requests' prompt lengths.
        steps: one row per engine iteration; columns in ``tokpool.sim.STEP_COLUMNS``.
        requests: one row per request; columns in ``tokpool.sim.REQUEST_COLUMNS``.
        corrupted: requests whose delivered output differs from the reference, input order.
        peak_pooling_bytes: max of ``steps.pool_peak_bytes``.
        buffer_bytes: the persistent output memory (``SimConfig.buffer_bytes``: graph output
            memory, or the teaching buffer).
        peak_device_bytes: ``peak_pooling_bytes + buffer_bytes``.
        schedule: the compute steps and their chunks.
        outputs: tensor mode only: each request's delivered host output, input order.
        chunks: one row per (step, request) chunk: what the keep rule did with it, when it
            was read, which step overwrote it (columns in ``tokpool.sim.CHUNK_COLUMNS``).
        buffer_writes: one row per step's write of its hidden states (columns in
            ``tokpool.sim.memory.views.WRITE_COLUMNS``: step, region, rows written).
        overwrites: one row each time a step's write rewrote rows of a view pooling kept
            that no earlier write had rewritten (``OVERWRITE_COLUMNS`` there): the rows a
            kept view still points at after they were rewritten. Both come from the loop's
            ``ViewTracker``, the one judge of overwrites.
        closed_form: ``mode="closed_form"`` only: the formula's numbers (``summary()``).
        looked_past: what vLLM would have refused of this run and the config looked past on
            purpose (``SimConfig(as_if=True)``), one message each; empty: vLLM runs it.
        prompt_token_ids: the prompts' token ids when they were given as token ids (they
            decide the prefix-cache hits), else ``None``.
        pooling_params: each request's ``tp.PoolingParams`` (``None``: the engine's
            defaults), as ``simulate`` was given them.
        aborts: one row per abort ``simulate`` was given (``aborts=``): what it did
            (``aborted``, ``output dropped``, ``no-op``) and what it freed, columns in
            ``tokpool.sim.schedule.aborts.ABORT_COLUMNS``; ``None`` without aborts.
        by_task: a workload mixing tasks (``PoolingParams(task=...)``): one row per step and
            task, what that task's pooling states own and what its host copies delivered
            (columns in ``tokpool.sim.backends.mixed.BY_TASK_COLUMNS``); ``None`` otherwise.
    """

    config: SimConfig
    mode: str
    prompt_lens: list[int]
    steps: pd.DataFrame
    requests: pd.DataFrame
    corrupted: list[int]
    peak_pooling_bytes: int
    buffer_bytes: int
    peak_device_bytes: int
    schedule: list[ScheduledStep] = field(repr=False)
    outputs: list[Tensor] | None = field(default=None, repr=False)
    chunks: pd.DataFrame | None = field(default=None, repr=False)
    buffer_writes: pd.DataFrame | None = field(default=None, repr=False)
    overwrites: pd.DataFrame | None = field(default=None, repr=False)
    closed_form: dict | None = field(default=None, repr=False)
    looked_past: list[str] = field(default_factory=list, repr=False)
    prompt_token_ids: list[list[int]] | None = field(default=None, repr=False)
    pooling_params: list | None = field(default=None, repr=False)
    aborts: pd.DataFrame | None = field(default=None, repr=False)
    by_task: pd.DataFrame | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"SimResult(mode={self.mode!r}, requests={len(self.prompt_lens)}, "
            f"steps={len(self.steps)}, policy={c.policy!r}, async={c.async_scheduling}, "
            f"peak_pooling_bytes={self.peak_pooling_bytes:,}, "
            f"peak_device_bytes={self.peak_device_bytes:,}, corrupted={self.corrupted}"
            + (f", AS IF: {len(self.looked_past)} vLLM refusals looked past" if self.looked_past
               else "") + ")"
        )

    def summary(self) -> dict:
        """The run as one flat row (the columns of ``tp.sweep``); times are ESTIMATES."""
        if self.closed_form is not None:
            return dict(self.closed_form)
        steps = self.steps
        return {
            "prompt_len": int(sum(self.prompt_lens)),
            "policy": self.config.policy,
            "async_scheduling": self.config.async_scheduling,
            "num_steps": len(steps),
            "peak_pooling_bytes": self.peak_pooling_bytes,
            "peak_device_bytes": self.peak_device_bytes,
            "copy_bytes": int(steps["copy_bytes"].sum()),
            "d2h_bytes": int(steps["d2h_bytes"].sum()),
            "host_bytes": int(steps["host_bytes"].iloc[-1]),
            "output_bytes": int(self.requests["output_bytes"].sum()),
            "corrupted": bool(self.corrupted),
            "est_forward_s": float(steps["est_forward_s"].sum(min_count=1)),
            "est_pool_s": float(steps["est_pool_s"].sum()),
            "est_d2h_s": float(steps["est_d2h_s"].sum()),
            "est_total_s": float(steps["est_step_s"].sum(min_count=1)),
        }

    @property
    def estimates(self) -> list[str]:
        """What in this result rests on an ESTIMATE rather than on vLLM's rules, one line each
        (empty: every number follows from the rules and the bytes)."""
        cfg = self.config
        found = []
        if cfg.async_scheduling and cfg.async_overwrite == "forward_end":
            found.append("corrupted: which host copies finish before the next step writes is "
                         "decided by the roofline time ESTIMATE (async_overwrite='forward_end'); "
                         "'forward_start' does not depend on it")
        if cfg.gpu_memory_utilization is not None and cfg._resolved.activation_peak_is_estimate:
            found.append("kv_bytes and KV-cache blocks: vLLM's profiled activation peak is "
                         "ESTIMATED (SimConfig.estimated_activation_peak_bytes)")
        if cfg.model is not None:
            found.append("est_* columns: roofline time ESTIMATES from spec-sheet numbers")
        return found

    def explain(self) -> list[str]:
        """One sentence per request: how its chunks were kept (the keep rule's actions), which
        step rewrote a kept view before it was read, whether it was corrupted, what it
        stranded, which of its tokens came from the prefix cache (and, for a token task that
        could have hit it, why vLLM recomputed them). Drawn from ``chunks`` and ``requests``;
        see ``tokpool.sim.results.analysis.explain``."""
        self._needs_steps("explain()")
        return explain(self)

    def responses(self, encoding_formats=("float", "base64", "bytes", "bytes_only"),
                  embed_dtype: str = "float32", endianness: str = "native", *,
                  endpoint: str = "pooling") -> pd.DataFrame:
        """The answers the API process builds: per finished request and encoding format, the
        response's size and its peak host memory (``tp.response_bytes`` on the delivered
        shape; columns in ``tokpool.sim.results.responses.RESPONSE_COLUMNS``). JSON formats
        are ESTIMATES with their stated ``relative_error``; bytes formats are exact."""
        self._needs_steps("responses()")
        return response_table(self, encoding_formats, embed_dtype, endianness,
                              endpoint=endpoint)

    def _needs_steps(self, what: str) -> None:
        """A closed-form result has no steps or chunks: refuse, saying which mode has them."""
        if self.mode == "closed_form":
            raise ValueError(
                f"{what} needs the step table, and mode='closed_form' solves the request by "
                "formula (no steps, no chunks; summary() has its numbers). Run "
                "tp.simulate(..., mode='analytic') for the same bytes with every step"
            )

    def to_chrome_trace(self, path: str | Path) -> Path:
        """Write a Perfetto / chrome://tracing JSON of the run (ESTIMATED timeline).

        Tracks: steps, forward, pooling copies, host copies; one track per request with its
        chunks and what pooling did with each (clone, view, cat, ...); byte counters.

        Returns:
            The path written.
        """
        self._needs_steps("to_chrome_trace()")
        return write_chrome_trace(self, writable_file("path", path))
