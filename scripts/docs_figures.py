"""Regenerate the README's figures under ``docs/``: ``python scripts/docs_figures.py``.

Each figure is one function of the public API, the same calls the notebooks make. Figures that
need a real model (SmolLM2, MiniLM, the probe PRM) are skipped with ``--no-models`` or when the
model cannot be loaded; the JupyterLab screenshots come from ``tests/test_browser.py``.

Usage::

    python scripts/docs_figures.py                 # all figures into docs/ (200 dpi)
    python scripts/docs_figures.py --only memory_vs_prompt_length ownership_schedule
    python scripts/docs_figures.py --no-models --out /tmp/figs

Run it with the project's environment (``.venv/bin/python scripts/docs_figures.py``); it is a
script, not part of the installed package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import tokpool as tp

DOCS = Path(__file__).resolve().parents[1] / "docs"
TEXT = (
    "Token-level pooling keeps one vector per token. A long prompt is split into chunks, and "
    "every chunk must survive until the last one arrives."
)


def _fig(ax):
    return ax.figure


def _subplots(*args, **kwargs):
    """``plt.subplots`` in the project's style (axes made here, not by a plot function)."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    from tokpool.plots._style import RC

    with mpl.rc_context(RC):
        return plt.subplots(*args, layout="constrained", **kwargs)


def task_gate():
    """Model kinds × tasks: what the runner serves before and after PR #50931 (notebook 01)."""
    return _fig(tp.viz.plot_task_gate(tp.task_table()))


# What pooling itself hands over: an identity head (vLLM's float32 head copies a finished output
# within its step, which would hide the async race these two figures show).
IDENTITY_HEAD = {"head_dtype": None, "use_activation": False}
# Long-prompt figures go to 1M tokens, past Qwen3-Embedding-8B's 40,960-token context: they
# are drawn as if served with vLLM's --max-model-len raised that far, and say so.
LIFTED = {"max_model_len": 1 << 20, "as_if": True}  # vLLM would refuse: on purpose


def ownership_schedule():
    """legacy vs clone under async scheduling, same three requests (notebook 02)."""
    config = tp.SimConfig(hidden_size=576, max_num_batched_tokens=8, async_scheduling=True,
                          **IDENTITY_HEAD)
    fig, axes = _subplots(2, 1, figsize=(8.4, 9.6))
    for ax, policy in zip(axes, ("legacy", "clone"), strict=True):
        tp.plot_ownership_schedule(tp.simulate([5, 12, 3], config.replace(policy=policy)), ax=ax)
    return fig


def buffer_rows():
    """The reused hidden-state buffer under legacy + async (notebook 02)."""
    config = tp.SimConfig(hidden_size=576, max_num_batched_tokens=8, policy="legacy",
                          async_scheduling=True, **IDENTITY_HEAD)
    return _fig(tp.viz.plot_buffer_rows(tp.simulate([5, 12, 3], config)))


def buffer_reuse():
    """The reused buffer step by step: legacy's kept views, the rows rewritten under them and
    the clone beside each (notebook 02, section 2)."""
    config = tp.SimConfig(hidden_size=576, max_num_batched_tokens=8, policy="legacy",
                          **IDENTITY_HEAD)
    return tp.viz.plot_buffer_reuse(tp.simulate([20], config))[0].figure


def _lens() -> np.ndarray:
    return tp.viz.prompt_grid(1024, 1 << 20, points_per_doubling=4)  # 41 lengths, 1K … 1M


def first_example():
    """The README's first example as written: one 32K-token token_embed prompt on
    Qwen3-Embedding-8B under vLLM's defaults, its 1.25 GiB peak drawn as its parts."""
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H200")  # model + vLLM's defaults
    run = tp.simulate([32_768], cfg, mode="analytic")
    return _fig(tp.plot_memory_timeline(run))


#: jinaai/jina-reranker-v3's config.json (a listwise reranker on a Qwen3-0.6B backbone).
JINA = {"architectures": ["JinaForRanking"], "model_type": "qwen3", "hidden_size": 1024,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "rope_theta": 1000000}


def reranker_points(config) -> list[dict]:
    """Two single runs beside the curves, each its peak and what it delivers: a 64-document
    listwise prompt on jina-reranker-v3 (another model) and a 32K-token document late-chunked
    at 512 on the curves' model (README's reranker tour, notebook 05)."""
    from tokpool.late_interaction.listwise import listwise_prompts

    jina = tp.SimConfig.from_hf_config(JINA, hardware=config.hardware)  # vLLM's defaults
    prompts = listwise_prompts([135], [190] * 64, template_tokens=12850 - 64 * 191 - 136)
    listwise = tp.simulate(prompts, jina, mode="analytic")
    chunked = tp.simulate([32_768], config, mode="analytic",
                          pooling_params=tp.PoolingParams(late_chunking_size=512))
    n_list, n_doc = listwise.requests.iloc[0], chunked.requests.iloc[0]
    return [
        dict(listwise.summary(), label=f"jina-reranker-v3 (another model): 64 documents in "
                                       f"one {n_list['prompt_len']:,}-token listwise prompt, "
                                       f"{n_list['delivered_rows']} rows delivered"),
        dict(chunked.summary(), label=f"{config.model.name}: one {n_doc['prompt_len']:,}-token "
                                      f"document, late chunking at 512, "
                                      f"{n_doc['delivered_rows']} rows delivered"),
    ]


def memory_vs_prompt_length():
    """Qwen3-Embedding-8B token_embed, every policy, H100 line, vLLM's defaults, with two
    reranker runs drawn over it (notebook 05)."""
    config = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM", **LIFTED)
    swept = tp.sweep(_lens(), config, async_scheduling=[config.async_scheduling])  # vLLM's: sync
    swept = tp.sim.mark_startup_refusals(swept, config)  # refusals marked
    return _fig(tp.plot_memory_vs_prompt_length(
        swept, hardware="H100 SXM", points=reranker_points(config),
        title="Qwen3-Embedding-8B token_embed, vLLM's defaults (float32 head + activation, sync, "
              "16K-token chunks);\npast its 40,960-token context as if --max-model-len 1M; two "
              "single runs drawn over it"))


def memory_per_model():
    """clone, vLLM's defaults (sync), every model preset with its task (notebook 05)."""
    import pandas as pd

    def marked(name: str):  # each preset's points vLLM would refuse to start for, marked
        config = tp.SimConfig.for_model(name, hardware="H100 SXM", **LIFTED)
        swept = tp.sweep(_lens(), config, policies=["clone"],
                         async_scheduling=[config.async_scheduling])
        return tp.sim.mark_startup_refusals(swept, config).assign(
            model=f"{name} · {config.task}")

    frames = [marked(name) for name in tp.MODEL_PRESETS]
    return _fig(tp.plot_memory_vs_prompt_length(
        pd.concat(frames), hue="model", hardware="H100 SXM",
        title="clone policy, vLLM's defaults (float32 head, sync), per model preset and task "
              "(contexts lifted to 1M)"))


def memory_timeline():
    """One 1M-token prompt under clone and vLLM's defaults, step by step (notebook 05)."""
    config = tp.SimConfig.for_model("Qwen3-Embedding-8B", **LIFTED)
    return _fig(tp.plot_memory_timeline(tp.simulate([1 << 20], config, mode="analytic")))


def time_estimates():
    """Pooling-copy time ESTIMATE vs prompt length, beside the forward pass (notebook 05)."""
    config = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM", **LIFTED)
    swept = tp.sweep(_lens(), config, async_scheduling=[config.async_scheduling])  # vLLM's
    swept = tp.sim.mark_startup_refusals(swept, config)
    return _fig(tp.viz.plot_time_vs_prompt_length(swept, y="est_pool_s", forward=True))


def _smollm():
    return tp.load_model("smollm2-135m")


def token_similarity():
    """SmolLM2 and MiniLM token × token similarity side by side (notebook 03)."""
    fig, axes = _subplots(1, 2, figsize=(15, 6.4))
    for ax, name, label in ((axes[0], "smollm2-135m", "SmolLM2 (decoder)"),
                            (axes[1], "minilm-l6", "MiniLM (encoder)")):
        model = tp.load_model(name)
        (emb,) = model.encode(TEXT, task="token_embed")
        tokens = tp.viz.token_strings(model.tokenizer, model.token_ids([TEXT])[0])
        tp.plot_similarity(emb, tokens=tokens, ax=ax, title=f"{label}, final layer",
                           colorbar=name == "minilm-l6")
    return fig


def token_pca():
    """SmolLM2 token vectors on two principal components, by position (notebook 03)."""
    model = _smollm()
    (emb,) = model.encode(TEXT, task="token_embed")
    tokens = tp.viz.token_strings(model.tokenizer, model.token_ids([TEXT])[0])
    return _fig(tp.viz.plot_token_pca(emb, tokens=tokens))


def token_norms():
    """SmolLM2 middle-layer norms per token, coloured text (notebook 03)."""
    model = _smollm()
    layer = model.num_layers // 2
    (raw,) = model.encode(TEXT, task="token_embed", layer=layer, use_activation=False)
    norms = raw.norm(dim=-1)
    tokens = tp.viz.token_strings(model.tokenizer, model.token_ids([TEXT])[0])
    return _fig(tp.viz.plot_token_values(tokens, norms / norms.median(), vmin=0, vmax=3,
                                     label="norm / median",
                                     title=f"SmolLM2 layer {layer}: hidden-state norm per token"))


def chunked_vs_full():
    """SmolLM2 chunked prefill vs full forward, float32 and bfloat16 (notebook 03)."""
    df = tp.models.compare_chunked(_smollm(), TEXT, chunk_sizes=(8,),
                                   dtypes=("float32", "bfloat16"))
    return _fig(tp.viz.plot_chunked_error(df, metric="rel_rms", chunk_size=8))


def step_rewards():
    """The shipped probe PRM on a test example with an error (notebook 04)."""
    prm = tp.load_prm()
    record = next(r for r in tp.load_prm_dataset("test") if r["first_error"] >= 0)
    scores = prm.score(record["prompt"], record["completions"])
    return _fig(tp.plot_step_rewards(scores.rewards, threshold=scores.threshold,
                                     true_first_error=record["first_error"],
                                     step_labels=record["labels"],
                                     step_texts=record["completions"],
                                     title="Fine-tuned PRM on the first erroneous test solution"))


#: Figure name (file ``docs/<name>.png``) → function; the second group needs real models.
FIGURES: dict[str, Callable] = {
    "task_gate": task_gate,
    "first_example": first_example,
    "ownership_schedule": ownership_schedule,
    "buffer_rows": buffer_rows,
    "buffer_reuse": buffer_reuse,
    "memory_vs_prompt_length": memory_vs_prompt_length,
    "memory_per_model": memory_per_model,
    "memory_timeline": memory_timeline,
    "time_estimates": time_estimates,
}
MODEL_FIGURES: dict[str, Callable] = {
    "token_similarity": token_similarity,
    "token_pca": token_pca,
    "token_norms": token_norms,
    "chunked_vs_full": chunked_vs_full,
    "step_rewards": step_rewards,
}


def make_figures(
    out: str | Path = DOCS, *, only: list[str] | None = None, models: bool = True,
    dpi: int = 200,
) -> list[Path]:
    """Draw the figures and save them as ``<out>/<name>.png``.

    Args:
        out: output directory (default: the repository's ``docs/``).
        only: names to draw (default: all).
        models: include figures that load real models.
        dpi: resolution (200: sharp on HiDPI screens).

    Returns:
        The files written. A model figure that cannot be made (model or probe missing) is
        reported on stderr and skipped.

    Raises:
        ValueError: an unknown name in ``only``.
    """
    import matplotlib.pyplot as plt

    known = {**FIGURES, **MODEL_FIGURES}
    names = list(known) if only is None else list(only)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; choose from {list(known)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        if name in MODEL_FIGURES and not models:
            continue
        try:
            fig = known[name]()
        except (FileNotFoundError, ImportError, OSError, AttributeError) as err:
            print(f"skipped {name}: {err}", file=sys.stderr)
            continue
        path = out / f"{name}.png"
        fig.savefig(path, dpi=dpi, bbox_inches="tight", facecolor="white")
        plt.close(fig)
        written.append(path)
        print(f"wrote {path}")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DOCS), help="output directory (default: docs/)")
    parser.add_argument("--only", nargs="+", help="figure names to draw")
    parser.add_argument("--no-models", action="store_true",
                        help="skip the figures that load real models")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")  # a command-line run draws off-screen
    make_figures(args.out, only=args.only, models=not args.no_models)


if __name__ == "__main__":
    main()
