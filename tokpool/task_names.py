"""The pooling task names (no dependencies): the data model and the poolers need them, and the
gate (``tokpool.tasks``, which loads pandas for its tables) re-exports them."""

from __future__ import annotations

from typing import Literal

PoolingTask = Literal[
    "embed", "classify", "token_embed", "token_classify", "embed&token_classify", "plugin"
]
POOLING_TASKS: tuple[str, ...] = (
    "embed",
    "classify",
    "token_embed",
    "token_classify",
    "embed&token_classify",
    "plugin",
)
#: The runner's own task set: every pooling task but ``plugin`` (served by another runner).
SUPPORTED_TASKS: frozenset[str] = frozenset(POOLING_TASKS) - {"plugin"}
#: Tasks whose output grows with the prompt; the gate before PR #50931 kept them for encoders
#: only.
TOKEN_TASKS: frozenset[str] = frozenset({"token_embed", "token_classify", "embed&token_classify"})
