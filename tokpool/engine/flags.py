"""The engine's flags: one configuration (``EngineFlags``) as vLLM's ``LLM(...)``, its ``vllm
serve`` line and ``tp.SimConfig`` all take it, and the per-token tasks the engine check compares.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from typing import Any

from .driver import ENGINE_ENV

#: Per-token tasks the check compares.
ENGINE_TASKS = ("token_embed", "token_classify")
_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # GiB of KV cache the CPU engine gets


@dataclass(frozen=True)
class EngineFlags:
    """One engine configuration, as vLLM's ``LLM(...)`` and ``tp.SimConfig`` both take it.

    Attributes:
        max_num_batched_tokens: the step's token budget.
        max_num_seqs: most requests in one step.
        long_prefill_token_threshold: at most this many tokens of one request per step when
            more than one request is eligible (0: no limit); tokpool's ``chunk_size``.
        max_model_len: longest prompt the engine accepts.
        enable_chunked_prefill: split prompts across steps.
        dtype: weights and activations (``"float32"`` for a tight comparison).
        num_gpu_blocks_override: KV-cache blocks instead of what ``VLLM_CPU_KVCACHE_SPACE``
            gives (a small cache makes vLLM preempt); ``None``: that size.
    """
    max_num_batched_tokens: int = 64
    max_num_seqs: int = 64
    long_prefill_token_threshold: int = 0
    max_model_len: int = 512
    enable_chunked_prefill: bool = True
    dtype: str = "float32"
    num_gpu_blocks_override: int | None = None

    @property
    def chunk_size(self) -> int | None:
        """The ``chunk_size`` ``PoolingModel.encode`` gets for these flags."""
        return self.long_prefill_token_threshold or None

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.LLM`` (eager, no prefix caching: every token computed)."""
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "max_model_len": self.max_model_len,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "enable_prefix_caching": False,
            "enforce_eager": True,
            "dtype": self.dtype,
            **({} if self.num_gpu_blocks_override is None
               else {"num_gpu_blocks_override": self.num_gpu_blocks_override}),
        }

    def serve_line(self, model_dir: str | os.PathLike, task: str) -> str:
        """The ``vllm serve`` line of this engine (the driver's environment included), as
        ``SimConfig.from_vllm_args`` reads it.

        Example:
            >>> EngineFlags(max_num_batched_tokens=256).serve_line("/m", "token_embed")[:59]
            'VLLM_CPU_KVCACHE_SPACE=1 vllm serve /m --runner pooling --p'
        """
        pooler = json.dumps({"task": task}, separators=(",", ":"))
        flags = [
            f"{_KV_SPACE}={os.environ.get(_KV_SPACE) or ENGINE_ENV[_KV_SPACE]}",  # as the driver
            "vllm serve", shlex.quote(os.fspath(model_dir)), "--runner pooling",
            f"--pooler-config {shlex.quote(pooler)}",
            f"--max-num-batched-tokens {self.max_num_batched_tokens}",
            f"--max-num-seqs {self.max_num_seqs}",
            f"--long-prefill-token-threshold {self.long_prefill_token_threshold}",
            f"--max-model-len {self.max_model_len}",
            "--enable-chunked-prefill" if self.enable_chunked_prefill
            else "--no-enable-chunked-prefill",
            "--no-enable-prefix-caching", "--enforce-eager", f"--dtype {self.dtype}",
        ]
        if self.num_gpu_blocks_override is not None:
            flags.append(f"--num-gpu-blocks-override {self.num_gpu_blocks_override}")
        return " ".join(flags)
