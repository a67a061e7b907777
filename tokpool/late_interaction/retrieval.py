"""A small retrieval set that ships offline, and the metrics to judge rankings on it.

The set (``data/retrieval/``) is built from docstrings of Python's standard library and NumPy,
text every tokpool install already has: a *query* is a function's one-line summary ("Return the
cumulative sum of the elements along a given axis."), its *relevant document* the rest of the
same docstring (the description and parameters, examples cut off), and the other documents are
the rest of other docstrings. One relevant document per query; a ranking is judged by the rank
it gives that document (MRR@10, recall@k), with bootstrap confidence intervals over queries.
It is a small, honest test of "does the query's meaning find its passage", not a benchmark.

Example:
    >>> s = tp.late_interaction.load_retrieval_set()
    >>> len(s.queries), len(s.docs), s.queries[0]["relevant"][0] in s.doc_index
    (150, 600, True)
    >>> tp.late_interaction.mrr_at_k([1, 3, 12], k=10)
    0.4444444444444444
"""

from __future__ import annotations

import importlib
import inspect
import json
import platform
import random
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._args import MissingFileError, whole
from .._package import default_data_dir

__all__ = ["RetrievalSet", "bootstrap_ci", "build_retrieval_set", "load_retrieval_set",
           "mrr_at_k", "ranks_of_relevant", "recall_at_k", "write_retrieval_set"]

#: Modules whose public callables' docstrings make the set (standard library, then NumPy).
STDLIB_MODULES: tuple[str, ...] = (
    "os", "os.path", "shutil", "itertools", "functools", "collections", "json", "re", "math",
    "statistics", "string", "textwrap", "datetime", "random", "heapq", "bisect", "glob",
    "fnmatch", "tempfile", "pathlib", "csv", "zipfile", "tarfile", "gzip", "hashlib", "base64",
    "copy", "pprint", "difflib", "calendar", "time", "operator", "struct", "subprocess",
    "threading", "queue", "logging", "argparse", "urllib.parse", "html", "unicodedata",
    "decimal", "fractions", "zlib", "inspect", "ast", "typing", "contextlib", "enum",
    "dataclasses", "cmath", "weakref", "sys", "io", "codecs", "locale", "shlex", "uuid",
    "ipaddress", "email.utils", "mimetypes", "secrets", "hmac", "warnings", "traceback",
    "tokenize", "platform", "sysconfig", "sqlite3", "pickle", "configparser",
)
NUMPY_MODULES: tuple[str, ...] = ("numpy", "numpy.linalg", "numpy.random", "numpy.fft",
                                  "numpy.polynomial.polynomial", "numpy.ma")
#: Queries taken from each half, documents in all, words kept of a document, the seed.
QUERIES_PER_SOURCE = 75
N_DOCS = 600
MAX_DOC_WORDS = 100
MAX_DOC_CHARS = 600
SEED = 39


@dataclass(frozen=True)
class RetrievalSet:
    """Queries, documents and which document answers each query.

    Attributes:
        queries: dicts with ``id``, ``text``, ``source`` (``"stdlib"``/``"numpy"``) and
            ``relevant`` (the list of relevant document ids: one here).
        docs: dicts with ``id`` (``module.function``), ``text`` and ``source``.
        meta: how it was built (Python and NumPy versions, seed, sizes).
    """

    queries: list[dict[str, Any]]
    docs: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def doc_index(self) -> dict[str, int]:
        """Document id → its position in ``docs``."""
        return {d["id"]: i for i, d in enumerate(self.docs)}

    def subset(self, n_queries: int, n_docs: int) -> RetrievalSet:
        """The first ``n_queries`` queries and ``n_docs`` documents that include every one of
        their relevant documents (for quick runs).

        Raises:
            ValueError: ``n_docs`` below the relevant documents of those queries.
        """
        nq = whole("n_queries", n_queries, minimum=1, maximum=len(self.queries))
        queries = self.queries[:nq]
        needed = {r for q in queries for r in q["relevant"]}
        nd = whole("n_docs", n_docs, minimum=1, maximum=len(self.docs))
        if nd < len(needed):
            raise ValueError(f"n_docs={nd} cannot hold the {len(needed)} relevant documents "
                             f"of the first {nq} queries; pass at least {len(needed)}")
        others = [d for d in self.docs if d["id"] not in needed][: nd - len(needed)]
        keep = needed | {d["id"] for d in others}
        return RetrievalSet(queries=list(queries), docs=[d for d in self.docs if d["id"] in keep],
                            meta={**self.meta, "subset_of": (len(self.queries), len(self.docs))})


def _clean_body(paragraphs: list[str]) -> str:
    lines: list[str] = []
    for line in "\n\n".join(paragraphs).splitlines():
        stripped = line.strip()
        if stripped.startswith(">>>") or stripped in ("Examples", "Example", "Examples:"):
            break  # the examples: code, not prose
        if stripped and set(stripped) <= set("-=~^"):
            continue  # numpydoc's section underlines
        lines.append(stripped)
    kept: list[str] = []
    words = [w for w in " ".join(lines).split() if any(c.isalnum() for c in w)]  # no table rules
    for word in words[:MAX_DOC_WORDS]:
        if sum(len(w) + 1 for w in kept) + len(word) > MAX_DOC_CHARS:
            break  # code-like text makes many tokens per word: keep documents short
        kept.append(word)
    return " ".join(kept)


def _pairs(modules: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(id, summary, body)`` for every public callable with a usable docstring."""
    seen: set[int] = set()
    out: list[tuple[str, str, str]] = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        with warnings.catch_warnings():  # typing.io / typing.re warn when their doc is read
            warnings.simplefilter("ignore", DeprecationWarning)
            found = [(name, obj, inspect.getdoc(obj)) for name, obj in sorted(vars(module).items())
                     if not name.startswith("_") and callable(obj)]
        for name, obj, doc in found:
            if id(obj) in seen or not doc:
                continue
            seen.add(id(obj))
            paragraphs = doc.split("\n\n")
            if re.match(r"^[\w.]+\(.*\)", paragraphs[0]):  # a signature line first (C code)
                paragraphs = paragraphs[1:]
            if len(paragraphs) < 2:
                continue
            summary = " ".join(paragraphs[0].split())
            body = _clean_body(paragraphs[1:])
            if 5 <= len(summary.split()) <= 30 and len(body.split()) >= 25:
                out.append((f"{module_name}.{name}", summary, body))
    return out


def build_retrieval_set(*, seed: int = SEED) -> RetrievalSet:
    """Build the set from the installed standard library's and NumPy's docstrings.

    75 queries from each source, their 150 documents, and 450 more documents drawn from the
    other docstrings; summaries or bodies that occur twice (aliases) are dropped. The same
    Python and NumPy versions give the same set (the shipped one records both).

    Returns:
        A :class:`RetrievalSet` (write it with :func:`write_retrieval_set`).
    """
    rng = random.Random(seed)
    by_source = {"stdlib": _pairs(STDLIB_MODULES), "numpy": _pairs(NUMPY_MODULES)}
    summaries: dict[str, int] = {}
    bodies: dict[str, int] = {}
    for pairs in by_source.values():
        for _, summary, body in pairs:
            summaries[summary] = summaries.get(summary, 0) + 1
            bodies[body] = bodies.get(body, 0) + 1
    queries: list[dict[str, Any]] = []
    pool: list[dict[str, Any]] = []
    relevant: list[dict[str, Any]] = []
    for source, pairs in by_source.items():
        unique = [p for p in pairs if summaries[p[1]] == 1 and bodies[p[2]] == 1]
        rng.shuffle(unique)
        for k, (ident, summary, body) in enumerate(unique):
            doc = {"id": ident, "text": body, "source": source}
            if k < QUERIES_PER_SOURCE:
                queries.append({"id": f"q-{ident}", "text": summary, "source": source,
                                "relevant": [ident]})
                relevant.append(doc)
            else:
                pool.append(doc)
    rng.shuffle(pool)
    docs = relevant + pool[: N_DOCS - len(relevant)]
    rng.shuffle(docs)
    rng.shuffle(queries)
    meta = {"python": platform.python_version(), "numpy": np.__version__, "seed": seed,
            "queries": len(queries), "docs": len(docs), "max_doc_words": MAX_DOC_WORDS,
            "max_doc_chars": MAX_DOC_CHARS,
            "made_by": "tp.late_interaction.write_retrieval_set()"}
    return RetrievalSet(queries=queries, docs=docs, meta=meta)


def default_dir() -> Path:
    """``data/retrieval`` (under ``$TOKPOOL_DATA_DIR`` when set)."""

    return default_data_dir() / "retrieval"


def write_retrieval_set(out_dir: str | Path | None = None, *, seed: int = SEED) -> Path:
    """Build the set and write ``queries.jsonl``, ``docs.jsonl`` and ``meta.json``.

    Returns:
        The folder written (``data/retrieval`` by default).
    """
    folder = Path(out_dir) if out_dir is not None else default_dir()
    folder.mkdir(parents=True, exist_ok=True)
    s = build_retrieval_set(seed=seed)
    for name, rows in (("queries", s.queries), ("docs", s.docs)):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (folder / "meta.json").write_text(json.dumps(s.meta, indent=1) + "\n", encoding="utf-8")
    return folder


def load_retrieval_set(path: str | Path | None = None) -> RetrievalSet:
    """The shipped set (``data/retrieval``), or the one in folder ``path``.

    Raises:
        MissingFileError: the folder has no ``queries.jsonl`` / ``docs.jsonl`` (the message says
            how to write them).
    """
    folder = Path(path) if path is not None else default_dir()
    files = [folder / "queries.jsonl", folder / "docs.jsonl"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise MissingFileError(f"no retrieval set at {folder} (missing {missing}); write it with "
                               "`python -c 'import tokpool as tp; "
                               "tp.late_interaction.write_retrieval_set()'` from a checkout")
    queries, docs = ([json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()
                      if line.strip()] for f in files)
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
    return RetrievalSet(queries=queries, docs=docs, meta=meta)


def ranks_of_relevant(scores: np.ndarray, relevant: Sequence[int]) -> int:
    """The 1-based rank of the best-ranked relevant document in one query's ``scores``.

    Ties count against the relevant document (it ranks after every document scoring the same),
    so a method that scores everything alike is not rewarded.

    Args:
        scores: ``[n_docs]`` one query's score for every document.
        relevant: positions of its relevant documents.
    """
    s = np.asarray(scores, dtype=np.float64)
    best = max(float(s[r]) for r in relevant)
    others = np.ones(len(s), dtype=bool)
    others[list(relevant)] = False
    return 1 + int((s[others] >= best).sum())  # documents not relevant that score as high


def mrr_at_k(ranks: Sequence[int], k: int = 10) -> float:
    """Mean reciprocal rank, counting ``1 / rank`` only for ranks ``<= k`` (0 beyond)."""
    r = np.asarray(ranks, dtype=np.float64)
    return float(np.where(r <= k, 1.0 / r, 0.0).mean())


def recall_at_k(ranks: Sequence[int], k: int) -> float:
    """Share of queries whose relevant document is in the top ``k`` (one relevant each)."""
    return float((np.asarray(ranks) <= k).mean())


def bootstrap_ci(ranks: Sequence[int], metric: Any, *, n_boot: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric(ranks)``, resampling queries.

    Args:
        ranks: one rank per query.
        metric: a function of a rank array (``mrr_at_k``, ``lambda r: recall_at_k(r, 5)``).
        n_boot: resamples; level: the interval's coverage; seed: the resampling seed.

    Returns:
        ``(low, high)``.
    """
    r = np.asarray(ranks)
    rng = np.random.default_rng(seed)
    stats = np.array([metric(r[rng.integers(0, len(r), len(r))]) for _ in range(n_boot)])
    tail = (1 - level) / 2
    return float(np.quantile(stats, tail)), float(np.quantile(stats, 1 - tail))
