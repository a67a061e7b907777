"""tokpool's index bytes against folders the real indexers write, part by part.

    python -m benchmarks.index_real                 # the grid: 300 and 1,200 documents, nbits 1/2/4
    python -m benchmarks.index_real --small         # one index per library (what CI's test builds)

Builds each index with ``scripts/build_real_index.py`` in the index venv (``make index``:
fast-plaid 1.7.0, colbert-ai 0.2.22, PyLate 1.6.0 on fast-plaid 1.4.6; random unit vectors, no
model), groups the folder's files into tokpool's parts (``index_files.FILE_PARTS``) and sets
``tp.late_interaction.multivector_index_bytes`` beside them. The grid writes
``benchmarks/results/index_bytes_real.json`` (``make index-test``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tokpool.late_interaction import multivector_index_bytes
from tokpool.late_interaction.index_files import folder_part

ROOT = Path(__file__).resolve().parents[1]
INDEX_VENV = ROOT / ".venv-index"
INDEX_PYTHON_ENV = "TOKPOOL_INDEX_PYTHON"
LIBRARIES = ("colbert", "fast-plaid", "pylate")
OUT = ROOT / "benchmarks" / "results" / "index_bytes_real.json"


def index_python() -> Path | None:
    """The index venv's Python (``$TOKPOOL_INDEX_PYTHON``, else ``.venv-index``), if built."""
    explicit = os.environ.get(INDEX_PYTHON_ENV)
    path = Path(explicit) if explicit else INDEX_VENV / "bin" / "python"
    stamp = path.parent.parent / ".tokpool-index-installed"
    return path if path.exists() and (explicit or stamp.exists()) else None


def why_missing() -> str:
    """Why there is no index venv, in words (its ``.failed`` file, else how to build it)."""
    failed = INDEX_VENV.with_name(INDEX_VENV.name + ".failed")
    if failed.exists():
        return f"the index venv could not be built: {failed.read_text().strip()}"
    return f"no index venv: run `make index` (or set {INDEX_PYTHON_ENV})"


def build(library: str, n_docs: int, nbits: int, *, python: Path, seed: int = 0) -> dict:
    """One real index's folder (``{file: bytes}``) and how it was built; ``seconds`` added."""
    t0 = time.perf_counter()
    run = subprocess.run(
        [str(python), str(ROOT / "scripts" / "build_real_index.py"), library, str(n_docs),
         str(nbits), "--seed", str(seed)],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=900, check=False)
    if run.returncode:
        raise RuntimeError(f"building the {library} index failed:\n{run.stderr[-3000:]}")
    out = json.loads(run.stdout.strip().splitlines()[-1])  # faiss prints to stdout before it
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def compare(real: dict) -> dict:
    """tokpool's parts and total beside the real folder's: bytes and ratio (tokpool / real)."""
    layout = real["library"]
    b = multivector_index_bytes(real["doc_lens"], real["dim"], real["raw_dtype"],
                                nbits=real["nbits"], layout=layout)
    folder: dict[str, int] = {}
    for name, size in real["files"].items():
        part = folder_part(layout, name)
        folder[part] = folder.get(part, 0) + size
    parts = {p: {"tokpool": b.parts.get(p, 0), "real": folder.get(p, 0),
                 "ratio": round(b.parts.get(p, 0) / folder[p], 5) if folder.get(p) else None}
             for p in sorted(set(folder) | set(b.parts))}
    total = sum(folder.values())
    return {"layout": layout, "version": real["version"], "fast_plaid": real["fast_plaid"],
            "n_docs": real["n_docs"], "nbits": real["nbits"], "dim": real["dim"],
            "n_vectors": b.n_vectors, "partitions": b.partitions,
            "tokpool_total": b.total_bytes, "real_total": total,
            "ratio": round(b.total_bytes / total, 5), "parts": parts,
            "build_seconds": real["seconds"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="one index per library (300, nbits 2)")
    a = p.parse_args(argv)
    python = index_python()
    if python is None:
        print(f"index_real: {why_missing()}", file=sys.stderr)
        return 1
    grid = [(lib, 300, 2) for lib in LIBRARIES] if a.small else [
        (lib, n, bits) for lib in LIBRARIES for n in (300, 1_200) for bits in (1, 2, 4)]
    rows = []
    for lib, n, bits in grid:
        row = compare(build(lib, n, bits, python=python))
        rows.append(row)
        print(f"{lib:10} {row['version']:10} docs {n:5} nbits {bits}: tokpool "
              f"{row['tokpool_total']:>11,} B, real {row['real_total']:>11,} B, ratio "
              f"{row['ratio']:.4f}  ({row['build_seconds']} s)", flush=True)
    if not a.small:
        OUT.write_text(json.dumps({
            "what": "tp.late_interaction.multivector_index_bytes against index folders the real "
                    "libraries wrote (random unit vectors, 16-128 tokens a document, dim 128, "
                    "float32 raw vectors; CPU, 2 shared cores)",
            "worst_total_ratio_off": round(max(abs(r["ratio"] - 1) for r in rows), 5),
            "rows": rows}, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
