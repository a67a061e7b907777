"""Build one real late-interaction index over random unit vectors and list its folder, file by file.

Run with the index venv's Python (scripts/build-index-venv.sh), never tokpool's: it imports the
indexers, not tokpool.

    .venv-index/bin/python scripts/build_real_index.py LIBRARY N_DOCS NBITS [--dim 128] [--seed 0]

LIBRARY is ``fast-plaid`` (fast-plaid 1.7.0's ``FastPlaid.create``), ``colbert`` (colbert-ai
0.2.22's ``Indexer.index`` with its encoder replaced by the random vectors: no model) or
``pylate`` (PyLate 1.6.0's ``indexes.PLAID`` on the fast-plaid it pins, 1.4.6, which the venv
keeps in its ``fast-plaid-1.4.6`` folder; put first on ``sys.path`` here). Document ``i`` has
``lengths[i]`` float32 token vectors of ``dim``, L2-normalised, drawn from ``seed`` (the lengths
too: 16 to 128 tokens). Prints one JSON object: the library and its version, ``doc_lens``,
``dim``, ``nbits`` and ``files`` (``{name: bytes}``, the whole folder).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))


def _vectors(n_docs: int, dim: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(16, 129, (n_docs,), generator=g).tolist()
    docs = [torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=-1)
            for n in lens]  # each [n, dim] float32
    return lens, docs


def _folder(path: str) -> dict[str, int]:
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            out[os.path.relpath(full, path)] = os.path.getsize(full)
    return out


def build_fast_plaid(docs, nbits: int, where: str) -> str:
    from fast_plaid import search

    index = os.path.join(where, "fast_plaid")
    search.FastPlaid(index=index, device="cpu").create(documents_embeddings=docs, nbits=nbits)
    return index


def build_pylate(docs, nbits: int, where: str) -> str:
    from pylate import indexes

    indexes.PLAID(index_folder=where, index_name="pylate", override=True, nbits=nbits,
                  device="cpu", show_progress=False).add_documents(
        documents_ids=[str(i) for i in range(len(docs))], documents_embeddings=docs)
    return os.path.join(where, "pylate")


def build_colbert(docs, nbits: int, where: str) -> str:
    import torch
    from colbert.indexing import collection_indexer
    from colbert.infra import ColBERTConfig, Run, RunConfig

    class RandomEncoder:  # colbert-ai's CollectionEncoder, with the vectors given
        def __init__(self, config, checkpoint):
            pass

        def encode_passages(self, passages):
            chosen = [docs[int(p)] for p in passages]
            if not chosen:
                return torch.empty(0, docs[0].shape[1]), []
            return torch.cat(chosen), [d.shape[0] for d in chosen]

    collection_indexer.Checkpoint = lambda *a, **k: None
    collection_indexer.CollectionEncoder = RandomEncoder
    dim = docs[0].shape[1]
    with Run().context(RunConfig(nranks=1, root=where, experiment="tokpool")):
        config = ColBERTConfig(nbits=nbits, dim=dim, doc_maxlen=512, gpus=0, rank=0, nranks=1,
                               checkpoint="random-vectors", index_name="colbert", root=where,
                               experiment="tokpool")
        os.makedirs(config.index_path_, exist_ok=True)
        # Indexer.index without its Launcher (a new process would import the real encoder)
        collection_indexer.encode(config, [str(i) for i in range(len(docs))], [], [], verbose=0)
        return config.index_path_


BUILDERS = {"fast-plaid": build_fast_plaid, "colbert": build_colbert, "pylate": build_pylate}
VERSIONS = {"fast-plaid": "fast-plaid", "colbert": "colbert-ai", "pylate": "pylate"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("library", choices=sorted(BUILDERS))
    p.add_argument("n_docs", type=int)
    p.add_argument("nbits", type=int)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.library == "pylate":
        sys.path.insert(0, os.path.join(sys.prefix, "fast-plaid-1.4.6"))
    lens, docs = _vectors(a.n_docs, a.dim, a.seed)
    with tempfile.TemporaryDirectory() as where:
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            folder = BUILDERS[a.library](docs, a.nbits, where)
        files = _folder(folder)
    out = {"library": a.library, "version": version(VERSIONS[a.library]),
           "fast_plaid": version("fast-plaid"),  # the one on sys.path: PyLate's pin for pylate
           "n_docs": a.n_docs, "nbits": a.nbits, "dim": a.dim, "doc_lens": lens,
           "raw_dtype": "float32", "files": files}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
