"""``PoolingModel``: a transformers model + a pooler that declares its tasks, served like vLLM.

A decoder LM declares ``{embed (LAST), token_embed (ALL)}``; an encoder ``{embed (MEAN or CLS),
token_embed (ALL)}`` with ``attn_type == "encoder_only"``; a model with a token-classification
head adds ``token_classify`` (ALL + the classifier). ``encode`` checks the request's task with
the runner's gate, runs the prompts through the engine step loop (``engine.run_encode``) and
returns vLLM's output shapes.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from ..pooler._checks import check_flag
from ..pooler.heads import TokenClassifierHead, TokenEmbeddingHead, check_dimensions, resolve_dtype
from ..pooler.poolers import DispatchPooler, Pooler
from ..pooler.pooling import AllPool, RetentionPolicy, check_policy, get_pooling_method
from ..pooler.tasks import check_request_task, gate, select_task
from .budget import ensure_encode_fits
from .encode_loop import StepTimes, run_encode
from .forward import ENCODER_CHUNK_REASON, resolve_layer
from .prompts import Prompt, to_token_ids
from .source import ModelSource

SequencePooling = Literal["LAST", "MEAN", "CLS"]


class PoolingModel:
    """A transformers model served for pooling tasks. Build one with ``tp.load_model``.

    Attributes:
        name: the name or path it was loaded from.
        hf_model: the underlying transformers model (e.g. ``LlamaForCausalLM``, ``BertModel``).
        tokenizer: its tokenizer, or ``None`` (token-id prompts only).
        attn_type: ``"decoder"`` or ``"encoder_only"``.
        hidden_size: width of the hidden states (and of ``embed``/``token_embed`` outputs).
        num_layers: transformer layers (``layer`` indexes ``0..num_layers``).
        max_length: the longest prompt accepted, in tokens.
        sequence_pooling: ``embed``'s pooling method (``"LAST"``, ``"MEAN"`` or ``"CLS"``).
        task: the model's selected task (``tp.select_task`` priority unless ``load_model``
            was given one).
        pooler: a ``tp.DispatchPooler`` built with the default flags; it declares
            ``supported_tasks``.
        source_path: the directory the weights were read from (``None`` for tiny models); for
            GGUF models this is the converted cache entry.
    """

    def __init__(
        self,
        hf_model,
        tokenizer,
        *,
        name: str,
        attn_type: Literal["decoder", "encoder_only"],
        sequence_pooling: SequencePooling,
        max_length: int,
        max_length_reason: str,
        task: str | None = None,
        source_path: Path | None = None,
    ) -> None:
        config = hf_model.config
        self.name = name
        self.hf_model = hf_model
        self.tokenizer = tokenizer
        self.attn_type = attn_type
        self.sequence_pooling = sequence_pooling
        self.hidden_size = int(config.hidden_size)
        self.num_layers = int(config.num_hidden_layers)
        self.vocab_size = int(config.vocab_size)
        self.max_length = int(max_length)
        self.max_length_reason = max_length_reason
        self.architectures: tuple[str, ...] = tuple(
            getattr(config, "architectures", None) or (type(hf_model).__name__,)
        )
        self.source_path = source_path
        self._init = {
            "name": name, "attn_type": attn_type, "sequence_pooling": sequence_pooling,
            "max_length": max_length, "max_length_reason": max_length_reason,
            "source_path": source_path,
        }
        self._root: PoolingModel | None = None  # the model a with_dtype copy was made from
        self._dtype_copies: dict[torch.dtype, PoolingModel] = {}
        self._classifier32 = self._float32_classifier()
        self.pooler = self.make_pooler()
        self.supported_tasks: frozenset[str] = self.pooler.get_supported_tasks()
        # ValueError naming both sets when `task` is not one the pooler declares
        self.task = select_task(self.supported_tasks, requested=task,
                                architectures=self.architectures)

    # --- structure ----------------------------------------------------------------------------

    @property
    def base_model(self):
        """The transformer without its LM / classification head (what produces hidden states)."""
        return self.hf_model.base_model

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the weights and of the hidden states."""
        return next(self.hf_model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def classifier(self) -> torch.nn.Module | None:
        """The token-classification head (``score`` or ``classifier``) of a
        ``*ForTokenClassification`` model, ``[.., hidden] -> [.., num_labels]``; else ``None``."""
        if not any(a.endswith("ForTokenClassification") for a in self.architectures):
            return None
        for attr in ("score", "classifier"):
            module = getattr(self.hf_model, attr, None)
            if isinstance(module, torch.nn.Module):
                return module
        return None

    def _float32_classifier(self) -> torch.nn.Module | None:
        # why: heads run in float32 (engines' default head dtype), so the weights must too.
        module = self.classifier
        if module is None:
            return None
        return copy.deepcopy(module).float().eval().requires_grad_(False)

    def make_pooler(
        self, *, async_scheduling: bool = False, policy: RetentionPolicy = "clone"
    ) -> DispatchPooler:
        """The model's pooler, with ALL pooling's engine flags set.

        Returns:
            ``DispatchPooler`` routing ``embed`` to ``sequence_pooling`` + embedding head,
            ``token_embed`` to ALL + embedding head and (with a classifier) ``token_classify``
            to ALL + classifier head.
        """
        check_policy(policy)

        def all_pool() -> AllPool:
            return AllPool(
                enable_chunked_prefill=self.attn_type == "decoder",
                async_scheduling=async_scheduling,
                policy=policy,
            )

        embed_head = TokenEmbeddingHead()
        poolers = {
            "embed": Pooler(get_pooling_method(self.sequence_pooling), embed_head,
                            tasks=frozenset({"embed"})),
            "token_embed": Pooler(all_pool(), embed_head, tasks=frozenset({"token_embed"})),
        }
        if self._classifier32 is not None:
            poolers["token_classify"] = Pooler(
                all_pool(), TokenClassifierHead(classifier=self._classifier32),
                tasks=frozenset({"token_classify"}),
            )
        return DispatchPooler(poolers)

    def served_tasks(
        self, *, policy: Literal["current", "legacy"] = "current", requested: str | None = None
    ) -> frozenset[str]:
        """What the pooling runner serves for this model under a gate policy.

        Raises:
            tp.UnsupportedTaskError: the gate refuses (e.g. ``policy="pre_50931"`` with
                ``requested="token_embed"`` on a decoder), with vLLM's message.
        """
        return gate(
            self.supported_tasks,
            requested=requested if requested is not None else self.task,
            attn_type=self.attn_type,
            policy=policy,
            architectures=self.architectures,
        )

    def with_dtype(self, dtype: torch.dtype | str) -> PoolingModel:
        """This model with its weights cast to ``dtype``; ``self`` is unchanged.

        The copy is made from the weights the model was loaded with (casting a bfloat16 copy
        back to float32 returns the original) and cached on the original, one per dtype, so
        comparing dtypes repeatedly costs one cast.
        """
        dtype = resolve_dtype(dtype)
        root = self._root if self._root is not None else self
        if dtype == self.dtype:
            return self
        if dtype == root.dtype:
            return root
        if dtype not in root._dtype_copies:
            typed = PoolingModel(copy.deepcopy(root.hf_model).to(dtype), root.tokenizer,
                                 task=root.task, **root._init)
            typed._root = root
            root._dtype_copies[dtype] = typed
        return root._dtype_copies[dtype]

    # --- inputs -------------------------------------------------------------------------------

    def token_ids(self, prompts: Prompt | Sequence[Prompt]) -> list[Tensor]:
        """Tokenize and validate prompts: one ``[prompt_len]`` int64 tensor per prompt.

        Raises:
            ValueError: empty prompts, ids outside the vocabulary, prompts longer than
                ``max_length``.
        """
        return to_token_ids(
            prompts,
            tokenizer=self.tokenizer,
            vocab_size=self.vocab_size,
            max_length=self.max_length,
            max_length_reason=self.max_length_reason,
            model_name=self.name,
        )

    def check_chunk_size(self, chunk_size: int | None) -> None:
        """Raises ``ValueError`` for a chunk size this model cannot run (see ``encode``)."""
        if chunk_size is None:
            return
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
            raise TypeError(f"chunk_size must be an int or None, got {chunk_size!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1 token, got {chunk_size}")
        if self.attn_type == "encoder_only":
            raise ValueError(
                f"chunk_size={chunk_size} given for {self.name}, an encoder: "
                f"{ENCODER_CHUNK_REASON}; leave chunk_size=None"
            )

    # --- serving ------------------------------------------------------------------------------

    def encode(
        self,
        prompts: Prompt | Sequence[Prompt],
        *,
        task: str | None = None,
        chunk_size: int | None = None,
        async_scheduling: bool = False,
        policy: RetentionPolicy = "clone",
        layer: int = -1,
        use_activation: bool = True,
        dimensions: int | None = None,
        gate_policy: Literal["current", "pre_50931"] = "current",
        times: StepTimes | None = None,
    ) -> list[Tensor]:
        """Pool prompts with the model, as the pooling runner would.

        Args:
            prompts: one prompt or a list; a prompt is text or a list of token ids.
            task: ``"embed"``, ``"token_embed"`` or ``"token_classify"`` (default: the model's
                ``task``). It must pass the runner's gate.
            chunk_size: prefill each prompt in chunks of at most this many tokens, one chunk
                per request per step, each continuing the request's KV cache (decoders only).
            async_scheduling, policy: ``tp.AllPool``'s flags for the token tasks.
            layer: hidden states to pool: ``-1`` is the final output (after the final norm),
                ``0`` the embeddings, ``k`` the output of layer ``k``.
            use_activation: L2-normalise embeddings / softmax classifier logits.
            dimensions: Matryoshka truncation of embeddings, in ``[1, hidden_size]``.
            gate_policy: ``"current"`` (after vLLM PR #50931) or ``"pre_50931"`` (before it).
            times: a ``StepTimes`` that accumulates seconds in the transformer vs in pooling
                (metadata + pooling method + head), step by step.

        Returns:
            One tensor per prompt, float32 (the head dtype): ``embed`` ``[D]``,
            ``token_embed`` ``[n_tokens, D]``, ``token_classify`` ``[n_tokens, n_labels]``,
            with ``D = dimensions or hidden_size``. Outputs computed without a head operation
            (``use_activation=False``) may be views of inference tensors: ``clone()`` before
            editing them in place.

        Raises:
            tp.UnsupportedTaskError: the task is not served (the gate's message).
            ValueError: bad prompts (empty, too long: both numbers), ``chunk_size`` on an
                encoder, ``dimensions`` out of range, an unknown policy or layer.
            tokpool.guard.MemoryLimitError: the estimated peak (``models.budget``) exceeds the
                memory limit (``TOKPOOL_MEMORY_LIMIT``); raised before any forward.

        Example:
            >>> model = tp.load_model("tiny-decoder")
            >>> [e.shape for e in model.encode([[5, 6, 7]], task="token_embed", chunk_size=2)]
            [torch.Size([3, 64])]
        """
        task = task if task is not None else self.task
        check_request_task(task, self.served_tasks(policy=gate_policy))
        check_policy(policy)
        self.check_chunk_size(chunk_size)
        resolve_layer(layer, self.num_layers)
        head_options: dict = {"use_activation": check_flag(use_activation, "use_activation")}
        if dimensions is not None:
            if task not in ("embed", "token_embed"):
                raise ValueError(
                    f"dimensions={dimensions} applies to embeddings; task {task!r} has none"
                )
            head_options["dimensions"] = check_dimensions(dimensions, self.hidden_size)
        token_ids = self.token_ids(prompts)
        if not token_ids:
            return []
        ensure_encode_fits(self, [t.numel() for t in token_ids], task=task,
                           chunk_size=chunk_size, layer=layer, dimensions=dimensions)
        source = ModelSource(self, token_ids, layer=layer)
        pooler = self.make_pooler(async_scheduling=async_scheduling, policy=policy)
        return run_encode(source, pooler=pooler, task=task, chunk_size=chunk_size,
                          async_scheduling=async_scheduling, policy=policy,
                          head_options=head_options, times=times)

    def __repr__(self) -> str:
        return (
            f"PoolingModel({self.name!r}, {self.architectures[0]}, attn_type={self.attn_type!r}, "
            f"hidden_size={self.hidden_size}, num_layers={self.num_layers}, "
            f"max_length={self.max_length}, dtype={self.dtype}, "
            f"tasks={sorted(self.supported_tasks)}, task={self.task!r})"
        )
