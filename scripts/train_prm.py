"""Fine-tune SmolLM2-135M-Instruct into a two_class PRM: ``python scripts/train_prm.py``.

What it does (seeded; CPU; writes ``data/prm/smollm2-prm/``):

1. Lay out every example of ``data/prm/train.jsonl`` and ``dev.jsonl`` with ``format_steps``
   (no chat template: ``problem + "\\n\\n" + step₁<file_sep>\\nstep₂<file_sep>…``) and run the
   *frozen* bottom ``--first-layer`` layers once, in padded batches; keep every token's hidden
   state (the input of layer ``--first-layer``), cached on disk for reruns.
2. Keep the base model's first ``--num-layers`` layers (and its final norm), put LoRA factors
   (rank ``--rank``, scale ``alpha / rank``, on q/k/v/o and the MLP's gate/up/down) on layers
   ``--first-layer .. --num-layers - 1``, and a 2-label score head after the final norm —
   ``LlamaForTokenClassification``'s layout. The head starts at the logistic regression of the
   un-adapted tag rows (linear probing, then fine-tuning). Train factors and head with AdamW on
   the class-balanced cross-entropy at the step-tag rows of the steps **up to and including the
   first error** (later steps are labelled wrong only because they build on a wrong value),
   ``--epochs`` passes, linear warm-up then linear decay.
3. Pick the ``first_error`` threshold that maximises ProcessBench F1 on ``dev`` (the test and
   hard splits are never used for a choice).
4. Write ``adapter.safetensors`` (factors + head + settings), ``loss.csv``, ``loss.png`` and
   ``training.json`` (settings, dev metrics, wall times). Evaluate with
   ``python scripts/eval_prm.py``.

Why these defaults (17 layers, LoRA on 13–16): the probe's layer sweep found layer 16 the most
informative; training only the top kept layers runs the bottom ones once instead of every epoch,
which fits the ~30 CPU-minutes this project allows on a 2-core machine; LoRA keeps the shipped
file at 2.6 MB. ``data/prm/smollm2-prm/README.md`` (the model card) has the numbers.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

import tokpool as tp
from tokpool.prm.adapter import ADAPTER_FILE, LORA_TARGETS, lora_key, save_adapter
from tokpool.prm.dataset import default_data_dir
from tokpool.prm.evaluation import choose_threshold, evaluate, up_to_first_error

BASE_MODEL = "smollm2-135m"
LAYOUT = {"tag": "<file_sep>", "separator": "\n", "chat": False, "system": None}


class LoRALinear(nn.Module):
    """``y = W x + (alpha / rank) · B A x`` with ``W`` frozen; ``B`` starts at zero."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator):
        super().__init__()
        self.base = base.requires_grad_(False)
        bound = 1 / math.sqrt(base.in_features)  # kaiming-uniform-like, as peft does
        self.lora_A = nn.Parameter(
            (torch.rand(rank, base.in_features, generator=generator) * 2 - 1) * bound)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale


def format_records(tokenizer, records: list[dict]) -> list[dict[str, Any]]:
    """Token ids, tag rows, labels and the up-to-first-error mask of every example."""
    masks = up_to_first_error(records)
    out = []
    for record, mask in zip(records, masks, strict=True):
        f = tp.prm.format_steps(record["prompt"], record["completions"], tokenizer=tokenizer,
                            **LAYOUT)
        out.append({"ids": torch.tensor(f.token_ids), "tags": torch.tensor(f.tag_positions),
                    "labels": torch.tensor(record["labels"], dtype=torch.long),
                    "mask": torch.from_numpy(mask)})
    return out


def pad(tensors: list[Tensor]) -> Tensor:
    """Right-pad ``[len_i, ...]`` tensors to ``[batch, max_len, ...]`` with zeros. Right
    padding under causal attention leaves every real token's output unchanged."""
    return nn.utils.rnn.pad_sequence(tensors, batch_first=True)


def bottom_states(model, examples, first_layer: int, batch_size: int) -> list[Tensor]:
    """The input of layer ``first_layer`` for every token: ``[n_tokens, hidden]`` each."""
    base = model.base_model
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["ids"]))
    states: list[Tensor | None] = [None] * len(examples)
    with torch.inference_mode():
        for start in tqdm(range(0, len(order), batch_size), desc=f"layers 0-{first_layer - 1}",
                          unit="batch"):
            rows = order[start:start + batch_size]
            ids = pad([examples[i]["ids"] for i in rows])  # [b, T]
            h = base.embed_tokens(ids)  # [b, T, hidden]
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            rope = base.rotary_emb(h, positions)
            for layer in base.layers[:first_layer]:
                h = layer(h, position_embeddings=rope, position_ids=positions)
            for k, i in enumerate(rows):
                states[i] = h[k, : len(examples[i]["ids"])].clone()  # [n_tokens, hidden]
    return states  # type: ignore[return-value]


def cached_bottom_states(model, examples, first_layer: int, cache: Path) -> list[Tensor]:
    """``bottom_states``, stored under ``cache`` keyed by model, layer and token ids (a rerun
    with other training settings skips the frozen layers; delete the folder to recompute)."""
    key = hashlib.sha256(json.dumps(
        [model.name, first_layer, [ex["ids"].tolist() for ex in examples]]).encode()).hexdigest()
    file = cache / f"bottom-{first_layer}-{key[:16]}.pt"
    if file.is_file():
        return torch.load(file)
    states = bottom_states(model, examples, first_layer, 16)
    cache.mkdir(parents=True, exist_ok=True)
    torch.save(states, file)
    return states


def top_hidden(model, states: list[Tensor], first_layer: int, num_layers: int) -> Tensor:
    """Layers ``first_layer .. num_layers - 1`` + final norm on a padded batch:
    ``[b, T, hidden]``."""
    base = model.base_model
    h = pad(states)  # [b, T, hidden]
    positions = torch.arange(h.shape[1]).unsqueeze(0)
    rope = base.rotary_emb(h, positions)
    for layer in base.layers[first_layer:num_layers]:
        h = layer(h, position_embeddings=rope, position_ids=positions)
    return base.norm(h)


def top_logits(model, head: nn.Linear, states: list[Tensor], first_layer: int,
               num_layers: int) -> Tensor:
    """``top_hidden`` + the head: ``[b, T, 2]``."""
    return head(top_hidden(model, states, first_layer, num_layers))


def probe_init_(head: nn.Linear, model, states, examples, first_layer: int, num_layers: int,
                *, l2: float = 1e-3) -> None:
    """Start the head at the class-balanced logistic regression (L-BFGS, on standardised
    features, folded back into the linear layer) of the un-adapted model's tag rows: linear
    probing, then fine-tuning (LP-FT), so LoRA starts from a head that already points the
    right way instead of a random one."""
    xs, ys = [], []
    with torch.inference_mode():
        for start in range(0, len(states), 16):
            h = top_hidden(model, states[start:start + 16], first_layer, num_layers)
            for k, ex in enumerate(examples[start:start + 16]):
                xs.append(h[k, ex["tags"][ex["mask"]]])  # [n_kept, hidden]
                ys.append(ex["labels"][ex["mask"]])
    x, y = torch.cat(xs).clone(), torch.cat(ys)
    mean, scale = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / scale
    counts = torch.bincount(y, minlength=2).float()
    weights = counts.sum() / (2 * counts)
    linear = nn.Linear(x.shape[1], 2)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=300,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(linear(z), y, weight=weights)
        loss = loss + l2 * linear.weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():  # w·(x − m)/s + b  =  (w/s)·x + (b − (w/s)·m)
        head.weight.copy_(linear.weight / scale)
        head.bias.copy_(linear.bias - (linear.weight / scale) @ mean)


def step_rewards_batch(model, head, states, examples, first_layer, num_layers,
                       batch_size) -> list[np.ndarray]:
    """Rewards (softmax index 1 at the tag rows) of every example, in order."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(states), batch_size):
            logits = top_logits(model, head, states[start:start + batch_size], first_layer,
                                num_layers)
            for k, ex in enumerate(examples[start:start + batch_size]):
                out.append(torch.softmax(logits[k, ex["tags"]], -1)[:, 1].numpy())
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-layers", type=int, default=17,
                        help="keep the base model's first N layers (the rest are dropped)")
    parser.add_argument("--first-layer", type=int, default=13,
                        help="first layer with LoRA factors (those below stay frozen)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=float, default=0.1, help="share of steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="first N train/dev examples")
    parser.add_argument("--out", default=None, help="default data/prm/smollm2-prm")
    parser.add_argument("--cache-dir", default=None,
                        help="frozen-layer outputs (default <tp.models.model_cache_dir()>/prm)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else default_data_dir() / "prm" / "smollm2-prm"
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()

    model = tp.load_model(BASE_MODEL)
    model.hf_model.requires_grad_(False)
    records = {s: tp.load_prm_dataset(s)[: args.limit] for s in ("train", "dev")}
    examples = {s: format_records(model.tokenizer, r) for s, r in records.items()}
    cache = Path(args.cache_dir) if args.cache_dir else tp.models.model_cache_dir() / "prm"
    states = {s: cached_bottom_states(model, ex, args.first_layer, cache)
              for s, ex in examples.items()}
    seconds["frozen_layers"] = time.perf_counter() - t0

    generator = torch.Generator().manual_seed(args.seed)
    base = model.base_model
    if not 0 < args.first_layer < args.num_layers <= model.num_layers:
        raise ValueError(f"need 0 < --first-layer < --num-layers <= {model.num_layers}, got "
                         f"{args.first_layer} and {args.num_layers}")
    for i in range(args.first_layer, args.num_layers):
        for block, name in LORA_TARGETS:
            parent = getattr(base.layers[i], block)
            setattr(parent, name, LoRALinear(getattr(parent, name), args.rank, args.alpha,
                                             generator))
    head = nn.Linear(model.hidden_size, 2)
    t_init = time.perf_counter()
    probe_init_(head, model, states["train"], examples["train"], args.first_layer,
                args.num_layers)
    seconds["head_init"] = time.perf_counter() - t_init
    params = [p for p in base.parameters() if p.requires_grad] + list(head.parameters())

    train = examples["train"]
    labels = torch.cat([ex["labels"][ex["mask"]] for ex in train])
    counts = torch.bincount(labels, minlength=2).float()
    # why class weights: wrong steps are the minority (~1 in 9 of the steps trained on)
    weights = counts.sum() / (2 * counts)
    # length-bucketed batches (less padding), shuffled per epoch with the seeded generator
    order = sorted(range(len(train)), key=lambda i: len(train[i]["ids"]))
    batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    total = len(batches) * args.epochs
    warm = max(1, int(args.warmup * total))
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm))))
    log = []
    t1 = time.perf_counter()
    bar = tqdm(total=total, desc="train", unit="batch")
    for epoch in range(args.epochs):
        perm = torch.randperm(len(batches), generator=generator).tolist()
        for b in perm:
            rows = batches[b]
            logits = top_logits(model, head, [states["train"][i] for i in rows],
                                args.first_layer, args.num_layers)
            picked, target = [], []
            for k, i in enumerate(rows):
                ex = train[i]
                picked.append(logits[k, ex["tags"][ex["mask"]]])  # [n_kept, 2]
                target.append(ex["labels"][ex["mask"]])
            loss = nn.functional.cross_entropy(torch.cat(picked), torch.cat(target),
                                               weight=weights)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            log.append({"step": len(log), "epoch": epoch, "loss": float(loss),
                        "lr": schedule.get_last_lr()[0],
                        "seconds": round(time.perf_counter() - t1, 1)})
            bar.update()
            bar.set_postfix(loss=f"{float(loss):.3f}", epoch=epoch)
    bar.close()
    seconds["training"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    dev_rewards = step_rewards_batch(model, head, states["dev"], examples["dev"],
                                     args.first_layer, args.num_layers, 16)
    threshold, dev_f1 = choose_threshold(dev_rewards, records["dev"])
    dev_metrics = evaluate(dev_rewards, records["dev"], threshold, n_bootstrap=0)
    seconds["dev"] = time.perf_counter() - t2

    tensors: dict[str, Tensor] = {"score.weight": head.weight, "score.bias": head.bias}
    for i in range(args.first_layer, args.num_layers):
        for block, name in LORA_TARGETS:
            lora = getattr(getattr(base.layers[i], block), name)
            tensors[f"{lora_key(i, block, name)}.lora_A"] = lora.lora_A
            tensors[f"{lora_key(i, block, name)}.lora_B"] = lora.lora_B
    settings = {
        "base_model": BASE_MODEL, "convention": "two_class", "num_labels": 2, **LAYOUT,
        "threshold": threshold, "rank": args.rank, "alpha": args.alpha,
        "first_layer": args.first_layer, "num_layers": args.num_layers,
        "targets": [f"{b}.{n}" for b, n in LORA_TARGETS],
        "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
        "warmup": args.warmup, "seed": args.seed, "head_init": "logistic regression (LP-FT)",
        "trained_on": "train split, tag rows of the steps up to and including the first error",
        "train_examples": len(train), "train_steps": len(labels),
        "threshold_chosen_on": f"dev split ({len(records['dev'])} examples)",
    }
    save_adapter(out / ADAPTER_FILE, tensors, settings)
    with (out / "loss.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(log[0]))
        writer.writeheader()
        writer.writerows(log)
    plot_loss(log, out / "loss.png", steps_per_epoch=len(batches))
    seconds["total"] = time.perf_counter() - t0
    report = {"settings": settings, "dev": {k: v for k, v in dev_metrics.items() if k != "ci95"},
              "dev_f1_at_threshold": dev_f1, "seconds": {k: round(v, 1) for k, v in
                                                         seconds.items()},
              "threads": args.threads}
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


def plot_loss(log: list[dict], path: Path, *, steps_per_epoch: int) -> None:
    """Per-batch loss and its running mean over one epoch's window of batches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loss = np.array([r["loss"] for r in log])
    window = max(1, min(len(loss), steps_per_epoch // 4))
    smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
    fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
    ax.plot(loss, lw=0.6, alpha=0.4, label="batch loss")
    ax.plot(np.arange(window - 1, len(loss)), smooth, lw=1.8,
            label=f"mean of {window} batches")
    for e in range(1, math.ceil(len(loss) / steps_per_epoch)):
        ax.axvline(e * steps_per_epoch, color="grey", ls=":", lw=0.8)
    ax.set(xlabel="optimizer step (batch of 8 examples)", ylabel="class-balanced CE",
           title="SmolLM2-135M PRM fine-tuning (LoRA, top layers)")
    ax.legend()
    fig.savefig(path, dpi=150)
    plt.close(fig)


if __name__ == "__main__":
    main()
