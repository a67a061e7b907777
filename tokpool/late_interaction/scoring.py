"""How vLLM 0.33.0's scoring server turns queries and documents into engine requests.

- Pairing (entrypoints/pooling/scoring/utils.py, ``_validate_score_input_lens``): 1:1, 1:N or
  N:N; "Input lengths must be either 1:1, 1:N or N:N" otherwise (N:1 included), and at least
  one text and one text_pair.
- Order (``BiEncoderIOProcessor.get_request_factory_online``): the queries' prompts, then the
  documents'; ``n_queries`` splits them again.
- Late-interaction parameters (``ServingScores._flash_late_interaction_encode_queries`` /
  ``_encode_docs``): query ``i`` gets key ``late-interaction-<uuid>-query-<i>`` and
  ``query_uses`` = the number of documents for one query, else 1; document ``j`` is paired with
  query 0 (1:N) or query ``j`` (N:N).
- Data parallelism (vllm/v1/pool/late_interaction.py, ``get_late_interaction_engine_index``):
  a request with late-interaction parameters goes to engine ``zlib.crc32(query_key) %
  num_engines`` — documents follow their query. vLLM's keys hold a fresh uuid, so the engine is
  a function of keys you pass (``query_keys``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ScoreRequest", "check_pairing", "engine_index", "plan_requests"]


def check_pairing(n_queries: int, n_docs: int) -> None:
    """vLLM's rule for the shapes of a score request, in its order.

    Raises:
        ValueError: anything but 1:1, 1:N, N:N; no query; no document.

    Example:
        >>> check_pairing(1, 5); check_pairing(3, 3)
        >>> check_pairing(3, 1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Input lengths must be either 1:1, 1:N or N:N (vLLM's ...
    """
    if n_queries > 1 and n_queries != n_docs:
        hint = ("N:1 is refused (give the one document once per query, or swap the roles)"
                if n_docs == 1 else "pair one query with every document (1:N) or give as "
                "many queries as documents (N:N)")
        raise ValueError(f"Input lengths must be either 1:1, 1:N or N:N (vLLM's "
                         f"_validate_score_input_lens): got {n_queries} queries and {n_docs} "
                         f"document{'s' if n_docs != 1 else ''}; {hint}")
    if n_queries == 0:
        raise ValueError("At least one text element must be given: no query (vLLM's "
                         "_validate_score_input_lens)")
    if n_docs == 0:
        raise ValueError("At least one text_pair element must be given: no document (vLLM's "
                         "_validate_score_input_lens)")


def engine_index(query_key: str, num_engines: int) -> int:
    """The data-parallel engine a late-interaction request is pinned to.

    Example:
        >>> engine_index("query-0", 4)
        1
    """
    return zlib.crc32(query_key.encode("utf-8")) % num_engines


@dataclass(frozen=True)
class ScoreRequest:
    """One engine request of a score call.

    Attributes:
        request: its number (queries first, then documents).
        role: ``"query"`` or ``"doc"``.
        query: the query it belongs to (a query: itself).
        key: the query key its late-interaction parameters carry.
        uses: a query's ``query_uses`` (documents: 0).
        engine: the data-parallel engine it runs on.
    """

    request: int
    role: str
    query: int
    key: str
    uses: int
    engine: int


def plan_requests(n_queries: int, n_docs: int, *, query_keys: Sequence[str] | None = None,
                  num_engines: int = 1) -> list[ScoreRequest]:
    """The engine requests of a score call, numbered as vLLM orders them.

    Args:
        n_queries, n_docs: the call's shape (checked: ``check_pairing``).
        query_keys: one key per query (default ``"query-<i>"``; vLLM's hold a uuid).
        num_engines: data-parallel engines.

    Returns:
        Queries ``0..n_queries-1``, then documents.

    Raises:
        ValueError: a bad shape, a wrong number of keys or repeated keys, ``num_engines`` < 1.
        TypeError: keys that are not non-empty strings.

    Example:
        >>> [(r.role, r.query, r.uses) for r in plan_requests(1, 2)]
        [('query', 0, 2), ('doc', 0, 0), ('doc', 0, 0)]
    """
    check_pairing(n_queries, n_docs)
    if isinstance(num_engines, bool) or not isinstance(num_engines, int) or num_engines < 1:
        raise ValueError(f"num_engines must be an int >= 1, got {num_engines!r}")
    if query_keys is None:
        keys = [f"query-{i}" for i in range(n_queries)]
    else:
        if isinstance(query_keys, str) or not isinstance(query_keys, Sequence):
            raise TypeError(f"query_keys must be a list of strings, one per query, got "
                            f"{type(query_keys).__name__}")
        keys = list(query_keys)
        if len(keys) != n_queries:
            raise ValueError(f"query_keys has {len(keys)} keys for {n_queries} queries; give "
                             "one per query")
        bad = [k for k in keys if not isinstance(k, str) or not k]
        if bad:
            raise TypeError(f"query keys must be non-empty strings (vLLM refuses a request "
                            f"missing a valid query key), got {bad[:3]!r}")
        if len(set(keys)) != len(keys):
            raise ValueError("query_keys repeat a key: a second query would replace the first "
                             "one's cached rows in the worker; give distinct keys")
    uses = n_docs if n_queries == 1 else 1
    plan = [ScoreRequest(i, "query", i, keys[i], uses, engine_index(keys[i], num_engines))
            for i in range(n_queries)]
    for j in range(n_docs):
        q = 0 if n_queries == 1 else j
        plan.append(ScoreRequest(n_queries + j, "doc", q, keys[q], 0, plan[q].engine))
    return plan
