"""A seeded generator of step-labelled arithmetic word problems (ProcessBench style).

Each example is a short story (a start amount, then 3–4 events: buying packs, giving away,
receiving, doubling, sharing into equal boxes…) whose solution takes one step per computation
and ends with ``So the answer is N.``. Half the examples are correct; the other half carry one
injected error, of one of four kinds, at a random step:

- ``arithmetic``: the right operation on the right numbers with a wrong result (an off-by-one, a
  dropped carry, a times-table slip, swapped digits);
- ``carried_value``: a value taken from an earlier step is mis-copied (or the final answer
  repeats an earlier value); the arithmetic on it is right;
- ``wrong_operation``: adds instead of subtracting, multiplies instead of dividing, …; computed
  correctly;
- ``misread_number``: a number from the problem is misread; computed correctly.

Steps after the first error carry the wrong value forward with correct arithmetic, and are
**labelled incorrect** (Math-Shepherd's convention: a step is correct when the solution can still
reach the right answer from it). ``first_error`` is ProcessBench's label: the index of the first
wrong step, ``-1`` when every step is correct.

Two more splits come from the same stories: ``dev`` (the train distribution, for choosing a
fine-tuned PRM's threshold without touching ``test``) and ``hard``, whose errors are of two kinds
that ``train`` never contains (``HARD_ERROR_TYPES``):

- ``wrong_operand``: an operand is replaced by *another* number that is really there (a number
  of the problem or an earlier step's result, never a slip of the right one), computed correctly:
  a "does this number appear in the context?" check no longer finds it;
- ``skipped_step``: a step that updates the running amount is left out, so the next step (or the
  final answer) builds on the amount from before it; every step that is written is computed
  correctly.

Records are in TRL's stepwise-supervision shape: ``prompt`` (the problem), ``completions`` (the
steps), ``labels`` (one bool per step), plus ``first_error``, ``error_type``, ``answer``, ``id``.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._args import MissingFileError
from .._args import path as args_path
from .._package import default_data_dir

Split = Literal["train", "test", "dev", "hard"]
SPLITS: tuple[str, ...] = ("train", "test", "dev", "hard")
#: The error kinds of ``train``, ``test`` and ``dev``.
ERROR_TYPES: tuple[str, ...] = ("arithmetic", "carried_value", "wrong_operation",
                                "misread_number")
#: The error kinds of ``hard``: none of them occurs in ``train``.
HARD_ERROR_TYPES: tuple[str, ...] = ("wrong_operand", "skipped_step")
#: Examples per split of the shipped files (``data/prm/*.jsonl``).
DEFAULT_SIZES: dict[str, int] = {"train": 800, "test": 400, "dev": 200, "hard": 200}
DEFAULT_SEED = 5
_SPLIT_OFFSET = {"train": 0, "test": 1, "dev": 2, "hard": 3}
#: The splits whose problems a split must not repeat (``train``/``test`` keep their original rule).
_EXCLUDES = {"train": (), "test": ("train",), "dev": ("train", "test"),
             "hard": ("train", "test", "dev")}

_NAMES = ("Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Iris", "Tom", "Sara",
          "Yuki", "Ben", "Nina", "Kofi", "Elena", "Max", "Priya", "Hugo", "Ana")
_ITEMS = ("apples", "stickers", "marbles", "coins", "books", "cards", "beads", "pencils",
          "cookies", "stamps", "shells", "buttons")
_OTHERS = ("a brother", "a friend", "a sister", "a neighbour", "the teacher", "a cousin")
_CONTAINERS = ("packs", "bags", "boxes", "jars", "sets")

_OPS: dict[str, Callable[[int, int], int | None]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b if a >= b else None,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b if b and a % b == 0 else None,
}
#: The wrong operation a solver might use instead of each right one.
_WRONG_OPS = {"+": ("-", "*"), "-": ("+",), "*": ("+",), "/": ("*", "-")}


@dataclass
class _Step:
    """One computation ``left op right = result``; ``left``/``right`` name where the operand
    comes from: ``("given", n)`` (a number of the problem) or ``("step", i)`` (step i's result).
    ``text`` formats ``{a}``, ``{b}``, ``{r}``."""

    text: str
    op: str
    left: tuple[str, int]
    right: tuple[str, int]


def _event(rng: random.Random, value: int, item: str, who: str) -> tuple[str, list[_Step]]:
    """One story event on the running amount (its step operand is ``("run", 0)``)."""
    run, given = ("run", 0), "given"
    while True:
        kind = rng.choice(("buy", "give", "receive", "scale", "share", "sell"))
        if kind == "buy":
            k, m, box = rng.randint(2, 9), rng.randint(3, 25), rng.choice(_CONTAINERS)
            return (
                f"{who} buys {k} {box} with {m} {item} in each.",
                [_Step(rng.choice((f"{k} {box} of {m} {item} make {{a}} * {{b}} = {{r}} {item}.",
                                   f"The {box} hold {{a}} * {{b}} = {{r}} {item}.")),
                       "*", (given, k), (given, m)),
                 _Step(rng.choice((f"Now {who} has {{a}} + {{b}} = {{r}} {item}.",
                                   f"After buying, that is {{a}} + {{b}} = {{r}} {item}.")),
                       "+", run, ("prev", 0))],
            )
        if kind == "sell" and value >= 8:
            k = rng.randint(2, 5)
            m = rng.randint(2, max(2, value // k))
            if k * m <= value:
                return (
                    f"{who} sells {k} bags with {m} {item} in each.",
                    [_Step(f"The bags hold {{a}} * {{b}} = {{r}} {item}.", "*", (given, k),
                           (given, m)),
                     _Step(rng.choice((f"{who} has {{a}} - {{b}} = {{r}} {item} left.",
                                       f"That leaves {{a}} - {{b}} = {{r}} {item}.")),
                           "-", run, ("prev", 0))],
                )
        if kind == "give" and value >= 4:
            x = rng.randint(1, value - 1)
            return (
                f"{who} gives {x} {item} to {rng.choice(_OTHERS)}.",
                [_Step(rng.choice((f"After giving {x} away, {who} has {{a}} - {{b}} = {{r}} "
                                   f"{item}.",
                                   f"{who} now has {{a}} - {{b}} = {{r}} {item}.")),
                       "-", run, (given, x))],
            )
        if kind == "receive":
            x = rng.randint(2, 60)
            return (
                f"Then {rng.choice(_OTHERS)} gives {who} {x} more {item}.",
                [_Step(rng.choice((f"With the gift, {who} has {{a}} + {{b}} = {{r}} {item}.",
                                   f"That makes {{a}} + {{b}} = {{r}} {item}.")),
                       "+", run, (given, x))],
            )
        if kind == "scale" and value <= 150:
            k = rng.choice((2, 2, 3, 4))
            word = {2: "doubles", 3: "triples", 4: "quadruples"}[k]
            return (
                f"Next, {who} {word} the number of {item}.",
                [_Step(f"{word.capitalize()} means {{a}} * {{b}} = {{r}} {item}.", "*", run,
                       (given, k))],
            )
        if kind == "share":
            divisors = [k for k in range(2, 10) if value % k == 0 and value // k >= 2]
            if divisors:
                k = rng.choice(divisors)
                return (
                    f"{who} puts the {item} into {k} equal piles and keeps only one pile.",
                    [_Step(rng.choice((f"One pile has {{a}} / {{b}} = {{r}} {item}.",
                                       f"{who} keeps {{a}} / {{b}} = {{r}} {item}.")),
                           "/", run, (given, k))],
                )


def _story(rng: random.Random) -> tuple[str, list[_Step]]:
    """A problem text and its computation steps, operands resolved to step indices."""
    who, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    start = rng.randint(5, 90)
    sentences = [f"{who} has {start} {item}."]
    steps: list[_Step] = []
    value, run_source = start, ("given", start)
    for _ in range(rng.randint(3, 4)):
        sentence, new = _event(rng, value, item, who)
        sentences.append(sentence)
        for step in new:
            step.left = _resolve(step.left, run_source, len(steps))
            step.right = _resolve(step.right, run_source, len(steps))
            steps.append(step)
        value = _evaluate(steps)[-1]
        run_source = ("step", len(steps) - 1)
    sentences.append(f"How many {item} does {who} have at the end?")
    return " ".join(sentences), steps


def _resolve(source: tuple[str, int], run_source: tuple[str, int], index: int):
    if source[0] == "run":
        return run_source
    if source[0] == "prev":
        return ("step", index - 1)
    return source


def _evaluate(steps: list[_Step], overrides: dict[int, dict[str, Any]] | None = None):
    """Results of every step; ``overrides[i]`` may replace step i's ``a``/``b``/``op``/``r``.

    Returns ``None`` when a result is not a non-negative integer (the error does not fit)."""
    overrides = overrides or {}
    results: list[int] = []
    for i, step in enumerate(steps):
        o = overrides.get(i, {})
        a = o.get("a", _operand(step.left, results))
        b = o.get("b", _operand(step.right, results))
        r = o["r"] if "r" in o else _OPS[o.get("op", step.op)](a, b)
        if r is None or r < 0:
            return None
        results.append(r)
    return results


def _operand(source: tuple[str, int], results: list[int]) -> int:
    kind, n = source
    return n if kind == "given" else results[n]


def _near(rng: random.Random, n: int) -> int:
    """A plausible slip of ``n``: ±1, ±2, ±10, or swapped digits; never ``n`` itself."""
    options = {n + 1, n - 1, n + 2, n - 2, n + 10, n - 10}
    digits = str(n)
    if len(digits) >= 2 and digits[-1] != digits[-2]:
        options.add(int(digits[:-2] + digits[-1] + digits[-2]))
    return rng.choice(sorted(o for o in options if o >= 0 and o != n))


def _inject(rng: random.Random, steps: list[_Step], kind: str):
    """Pick a step and an override that makes it wrong in the way ``kind`` says, with later
    steps carried forward. Returns ``(first_error, overrides, final_answer)`` or ``None``."""
    right = _evaluate(steps)
    n = len(steps)
    candidates = list(range(n + 1))  # index n is the final-answer step
    rng.shuffle(candidates)
    for i in candidates:
        if i == n:
            if kind != "carried_value":
                continue
            # the final answer repeats an earlier value instead of the last one
            earlier = [r for r in right[:-1] if r != right[-1]]
            if earlier:
                return n, {}, rng.choice(earlier)
            continue
        step, o = steps[i], {}
        a, b = _operand(step.left, right), _operand(step.right, right)
        if kind == "arithmetic":
            r = right[i]
            o["r"] = r + rng.choice((b, -b)) if step.op == "*" and rng.random() < 0.3 else _near(
                rng, r)
            if o["r"] == r:
                continue
        elif kind == "carried_value":
            # a value carried from an earlier step is mis-copied
            carried = [k for k, src in (("a", step.left), ("b", step.right)) if src[0] == "step"]
            if not carried:
                continue
            side = rng.choice(carried)
            o[side] = _near(rng, a if side == "a" else b)
        elif kind == "wrong_operation":
            o["op"] = rng.choice(_WRONG_OPS[step.op])
        elif kind == "misread_number":
            given = [k for k, src in (("a", step.left), ("b", step.right)) if src[0] == "given"]
            if not given:
                continue
            side = rng.choice(given)
            value = a if side == "a" else b
            o[side] = _near(rng, value) if value > 2 else value + rng.randint(1, 3)
        results = _evaluate(steps, {i: o})
        if results is None or (results[i] == right[i] and kind != "arithmetic"):
            continue
        if results[-1] == right[-1]:
            continue  # the error cancels out: the later steps would not all be wrong
        return i, {i: o}, results[-1]
    return None


def _is_near(v: int, n: int) -> bool:
    """``v`` is one of the slips ``_near`` could make of ``n`` (or ``n`` itself)."""
    return abs(v - n) <= 2 or abs(v - n) == 10 or (
        len(str(n)) >= 2 and str(v) == str(n)[:-2] + str(n)[-1] + str(n)[-2])


def _inject_hard(rng: random.Random, steps: list[_Step], kind: str):
    """Like ``_inject`` for ``HARD_ERROR_TYPES``. Returns ``(first_error, overrides, final,
    skipped)`` (``skipped``: the step index left out, or ``None``) or ``None``."""
    right = _evaluate(steps)
    n = len(steps)
    candidates = list(range(n))
    rng.shuffle(candidates)
    givens = sorted({src[1] for s in steps for src in (s.left, s.right) if src[0] == "given"})
    # the running amount: the steps whose result a later step takes as its left operand
    running = {src[1] for s in steps for src in (s.left,) if src[0] == "step"} | {n - 1}
    for i in candidates:
        step = steps[i]
        if kind == "wrong_operand":
            side = rng.choice(("a", "b"))
            source = step.left if side == "a" else step.right
            value = _operand(source, right)
            pool = [v for v in (*givens, *right[:i]) if not _is_near(v, value)]
            if not pool:
                continue
            o = {side: rng.choice(sorted(set(pool)))}
            results = _evaluate(steps, {i: o})
            if results is None or results[-1] == right[-1]:
                continue
            return i, {i: o}, results[-1], None
        if kind == "skipped_step":
            if i not in running:
                continue
            before = _operand(step.left, right)  # the running amount before step i
            later = {k: {"a": before} for k in range(i + 1, n) if steps[k].left == ("step", i)}
            results = _evaluate(steps, later)
            final = before if i == n - 1 else (None if results is None else results[-1])
            if final is None or final == right[-1]:
                continue
            return i, later, final, i
    return None


def _render(steps: list[_Step], overrides: dict[int, dict[str, Any]]) -> list[str]:
    results = _evaluate(steps, overrides)
    texts = []
    for i, step in enumerate(steps):
        o = overrides.get(i, {})
        a = o.get("a", _operand(step.left, results))
        b = o.get("b", _operand(step.right, results))
        template = step.text.replace(f" {step.op} ", " {op} ", 1)
        texts.append(template.format(a=a, b=b, r=results[i], op=o.get("op", step.op)))
    return texts


def generate_example(rng: random.Random, *, error: bool,
                     kinds: tuple[str, ...] = ERROR_TYPES) -> dict[str, Any]:
    """One example; ``error=True`` injects one error of a random kind (see module docstring).

    Args:
        rng: the random source (the example is a function of its state).
        error: inject an error.
        kinds: the error kinds to draw from (``ERROR_TYPES`` or ``HARD_ERROR_TYPES``).

    Returns:
        ``{"id", "prompt", "completions", "labels", "first_error", "error_type", "answer"}``.
    """
    while True:
        problem, steps = _story(rng)
        answer = _evaluate(steps)[-1]
        overrides: dict[int, dict[str, Any]] = {}
        first_error, error_type, final, skipped = -1, None, answer, None
        if error:
            error_type = rng.choice(kinds)
            if error_type in HARD_ERROR_TYPES:
                injected = _inject_hard(rng, steps, error_type)
            else:
                injected = _inject(rng, steps, error_type)
                injected = None if injected is None else (*injected, None)
            if injected is None:
                continue
            first_error, overrides, final, skipped = injected
        texts = _render(steps, overrides)
        if skipped is not None:
            del texts[skipped]
        texts.append(f"So the answer is {final}.")
        labels = [first_error == -1 or i < first_error for i in range(len(texts))]
        return {
            "id": "",
            "prompt": problem,
            "completions": texts,
            "labels": labels,
            "first_error": first_error,
            "error_type": error_type,
            "answer": answer,
        }


def generate_prm_dataset(
    split: Split, *, n: int | None = None, seed: int = DEFAULT_SEED
) -> list[dict[str, Any]]:
    """The examples of one split, deterministically from ``seed``.

    Half the examples (alternating) carry an error. Test examples never repeat a train
    problem's text, dev examples neither a train nor a test one, hard examples none of the
    three (those splits are regenerated to check). ``hard`` draws its errors from
    ``HARD_ERROR_TYPES``, the others from ``ERROR_TYPES``.

    Args:
        split: ``"train"``, ``"test"``, ``"dev"`` or ``"hard"``.
        n: number of examples (default ``DEFAULT_SIZES[split]``).
        seed: base seed; each split draws from its own stream.

    Returns:
        A list of records (see ``generate_example``).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    n = DEFAULT_SIZES[split] if n is None else n
    for name, value in (("n", n), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be a whole number, got {value!r}"
                            + (f" (the default seed is {DEFAULT_SEED}; the dataset is "
                               "deterministic, so there is no random seed)"
                               if name == "seed" else ""))
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    excluded = {r["prompt"] for other in _EXCLUDES[split]
                for r in generate_prm_dataset(other, seed=seed)}
    kinds = HARD_ERROR_TYPES if split == "hard" else ERROR_TYPES
    rng = random.Random(seed * 1000 + _SPLIT_OFFSET[split])
    records: list[dict[str, Any]] = []
    while len(records) < n:
        record = generate_example(rng, error=len(records) % 2 == 1, kinds=kinds)
        if record["prompt"] not in excluded:
            record["id"] = f"{split}-{len(records):05d}"
            records.append(record)
    return records


#: Stream offset of ``generate_training_problems`` (no split of ``_SPLIT_OFFSET`` uses it).
_EXTRA_OFFSET = 10


def generate_training_problems(
    n: int, *, seed: int = 1, base_seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """More training problems for a learning curve, none of them a shipped split's problem.

    Draws from its own stream (``seed * 1000 + 10``), with the ``train`` distribution (half the
    examples carry an error of ``ERROR_TYPES``), and skips any problem whose text occurs in
    ``train``, ``test``, ``dev`` or ``hard`` as generated from ``base_seed`` (the shipped files)
    or earlier in this list. The first ``k`` records of ``n`` are the records of ``k``, so
    nested training sets (800, 3,200, 12,800) share their problems.

    Args:
        n: number of problems (>= 0).
        seed: this stream's seed (ids are ``"gen{seed}-00000"``…).
        base_seed: the seed of the splits to exclude.

    Returns:
        Records in the shape of ``generate_prm_dataset``.

    Raises:
        ValueError: ``n < 0``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    seen = {r["prompt"] for split in SPLITS for r in generate_prm_dataset(split, seed=base_seed)}
    rng = random.Random(seed * 1000 + _EXTRA_OFFSET)
    records: list[dict[str, Any]] = []
    while len(records) < n:
        record = generate_example(rng, error=len(records) % 2 == 1, kinds=ERROR_TYPES)
        if record["prompt"] not in seen:
            seen.add(record["prompt"])
            record["id"] = f"gen{seed}-{len(records):05d}"
            records.append(record)
    return records


def write_prm_dataset(
    out_dir: str | os.PathLike | None = None, *, seed: int = DEFAULT_SEED,
    sizes: dict[str, int] | None = None,
) -> dict[str, Path]:
    """Write ``{train,test,dev,hard}.jsonl`` (one JSON record per line, UTF-8, ``\\n``).

    Args:
        out_dir: target folder (default ``data/prm``).
        seed: base seed.
        sizes: examples per split (default ``DEFAULT_SIZES``).

    Returns:
        ``{split: path}``.
    """
    out = Path(out_dir) if out_dir is not None else default_data_dir() / "prm"
    out.mkdir(parents=True, exist_ok=True)
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    paths = {}
    for split in SPLITS:
        path = out / f"{split}.jsonl"
        records = generate_prm_dataset(split, n=sizes[split], seed=seed)
        with path.open("w", encoding="utf-8", newline="\n") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        paths[split] = path
    return paths


def load_prm_dataset(split: Split, *, path: str | os.PathLike | None = None):
    """The shipped step-labelled examples of one split.

    Args:
        split: ``"train"``, ``"test"``, ``"dev"`` or ``"hard"`` (see ``generate_prm_dataset``).
        path: a JSONL file to read instead of ``data/prm/{split}.jsonl``.

    Returns:
        A list of dicts with ``prompt``, ``completions``, ``labels`` (TRL stepwise supervision;
        ``datasets.Dataset.from_list`` takes it as is), ``first_error``, ``error_type``,
        ``answer`` and ``id``. When the shipped file is absent (a non-editable install), the
        same records are regenerated in memory.

    Raises:
        ValueError: unknown split.
        FileNotFoundError: an explicit ``path`` that does not exist.
    """
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    file = args_path("path", path) if path is not None else (
        default_data_dir() / "prm" / f"{split}.jsonl")
    if not file.exists():
        if path is not None:
            raise MissingFileError(f"no PRM data at {file} (path=)")
        return generate_prm_dataset(split)
    if not file.is_file():
        raise ValueError(f"the PRM data at {file} is not a file (path= or TOKPOOL_DATA_DIR)")
    return read_records(file)


def read_records(file: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file, one JSON object a line; a bad line is named by its file
    and number, with how to restore the file.

    Raises:
        ValueError: a line that is not JSON, or not a JSON object.
    """
    records = []
    with file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{file}, line {number}, is not JSON ({err.msg} at column "
                                 f"{err.colno}): the file is damaged. {_RESTORE}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{file}, line {number}, holds {type(record).__name__} "
                                 f"{line.strip()[:40]!r}, not a record (a JSON object). "
                                 f"{_RESTORE}")
            records.append(record)
    return records


_RESTORE = ("Restore it: in a clone of tokpool `git checkout -- data/prm`; for a copy under "
            "$TOKPOOL_DATA_DIR copy data/prm from the repository again; or rewrite it with "
            "`python -m tokpool.prm make-data`")


def stratum(record: dict[str, Any]) -> str:
    """A record's stratum for ``stratified_sample``: ``"correct"`` or its error type."""
    return "correct" if record["first_error"] < 0 else str(record["error_type"])


def stratified_sample(records: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` records with the mix of ``records``: each stratum (correct solutions, and each
    error type) gets its share of ``n``, rounded by largest remainder; within a stratum the
    records are taken in split order. No randomness: the same split gives the same sample.

    So a small live evaluation measures what the whole split measures (the same share of
    erroneous solutions, the same error types), not whatever the first ``n`` happen to hold.

    Args:
        records: dataset records (``load_prm_dataset``), each with ``first_error`` and
            ``error_type``.
        n: how many to take, ``1 <= n <= len(records)``.

    Returns:
        The chosen records, in split order.

    Raises:
        ValueError: ``n`` out of range.

    Example:
        >>> recs = [{"first_error": -1, "error_type": None}] * 6 + [
        ...     {"first_error": 1, "error_type": "arithmetic"}] * 4
        >>> [stratum(r) for r in stratified_sample(recs, 5)]
        ['correct', 'correct', 'correct', 'arithmetic', 'arithmetic']
    """
    records = list(records)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(records):
        raise ValueError(f"n must be a whole number from 1 to {len(records)} (the records "
                         f"given), got {n!r}")
    groups: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        groups.setdefault(stratum(record), []).append(i)
    exact = {key: n * len(rows) / len(records) for key, rows in groups.items()}
    take = {key: int(share) for key, share in exact.items()}
    by_remainder = sorted(groups, key=lambda k: (-(exact[k] - take[k]), list(groups).index(k)))
    for key in by_remainder[: n - sum(take.values())]:
        take[key] += 1
    chosen = sorted(i for key, rows in groups.items() for i in rows[: take[key]])
    return [records[i] for i in chosen]
