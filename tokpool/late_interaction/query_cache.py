"""The worker's late-interaction query cache, in bytes (vLLM 0.33.0's ``LateInteractionRunner``).

vllm/v1/pool/late_interaction_runner.py keeps, per engine process:

- ``_query_cache``: query key -> the query's token embeddings. A query request
  (``mode="cache_query"``) that finishes in a step stores ``output.clone()`` there — "``output``
  can be a view into the current step's hidden-states buffer, so clone it before storing across
  scheduling steps" — and hands the host a 0-d float32 zero instead of its rows;
- ``_query_uses``: how many documents still need it (``query_uses``: the number of documents
  for 1:N scoring, 1 for N:N; ``ServingScores._flash_late_interaction_encode_queries``);
- a document (``mode="score_doc"``) that finishes is scored against its query in the same step
  (``postprocess_pooler_output``), gets one float32 score, and releases one use; at zero uses
  the query's tensor is dropped. A document aborted or finished without a score releases its use
  too (``on_requests_finished``); ``release_queries`` / ``clear`` drop entries outright.

``QueryCache`` replays that bookkeeping with byte counts instead of tensors, so the simulator
can put the cache in its ledger step by step; ``tests/test_parity_late_interaction.py`` drives
vLLM's own runner with real tensors on the same events and compares the bytes after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["QueryCache"]


@dataclass
class QueryCache:
    """Bytes the worker's query cache holds, updated as vLLM's runner updates its dicts.

    Attributes:
        entries: query key -> bytes of the cloned query rows it holds.
        uses: query key -> documents still to be scored against it.

    Example:
        >>> cache = QueryCache()
        >>> cache.store("q0", nbytes=4096, uses=2)  # the clone: 4,096 B kept across steps
        4096
        >>> cache.score("q0"), cache.nbytes   # the first document scored: one use left
        (0, 4096)
        >>> cache.score("q0"), cache.nbytes   # the last: the tensor is dropped
        (4096, 0)
    """

    entries: dict[str, int] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes held now (one cloned tensor per cached query key)."""
        return sum(self.entries.values())

    def store(self, key: str, *, nbytes: int, uses: int) -> int:
        """A query request finished: its output is cloned into the cache (``query_uses`` is
        ``max(1, uses)``, as the runner parses it). A key stored again replaces its tensor.

        Returns:
            The bytes the clone allocated.
        """
        self.entries[key] = nbytes
        self.uses[key] = max(1, int(uses))
        return nbytes

    def score(self, key: str) -> int:
        """A document paired with ``key`` was scored: one use released
        (``_release_query_use``).

        Returns:
            The bytes freed (the whole tensor at the last use, else 0).

        Raises:
            ValueError: no cached query under ``key`` (vLLM's "late-interaction query cache
                miss": a document ran before its query).
        """
        if key not in self.entries:
            raise ValueError(f"late-interaction query cache miss for key {key!r}: a document "
                             "was scored before its query finished (vLLM raises the same); "
                             "queries must run in the first stage")
        return self._release(key)

    def _release(self, key: str) -> int:
        remaining = self.uses.get(key, 1) - 1
        if remaining <= 0:
            self.uses.pop(key, None)
            return self.entries.pop(key, 0)
        self.uses[key] = remaining
        return 0

    def release(self, keys) -> int:
        """``release_queries``: drop these keys whatever their uses (the serving layer's
        clean-up after a failed request). Returns the bytes freed."""
        freed = 0
        for key in set(keys):
            freed += self.entries.pop(key, 0)
            self.uses.pop(key, None)
        return freed
