"""Render the figures and tables issue 37 changed in notebooks 01, 03 and 04 (before/after).

Run from a checkout: ``PYTHONPATH=<checkout> python docs/before_after/render_i37words.py
{before|after} [--out DIR]``. Figures are drawn by the same calls the notebooks make (full
mode); tables are the notebooks' DataFrames as JupyterLab shows them (its table CSS), captured
by headless Chromium at a 900 px wide cell. Writes ``<name>_<suffix>.png``.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

import tokpool as tp

TEXT = ("Token-level pooling keeps one vector per token. A long prompt is split into chunks, "
        "and every chunk must survive until the last one arrives. Process reward models score "
        "each step of a solution at a special tag token, while retrieval models such as ColBERT "
        "compare every query token with every document token. Both need the whole prompt's "
        "hidden states, not just the last one.")
#: JupyterLab's rendered-HTML table style (jp-RenderedHTMLCommon), enough to judge the width.
LAB_CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;
font-size:13px;margin:0;padding:8px 0 8px 72px;width:828px;overflow-x:auto}
table{border-collapse:collapse;border:none;font-size:12px;table-layout:fixed}
td,th{text-align:right;vertical-align:middle;padding:0.5em;line-height:normal;
white-space:normal;max-width:none;border:none}
th{font-weight:bold} tbody tr:nth-child(odd){background:#f5f5f5}
thead{border-bottom:1px solid #000} .frame{width:828px;overflow:hidden;border-right:2px dashed
#c00}"""


def _table_png(frame, path: Path, height: int = 420) -> None:
    html = f"<style>{LAB_CSS}</style><div class='frame'>{frame.to_html()}</div>"
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
        f.write(html)
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--screenshot={path}", f"--window-size=920,{height}",
                    f"file://{f.name}"], check=True, capture_output=True, timeout=120)


def _save(ax_or_fig, path: Path) -> None:
    fig = getattr(ax_or_fig, "figure", ax_or_fig)
    if hasattr(ax_or_fig, "__len__") and not hasattr(ax_or_fig, "figure"):
        fig = ax_or_fig[0].figure
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("suffix", choices=["before", "after"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    out, sfx = args.out, args.suffix
    out.mkdir(parents=True, exist_ok=True)

    # 01: the task table as the notebook shows it
    table = tp.task_table()
    cell3 = table[["example", "attn_type", "model_tasks", "default_task", "served_pre_50931",
                   "served_current"] if sfx == "before" else
                  ["served_current", "served_pre_50931", "default_task", "model_tasks",
                   "attn_type", "example"]]
    _table_png(cell3, out / f"01_task_table_{sfx}.png")

    # 03: similarity heatmap, PCA, the explorer's heatmap
    smollm = tp.load_model("smollm2-135m")
    (emb,) = smollm.encode(TEXT, task="token_embed")
    tokens = tp.viz.token_strings(smollm.tokenizer, smollm.token_ids([TEXT])[0])
    _save(tp.plot_similarity(emb, tokens=tokens), out / f"03_similarity_{sfx}.png")
    _save(tp.viz.plot_token_pca(emb, tokens=tokens), out / f"03_pca_{sfx}.png")
    from tokpool.widgets.tokens import render_token_heatmap
    (raw,) = smollm.encode(TEXT, task="token_embed", layer=15, use_activation=False)
    (out / f"03_explorer_heatmap_{sfx}.png").write_bytes(
        render_token_heatmap(tokens, raw, layer_label="layer 15 of 30"))

    # 04: the second example chart, learning curve, memory table
    test = tp.load_prm_dataset("test")
    report = tp.prm.read_report()
    prm = tp.load_prm()
    example = next(r for r in test if r["first_error"] >= 0)
    sample = report["fixed_sample"]
    by_id = {r["id"]: r for r in test}
    predicted = tp.prm.first_errors(sample["rewards"], prm.threshold)
    erroneous = [(by_id[i], p) for i, p in zip(sample["ids"], predicted, strict=True)
                 if by_id[i]["first_error"] >= 0]
    missed = [r for r, p in erroneous if p != r["first_error"]]
    if sfx == "after":  # the notebook's rule now: not the opening example
        missed = [r for r in missed if r["id"] != example["id"]]
    missed = missed[0]
    scores = prm.score(missed["prompt"], missed["completions"])
    _save(tp.plot_step_rewards(scores.rewards, threshold=scores.threshold,
                               true_first_error=missed["first_error"],
                               step_labels=missed["labels"], step_texts=missed["completions"],
                               title=f"missed: {missed['error_type']} ({missed['id']})"),
          out / f"04_missed_{sfx}.png")
    _save(tp.prm.plot_learning_curve(tp.prm.read_curve()), out / f"04_learning_curve_{sfx}.png")
    memory = pd.concat([
        tp.prm.prm_memory_table(lengths, model=m, conventions=("two_class", "token_pair"))
        for m, lengths in (("SmolLM2-135M", (1_024, 8_192)),
                           ("qwen2.5-math-prm-7b", (1_024, 4_096)))])
    if sfx == "before":
        shown = memory.assign(
            peak_pooling_MiB=memory["peak_pooling_bytes"] / 2**20,
            peak_device_MiB=memory["peak_device_bytes"] / 2**20,
        )[["model", "convention", "prompt_len", "num_steps", "pooled_width", "peak_pooling_MiB",
           "peak_device_MiB"]].round(3)
    else:  # the notebook's cell: whole bytes with thousands separators
        memory = memory.reset_index(drop=True)
        shown = memory.rename(columns={"num_steps": "reasoning_steps"})[
            ["model", "convention", "prompt_len", "reasoning_steps", "pooled_width",
             "peak_pooling_bytes", "peak_device_bytes"]].style.format(
            "{:,}", subset=["prompt_len", "pooled_width", "peak_pooling_bytes",
                            "peak_device_bytes"])
    _table_png(shown, out / f"04_memory_table_{sfx}.png", height=300)


if __name__ == "__main__":
    main()
