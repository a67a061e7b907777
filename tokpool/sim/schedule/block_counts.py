"""The KV-cache blocks of a schedule as counts: ``KVBlocks`` where no block's identity matters.

vLLM's ``BlockPool`` hands out block ids, keeps reference counts, a free queue and the cached
prefixes (``kv_blocks.KVBlocks`` keeps all of it, block by block). Which block a request gets
only matters when a later request can READ it: a prefix-cache hit (prefix caching on, for a
task that reads the cache), or a sliding window's freed blocks (``remove_skipped_blocks``) and
its admission cap. Without either, every answer the scheduler asks of the cache is a count:

- a running request's chunk needs ``ceil(slots / block_size) - held`` new blocks per group
  (``get_num_blocks_to_allocate`` with no hit and nothing skipped);
- a waiting request is admitted when its whole prompt's blocks are free
  (``scheduler_reserve_full_isl``);
- ``free`` gives every block of the request back; ``used`` is what requests hold.

``BlockCounts`` keeps those counts in O(1) per call instead of O(blocks), so a 32,768-token
prompt costs one addition, not 2,048 block moves. ``scheduler.kv_blocks_for`` picks it exactly
when the cache is read by nobody and every group is full attention; the schedule is the same
(tests/test_fast_analytic.py compares both block managers' schedules step by step).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

__all__ = ["BlockCounts", "counts_suffice"]


def counts_suffice(windows: Sequence[int | None], *, caching: bool) -> bool:
    """Whether block counts answer every question the scheduler asks of the cache: prefix
    caching not read and every KV-cache group full attention (no sliding window).

    Example:
        >>> counts_suffice((None,), caching=False), counts_suffice((None, 4096), caching=False)
        (True, False)
    """
    return not caching and all(w is None for w in windows)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockCounts:
    """Per request, the blocks it holds (the same in every group); the pool as a count.

    Args:
        num_blocks: vLLM's ``num_gpu_blocks`` (block 0 is the null block, never free).
        block_size: tokens per block.
        num_groups: KV-cache groups (all full attention).
        max_model_len: the engine's ``max_model_len`` (caps a request's slots).
        lens: each request's prompt length.
    """

    caching = False

    def __init__(self, num_blocks: int, block_size: int, num_groups: int, *,
                 max_model_len: int, lens: Sequence[int]) -> None:
        self.total = num_blocks - 1
        self.size = block_size
        self.groups = num_groups
        self.max_model_len = max_model_len
        self.lens = list(lens)
        self.held: dict[int, int] = {}  # request -> blocks per group
        self.used = 0  # blocks held by requests, every group (the null block not counted)
        self.in_flight: collections.Counter[int] = collections.Counter()  # as KVBlocks'

    def allocate(self, r: int, num_computed: int, num_new: int, *, hit=None, num_hit: int = 0,
                 admit: bool = False) -> bool:
        """``KVBlocks.allocate`` with no hit: False (nothing allocated) when the blocks are
        not free."""
        held = self.held.get(r, 0)
        free = self.total - self.used
        mml = self.max_model_len
        if admit and self.groups * max(_cdiv(min(self.lens[r], mml), self.size) - held, 0) > free:
            return False
        computed = min(num_computed + num_hit, mml)
        need = max(_cdiv(min(computed + num_new, mml), self.size) - held, 0)
        if self.groups * need > free:
            return False
        if need:
            self.held[r] = held + need
            self.used += self.groups * need
        return True

    def free(self, r: int) -> None:
        """``KVCacheManager.free``: every block of the request goes back."""
        self.used -= self.groups * self.held.pop(r, 0)

    def cache_hit(self, r: int) -> tuple[tuple[list[int], ...], int]:
        """No prefix cache is read: no hit."""
        return tuple([] for _ in range(self.groups)), 0
