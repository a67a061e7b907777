"""``python -m tokpool.prm make-data | train-probe``: rebuild what ``data/`` ships.

- ``make-data [--out DIR] [--seed N]`` writes ``data/prm/{train,test}.jsonl``.
- ``train-probe [...]`` extracts SmolLM2 features (cached), trains the probe PRM and writes
  ``data/prm/probe/`` (see ``tokpool.prm.train_probe``).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tokpool.prm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    data = sub.add_parser("make-data", help="write data/prm/{train,test}.jsonl")
    data.add_argument("--out", default=None, help="output folder (default data/prm)")
    data.add_argument("--seed", type=int, default=None)
    sub.add_parser("train-probe", help="train the probe PRM (see --help)", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "make-data":
        from .dataset import DEFAULT_SEED, write_prm_dataset

        seed = DEFAULT_SEED if args.seed is None else args.seed
        for split, path in write_prm_dataset(args.out, seed=seed).items():
            print(f"{split}: {path}")
    else:
        from .train_probe import main as train_main

        train_main(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
