"""A model by its Hub id: ``SimConfig.from_hf_config``, ``for_model`` and ``from_vllm_args``
read the model's small files from a Hub cache the tests build (``hub_cache.py``), offline, and
resolve each id to the same ``SimConfig`` as its local folder; a Hub id that cannot be had is
refused in words naming the id, the revision and what to do; a name that is also a preset is
answered by the preset only when the files cannot be had, and says so."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hub_cache import MODELS, build_hub_cache, commit_of, local_folder

from tokpool.sim import SimConfig
from tokpool.sim.vllm_rules import hub as hub_module
from tokpool.sim.vllm_rules.hub import (
    HubError,
    HubUnavailable,
    PresetAnswersWarning,
    hub_folder,
    is_hub_id,
)

IDS = sorted(MODELS)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = build_hub_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _fields(cfg: SimConfig) -> dict:
    """Every field, the model's name and id (the folder's name vs the Hub id) set aside."""
    out = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}
    out["model"] = dataclasses.replace(cfg.model, name="", hf_id="")
    return out


@pytest.mark.parametrize("repo_id", IDS)
def test_each_id_resolves_as_its_local_folder(hub, tmp_path, repo_id):
    folder = local_folder(tmp_path / "local", repo_id)
    by_id = SimConfig.from_hf_config(repo_id)
    assert _fields(by_id) == _fields(SimConfig.from_hf_config(folder))
    assert by_id.model.name == by_id.model.hf_id == repo_id
    line = f"vllm serve {repo_id} --max-num-seqs 8"
    assert _fields(SimConfig.from_vllm_args(line)) == _fields(SimConfig.from_vllm_args(
        line.replace(repo_id, str(folder))))


def test_hub_folder_fetches_only_the_small_files(hub):
    folder = hub_folder("BAAI/bge-m3")
    assert folder.name == commit_of("BAAI/bge-m3")
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.json")) == sorted(
        MODELS["BAAI/bge-m3"])


def test_a_preset_id_reads_the_models_files_when_cached(hub):
    """vLLM reads Qwen3-Embedding-0.6B's sentence-transformers max_seq_length: 8,192, not the
    preset's 32,768 (``max_position_embeddings``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetAnswersWarning)
        served = SimConfig.from_vllm_args("vllm serve Qwen/Qwen3-Embedding-0.6B")
        named = SimConfig.for_model("Qwen/Qwen3-Embedding-0.6B")
    assert served.max_model_len == named.max_model_len == 8192
    assert served.task == "embed" and served.model.hf_id == "Qwen/Qwen3-Embedding-0.6B"
    prm = SimConfig.for_model("Qwen/Qwen2.5-Math-PRM-7B")
    assert (prm.task, prm.pooling_method) == ("token_classify", "STEP")


def test_the_preset_answers_offline_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.warns(PresetAnswersWarning, match="preset 'Qwen3-Embedding-0.6B' answers"):
        cfg = SimConfig.from_vllm_args("vllm serve Qwen/Qwen3-Embedding-0.6B")
    assert cfg.max_model_len == 32768  # the preset's, said in the warning
    with pytest.warns(PresetAnswersWarning, match="HF_HUB_OFFLINE"):
        SimConfig.for_model("Qwen/Qwen3-Embedding-8B")
    with warnings.catch_warnings():  # a bare preset name is the preset, silently
        warnings.simplefilter("error", PresetAnswersWarning)
        assert SimConfig.for_model("Qwen3-Embedding-8B").model.name == "Qwen3-Embedding-8B"


@pytest.mark.parametrize("call", [
    lambda: SimConfig.from_hf_config("org/not-cached"),
    lambda: SimConfig.for_model("org/not-cached"),
    lambda: SimConfig.from_vllm_args("vllm serve org/not-cached"),
])
def test_offline_and_not_cached_is_refused_in_words(hub, call):
    with pytest.raises(HubUnavailable) as err:
        call()
    text = str(err.value)
    assert "'org/not-cached'" in text and "revision 'main'" in text
    assert "HF_HUB_OFFLINE" in text and "folder" in text
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_a_revision_the_cache_lacks_is_refused_and_never_answered_by_a_preset(hub):
    with pytest.raises(HubError, match="revision 'v2'"):
        SimConfig.from_hf_config("BAAI/bge-m3", revision="v2")
    with pytest.raises(HubError, match="revision 'v9'"):
        SimConfig.from_vllm_args("vllm serve Qwen/Qwen3-Embedding-0.6B --revision v9")
    with pytest.raises(ValueError, match="is for a Hub id"):
        SimConfig.from_hf_config({"hidden_size": 8}, revision="main")


def test_a_revision_in_the_cache_is_read(tmp_path, monkeypatch):
    cache = build_hub_cache(tmp_path / "hub", {"BAAI/bge-m3": {
        **MODELS["BAAI/bge-m3"], "sentence_bert_config.json": {"max_seq_length": 512}}},
        revision="v1")
    build_hub_cache(cache, {"BAAI/bge-m3": MODELS["BAAI/bge-m3"]})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert SimConfig.from_hf_config("BAAI/bge-m3").max_model_len == 8192
    assert SimConfig.from_hf_config("BAAI/bge-m3", revision="v1").max_model_len == 512
    line = "vllm serve BAAI/bge-m3 --revision v1"
    assert SimConfig.from_vllm_args(line).max_model_len == 512


class _Response:
    status_code, headers, url, reason_phrase = 401, {}, "https://huggingface.co/x", "denied"
    request = None


@pytest.mark.parametrize("error, words", [
    ("GatedRepoError", ["gated", "log in", "HF_TOKEN", "folder"]),
    ("RepositoryNotFoundError", ["no model", "spelling", "log in", "folder"]),
    ("RevisionNotFoundError", ["no such revision", "revision="]),
    ("RemoteEntryNotFoundError", ["has no config.json", "folder"]),
])
def test_hub_client_errors_are_said_in_words(monkeypatch, tmp_path, error, words):
    """What the Hub client raises online, translated (no traceback from inside the client)."""
    import huggingface_hub
    from huggingface_hub import errors

    def refuse(*args, **kwargs):
        cls = getattr(errors, error)
        exc = cls.__new__(cls)
        Exception.__init__(exc, "hub says no")
        raise exc

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(hub_module, "_hub_reachable", lambda: True)  # no network in tests
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(HubError) as err:
        SimConfig.from_hf_config("org/model")
    assert "'org/model' (revision 'main')" in str(err.value)
    for word in words:
        assert word in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_no_network_is_unavailable_and_a_preset_answers(monkeypatch, tmp_path):
    import huggingface_hub

    def unreachable(*args, **kwargs):
        raise ConnectionError("no route to huggingface.co")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    monkeypatch.setattr(hub_module, "_hub_reachable", lambda: True)  # the client finds out
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(HubUnavailable, match="could not be reached"):
        SimConfig.from_hf_config("org/model")
    with pytest.warns(PresetAnswersWarning, match="could not be reached"):
        assert SimConfig.for_model("HuggingFaceTB/SmolLM2-135M").model.name == "SmolLM2-135M"


@pytest.mark.parametrize("name, expected", [
    ("BAAI/bge-m3", True), ("colbert-ir/colbertv2.0", True), ("bge-m3", False),
    ("/abs/path", False), ("a/b/c", False), ("../x", False), ("org/..", False), ("", False),
    (3, False),
])
def test_what_reads_as_a_hub_id(name, expected):
    assert is_hub_id(name) is expected


def test_the_command_line_and_the_explorer_take_a_hub_id(hub, capsys):
    from tokpool.cli import main
    from tokpool.widgets.memory import _memory_model

    assert main(["simulate", "--model", "Qwen/Qwen3-Embedding-0.6B", "--prompt-lens", "9000",
                 "--hardware", "H100"]) == 2
    # vLLM's max_model_len from the model's sentence-transformers files, not the preset's
    assert "Qwen/Qwen3-Embedding-0.6B's max_model_len=8192" in capsys.readouterr().err
    assert _memory_model("BAAI/bge-m3") == (next(iter(__import__("tokpool").MODEL_PRESETS)),
                                            "BAAI/bge-m3")


def test_an_unreachable_hub_is_found_once_and_the_cache_answers(hub, monkeypatch):
    """No answer from the Hub's host: the cache is read at once (no client back-off), and a
    file it lacks is refused in words that say so."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(hub_module, "_UNREACHABLE", {"huggingface.co"})
    assert SimConfig.from_hf_config("Qwen/Qwen3-Embedding-0.6B").max_model_len == 8192
    with pytest.raises(HubUnavailable, match="cannot be reached from here"):
        SimConfig.from_hf_config("org/not-cached")
