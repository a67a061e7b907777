"""Fine-tune SmolLM2-135M-Instruct into a two_class PRM: ``python scripts/train_prm.py``.

What it does (seeded; CPU; writes ``data/prm/smollm2-prm/`` unless ``--out``):

1. Take ``--train-size`` training problems: ``data/prm/train.jsonl`` (800), then problems of
   ``tp.prm.generate_training_problems(seed=--extra-seed)`` (nested: 3,200 holds the 800); check
   that none shares its text with ``dev``, ``test`` or ``hard`` (else ``ValueError``).
2. Lay out every training and ``dev`` example with ``format_steps`` (no chat template:
   ``problem + "\\n\\n" + step₁<file_sep>\\nstep₂<file_sep>…``) and run the *frozen* bottom
   ``--first-layer`` layers once, in padded batches; keep every token's hidden state (the input
   of layer ``--first-layer``) in float16 under ``--cache-dir`` (default
   ``<tp.models.model_cache_dir()>/prm``), in shards of 100 examples keyed by model, layer and
   token ids — a stopped extraction resumes shard by shard, nested training sets share shards,
   and the folder is pruned least-recently-used first to ``--cache-limit-gb`` (default 3).
3. Keep the base model's first ``--num-layers`` layers (and its final norm), put LoRA factors
   (rank ``--rank``, scale ``alpha / rank``, on q/k/v/o and the MLP's gate/up/down) on layers
   ``--first-layer .. --num-layers - 1``, and a 2-label score head after the final norm —
   ``LlamaForTokenClassification``'s layout. The head starts at the logistic regression of the
   un-adapted tag rows (linear probing, then fine-tuning); that head alone, scored on ``dev``, is
   the "head only" variation of the learning curve. Train factors and head with AdamW on the
   class-balanced cross-entropy at the step-tag rows of the steps **up to and including the
   first error** (later steps are labelled wrong only because they build on a wrong value),
   ``--epochs`` passes, linear warm-up then linear decay.
4. Every ``--eval-every`` steps: the F1-maximising threshold and ProcessBench F1 on ``dev``;
   keep the best weights, stop after ``--patience`` evaluations without a better dev F1. Every
   ``--checkpoint-every`` steps and at each evaluation, a checkpoint (``ckpt-<settings>.pt`` in
   the cache folder): rerunning the same command resumes where a stopped run stopped, and ends
   with the same adapter bytes as a run that never stopped. ``--max-steps`` is a compute
   budget: train up to that step, then ship the best dev point so far.
5. Ship the best dev point: its threshold (chosen on ``dev``; ``test`` and ``hard`` are never
   used for a choice), ``adapter.safetensors`` (factors + head + settings), ``loss.csv``,
   ``loss.png`` and ``training.json`` (settings, dev metrics with bootstrap 95 % intervals, the
   head-only dev metrics, the dev curve, wall times). Evaluate with ``python scripts/eval_prm.py``;
   collect learning-curve runs with ``python scripts/prm_curve.py``.

The shipped adapter's command is in its model card (``data/prm/smollm2-prm/README.md``).
Rerunning it on the same torch build with the same ``--threads`` rewrites ``adapter.safetensors``
byte for byte (``tests/test_prm_curve.py`` checks this at small scale: straight through,
stopped and resumed, and from scratch give the same bytes).

Why these defaults (17 layers, LoRA on 13–16): the probe's layer sweep found layer 16 the most
informative; training only the top kept layers runs the bottom ones once instead of every epoch;
LoRA keeps the shipped file at 2.6 MB.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

import tokpool as tp
from tokpool.models import model_cache_dir
from tokpool.prm.adapter import ADAPTER_FILE, LORA_TARGETS, lora_key, save_adapter
from tokpool.prm.dataset import default_data_dir, generate_training_problems
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


SHARD = 100  # examples per cached feature file: a stopped extraction resumes shard by shard
CACHE_LIMIT_GB = 3.0  # default bound on <cache>/bottom-* + ckpt-* (oldest pruned first)


def prune_cache(cache: Path, limit_bytes: int, keep: set[Path]) -> list[Path]:
    """Delete the least recently used ``bottom-*``/``ckpt-*`` files of ``cache`` until they
    take at most ``limit_bytes``; files in ``keep`` (this run's) are never deleted. Returns the
    deleted paths."""
    files = sorted((f for pattern in ("bottom-*.pt", "ckpt-*.pt") for f in cache.glob(pattern)),
                   key=lambda f: f.stat().st_mtime)
    total = sum(f.stat().st_size for f in files)
    deleted = []
    for f in files:
        if total <= limit_bytes:
            break
        if f in keep:
            continue
        total -= f.stat().st_size
        f.unlink()
        deleted.append(f)
    return deleted


def _save_atomic(obj: Any, file: Path) -> None:
    tmp = file.with_name(file.name + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(file)


def cached_bottom_states(model, examples, first_layer: int, cache: Path, *,
                         limit_bytes: int = int(CACHE_LIMIT_GB * 2**30),
                         desc: str = "frozen layers") -> list[Tensor]:
    """``bottom_states`` in float16 (half the bytes; the top layers compute in float32), stored
    under ``cache`` in shards of ``SHARD`` examples keyed by model, layer and token ids: a rerun
    or a stopped run skips the shards already there, nested training sets share theirs, and
    the folder is pruned to ``limit_bytes`` (least recently used first) after each write."""
    cache.mkdir(parents=True, exist_ok=True)
    states: list[Tensor] = []
    used: set[Path] = set()
    for start in tqdm(range(0, len(examples), SHARD), desc=desc, unit="shard"):
        chunk = examples[start:start + SHARD]
        key = hashlib.sha256(json.dumps(
            [model.name, first_layer, "float16", [ex["ids"].tolist() for ex in chunk]]
        ).encode()).hexdigest()
        file = cache / f"bottom-{first_layer}-f16-{key[:16]}.pt"
        used.add(file)
        if file.is_file():
            shard = torch.load(file)
            os.utime(file)  # least recently used goes first
        else:
            shard = [h.half() for h in bottom_states(model, chunk, first_layer, 16)]
            _save_atomic(shard, file)
            prune_cache(cache, limit_bytes, used)
        states.extend(shard)
    return states


def top_hidden(model, states: list[Tensor], first_layer: int, num_layers: int) -> Tensor:
    """Layers ``first_layer .. num_layers - 1`` + final norm on a padded batch:
    ``[b, T, hidden]``."""
    base = model.base_model
    h = pad(states).float()  # [b, T, hidden]
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


def training_records(n: int, *, extra_seed: int) -> list[dict[str, Any]]:
    """The first ``n`` training problems: ``train.jsonl`` (800), then
    ``generate_training_problems(n - 800, seed=extra_seed)`` — nested, so every size of the
    learning curve holds the smaller ones."""
    shipped = tp.load_prm_dataset("train")
    if n <= len(shipped):
        return shipped[:n]
    return shipped + generate_training_problems(n - len(shipped), seed=extra_seed)


def check_disjoint(train: list[dict], others: dict[str, list[dict]]) -> None:
    """Raise ``ValueError`` when a training problem's text is also a problem of ``others``."""
    texts = {r["prompt"] for r in train}
    for split, records in others.items():
        shared = [r["id"] for r in records if r["prompt"] in texts]
        if shared:
            raise ValueError(f"{len(shared)} {split} problems are also training problems "
                             f"(first: {shared[0]}); regenerate the training set with another "
                             "--extra-seed")


def dev_point(model, head, states, examples, records, first_layer, num_layers, step, epoch,
              n_bootstrap=0) -> dict[str, Any]:
    """Dev rewards → the F1-maximising threshold → the metrics of the learning curve."""
    rewards = step_rewards_batch(model, head, states, examples, first_layer, num_layers, 16)
    threshold, f1 = choose_threshold(rewards, records)
    metrics = evaluate(rewards, records, threshold, n_bootstrap=n_bootstrap)
    return {"step": step, "epoch": epoch, "threshold": threshold, "dev_f1": f1,
            "dev_step_auroc": metrics["step_auroc_up_to_first_error"], "metrics": metrics}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-layers", type=int, default=17,
                        help="keep the base model's first N layers (the rest are dropped)")
    parser.add_argument("--first-layer", type=int, default=13,
                        help="first layer with LoRA factors (those below stay frozen)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--train-size", type=int, default=800,
                        help="training problems: train.jsonl's 800, then generated ones")
    parser.add_argument("--extra-seed", type=int, default=1,
                        help="seed of the generated problems past the first 800")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=float, default=0.1, help="share of steps")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="optimizer steps between dev evaluations (default: one epoch)")
    parser.add_argument("--patience", type=int, default=2,
                        help="stop after this many dev evaluations without a better dev F1")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="a compute budget: train at most up to this optimizer step (the "
                             "schedule still spans --epochs), then ship the best dev point so "
                             "far; a later run without it resumes from the checkpoint")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="first N train/dev examples")
    parser.add_argument("--out", default=None, help="default data/prm/smollm2-prm")
    parser.add_argument("--cache-dir", default=None,
                        help="frozen-layer outputs and checkpoints (default "
                             "<tp.models.model_cache_dir()>/prm)")
    parser.add_argument("--cache-limit-gb", type=float, default=CACHE_LIMIT_GB,
                        help="bound on the cached features + checkpoints (LRU pruned)")
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
    records = {"train": training_records(args.train_size, extra_seed=args.extra_seed),
               "dev": tp.load_prm_dataset("dev")}
    check_disjoint(records["train"], {s: tp.load_prm_dataset(s) for s in ("dev", "test", "hard")})
    records = {s: r[: args.limit] for s, r in records.items()}
    examples = {s: format_records(model.tokenizer, r) for s, r in records.items()}
    cache = Path(args.cache_dir) if args.cache_dir else model_cache_dir() / "prm"
    limit_bytes = int(args.cache_limit_gb * 2**30)
    states = {s: cached_bottom_states(model, ex, args.first_layer, cache,
                                      limit_bytes=limit_bytes, desc=f"frozen layers ({s})")
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
    params = [p for p in base.parameters() if p.requires_grad] + list(head.parameters())

    train = examples["train"]
    labels = torch.cat([ex["labels"][ex["mask"]] for ex in train])
    counts = torch.bincount(labels, minlength=2).float()
    # why class weights: wrong steps are the minority (~1 in 9 of the steps trained on)
    weights = counts.sum() / (2 * counts)
    # length-bucketed batches (less padding); every epoch's shuffle drawn up front from the
    # seeded generator, so a resumed run takes the same batches as an uninterrupted one
    order = sorted(range(len(train)), key=lambda i: len(train[i]["ids"]))
    batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    plan = [(epoch, b) for epoch in range(args.epochs)
            for b in torch.randperm(len(batches), generator=generator).tolist()]
    total = len(plan)
    warm = max(1, int(args.warmup * total))
    eval_every = args.eval_every or len(batches)
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm))))

    run_key = hashlib.sha256(json.dumps(
        [vars(args) | {"threads": None, "out": None, "cache_dir": None,
                       "checkpoint_every": None, "cache_limit_gb": None,
                       "max_steps": None, "patience": None},
         [r["id"] for r in records["train"]]]).encode()).hexdigest()[:16]
    ckpt_file = cache / f"ckpt-{run_key}.pt"

    def snapshot() -> list[Tensor]:
        return [p.detach().clone() for p in params]

    def save_checkpoint(step: int) -> None:
        _save_atomic({"step": step, "params": snapshot(), "optimizer": optimizer.state_dict(),
                      "schedule": schedule.state_dict(), "log": log, "evals": evals,
                      "best": best, "bad": bad, "stopped": stopped,
                      "head_init_seconds": seconds.get("head_init", 0.0),
                      "train_seconds": train_seconds + time.perf_counter() - t1}, ckpt_file)
        prune_cache(cache, limit_bytes, {ckpt_file})

    log: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    start_step, bad, stopped, train_seconds = 0, 0, False, 0.0
    t1 = time.perf_counter()
    if ckpt_file.is_file():
        ckpt = torch.load(ckpt_file, weights_only=False)
        with torch.no_grad():
            for p, saved in zip(params, ckpt["params"], strict=True):
                p.copy_(saved)
        optimizer.load_state_dict(ckpt["optimizer"])
        schedule.load_state_dict(ckpt["schedule"])
        log, evals, best, bad = (ckpt[k] for k in ("log", "evals", "best", "bad"))
        stopped = bad >= args.patience  # a rerun with more patience goes on
        start_step, train_seconds = ckpt["step"], ckpt["train_seconds"]
        seconds["head_init"] = ckpt["head_init_seconds"]
        print(f"resuming {ckpt_file.name} at step {start_step} of {total}")
    else:
        t_init = time.perf_counter()
        probe_init_(head, model, states["train"], examples["train"], args.first_layer,
                    args.num_layers)
        seconds["head_init"] = time.perf_counter() - t_init
        # the head alone (linear probing): the learning curve's "head only" variation
        point = dev_point(model, head, states["dev"], examples["dev"], records["dev"],
                          args.first_layer, args.num_layers, 0, 0, n_bootstrap=1000)
        evals.append(point)
        best = {"step": 0, "dev_f1": point["dev_f1"], "params": snapshot()}
        t1 = time.perf_counter()
        save_checkpoint(0)

    bar = tqdm(total=total, initial=start_step, desc="train", unit="batch")
    budget = total if args.max_steps is None else min(total, args.max_steps)
    for step in range(start_step, budget):
        if stopped:
            break
        epoch, b = plan[step]
        rows = batches[b]
        logits = top_logits(model, head, [states["train"][i] for i in rows],
                            args.first_layer, args.num_layers)
        picked, target = [], []
        for k, i in enumerate(rows):
            ex = train[i]
            picked.append(logits[k, ex["tags"][ex["mask"]]])  # [n_kept, 2]
            target.append(ex["labels"][ex["mask"]])
        loss = nn.functional.cross_entropy(torch.cat(picked), torch.cat(target), weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        log.append({"step": step, "epoch": epoch, "loss": loss.item(),
                    "lr": schedule.get_last_lr()[0],
                    "seconds": round(train_seconds + time.perf_counter() - t1, 1)})
        bar.update()
        bar.set_postfix(loss=f"{loss.item():.3f}", epoch=epoch, best=f"{best['dev_f1']:.3f}")
        done = step + 1
        if done % eval_every == 0 or done == total:
            point = dev_point(model, head, states["dev"], examples["dev"], records["dev"],
                              args.first_layer, args.num_layers, done, epoch)
            point.pop("metrics")
            evals.append(point)
            tqdm.write(f"step {done}: dev F1 {point['dev_f1']:.3f}, "
                       f"AUROC {point['dev_step_auroc']:.3f}")
            if point["dev_f1"] > best["dev_f1"]:
                best, bad = {"step": done, "dev_f1": point["dev_f1"], "params": snapshot()}, 0
            else:
                bad += 1
                stopped = bad >= args.patience
            save_checkpoint(done)
        elif done % args.checkpoint_every == 0:
            save_checkpoint(done)
    bar.close()
    done = len(log)
    if not stopped and done < total and (not evals or evals[-1]["step"] != done):
        # stopped by --max-steps between evaluations: checkpoint (a later run resumes from
        # here as if never stopped), then weigh the current weights against the best so far
        # without recording them in the checkpoint
        save_checkpoint(done)
        point = dev_point(model, head, states["dev"], examples["dev"], records["dev"],
                          args.first_layer, args.num_layers, done, plan[done - 1][0])
        point.pop("metrics")
        evals = [*evals, {**point, "budget_stop": True}]
        if point["dev_f1"] > best["dev_f1"]:
            best = {"step": done, "dev_f1": point["dev_f1"], "params": snapshot()}
    seconds["training"] = train_seconds + time.perf_counter() - t1

    t2 = time.perf_counter()
    with torch.no_grad():  # ship the best dev point, not the last
        for p, saved in zip(params, best["params"], strict=True):
            p.copy_(saved)
    final = dev_point(model, head, states["dev"], examples["dev"], records["dev"],
                      args.first_layer, args.num_layers, best["step"], None, n_bootstrap=1000)
    threshold, dev_metrics = final["threshold"], final["metrics"]
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
        "trained_on": "training problems (train.jsonl, then generated with --extra-seed), tag "
                      "rows of the steps up to and including the first error",
        "train_examples": len(train), "train_steps": len(labels),
        "extra_seed": args.extra_seed, "eval_every": eval_every, "patience": args.patience,
        "best_step": best["step"], "features": "float16", "max_steps": args.max_steps,
        "threshold_chosen_on": f"dev split ({len(records['dev'])} examples)",
    }
    save_adapter(out / ADAPTER_FILE, tensors, settings)
    if log:  # none under --max-steps 0 (the head alone)
        with (out / "loss.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(log[0]))
            writer.writeheader()
            writer.writerows(log)
        plot_loss(log, out / "loss.png", steps_per_epoch=len(batches))
    seconds["total"] = time.perf_counter() - t0
    report = {"settings": settings, "dev": dev_metrics, "dev_f1_at_threshold": final["dev_f1"],
              "head_only_dev": evals[0]["metrics"],
              "dev_curve": [{k: v for k, v in e.items() if k != "metrics"} for e in evals],
              "stopped_early": stopped,
              "seconds": {k: round(v, 1) for k, v in seconds.items()},
              "threads": args.threads}
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k in ("dev_curve", "seconds")},
                     indent=2))
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
