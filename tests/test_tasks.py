"""Task selection, the gate under both policies, vLLM's message shapes, the catalogue table."""

import pytest

import tokpool as tp
from tokpool.pooler import tasks

DECODER_EMBED = {"embed", "token_embed"}


def test_task_constants():
    assert tp.POOLING_TASKS == ("embed", "classify", "token_embed", "token_classify",
                                "embed&token_classify", "plugin")
    assert frozenset(tp.POOLING_TASKS) - {"plugin"} == tp.SUPPORTED_TASKS


def test_select_task_priority():
    assert tp.select_task(tp.POOLING_TASKS) == "embed&token_classify"
    assert tp.select_task({"token_embed", "embed", "classify"}) == "embed"
    assert tp.select_task({"classify", "token_classify"}) == "classify"
    assert tp.select_task({"token_classify", "token_embed"}) == "token_embed"
    assert tp.select_task({"plugin"}) == "plugin"
    assert tp.select_task(set()) is None
    assert tp.select_task({"classify", "token_classify"},
                          architectures=["BertForTokenClassification"]) == "token_classify"


def test_select_requested_must_be_supported():
    assert tp.select_task(DECODER_EMBED, requested="token_embed") == "token_embed"
    with pytest.raises(ValueError, match=r"'classify'.*\['embed', 'token_embed'\]"):
        tp.select_task(DECODER_EMBED, requested="classify")
    with pytest.raises(ValueError, match="unknown pooling task"):
        tp.select_task(DECODER_EMBED, requested="score")


def test_current_gate_serves_decoder_token_tasks():
    assert tp.gate(DECODER_EMBED, requested="token_embed") == DECODER_EMBED
    assert tp.gate({"token_classify"}) == {"token_classify"}


def test_legacy_gate_refuses_decoder_token_embed_with_vllms_message():
    with pytest.raises(tp.UnsupportedTaskError) as err:
        tp.gate(DECODER_EMBED, requested="token_embed", policy="pre_50931")
    msg = str(err.value)
    assert "supports pooling tasks ['classify', 'embed'], but this model selects " \
           "'token_embed' from ['embed', 'token_embed']. Set an explicitly supported task" in msg
    assert isinstance(err.value, ValueError)
    # without a request the decoder still gets `embed`
    assert tp.gate(DECODER_EMBED, policy="pre_50931") == {"embed"}


def test_legacy_gate_keeps_token_tasks_for_encoders():
    served = tp.gate({"embed", "token_embed"}, requested="token_embed", policy="pre_50931",
                     attn_type="encoder_only")
    assert served == {"embed", "token_embed"}


def test_hint_when_model_has_no_supported_task():
    with pytest.raises(tp.UnsupportedTaskError, match=r"selects 'token_classify' from "
                       r"\['token_classify'\]\. .*to use this model"):
        tp.gate({"token_classify"}, policy="pre_50931")
    with pytest.raises(tp.UnsupportedTaskError, match=r"selects 'plugin' from \['plugin'\]"):
        tp.gate({"plugin"})


def test_runner_tasks_and_bad_options():
    assert tasks.runner_tasks(policy="pre_50931") == {"classify", "embed"}
    assert tasks.runner_tasks(policy="pre_50931", attn_type="encoder_only") == tp.SUPPORTED_TASKS
    with pytest.raises(ValueError, match="unknown gate policy 'new'"):
        tp.gate(DECODER_EMBED, policy="new")
    with pytest.raises(ValueError, match="unknown attn_type 'causal'"):
        tp.gate(DECODER_EMBED, attn_type="causal")
    with pytest.raises(ValueError, match=r"unknown pooling task\(s\) \['rerank'\]"):
        tp.gate({"rerank"})
    with pytest.raises(TypeError, match="not the string"):
        tp.gate("embed")


def test_per_request_check():
    tasks.check_request_task("embed", {"embed"})
    with pytest.raises(tp.UnsupportedTaskError,
                       match=r"Unsupported task: 'token_embed'. Supported tasks: \['embed'\]"):
        tasks.check_request_task("token_embed", {"embed"})


def test_catalogue_and_table():
    expected_kinds = {"decoder_embedding", "decoder_sequence_classifier", "process_reward_model",
                      "token_classification", "bge_m3_encoder", "splade_encoder",
                      "listwise_decoder_reranker", "plugin_only"}
    assert set(tasks.MODEL_KINDS) == expected_kinds
    table = tp.task_table()
    assert set(table.index) == expected_kinds
    row = table.loc["decoder_embedding"]
    assert row["default_task"] == "embed"
    assert row["pre_50931:token_embed"] == "no" and row["current:token_embed"] == "yes"
    assert table.loc["process_reward_model", "served_pre_50931"] == "refused"
    assert table.loc["process_reward_model", "served_current"] == "token_classify"
    assert table.loc["token_classification", "default_task"] == "token_classify"
    assert table.loc["bge_m3_encoder", "pre_50931:embed&token_classify"] == "yes"
    assert table.loc["plugin_only", "served_current"] == "refused"
    with pytest.raises(ValueError, match="unknown model kind 'gpt'"):
        tasks.model_kind("gpt")


def test_an_engine_serves_only_its_selected_task():
    served = tp.gate({"embed", "token_embed"}, requested="embed")
    tasks.check_request_task("embed", served, selected="embed")
    tasks.check_request_task("token_embed", served)  # the runner alone would serve it
    with pytest.raises(tp.UnsupportedTaskError,
                       match=r"Try switching the model's pooling_task via "
                             r'`PoolerConfig\(task="token_embed"\)`'):
        tasks.check_request_task("token_embed", served, selected="embed")
    with pytest.raises(tp.UnsupportedTaskError, match=r"--pooler-config\.task token_embed"):
        tasks.check_request_task("token_embed", served, selected="embed", entrypoint="server")
    # vllm/entrypoints/pooling/offline.py, PoolingOfflineMixin._verify_pooling_task: the LLM
    # class names the API and the --convert that would add it; the server the task
    with pytest.raises(tp.UnsupportedTaskError, match=r"Classification API is not supported by "
                       r"this model\. Try converting the model using `--convert classify`\."):
        tasks.check_request_task("classify", served, selected="embed")
    with pytest.raises(tp.UnsupportedTaskError, match="Unsupported task: 'classify'"):
        tasks.check_request_task("classify", served, selected="embed", entrypoint="server")


def test_the_gate_policy_old_name_warns_and_still_works():
    with pytest.warns(DeprecationWarning, match='"pre_50931"'):
        old = tp.gate(DECODER_EMBED, policy="legacy")
    assert old == tp.gate(DECODER_EMBED, policy="pre_50931") == {"embed"}
