"""The KV-cache blocks of a prefill schedule, as vLLM 0.33.0's ``KVCacheManager`` keeps them.

One pool of ``num_blocks`` blocks (block 0 is the null block), shared by every KV-cache group
(``vllm_rules.kv_spec``); each request holds one block table per group. It follows, for
pooling requests (no decode, no speculative tokens, no connector):

- ``BlockPool`` (vllm/v1/core/block_pool.py): a free queue that hands out blocks from its head;
  a freed block goes back to the head when it holds no cached prefix (reused first) and to the
  tail when it does (evicted last, least recently freed first); a block handed out again loses
  its cached prefix (``_maybe_evict_cached_block``); a cache hit takes a free block out of the
  queue (``touch``).
- ``SingleTypeKVCacheManager`` and its ``FullAttentionManager`` / ``SlidingWindowManager``
  (vllm/v1/core/single_type_kv_cache_manager.py): ``get_num_blocks_to_allocate`` (with the
  sliding window's admission cap, and the free cached blocks a hit takes), ``allocate_new_
  blocks``, ``remove_skipped_blocks`` (a sliding-window group frees the blocks wholly before
  its window, from the tokens already processed), ``cache_blocks``, ``free`` (tail blocks
  first), ``find_longest_cache_hit`` (full attention: the leading run of cached blocks;
  sliding window: the last ``ceil((window - 1) / block_size)`` blocks before the hit must be
  cached, searched right to left).
- ``KVCacheManager.allocate_slots`` / ``get_computed_blocks`` (vllm/v1/core/
  kv_cache_manager.py) and the coordinators (vllm/v1/core/kv_cache_coordinator.py; a hybrid
  model's hit is the fixed point over its spec groups, full attention first).

Prefix-cache hashes: a block's key is its request's token ids up to the block's end (a chain, as
``hash_block_tokens``), so two prompts share a block exactly when they share every token before
its end. Prompts given by length only have tokens of their own (they share nothing).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from ..vllm_rules.kv_spec import KVGroup

__all__ = ["KVBlocks", "block_keys", "unlimited_blocks"]

NULL = 0  # vLLM's null block (block 0, never handed out, never freed)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def unlimited_blocks(lens: Sequence[int], block_size: int, num_groups: int = 1) -> int:
    """The pool of a run "without a KV-cache limit": every prompt's blocks in every group at
    once, plus the null block (nothing is ever preempted or evicted). Both schedulers (tokpool's
    and vLLM's, driven) use this one size."""
    return num_groups * sum(_cdiv(n, block_size) for n in lens) + 1


def block_keys(lens: Sequence[int], block_size: int,
               token_ids: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """Each request's prefix-cache key per full block: equal keys exactly when the token ids up
    to the block's end are equal (a hash chain without collisions). Without token ids every
    request's keys are its own.

    Returns:
        ``[request][block]`` int keys, ``len // block_size`` per request.
    """
    keys: list[list[int]] = []
    if token_ids is None:
        next_key = 0
        for n in lens:
            count = n // block_size
            keys.append(list(range(next_key, next_key + count)))
            next_key += count
        return keys
    chain: dict[tuple[int, tuple[int, ...]], int] = {}
    for ids in token_ids:
        parent, mine = -1, []
        for j in range(len(ids) // block_size):
            block = (parent, tuple(ids[j * block_size:(j + 1) * block_size]))
            parent = chain.setdefault(block, len(chain))
            mine.append(parent)
        keys.append(mine)
    return keys


class _Pool:
    """vLLM's ``BlockPool``: ref counts, the free queue, the cached-prefix map."""

    def __init__(self, num_blocks: int, caching: bool) -> None:
        self.total = num_blocks - 1          # the null block is never free
        self.caching = caching
        self.front: collections.deque[int] = collections.deque()  # freed, no cached prefix
        self.fresh = 1                       # blocks fresh..num_blocks-1 never handed out
        self.end = num_blocks
        self.tail: dict[int, None] = {}      # freed with a cached prefix, LRU order
        self.ref: dict[int, int] = {}
        self.key_of: dict[int, tuple[int, int]] = {}          # block -> (group, key)
        self.cached: dict[tuple[int, int], dict[int, None]] = {}  # (group, key) -> blocks

    @property
    def num_free(self) -> int:
        return len(self.front) + (self.end - self.fresh) + len(self.tail)

    def take(self, n: int) -> list[int]:
        """``get_new_blocks``: ``n`` blocks from the head of the free queue."""
        if not self.front and self.end - self.fresh >= n:  # never-used blocks: no prefix
            out = list(range(self.fresh, self.fresh + n))
            self.fresh += n
            self.ref.update(dict.fromkeys(out, 1))
            return out
        out = []
        for _ in range(n):
            if self.front:
                block = self.front.popleft()
            elif self.fresh < self.end:
                block, self.fresh = self.fresh, self.fresh + 1
            else:
                block = next(iter(self.tail))
                del self.tail[block]
            self._evict(block)
            self.ref[block] = 1
            out.append(block)
        return out

    def _evict(self, block: int) -> None:
        key = self.key_of.pop(block, None)
        if key is not None:
            holders = self.cached[key]
            del holders[block]
            if not holders:
                del self.cached[key]

    def touch(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            if block == NULL:
                continue
            if self.ref.get(block, 0) == 0:
                del self.tail[block]  # a free block with a cached prefix sits in the tail
            self.ref[block] = self.ref.get(block, 0) + 1

    def free(self, ordered: Sequence[int]) -> None:
        """``free_blocks``: the first block is to be reused (or evicted) first."""
        first, last = [], []
        for block in ordered:
            if block == NULL:
                continue
            self.ref[block] -= 1
            if self.ref[block] == 0:
                (last if self.caching and block in self.key_of else first).append(block)
        self.front.extendleft(reversed(first))
        for block in last:
            self.tail[block] = None

    def cache(self, block: int, key: tuple[int, int]) -> None:
        if self.key_of.get(block) == key:
            return
        self.key_of[block] = key
        self.cached.setdefault(key, {})[block] = None

    def lookup(self, key: int, groups: Sequence[int]) -> list[int] | None:
        """``get_cached_block``: a cached block for ``key`` in each group, or ``None``."""
        found = []
        for g in groups:
            holders = self.cached.get((g, key))
            if not holders:
                return None
            found.append(next(iter(holders)))
        return found


class KVBlocks:
    """The block tables of every request, and the pool they draw from.

    Args:
        num_blocks: vLLM's ``num_gpu_blocks`` (block 0 is the null block).
        block_size: tokens per block.
        windows: each KV-cache group's sliding window (``None``: full attention), vLLM's
            group order (``KVCacheSpec.group_windows``).
        caching: prefix caching on (``enable_caching``).
        max_model_len: the engine's ``max_model_len`` (caps the slots and the window's cap).
        max_in_flight_tokens: ``VllmConfig.max_in_flight_tokens`` (the window's admission cap).
        lens: each request's prompt length.
        keys: ``block_keys`` of the requests (used when caching).
    """

    def __init__(self, num_blocks: int, block_size: int, windows: Sequence[int | None], *,
                 caching: bool, max_model_len: int, max_in_flight_tokens: int,
                 lens: Sequence[int], keys: list[list[int]]) -> None:
        self.pool = _Pool(num_blocks, caching)
        self.size = block_size
        self.windows = tuple(windows)
        self.caching = caching
        self.max_model_len = max_model_len
        self.max_in_flight_tokens = max_in_flight_tokens
        self.caps = [KVGroup(w, ()).admission_cap(block_size=block_size,
                                                  max_model_len=max_model_len,
                                                  max_in_flight_tokens=max_in_flight_tokens)
                     for w in self.windows]
        self.lens = list(lens)
        self.keys = keys
        self.tables: list[dict[int, list[int]]] = [{} for _ in self.windows]
        self.num_cached: list[dict[int, int]] = [{} for _ in self.windows]
        self.in_flight: collections.Counter[int] = collections.Counter()
        # the spec groups of a hybrid lookup, full attention first (verify_and_split_...)
        specs: dict[int | None, list[int]] = {}
        for g, w in enumerate(self.windows):
            specs.setdefault(w, []).append(g)
        self.spec_groups = sorted(specs.items(), key=lambda item: item[0] is not None)
        self._sliding = [g for g, w in enumerate(self.windows) if w is not None]

    @property
    def used(self) -> int:
        """Blocks held by requests (the null block not counted)."""
        return self.pool.total - self.pool.num_free

    # --- allocation ------------------------------------------------------------------------

    def _skipped(self, g: int, tokens: int) -> int:
        w = self.windows[g]
        return 0 if w is None else max(0, tokens - w + 1)

    def _to_allocate(self, g: int, r: int, num_tokens: int, hit: Sequence[int], computed: int,
                     *, capped: bool = False) -> int:
        """``SingleTypeKVCacheManager.get_num_blocks_to_allocate``."""
        required = _cdiv(num_tokens, self.size)
        if capped and self.caps[g] is not None:
            required = min(required, self.caps[g])
        held = len(self.tables[g].get(r, ()))
        if r in self.num_cached[g]:
            return max(required - held, 0)
        skipped = self._skipped(g, computed) // self.size
        new = max(required - max(skipped, len(hit) + held), 0)
        evictable = sum(1 for b in hit[max(0, skipped - held):]
                        if b != NULL and self.pool.ref.get(b, 0) == 0)
        return new + evictable

    def _remove_skipped(self, r: int, processed: int) -> None:
        """``remove_skipped_blocks``: free each sliding group's blocks before its window."""
        for g in self._sliding:
            table = self.tables[g].setdefault(r, [])
            n = min(self._skipped(g, processed) // self.size, len(table))
            freed = []
            for i in range(n - 1, -1, -1):
                if table[i] == NULL:
                    break
                freed.append(table[i])
                table[i] = NULL
            if freed:
                self.pool.free(freed)

    def allocate(self, r: int, num_computed: int, num_new: int, *,
                 hit: tuple[list[int], ...] | None = None, num_hit: int = 0,
                 admit: bool = False) -> bool:
        """``KVCacheManager.allocate_slots`` for ``num_new`` tokens after ``num_computed`` (a
        running request) or after a cache hit of ``num_hit`` tokens (a waiting one, ``admit``:
        the whole prompt must fit, ``scheduler_reserve_full_isl``). False: not enough free
        blocks (nothing allocated; a sliding window may still have freed its old blocks)."""
        hit = hit if hit is not None else tuple([] for _ in self.windows)
        computed = min(num_computed + num_hit, self.max_model_len)
        local = num_computed + num_hit
        if admit:
            whole = min(self.lens[r], self.max_model_len)
            need = sum(self._to_allocate(g, r, whole, hit[g], computed, capped=True)
                       for g in range(len(self.windows)))
            if need > self.pool.num_free:
                return False
        self._remove_skipped(r, max(0, computed - self.in_flight[r]))
        slots = min(computed + num_new, self.max_model_len)
        need = sum(self._to_allocate(g, r, slots, hit[g], computed)
                   for g in range(len(self.windows)))
        if need > self.pool.num_free:
            return False
        if any(hit):
            for g in range(len(self.windows)):  # add_local_computed_blocks
                skipped = self._skipped(g, local) // self.size
                self.pool.touch(hit[g][skipped:])
                table = self.tables[g].setdefault(r, [])
                table.extend([NULL] * skipped)
                table.extend(hit[g][skipped:])
                self.num_cached[g][r] = len(table)
        for g in range(len(self.windows)):
            table = self.tables[g].setdefault(r, [])
            table.extend(self.pool.take(max(0, _cdiv(slots, self.size) - len(table))))
        if self.caching:
            self._cache(r, min(computed + num_new, self.lens[r]))
        return True

    def _cache(self, r: int, num_tokens: int) -> None:
        """``cache_blocks``: register the request's full blocks under their keys."""
        if len(self.windows) > 1:
            num_tokens = num_tokens // self.size * self.size  # hybrid: scheduler-block aligned
        keys = self.keys[r]
        full = min(num_tokens, len(keys) * self.size) // self.size
        for g in range(len(self.windows)):
            done = self.num_cached[g].get(r, 0)
            if done >= full:
                continue
            table = self.tables[g][r]
            for j in range(done, full):
                if table[j] != NULL:
                    self.pool.cache(table[j], (g, keys[j]))
            self.num_cached[g][r] = full

    def free(self, r: int) -> None:
        """``KVCacheManager.free``: group by group, each table tail first."""
        for g in range(len(self.windows)):
            table = self.tables[g].pop(r, [])
            self.num_cached[g].pop(r, None)
            lead = 0
            while lead < len(table) and table[lead] == NULL:
                lead += 1  # trim_null_head
            self.pool.free(table[lead:][::-1])

    # --- prefix-cache hits -----------------------------------------------------------------

    def cache_hit(self, r: int) -> tuple[tuple[list[int], ...], int]:
        """``get_computed_blocks`` (the coordinator's ``find_longest_cache_hit``): the cached
        blocks per group and the tokens they hold, at most ``prompt_len - 1`` (the last token
        is always computed)."""
        empty: tuple[list[int], ...] = tuple([] for _ in self.windows)
        if not self.caching:
            return empty, 0
        max_len = self.lens[r] - 1
        if len(self.windows) == 1:
            blocks, length = self._find(self.windows[0], [0], r, max_len)
            return (blocks[0],), length
        found: list[list[int] | None] = [None] * len(self.windows)
        found_len = [0] * len(self.windows)
        hit_len = max_len
        simple = len(self.spec_groups) == 2 and self.spec_groups[0][0] is None
        while True:
            current = hit_len
            for window, groups in self.spec_groups:
                if window is None and found[groups[0]] is not None:
                    current = min(current, found_len[groups[0]])  # full: look up once
                    continue
                blocks, length = self._find(window, groups, r, current)
                current = length
                for g, b in zip(groups, blocks, strict=True):
                    found[g], found_len[g] = b, length
            if current >= hit_len:
                break
            hit_len = current
            if simple:
                break
        for window, groups in self.spec_groups:
            if window is None:
                for g in groups:
                    if found[g] is not None:
                        del found[g][_cdiv(hit_len, self.size):]
        return tuple(b if b is not None else [] for b in found), hit_len

    def _find(self, window: int | None, groups: list[int], r: int,
              max_len: int) -> tuple[list[list[int]], int]:
        """``FullAttentionManager`` / ``SlidingWindowManager.find_longest_cache_hit``."""
        keys = self.keys[r]
        limit = min(max_len // self.size, len(keys))
        out: list[list[int]] = [[] for _ in groups]
        if window is None:
            for j in range(limit):
                blocks = self.pool.lookup(keys[j], groups)
                if blocks is None:
                    break
                for lst, b in zip(out, blocks, strict=True):
                    lst.append(b)
            return out, len(out[0]) * self.size
        need = _cdiv(window - 1, self.size)
        out = [[NULL] * (max_len // self.size) for _ in groups]
        run = 0
        for i in range(max_len // self.size - 1, -1, -1):
            blocks = self.pool.lookup(keys[i], groups) if i < len(keys) else None
            if blocks is None:
                run = 0
                continue
            for lst, b in zip(out, blocks, strict=True):
                lst[i] = b
            run += 1
            if run >= need:
                for lst in out:
                    del lst[i + run:]
                return out, len(out[0]) * self.size
        for lst in out:
            del lst[run:]
        return out, len(out[0]) * self.size
