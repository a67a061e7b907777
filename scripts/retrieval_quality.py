"""Measure the token-pooling quality table on the shipped retrieval set and write it.

    python scripts/retrieval_quality.py            # -> benchmarks/results/retrieval_quality.json

MiniLM (``minilm-l6``, shipped offline) encodes the 150 queries and 600 documents of
``data/retrieval`` once; ``tp.late_interaction.retrieval_quality`` scores dense mean-pooled
vectors, MaxSim over the token vectors, and MaxSim after ``tp.late_interaction.pool_tokens`` at
factors 2, 3 and 4
(1,000 bootstrap resamples of the queries, seed 0). Notebook 06 reads the file for its prose and
recomputes the table (on a subset in quick mode). MiniLM was trained as a mean-pooled
bi-encoder, not for late interaction.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

import tokpool as tp

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "retrieval_quality.json"


def main() -> int:
    li = tp.late_interaction
    rset = li.load_retrieval_set()
    model = tp.load_model("minilm-l6")
    encoded = li.encode_retrieval_set(model, rset)
    table = li.retrieval_quality(rset, encoded)
    record = {
        "model": encoded.model,
        "set": rset.meta,
        "queries": len(rset.queries),
        "docs": len(rset.docs),
        "doc_tokens": sum(t.shape[0] for t in encoded.d_tokens),
        "dim": int(encoded.d_dense.shape[1]),
        "n_boot": 1000,
        "encode_seconds": round(encoded.seconds, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "methods": json.loads(table.to_json(orient="records")),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(table.drop(columns=["ranks"]).to_string())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
