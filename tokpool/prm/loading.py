"""``load_prm``: a process reward model served the engine's way (per-token outputs → STEP
pooling → rewards), shipped or from a local path.

``load_prm()`` returns the shipped *fine-tuned PRM* (``"smollm2-prm"``, see ``finetuned``):
SmolLM2-135M-Instruct with merged LoRA weights and a 2-label score head, served as
``token_classify``. ``load_prm("probe")`` returns the shipped *probe PRM*, the baseline: frozen
SmolLM2-135M-Instruct hidden states at one layer, then a small trained head (``ProbeHead``) that
maps every token to 2 logits, exactly like Qwen2.5-Math-PRM's score head. Both go through
``step_rewards``, which keeps the tag rows (STEP pooling) and takes softmax index 1 (the
``two_class`` convention).

``load_prm(path)`` also takes a real PRM from a local directory, through the same API:

- ``*ForTokenClassification`` checkpoint (via ``tp.load_model``): 2 labels → ``two_class``,
  1 label → ``value_head``;
- ``*ForCausalLM`` checkpoint (Math-Shepherd style): ``token_pair`` over the LM logits of a
  good and a bad token (default ``"+"``/``"-"``);
- a checkpoint with its own modelling code (Qwen2.5-Math-PRM's ``Qwen2ForProcessRewardModel``):
  ``trust_remote_code=True`` runs the code shipped in that directory (offline), ``two_class``
  with Qwen's tag ``<extra_0>``, no separator and its system prompt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._args import MissingFileError, choice, each, flag, items, text, whole
from .._args import path as args_path
from .._package import default_data_dir
from ..models import load_model
from ..models.source import require_pooling_model
from .adapter import ADAPTER_FORMAT, read_format
from .finetuned import load_finetuned
from .probe import PROBE_FILE, PROBE_FORMAT, QWEN_PRM_SYSTEM, read_probe
from .reward_model import ProcessRewardModel, check_threshold
from .steps import CONVENTIONS, Convention

if TYPE_CHECKING:
    from ..models.pooling_model import PoolingModel

__all__ = ["DEFAULT_PRM", "SHIPPED_PRMS", "load_prm"]


#: The PRMs tokpool ships, by the name ``load_prm`` takes: the file under ``data/prm/``.
SHIPPED_PRMS: dict[str, str] = {
    "smollm2-prm": "smollm2-prm/adapter.safetensors",
    "probe": f"probe/{PROBE_FILE}",
}
#: What ``load_prm()`` returns: the fine-tuned PRM (the probe stays as ``load_prm("probe")``).
DEFAULT_PRM = "smollm2-prm"
_REBUILD = {"smollm2-prm": "python scripts/train_prm.py",
            "probe": "python scripts/train_probe.py"}


def load_prm(
    path: str | os.PathLike | None = None,
    *,
    model: PoolingModel | None = None,
    convention: Convention | None = None,
    returned_token_ids: Sequence[int] | None = None,
    tag: str | None = None,
    threshold: float | None = None,
    trust_remote_code: bool = False,
) -> ProcessRewardModel:
    """A ready process reward model: a shipped one by name, or a real PRM from a local path.

    Args:
        path: ``None`` or ``"smollm2-prm"`` for the shipped fine-tuned PRM (SmolLM2-135M with
            merged LoRA weights and a 2-label score head, served as ``token_classify``);
            ``"probe"`` for the shipped probe PRM (a linear head on frozen SmolLM2 hidden
            states, the baseline); a ``.safetensors`` file (a probe or a PRM adapter) or a
            directory holding ``probe.safetensors`` or ``adapter.safetensors``; or a local
            transformers checkpoint (see the module docstring for which architectures map to
            which convention).
        model: an already loaded ``tp.load_model(...)`` to reuse as a probe's base model (must
            be the one the probe was trained on). Not for adapters, which modify their base.
        convention: override the convention inferred from a checkpoint.
        returned_token_ids: ``(good, bad)`` ids for ``token_pair`` (default: the ids of
            ``"+"`` and ``"-"``, Math-Shepherd's).
        tag: the step tag (default: the PRM's own, or ``format_steps``'s choice).
        threshold: ``first_error`` cut (default: the PRM's tuned value, else 0.5).
        trust_remote_code: allow a checkpoint's own modelling code (e.g. Qwen2.5-Math-PRM);
            it is read from ``path`` only, never downloaded.

    Returns:
        ``ProcessRewardModel`` whose ``score(problem, steps)`` gives ``StepScores``.

    Raises:
        FileNotFoundError: no such path, or a shipped PRM's file is missing (the message says
            how to rebuild it).
        ValueError: a name that is neither shipped nor a path (the shipped names are listed);
            ``model=`` with an adapter; a checkpoint tokpool cannot map to a convention (the
            message says which options to pass).

    Example:
        >>> prm = tp.load_prm()                  # the fine-tuned PRM ("smollm2-prm")
        >>> baseline = tp.load_prm("probe")      # the linear probe it is compared with
    """
    if path is None:
        path = DEFAULT_PRM
    _check_load_options(model, convention, returned_token_ids, tag, threshold,
                        trust_remote_code)
    if isinstance(path, str) and path in SHIPPED_PRMS:
        file = default_data_dir() / "prm" / SHIPPED_PRMS[path]
        if not file.is_file():
            raise MissingFileError(f"the shipped PRM {path!r} is missing at {file}; rebuild it "
                                   f"with `{_REBUILD[path]}` from a checkout of tokpool")
        return _load_file(file, model=model, tag=tag, threshold=threshold,
                          convention=convention, returned_token_ids=returned_token_ids)
    path = args_path("path", path).expanduser()
    if not path.exists():
        if isinstance(path, Path) and len(path.parts) == 1 and not path.suffix:
            raise ValueError(f"no PRM named {str(path)!r}: shipped PRMs are "
                             f"{sorted(SHIPPED_PRMS)}; or pass a local path")
        raise MissingFileError(f"no PRM at {path} (path=)")
    file = path if path.is_file() and path.suffix == ".safetensors" else next(
        (path / n for n in (PROBE_FILE, "adapter.safetensors") if (path / n).is_file()), None)
    if file is not None:
        return _load_file(file, model=model, tag=tag, threshold=threshold,
                          convention=convention, returned_token_ids=returned_token_ids)
    return _load_checkpoint(path, convention=convention, returned_token_ids=returned_token_ids,
                            tag=tag, threshold=threshold, trust_remote_code=trust_remote_code)


def _check_load_options(model, convention, returned_token_ids, tag, threshold,
                        trust_remote_code) -> None:
    """``load_prm``'s options, before anything is read (each named with what it must be)."""
    if model is not None:
        require_pooling_model(model, "model (a probe's base model)")
    if convention is not None:
        choice("convention", convention, CONVENTIONS)
    if returned_token_ids is not None:
        ids = items("returned_token_ids", returned_token_ids,
                    what="(good_id, bad_id): two vocabulary ids")
        each("returned_token_ids", ids, lambda name, v: whole(name, v, minimum=0))
    if tag is not None:
        text("tag", tag)
    if threshold is not None:
        check_threshold(threshold)
    flag("trust_remote_code", trust_remote_code)


def _load_file(file: Path, *, model, tag, threshold, convention=None,
               returned_token_ids=None) -> ProcessRewardModel:
    """A probe or an adapter file, told apart by the format in its header."""
    given = [n for n, v in (("convention", convention), ("returned_token_ids",
                                                          returned_token_ids)) if v is not None]
    if given:
        raise ValueError(f"{given} apply to a transformers PRM checkpoint; {file.name} is a "
                         "tokpool probe or adapter, which sets its own convention and columns. "
                         "Drop them")
    found = read_format(file)
    if found not in (ADAPTER_FORMAT, PROBE_FORMAT):
        raise ValueError(f"{file} is not a tokpool probe or PRM adapter (format {found!r}, "
                         f"expected {PROBE_FORMAT!r} or {ADAPTER_FORMAT!r})")
    if found == ADAPTER_FORMAT:
        if model is not None:
            raise ValueError(f"{file} is a PRM adapter, which merges its weights into a fresh "
                             "copy of its base model; drop model= (it only applies to probes)")
        return load_finetuned(file, tag=tag, threshold=threshold)
    return _load_probe(file, model=model, tag=tag, threshold=threshold)


def _load_probe(file: Path, *, model, tag, threshold) -> ProcessRewardModel:

    head, settings = read_probe(file)
    base = settings["base_model"]
    if model is None:
        model = load_model(base)
    elif getattr(model, "name", None) != base:
        raise ValueError(f"this probe reads {base!r} hidden states but model= is "
                         f"{getattr(model, 'name', model)!r}; pass tp.load_model({base!r})")
    if model.hidden_size != head.hidden_size:
        raise ValueError(f"the probe expects hidden size {head.hidden_size}, the model has "
                         f"{model.hidden_size}")
    return ProcessRewardModel(
        model,
        convention=settings["convention"],
        threshold=settings.get("threshold", 0.5) if threshold is None else threshold,
        tag=settings["tag"] if tag is None else tag,
        separator=settings.get("separator", "\n"),
        chat=settings.get("chat", True),
        system=settings.get("system"),
        head=head,
        layer=int(settings["layer"]),
        info={"file": str(file), **settings, "metrics": _shipped_metrics(file)},
    )


def _shipped_metrics(probe_file: Path) -> dict[str, Any]:
    """The test-split figures ``train-probe`` wrote next to the probe (flat), or ``{}``."""
    report_file = probe_file.parent / "metrics.json"
    if not report_file.is_file():
        return {}
    test = json.loads(report_file.read_text()).get("test", {})
    flat = {k: v for k, v in test.items() if not isinstance(v, dict)}
    for baseline, values in test.items():
        if isinstance(values, dict):
            flat.update({f"{baseline}.{k}": v for k, v in values.items()
                         if not isinstance(v, dict)})
    return flat


def _load_checkpoint(path: Path, *, convention, returned_token_ids, tag, threshold,
                     trust_remote_code) -> ProcessRewardModel:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{path} holds neither {PROBE_FILE} nor a transformers config.json")
    config = json.loads(config_file.read_text())
    archs = config.get("architectures") or []
    cut = 0.5 if threshold is None else threshold
    info = {"path": str(path), "architectures": archs}
    if any(a.endswith("ForTokenClassification") for a in archs):

        model = load_model(path)
        num_labels = int(model.hf_model.config.num_labels)
        chosen = convention or {2: "two_class", 1: "value_head"}.get(num_labels)
        if chosen not in _WIDTHS or _WIDTHS[chosen] != num_labels:
            raise ValueError(
                f"{path} has a {num_labels}-label token classifier; a PRM needs 2 labels "
                "(two_class, softmax index 1) or 1 (value_head, sigmoid)"
            )
        return ProcessRewardModel(model, convention=chosen, tag=tag, threshold=cut, info=info)
    if any(a.endswith("ForCausalLM") for a in archs) and not trust_remote_code:

        if convention not in (None, "token_pair"):
            raise ValueError(f"{path} is a causal LM: its PRM convention is 'token_pair' "
                             f"(vocabulary columns), not {convention!r}")
        model = load_model(path)
        columns = (list(returned_token_ids) if returned_token_ids is not None
                   else _good_bad_ids(model.tokenizer))
        return ProcessRewardModel(model, convention="token_pair", tag=tag, threshold=cut,
                                  returned_token_ids=columns, info=info)
    if not trust_remote_code:
        raise ValueError(
            f"{path} has architectures {archs}, which need the checkpoint's own modelling code "
            "(Qwen2.5-Math-PRM: Qwen2ForProcessRewardModel). Pass trust_remote_code=True to "
            "run the code in that directory, or use a *ForTokenClassification / *ForCausalLM "
            "checkpoint"
        )
    return _load_remote(path, convention=convention or "two_class", tag=tag, threshold=cut,
                        info=info)


_WIDTHS = {"two_class": 2, "value_head": 1}


def _good_bad_ids(tokenizer) -> list[int]:
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in ("+", "-")]
    if any(len(i) != 1 for i in ids):
        raise ValueError("'+' or '-' is not one token of this tokenizer; pass "
                         "returned_token_ids=(good_id, bad_id)")
    return [ids[0][0], ids[1][0]]


def _load_remote(path: Path, *, convention, tag, threshold, info) -> ProcessRewardModel:
    """Qwen2.5-Math-PRM-style checkpoint with its own code (offline, from ``path`` only)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True,
                                              trust_remote_code=True)
    model = AutoModel.from_pretrained(path, local_files_only=True, trust_remote_code=True,
                                      dtype=torch.float32).eval()
    qwen = "<extra_0>" in tokenizer.get_vocab()
    return ProcessRewardModel(
        model, tokenizer=tokenizer, convention=convention, threshold=threshold,
        tag=tag if tag is not None else ("<extra_0>" if qwen else None),
        separator="" if qwen else "\n",
        system=QWEN_PRM_SYSTEM if qwen else None,
        remote=True, info=info,
    )
