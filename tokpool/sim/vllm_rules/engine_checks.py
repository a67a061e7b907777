"""Every refusal of vLLM 0.33.0 that tokpool models, each written once, with vLLM's words.

vLLM refuses a configuration inside its config classes, which every way in builds, so no path
slips past; here each refusal is one function, and every entry path calls it: a directly built
``SimConfig``, ``for_model``, ``from_hf_config`` and ``from_vllm_args`` through the one
resolution step (``resolve.resolve_engine``); ``simulate`` (every mode, both schedulers),
``sweep``, the CLI and the explorers through ``check_prompts_fit`` and the schedulers
(``tests/test_refusals.py`` swaps each function and sees every path raise through it).

Start-up refusals (the engine never starts):

- ``check_tensor_parallel``: ``ModelConfig.verify_with_parallel_config`` (vllm/config/model.py)
  and ``QKVParallelLinear`` (vllm/model_executor/layers/linear.py);
- ``check_user_max_model_len``: ``_get_and_verify_max_len`` (vllm/config/model.py);
- ``check_scheduler_limits``: ``SchedulerConfig.verify_max_model_len``
  (vllm/config/scheduler.py): the budget below ``max_model_len`` without chunked prefill, below
  ``max_num_seqs``, and ``long_prefill_token_threshold`` above ``max_model_len``;
- ``check_pooling_runner``: ``ModelConfig.__post_init__`` after ``_get_runner_type``
  (vllm/config/model.py): a model vLLM serves as a generative one (a bare ``*ForCausalLM``
  under ``--runner auto``), whose pooling entry points then refuse it
  (``PoolingOfflineMixin._verify_pooling_task``), or a runner the model does not support;
- ``check_configured_task``: ``ModelConfig.get_pooling_task``: ``--pooler-config.task`` must
  be one the model declares;
- ``check_pipeline_parallel``: ``ModelConfig.verify_with_parallel_config``: ``-pp`` on a model
  class without ``SupportsPP``;
- ``check_model_dtype``: ``_check_valid_dtype`` (vllm/config/model.py): float16 for a model
  type vLLM refuses it for (Gemma-2/3, GLM-4);
- ``check_kv_cache_holds_one_sequence``: ``get_kv_cache_configs`` /
  ``_check_enough_kv_cache_memory`` (vllm/v1/core/kv_cache_planning.py): the cache, less the
  null block the ``BlockPool`` keeps, must hold one ``max_model_len`` request in every KV-cache
  group (a sliding-window group only its window, ``SlidingWindowSpec.max_memory_usage_bytes``),
  whether it was sized from memory or given (``--num-gpu-blocks-override``).

Request refusals:

- ``check_prompts_fit``: ``InputProcessor._validate_prompt_len``
  (vllm/v1/engine/input_processor.py): an empty prompt, a prompt over ``max_model_len``;
- ``check_unchunked_prompts_schedulable``: a prompt over the budget without chunked prefill can
  never be scheduled (vLLM refuses such a ``max_model_len`` at start-up; tokpool, which may run
  without a ``max_model_len``, refuses the prompt);
- ``check_step_pooling_sees_whole_prompts``: without chunked prefill, STEP pooling with a step
  tag fails on a prompt the long-prefill threshold split (``StepPool.forward``, run);
- ``check_sequence_pooling_sees_whole_prompts``: CLS and MEAN pooling fail on any step with a
  partial prefill (``CLSPool.forward`` / ``MeanPool.forward``, run), which the long-prefill
  threshold makes without chunked prefill;
- ``check_pooling_params``: a request's ``tp.PoolingParams`` (``PoolingParams.verify``, the
  renderer's late-chunking and truncation checks), called per request by ``simulate``;
- ``check_prompts_fit_kv_cache``: a prompt whose blocks exceed the cache is never admitted
  (``Scheduler.schedule`` reserves the whole prompt, a sliding-window group its window's
  blocks; vLLM refuses such a ``max_model_len`` at start-up,
  ``check_kv_cache_holds_one_sequence``).

Each raises ``EngineRefusal`` (a ``ValueError``). ``SimConfig(as_if=True)`` looks past the ones
that leave a simulation meaning something (``EngineRefusal.can_look_past``): the run goes on and
``SimConfig.looked_past`` / ``SimResult.looked_past`` list what vLLM would have refused;
``tokpool.sim.startup`` asks the same checks per plotted point (``startup_refusals``), so an "as
if" curve marks each point vLLM would refuse to start for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .kv_spec import KVCacheSpec, admission_blocks

__all__ = [
    "EngineRefusal",
    "Refusals",
    "check_configured_task",
    "check_kv_cache_holds_one_sequence",
    "check_model_dtype",
    "check_pipeline_parallel",
    "check_pooling_params",
    "check_pooling_runner",
    "check_prompts_fit",
    "check_prompts_fit_kv_cache",
    "check_scheduler_limits",
    "check_sequence_pooling_sees_whole_prompts",
    "check_step_pooling_sees_whole_prompts",
    "check_tensor_parallel",
    "check_unchunked_prompts_schedulable",
    "check_user_max_model_len",
]

_GIB = 1 << 30

class EngineRefusal(ValueError):
    """vLLM refuses this configuration or request.

    Attributes:
        follows: the vLLM function whose refusal this is.
        can_look_past: ``SimConfig(as_if=True)`` may simulate past it (``False``: the
            simulation would have no meaning, e.g. heads that do not split over the ranks).
    """

    def __init__(self, message: str, *, follows: str, can_look_past: bool = True) -> None:
        super().__init__(message)
        self.follows = follows
        self.can_look_past = can_look_past


class Refusals:
    """Runs refusal checks: raises, or with ``as_if`` records the refusals that can be looked
    past (``EngineRefusal.can_look_past``) in ``looked_past`` (their messages) and ``refusals``
    (the ``EngineRefusal``s, with the vLLM function each follows) and goes on.

    Example:
        >>> refusals = Refusals(as_if=True)
        >>> refusals(check_prompts_fit, [5000], 4096)
        >>> refusals.looked_past[0][:60]
        'request 0 has 5000 prompt tokens, longer than max_model_len='
    """

    def __init__(self, *, as_if: bool) -> None:
        self.as_if = as_if
        self.looked_past: list[str] = []
        self.refusals: list[EngineRefusal] = []

    def __call__(self, check, *args, **kwargs) -> None:
        try:
            check(*args, **kwargs)
        except EngineRefusal as err:
            if not (self.as_if and err.can_look_past):
                raise
            self.looked_past.append(str(err))
            self.refusals.append(err)


# --- start-up ---------------------------------------------------------------------------------


def check_tensor_parallel(name: str, num_attention_heads: int, num_kv_heads: int,
                          tp: int) -> None:
    """Refuse a ``tp`` that does not split the heads evenly, as vLLM does.

    Args:
        name: the model, for the message.
        num_attention_heads, num_kv_heads: the model's query and key/value heads.
        tp: ``--tensor-parallel-size``.

    Raises:
        EngineRefusal: "Total number of attention heads (H) must be divisible by tensor
            parallel size (T)." (``ModelConfig.verify_with_parallel_config``), or KV heads that
            cannot be split (``T < KV``: ``KV / T`` per rank) or replicated (``T >= KV``: each
            ``T / KV`` times) evenly (``QKVParallelLinear``'s ``divide``).
    """
    if tp == 1:
        return
    if num_attention_heads % tp:
        # the divisors of the heads, found up to their square root (heads may be huge)
        small = [t for t in range(1, min(math.isqrt(num_attention_heads), 1 << 16) + 1)
                 if num_attention_heads % t == 0]
        divisors = sorted({*small, *(num_attention_heads // t for t in small)})
        fits = [t for t in divisors
                if (num_kv_heads % t == 0 if t < num_kv_heads else t % num_kv_heads == 0)][:32]
        raise EngineRefusal(
            f"vLLM refuses to start {name} with --tensor-parallel-size {tp}: \"Total number of "
            f"attention heads ({num_attention_heads}) must be divisible by tensor parallel size "
            f"({tp}).\" (ModelConfig.verify_with_parallel_config). Use -tp in {fits}",
            follows="ModelConfig.verify_with_parallel_config", can_look_past=False)
    if (tp >= num_kv_heads and tp % num_kv_heads) or (tp < num_kv_heads and num_kv_heads % tp):
        heads, over = (tp, num_kv_heads) if tp >= num_kv_heads else (num_kv_heads, tp)
        raise EngineRefusal(
            f"vLLM fails to load {name} with --tensor-parallel-size {tp}: its {num_kv_heads} KV "
            f"heads cannot be split or replicated evenly over {tp} ranks (QKVParallelLinear: "
            f"\"{heads} is not divisible by {over}\"). Use a -tp that divides "
            f"{num_kv_heads} or is a multiple of it",
            follows="QKVParallelLinear", can_look_past=False)


def check_pooling_runner(
    name: str, architecture: str, *, runner: str, runner_type: str, convert_type: str,
    pooling_class: bool, generative_class: bool,
) -> None:
    """Refuse a model vLLM would not run as a pooling model (tokpool simulates pooling
    runners), with vLLM's words (vllm/config/model.py, ``ModelConfig.__post_init__`` after
    ``_get_runner_type`` / ``_get_convert_type``).

    Args:
        name: the model, for the message.
        architecture: ``architectures[0]``.
        runner: ``--runner`` as given (``"auto"``, ``"pooling"``, ...).
        runner_type, convert_type: what vLLM resolved (``architectures.resolve_runner``).
        pooling_class, generative_class: the registry's model class is a pooling /
            text-generation model.

    Raises:
        EngineRefusal: a generative runner (``--runner auto`` on a bare ``*ForCausalLM``:
            vLLM's pointer "Try passing `--runner pooling` ..." from
            ``PoolingOfflineMixin._verify_pooling_task``), an embedding model asked for
            ``--runner generate``, or ``--runner pooling --convert none`` on a model that
            needs an adapter.
    """
    follows = "ModelConfig._get_runner_type"
    if runner_type == "pooling":
        if not pooling_class and convert_type not in ("embed", "classify"):
            raise EngineRefusal(
                f"vLLM refuses to start {name} ({architecture}): \"This model does not "
                "support `--runner pooling`. You can pass `--convert <embed|classify> to adapt "
                "it into a pooling model.\" (ModelConfig.__post_init__)",
                follows="ModelConfig.__post_init__", can_look_past=False)
        return
    if pooling_class and not generative_class:
        quoted = (f"Embedding models do not support `--runner {runner_type}`. Use `--runner "
                  "pooling` or `--runner auto` for embedding models.")
        raise EngineRefusal(f"vLLM refuses to start {name} ({architecture}): \"{quoted}\" "
                            "(ModelConfig.__post_init__)",
                            follows="ModelConfig.__post_init__", can_look_past=False)
    why = (f"`--runner auto` resolves {architecture} to `--runner {runner_type}` ({follows}: "
           "a *ForCausalLM architecture, and no sentence-transformers pooling config "
           "(modules.json) in the model's folder)" if runner == "auto"
           else f"the line asks for `--runner {runner}`")
    raise EngineRefusal(
        f"vLLM serves {name} as a generative model, not a pooling one: {why}. Its pooling "
        "entry points then refuse every request: \"LLM.encode() is only supported for "
        "pooling models. Try passing `--runner pooling` to use the model as a pooling "
        "model.\" (PoolingOfflineMixin._verify_pooling_task). tokpool simulates pooling "
        "runners: add --runner pooling (vLLM then adapts it with --convert embed), or "
        "--convert embed / --convert classify (from_hf_config: runner='pooling' or "
        "convert=...)", follows=follows, can_look_past=False)


def check_configured_task(task: str, declared: Sequence[str], *, name: str) -> None:
    """Refuse a configured task (``--pooler-config.task``, ``task=``) the model does not
    declare, as vLLM's engine does at start-up (vllm/config/model.py,
    ``ModelConfig.get_pooling_task``, a ``RuntimeError``).

    Raises:
        EngineRefusal: naming the task, the model's tasks and the ``--convert`` that
            declares it.
    """
    if task in declared:
        return
    convert = "embed" if task in ("embed", "token_embed") else "classify"
    raise EngineRefusal(
        f"vLLM refuses to start {name} with the pooling task {task!r}: \"Unsupported task: "
        f"{task!r} Supported tasks: {tuple(declared)}\" (ModelConfig.get_pooling_task). "
        f"Serve one of the model's own tasks, or adapt it with --convert {convert} "
        "(convert=)", follows="ModelConfig.get_pooling_task", can_look_past=False)


def check_pipeline_parallel(name: str, pp: int, *, supported: bool) -> None:
    """Refuse ``-pp`` > 1 on a model whose vLLM class lacks ``SupportsPP`` (vllm/config/model.py,
    ``ModelConfig.verify_with_parallel_config``; ``architectures.supports_pipeline_parallel``).

    Raises:
        EngineRefusal: vLLM's ``NotImplementedError`` message.
    """
    if pp > 1 and not supported:
        raise EngineRefusal(
            f"vLLM refuses to start {name} with --pipeline-parallel-size {pp}: \"Pipeline "
            "parallelism is not supported for this model. Supported models implement the "
            "`SupportsPP` interface.\" (ModelConfig.verify_with_parallel_config). Use -pp 1 "
            "(tensor parallelism, -tp, splits it instead)",
            follows="ModelConfig.verify_with_parallel_config", can_look_past=False)


def check_model_dtype(model_type: str, dtype: str, *, reason: str | None) -> None:
    """Refuse float16 for a model type vLLM refuses it for (vllm/config/model.py,
    ``_check_valid_dtype``; ``architectures.FLOAT16_UNSUPPORTED`` gives the reason).

    Args:
        model_type: the config's ``model_type``.
        dtype: the dtype served (``"float16"``, ...).
        reason: vLLM's reason for the model type (``None``: float16 is fine).

    Raises:
        EngineRefusal: vLLM's message; as_if may look past it (the bytes are bfloat16's).
    """
    if dtype == "float16" and reason is not None:
        raise EngineRefusal(
            f"vLLM refuses --dtype float16 here: \"The model type {model_type!r} does not "
            f"support float16. Reason: {reason}\" (_check_valid_dtype). Use --dtype bfloat16 "
            "(vLLM's choice under --dtype auto for a float32 checkpoint) or float32",
            follows="_check_valid_dtype")


def check_user_max_model_len(max_model_len: int, derived: int | None, *,
                             allow_long: bool) -> None:
    """Refuse a ``--max-model-len`` above the length derived from the model's files unless
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (``allow_long``): positions past it give NaN with
    RoPE and out-of-bounds reads with absolute positions (vllm/config/model.py,
    ``_get_and_verify_max_len``).

    Raises:
        EngineRefusal: naming both lengths and the environment variable.
    """
    if derived is not None and max_model_len > derived and not allow_long:
        raise EngineRefusal(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len ({derived}) in the model's config.json: vLLM refuses it "
            "(_get_and_verify_max_len). Set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            "(allow_long_max_model_len=True) if the model really takes that context, lower "
            "--max-model-len, or simulate it on purpose with as_if=True",
            follows="_get_and_verify_max_len")


def check_scheduler_limits(
    *, max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int | None,
    enable_chunked_prefill: bool, long_prefill_token_threshold: int | None,
) -> None:
    """vLLM's scheduler start-up refusals (vllm/config/scheduler.py,
    ``SchedulerConfig.verify_max_model_len``), in its order. Without a ``max_model_len`` (no
    model: no context limit) only the ``max_num_seqs`` one applies.

    Raises:
        EngineRefusal: without chunked prefill a budget below ``max_model_len``; a budget below
            ``max_num_seqs``; a ``long_prefill_token_threshold`` above ``max_model_len``.
    """
    follows = "SchedulerConfig.verify_max_model_len"
    tokens = max_num_batched_tokens
    if max_model_len is not None and tokens < max_model_len and not enable_chunked_prefill:
        raise EngineRefusal(
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_model_len})"
            " with chunked prefill off: vLLM refuses to start, since longer prompts could never "
            f"be scheduled ({follows}). Raise --max-num-batched-tokens "
            "(max_num_batched_tokens=), lower --max-model-len (max_model_len=), or turn on "
            "--enable-chunked-prefill (enable_chunked_prefill=True)", follows=follows)
    if tokens < max_num_seqs:
        raise EngineRefusal(
            f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs "
            f"({max_num_seqs}) ({follows}); raise --max-num-batched-tokens "
            "(max_num_batched_tokens=) or lower --max-num-seqs (max_num_seqs=)", follows=follows)
    threshold = long_prefill_token_threshold or 0  # None / 0: no cap
    if max_model_len is not None and threshold > max_model_len:
        raise EngineRefusal(
            f"long_prefill_token_threshold ({threshold}) cannot be greater than the "
            f"max_model_len ({max_model_len}) ({follows}); lower "
            "--long-prefill-token-threshold (long_prefill_token_threshold=) to at most "
            f"{max_model_len}", follows=follows)


def _gib(num_bytes: int) -> str:
    return f"{round(num_bytes / _GIB, 2)}"  # vllm/utils/mem_utils.py, format_gib


def check_kv_cache_holds_one_sequence(
    *, name: str, spec: KVCacheSpec | None, kv_cache_blocks: int, max_model_len: int | None,
    max_in_flight_tokens: int, available_bytes: int | None = None, given: bool = False,
    block_size: int | None = None,
) -> None:
    """Refuse a KV cache that cannot hold one ``max_model_len`` request, as vLLM does:
    ``get_kv_cache_configs`` keeps the null block back (``available - bytes_per_block``, the
    pipeline stages' workers in order) and ``_check_enough_kv_cache_memory`` compares the rest
    with one request's blocks in every group (``_max_memory_usage_bytes_from_groups``; a
    sliding-window group needs its window's blocks only,
    ``SlidingWindowSpec.max_memory_usage_bytes``). With ``--num-gpu-blocks-override`` the
    memory checked is the override's blocks.

    Args:
        name: the model.
        spec: its KV cache on the most loaded rank (``kv_cache.kv_cache_spec``; ``None``:
            no KV cache, nothing to check).
        kv_cache_blocks: ``num_gpu_blocks`` on that rank (the null block included).
        max_model_len: the engine's ``max_model_len`` (``None``: nothing to check).
        max_in_flight_tokens: ``kv_spec.max_in_flight_tokens`` (sliding windows hold them).
        available_bytes: the KV memory vLLM found on that rank (default: the blocks').
        given: the block count was given (``kv_cache_blocks=``, vLLM's
            ``--num-gpu-blocks-override``) rather than sized from memory.
        block_size: with ``spec=None``, a config without a model (one full-attention group
            of unknown bytes): the rule is then a block count, ``ceil(max_model_len /
            block_size)`` blocks against ``kv_cache_blocks - 1`` (vLLM's override sizes the
            memory as ``blocks x bytes per block``, so the bytes cancel). ``None``: no KV
            cache to check (an encoder-only model).

    Raises:
        EngineRefusal: with vLLM's message and its estimated longest ``max_model_len``.

    Example:
        >>> check_kv_cache_holds_one_sequence(name="m", spec=None, kv_cache_blocks=61,
        ...     max_model_len=1024, max_in_flight_tokens=0, given=True, block_size=16)
        Traceback (most recent call last):
        ...
        tokpool.sim.vllm_rules.engine_checks.EngineRefusal: vLLM refuses to start m: ...
    """
    if max_model_len is None:
        return
    if spec is None:
        if block_size is not None:
            _check_blocks_hold_one_sequence(name, kv_cache_blocks, block_size, max_model_len,
                                            given=given)
        return
    flight = {"max_model_len": max_model_len, "max_in_flight_tokens": max_in_flight_tokens}
    if spec.fits_one_sequence(kv_cache_blocks, **flight):
        return
    follows = "kv_cache_planning._check_enough_kv_cache_memory"
    fix = ("Give more blocks (kv_cache_blocks=, vLLM's --num-gpu-blocks-override)" if given
           else "Raise --gpu-memory-utilization (gpu_memory_utilization=), add GPUs "
           "(--tensor-parallel-size)")
    if available_bytes is None:  # a block count: the most loaded rank's blocks
        available_bytes = kv_cache_blocks * spec.bytes_per_block
        stages: tuple[int, ...] = (spec.bytes_per_block,)
    else:  # get_kv_cache_configs checks the pipeline stages' workers in order
        stages = spec.stage_bytes_per_block
    for per_block in stages:
        if per_block == 0:
            continue  # a stage without KV layers
        check = available_bytes - per_block  # the null block the BlockPool holds back
        if check <= 0:
            raise EngineRefusal(
                f"vLLM refuses to start {name}: \"No available memory for the cache blocks. "
                "Try increasing `gpu_memory_utilization` when initializing the engine\" "
                f"({follows}: {available_bytes:,} B for the KV cache, less than one block of "
                f"{per_block:,} B besides vLLM's null block). {fix}, or simulate it on "
                "purpose with as_if=True", follows=follows)
        blocks = available_bytes // per_block
        if spec.fits_one_sequence(blocks, **flight):
            continue
        needed = spec.max_memory_blocks(**flight) * per_block
        longest = spec.estimate_max_model_len(blocks, **flight)
        estimate = (f"Based on the available memory, the estimated maximum model length is "
                    f"{longest}. " if longest > 0 else "")
        raise EngineRefusal(
            f"vLLM refuses to start {name}: \"To serve at least one request with the model's "
            f"max seq len ({max_model_len}), ({_gib(needed)} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({_gib(check)} GiB). {estimate}"
            "Try increasing `gpu_memory_utilization` ... or decreasing `max_model_len`\" "
            f"({follows}; {blocks} blocks of {spec.block_size} tokens, one of them the null "
            f"block). {fix}, simulate it on purpose with as_if=True, or lower --max-model-len "
            f"(max_model_len=) to at most {longest}", follows=follows)


def _check_blocks_hold_one_sequence(name: str, kv_cache_blocks: int, block_size: int,
                                    max_model_len: int, *, given: bool) -> None:
    """``check_kv_cache_holds_one_sequence`` for a config without a model: one full-attention
    group, whose bytes per block are unknown and cancel out (``get_kv_cache_configs`` makes the
    override's memory ``blocks x bytes per block``)."""
    follows = "kv_cache_planning._check_enough_kv_cache_memory"
    fix = ("Give more blocks (kv_cache_blocks=, vLLM's --num-gpu-blocks-override)" if given
           else "Give the KV cache more memory")
    usable = kv_cache_blocks - 1  # the null block the BlockPool holds back
    if usable <= 0:
        raise EngineRefusal(
            f"vLLM refuses to start {name}: \"No available memory for the cache blocks. "
            "Try increasing `gpu_memory_utilization` when initializing the engine\" "
            f"({follows}: kv_cache_blocks={kv_cache_blocks} leaves no block besides vLLM's "
            f"null block). {fix}, or simulate it on purpose with as_if=True", follows=follows)
    needed = -(-max_model_len // block_size)  # full attention: ceil(len / block_size)
    if needed <= usable:
        return
    longest = usable * block_size  # _estimate_max_model_len's binary search, in blocks
    raise EngineRefusal(
        f"vLLM refuses to start {name}: \"To serve at least one request with the model's max "
        f"seq len ({max_model_len}), ({needed} blocks of KV cache are needed, which is larger "
        f"than the available KV cache memory ({usable} blocks). Based on the available "
        f"memory, the estimated maximum model length is {longest}. Try increasing "
        "`gpu_memory_utilization` ... or decreasing `max_model_len`\" "
        f"({follows}; {kv_cache_blocks} blocks of {block_size} tokens, one of them the null "
        f"block; without a model the check counts blocks, vLLM's bytes per block cancel). "
        f"{fix}, simulate it on purpose with as_if=True, or lower --max-model-len "
        f"(max_model_len=) to at most {longest}", follows=follows)


# --- requests ---------------------------------------------------------------------------------


def check_prompts_fit(prompt_lens: Sequence[int], max_model_len: int | None, *,
                      name: str | None = None) -> None:
    """Refuse prompts vLLM rejects (vllm/v1/engine/input_processor.py,
    ``InputProcessor._validate_prompt_len``): an empty prompt, or one longer than
    ``max_model_len`` (a pooling prompt of exactly ``max_model_len`` is accepted: only
    generative models need room for an output token).

    Args:
        prompt_lens: per request, its prompt length (ints, or a numpy array).
        max_model_len: the engine's ``max_model_len`` (``None``: no limit).
        name: the model, for the message.

    Raises:
        EngineRefusal: naming the first such request, its length, how many there are, and what
            to change.
    """
    lens = np.asarray(prompt_lens, dtype=np.int64).reshape(-1)
    empty = np.flatnonzero(lens == 0)
    if empty.size:
        raise EngineRefusal(
            f"request {empty[0]} is empty (0 prompt tokens); vLLM rejects empty prompts "
            "(InputProcessor._validate_prompt_len)",
            follows="InputProcessor._validate_prompt_len", can_look_past=False)
    if max_model_len is None:
        return
    too_long = np.flatnonzero(lens > max_model_len)
    if too_long.size:
        i, n, count = int(too_long[0]), int(lens[too_long[0]]), too_long.size
        whose = f"{name}'s " if name else ""
        raise EngineRefusal(
            f"request {i} has {n} prompt tokens, longer than {whose}max_model_len="
            f"{max_model_len} ({count:,} such request{'s' if count > 1 else ''}); vLLM "
            "rejects it (InputProcessor._validate_prompt_len). Pass max_model_len >= "
            f"{n} (vLLM's --max-model-len) if the model supports that context, shorten the "
            "prompt, or simulate it on purpose with as_if=True",
            follows="InputProcessor._validate_prompt_len")


def check_unchunked_prompts_schedulable(prompt_lens: Sequence[int], max_num_batched_tokens: int,
                                        *, enable_chunked_prefill: bool) -> None:
    """Refuse prompts that can never be scheduled: longer than the budget with chunked prefill
    off (vLLM refuses a ``max_model_len`` above the budget at start-up,
    ``check_scheduler_limits``; an engine that accepted it would spin forever).

    Raises:
        EngineRefusal: naming the first such request and the two flags to change.
    """
    if enable_chunked_prefill:
        return
    too_long = [(i, int(n)) for i, n in enumerate(prompt_lens) if n > max_num_batched_tokens]
    if too_long:
        i, n = too_long[0]
        raise EngineRefusal(
            f"request {i} has {n} prompt tokens but max_num_batched_tokens is "
            f"{max_num_batched_tokens} and chunked prefill is disabled, so it can never be "
            f"scheduled ({len(too_long)} such request{'s' if len(too_long) > 1 else ''}; vLLM "
            "refuses a max_model_len above the budget without chunking, "
            "SchedulerConfig.verify_max_model_len). Set enable_chunked_prefill=True "
            "(--enable-chunked-prefill) or raise max_num_batched_tokens "
            "(--max-num-batched-tokens)",
            follows="SchedulerConfig.verify_max_model_len", can_look_past=False)


def check_prompts_fit_kv_cache(prompt_lens: Sequence[int], kv_cache_blocks: int,
                               block_size: int, *,
                               kv_cache_groups: Sequence[int | None] = (None,),
                               max_model_len: int | None = None,
                               max_in_flight_tokens: int = 0) -> None:
    """Refuse prompts the KV cache can never admit: vLLM's scheduler reserves a waiting
    request's WHOLE prompt (``SchedulerConfig.scheduler_reserve_full_isl``) in every KV-cache
    group — a sliding-window group its window's blocks
    (``get_num_blocks_to_allocate(apply_admission_cap=True)``) — in ``kv_cache_blocks - 1``
    usable blocks (one is the ``BlockPool``'s null block), so a longer prompt waits forever;
    vLLM refuses such a ``max_model_len`` at start-up.

    Args:
        prompt_lens: per request, its prompt length.
        kv_cache_blocks: ``num_gpu_blocks``.
        block_size: tokens per block.
        kv_cache_groups: each group's sliding window (``None``: full attention).
        max_model_len, max_in_flight_tokens: what a sliding window's cap depends on
            (``kv_spec.admission_blocks``).

    Raises:
        ValueError: ``kv_cache_blocks`` below 2 (no usable block).
        EngineRefusal: the first prompt that does not fit, with its blocks and the cache's.
    """
    if isinstance(kv_cache_blocks, bool) or not isinstance(kv_cache_blocks, int) \
            or kv_cache_blocks < 2:
        raise ValueError(
            f"kv_cache_blocks must be an int >= 2 (vLLM keeps one as its null block), "
            f"got {kv_cache_blocks!r}; give the KV cache more memory"
        )
    for i, n in enumerate(prompt_lens):
        need = admission_blocks(int(n), kv_cache_groups, block_size=block_size,
                                max_model_len=max_model_len,
                                max_in_flight_tokens=max_in_flight_tokens)
        if need <= kv_cache_blocks - 1:
            continue
        window = ("" if all(w is None for w in kv_cache_groups) else
                  f" in its {len(kv_cache_groups)} KV-cache groups (the sliding-window ones at "
                  "most their window's)")
        raise EngineRefusal(
            f"request {i} has {int(n)} prompt tokens: {need} KV blocks of {block_size} "
            f"tokens{window}, but the KV cache has {kv_cache_blocks} blocks, "
            f"{kv_cache_blocks - 1} usable (one is vLLM's null block): vLLM never admits it "
            "(its whole prompt must fit, Scheduler.schedule) and refuses a max_model_len the "
            "cache cannot hold. "
            "Give more KV cache (kv_cache_blocks, gpu_memory_utilization, "
            "tensor_parallel_size) or shorter prompts",
            follows="Scheduler.schedule", can_look_past=False)


def check_step_pooling_sees_whole_prompts(steps, prompt_lens: Sequence[int], *,
                                          step_tag_id: int | None,
                                          enable_chunked_prefill: bool) -> None:
    """Refuse a run vLLM's STEP pooling crashes on: with chunked prefill off its ``AllPool``
    keeps nothing, so a prompt that ``long_prefill_token_threshold`` split reaches
    ``StepPool.forward`` as its last chunk alone, and the step-tag mask of the whole prompt
    indexes past that chunk's rows (an ``IndexError`` in vLLM 0.33.0's own code, run by
    ``tests/test_parity_vllm.py``).

    Args:
        steps: the schedule (``ScheduledStep``s).
        prompt_lens: per request, its prompt length.
        step_tag_id: the tag STEP selects rows by (``None``: no row selection, no crash).
        enable_chunked_prefill: chunked prefill is on (then chunks are cached and joined).

    Raises:
        EngineRefusal: naming the first split request and what to change.
    """
    if enable_chunked_prefill or step_tag_id is None:
        return
    for step in steps:
        for r, start, stop in step.chunks:
            if (start, stop) != (0, prompt_lens[r]):
                raise EngineRefusal(
                    f"request {r} is split (tokens {start}..{stop - 1} of {prompt_lens[r]} in "
                    f"step {step.index}) with chunked prefill off: vLLM 0.33.0's StepPool then "
                    f"selects the step-tag rows (step_tag_id={step_tag_id}) of the whole "
                    "prompt in one chunk's rows and fails with an IndexError "
                    "(StepPool.forward). Enable chunked prefill (--enable-chunked-prefill) or "
                    "drop --long-prefill-token-threshold",
                    follows="StepPool.forward", can_look_past=False)


#: The sequence poolers that refuse a step with a partial prefill (vllm/model_executor/layers/
#: pooler/seqwise/methods.py): their vLLM class.
_WHOLE_PROMPT_SEQUENCE_POOLERS = {"CLS": "CLSPool", "MEAN": "MeanPool"}


def check_sequence_pooling_sees_whole_prompts(steps, prompt_lens: Sequence[int], *,
                                              seq_pooling_type: str,
                                              token_level: bool) -> None:
    """Refuse a run vLLM's CLS or MEAN pooling fails on: ``CLSPool.forward`` and
    ``MeanPool.forward`` raise ``RuntimeError`` on a step whose cursor is a partial prefill
    (batch-wide: ANY request whose scheduled tokens are not its whole prompt,
    ``PoolingCursor.is_partial_prefill``). Such models never chunk
    (``ModelConfig.is_chunked_prefill_supported``), yet ``long_prefill_token_threshold`` still
    splits a prompt while other requests wait (``Scheduler.schedule``), and the engine stops.
    LAST pooling reads the last scheduled row, the prompt's own last one: it runs.

    Args:
        steps: the schedule (``ScheduledStep``s).
        prompt_lens: per request, its prompt length.
        seq_pooling_type: the model's sequence pooling (``"LAST"``, ``"CLS"``, ``"MEAN"``).
        token_level: the run pools per token (ALL/STEP: the sequence pooler never runs).

    Raises:
        EngineRefusal: naming the first partial step, its request and what to change.

    Example:
        >>> from tokpool.sim.schedule.scheduler import ScheduledStep
        >>> check_sequence_pooling_sees_whole_prompts(
        ...     [ScheduledStep(0, ((0, 0, 16), (1, 0, 8)), (1,))], [24, 8],
        ...     seq_pooling_type="CLS", token_level=False)
        Traceback (most recent call last):
        ...
        tokpool.sim.vllm_rules.engine_checks.EngineRefusal: step 0 is a partial prefill ...
    """
    pooler = _WHOLE_PROMPT_SEQUENCE_POOLERS.get(seq_pooling_type)
    if token_level or pooler is None:
        return
    for step in steps:
        for r, start, stop in step.chunks:
            if stop - start != prompt_lens[r]:
                raise EngineRefusal(
                    f"step {step.index} is a partial prefill (request {r}: tokens "
                    f"{start}..{stop - 1} of {prompt_lens[r]}), and vLLM 0.33.0's {pooler} "
                    f"fails on it: \"partial prefill is not supported with "
                    f"{seq_pooling_type} pooling\" (RuntimeError, {pooler}.forward), which "
                    "stops the engine. A model with CLS or MEAN pooling never chunks its "
                    "prompts (ModelConfig.is_chunked_prefill_supported), but "
                    "--long-prefill-token-threshold still splits one while others wait "
                    "(Scheduler.schedule): drop --long-prefill-token-threshold "
                    "(long_prefill_token_threshold=None), or serve it with LAST pooling",
                    follows=f"{pooler}.forward", can_look_past=False)


# --- per-request pooling parameters -------------------------------------------------------------

#: ``PoolingParams.valid_parameters`` (vllm/pooling_params.py): the per-request options each
#: task takes, in vLLM's names (``late_chunking_params`` is ``tp.PoolingParams.
#: late_chunking_size``).
POOLING_PARAMS_BY_TASK: dict[str, tuple[str, ...]] = {
    "embed": ("dimensions", "use_activation"),
    "classify": ("use_activation",),
    "token_embed": ("dimensions", "use_activation", "late_chunking_params"),
    "token_classify": ("use_activation",),
}


def check_pooling_params(params, config, *, request: int | None = None) -> None:
    """Refuse a request's ``tp.PoolingParams`` as vLLM 0.33.0 refuses them, in vLLM's order.

    - the request's truncation (``TokenizeParams.__post_init__``, vllm/renderers/params.py):
      ``truncate_prompt_tokens`` above ``max_model_len``;
    - ``JinaForRanking`` with late chunking (``JinaRankingTokenEmbedIOProcessor.render``,
      vllm/entrypoints/pooling/embed/io_processor.py: it returns document/query vectors);
    - ``PoolingParams.verify`` (vllm/pooling_params.py): late chunking for a task other than
      ``token_embed``, or with late-interaction scoring; step tags on a model whose token
      pooling is not STEP (``_verify_step_pooling``); ``dimensions`` on a model that is not
      Matryoshka, outside ``[1, embedding_size]`` or outside its ``matryoshka_dimensions``
      (``_set_default_parameters``); an option the task does not take
      (``_verify_valid_parameters``); late chunking with step tags ("requires all token rows");
    - late chunking with truncation (``prepare_late_chunking_input``,
      vllm/entrypoints/pooling/token_embed/late_chunking.py).

    The model facts come from ``config.model`` (``architecture``, ``is_matryoshka``,
    ``matryoshka_dimensions``, ``embedding_size`` as a config.json gives them to
    ``SimConfig.from_hf_config``; a bare config is a model that is not Matryoshka).

    Args:
        params: a ``tp.PoolingParams`` (``None``: nothing to check).
        config: the ``tp.SimConfig`` the request runs on.
        request: its index, for the message.

    Raises:
        EngineRefusal: vLLM's words, the rule it follows; the Matryoshka and truncation
            refusals can be looked past (``as_if=True``: the run goes on as if the model
            allowed it), the others cannot.
    """
    if params is None:
        return
    who = f"request {request}: " if request is not None else ""
    model = config.model
    name = config.model_name or "the simulated model"
    task = getattr(params, "task", None) or config.task  # the request's own, if given
    chunked = params.late_chunking_size is not None
    keep = params.truncate_prompt_tokens

    def refuse(words: str, follows: str, *, can_look_past: bool = False) -> None:
        raise EngineRefusal(f"{who}{words} (vLLM's {follows})", follows=follows,
                            can_look_past=can_look_past)

    if keep is not None and config.max_model_len is not None and keep > config.max_model_len:
        refuse(f"truncate_prompt_tokens={keep} cannot be greater than max_total_tokens = "
               f"{config.max_model_len}. Please request a smaller truncation size.",
               "TokenizeParams.__post_init__", can_look_past=True)
    if chunked and getattr(model, "architecture", "") == "JinaForRanking":
        refuse("JinaForRanking returns document/query vectors and does not support late "
               "chunking", "JinaRankingTokenEmbedIOProcessor.render")
    if chunked and task != "token_embed":
        refuse("Late chunking requires token_embed", "PoolingParams.verify")
    if chunked and params.late_interaction_mode is not None:
        refuse("Late chunking cannot be combined with late-interaction scoring",
               "PoolingParams.verify")
    valid = list(POOLING_PARAMS_BY_TASK[task])
    step = [k for k in ("step_tag_id", "returned_token_ids") if getattr(params, k) is not None]
    if step and not config.pooling_kind.takes_step_params:
        refuse(f"Task {task} only supports {valid} parameters, does not support {step} "
               "parameters", "PoolingParams._verify_step_pooling")
    dims = params.dimensions
    if dims is not None and task in ("embed", "token_embed"):
        size = getattr(model, "embedding_size", None) or config.hidden_size
        mds = getattr(model, "matryoshka_dimensions", None)
        if not (getattr(model, "is_matryoshka", False) or mds):
            refuse(f"Model {name!r} does not support Matryoshka embeddings; dimensions must "
                   f"be unset (received dimensions={dims}).",
                   "PoolingParams._set_default_parameters", can_look_past=True)
        if not 1 <= dims <= size:
            refuse(f"Model {name!r} only supports dimensions in range [1, {size}], got "
                   f"{dims}.", "PoolingParams._set_default_parameters")
        if mds is not None and dims not in mds:
            refuse(f"Model {name!r} only supports Matryoshka dimensions {list(mds)}, got "
                   f"{dims}.", "PoolingParams._set_default_parameters", can_look_past=True)
    given = {"dimensions": dims, "use_activation": params.use_activation,
             "late_chunking_params": params.late_chunking_size}
    invalid = [k for k, v in given.items() if v is not None and k not in valid]
    if invalid:
        refuse(f"Task {task!r} only supports {valid} parameters, does not support {invalid} "
               "parameters", "PoolingParams._verify_valid_parameters")
    tag = params.step_tag_id if params.step_tag_id is not None else \
        config.pooling_kind.row_tag(config)
    if chunked and tag is not None:
        refuse("Late chunking requires all token rows", "PoolingParams.verify")
    if chunked and keep is not None:
        refuse("Late chunking does not support input padding, truncation or renderer text "
               "normalization", "prepare_late_chunking_input")
