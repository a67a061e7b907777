"""The keep rule: what ``AllPool`` keeps of a chunk between steps, and what it returns.

This is DESIGN.md's ownership table as ONE function. ``AllPool`` runs its branches from it,
the counting engine (``tokpool.sim.backends.counting``) does its bookkeeping from it, the closed
forms (``tokpool.sim.backends.closed_form``) read their per-policy cases from it, and
``SimResult.chunks`` and the trace label chunks with it. A new policy or a new engine rule is an
edit here.

Per chunk, the rule answers two questions:

- ``keep``: what the request holds of this chunk after pooling runs —
  ``"view"`` (a view of the step's output memory: owns nothing, may be overwritten),
  ``"clone"`` (an owned copy), ``"buffer"`` (copied into the request's owned
  ``[prompt_len, W]`` device buffer), ``"host"`` (copied into its host buffer);
- ``returns``: what pooling hands over — ``None`` (unfinished), ``"chunk"`` (the one kept
  tensor itself: a one-shot request), ``"cat"`` (``torch.cat`` of the kept chunks: new
  storage), ``"buffer"`` (the request's device or host buffer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RetentionPolicy = Literal["legacy", "clone", "prealloc", "offload"]
RETENTION_POLICIES: tuple[str, ...] = ("legacy", "clone", "prealloc", "offload")

#: The simulator's extra policy: drive the INSTALLED vLLM's own AllPool/StepPool (tensor mode,
#: ``tokpool.pooler.vllm_bridge``). vLLM 0.33.0's table is PR #50931's, ``clone`` (the parity layer,
#: tests/test_parity_vllm.py, holds it to that), so the counting engine and the closed forms
#: read ``clone``'s cells for it; tensor mode observes what the installed vLLM really keeps.
VLLM_POLICY = "vllm"
SIM_POLICIES: tuple[str, ...] = (*RETENTION_POLICIES, VLLM_POLICY)

Keep = Literal["view", "clone", "buffer", "host"]
Returns = Literal["chunk", "cat", "buffer"] | None


def check_policy(policy: object, *, allowed: tuple[str, ...] = RETENTION_POLICIES) -> None:
    """Raises ``ValueError`` for a name outside ``allowed`` (``RETENTION_POLICIES``; the
    simulator also takes ``"vllm"``: ``SIM_POLICIES``)."""
    if not isinstance(policy, str) or policy not in allowed:
        raise ValueError(
            f"unknown retention policy {policy!r}; choose one of {list(allowed)}"
        )


@dataclass(frozen=True)
class KeepRule:
    """One cell of the ownership table (see the module docstring).

    Attributes:
        keep: what is held of the chunk: ``"view" | "clone" | "buffer" | "host"``.
        returns: what pooling hands over this step: ``None | "chunk" | "cat" | "buffer"``.
    """

    keep: Keep
    returns: Returns

    @property
    def owned(self) -> bool:
        """The kept chunk owns its storage (only a view can be overwritten or pin memory)."""
        return self.keep != "view"

    @property
    def label(self) -> str:
        """Short name for plots and traces: ``clone``, ``view``, ``view + cat``, ..."""
        if self.returns == "cat":
            return f"{self.keep} + cat"
        return {"buffer": "prealloc", "host": "offload"}.get(self.keep, self.keep)


def keep_rule(
    policy: RetentionPolicy | Literal["vllm"],
    *,
    chunked: bool = True,
    async_scheduling: bool,
    finished: bool,
    first_chunk: bool,
) -> KeepRule:
    """The ownership table: what pooling keeps of one chunk and what it returns.

    Args:
        policy: ``"legacy"`` (pre PR #50931: views only), ``"clone"`` (PR #50931),
            ``"prealloc"`` (one owned buffer per multi-chunk request), ``"offload"`` (host),
            or the simulator's ``"vllm"`` (vLLM's own pooling: ``clone``'s cells).
        chunked: chunked prefill is enabled. Without it every request is one chunk.
        async_scheduling: step N+1 may write output memory before step N's host copy reads.
        finished: the chunk holds the request's last prompt token.
        first_chunk: the chunk starts at position 0 (nothing cached yet).

    Returns:
        The ``KeepRule`` of that cell.

    Without chunked prefill pooling keeps nothing across steps (vLLM 0.33.0's ``AllPool`` with
    ``enable_chunked_prefill=False``): every chunk is handed over as it is (``"chunk"``; cloned
    under async), finished or not, and the runner delivers only finished requests' outputs
    (``finished_mask``). A request that ``long_prefill_token_threshold`` split anyway is
    delivered as its LAST chunk alone (run on vLLM's own ``AllPool``:
    ``tests/test_parity_vllm.py``).

    Raises:
        ValueError: an unknown policy.

    Example:
        >>> keep_rule("clone", async_scheduling=False, finished=False, first_chunk=True)
        KeepRule(keep='clone', returns=None)
    """
    check_policy(policy, allowed=SIM_POLICIES)
    if policy == VLLM_POLICY:
        policy = "clone"  # vLLM 0.33.0 keeps what PR #50931's table says (see VLLM_POLICY)
    one_shot = finished and first_chunk
    if not chunked and not one_shot:
        # A split without chunked prefill (long_prefill_token_threshold): nothing is kept, the
        # chunk itself is handed over, owned when the next step may rewrite it first.
        owned = async_scheduling and policy != "legacy"
        return KeepRule("clone" if owned else "view", "chunk")
    if policy == "offload":
        # Every chunk goes to the request's host buffer as it is produced.
        return KeepRule("host", "buffer" if finished else None)
    if one_shot:
        # Read by the host copy only: owned when the next step may rewrite the memory first.
        owned = async_scheduling and policy != "legacy"
        return KeepRule("clone" if owned else "view", "chunk")
    if policy == "prealloc":
        return KeepRule("buffer", "buffer" if finished else None)
    if finished:
        # The final chunk after earlier ones: the cat copies it into new storage right away.
        return KeepRule("view", "cat")
    # An unfinished chunk outlives its step in every mode: only legacy keeps a view.
    return KeepRule("clone" if policy == "clone" else "view", None)


def ownership_table() -> list[dict[str, object]]:
    """Every cell of the table, for docs and notebooks: one dict per situation.

    Returns:
        Rows with ``policy``, ``chunked``, ``async_scheduling``, ``situation``, ``keep``,
        ``returns``, ``owned``.
    """
    situations = {
        "unfinished chunk": (False, True),
        "one shot": (True, True),
        "final chunk after earlier ones": (True, False),
    }
    unchunked = {"one shot", "unfinished chunk", "final chunk after earlier ones"}
    rows = []
    for policy in RETENTION_POLICIES:
        for chunked in (False, True):
            for async_scheduling in (False, True):
                for name, (finished, first) in situations.items():
                    if not chunked and name not in unchunked:
                        continue
                    rule = keep_rule(policy, chunked=chunked, async_scheduling=async_scheduling,
                                     finished=finished, first_chunk=first)
                    rows.append({
                        "policy": policy, "chunked": chunked,
                        "async_scheduling": async_scheduling, "situation": name,
                        "keep": rule.keep, "returns": rule.returns, "owned": rule.owned,
                    })
    return rows
