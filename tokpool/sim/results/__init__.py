"""What a run gives back: ``SimResult`` (``result``), frames and per-request stories
(``analysis``), the Chrome trace (``trace``), pooling's share of the KV cache (``kv_share``)."""
