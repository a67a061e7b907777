"""``python -m tokpool.prm make-data | train-probe | train-prm | eval-prm``: rebuild ``data/prm/``.

- ``make-data [--out DIR] [--seed N]`` writes ``data/prm/{train,test,dev,hard}.jsonl``.
- ``train-probe [...]``, ``train-prm [...]``, ``eval-prm [...]`` run ``scripts/train_probe.py``,
  ``scripts/train_prm.py`` and ``scripts/eval_prm.py`` of the checkout this package sits in
  (the training scripts live outside the package; ``--help`` is theirs).
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from .dataset import DEFAULT_SEED, write_prm_dataset

SCRIPTS = {"train-probe": "train_probe.py", "train-prm": "train_prm.py",
           "eval-prm": "eval_prm.py"}


def script_path(command: str) -> Path:
    """``scripts/<file>`` of the repository this package was imported from.

    Raises:
        FileNotFoundError: the package is installed without its repository (non-editable).
    """
    path = Path(__file__).resolve().parents[2] / "scripts" / SCRIPTS[command]
    if not path.is_file():
        raise FileNotFoundError(
            f"{command} runs {path}, which is not there: the training scripts ship with the "
            "tokpool repository, not the installed package. Run it from a checkout "
            "(`pip install -e .`)"
        )
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tokpool.prm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    data = sub.add_parser("make-data", help="write data/prm/{train,test,dev,hard}.jsonl")
    data.add_argument("--out", default=None, help="output folder (default data/prm)")
    data.add_argument("--seed", type=int, default=None)
    for command, file in SCRIPTS.items():
        sub.add_parser(command, help=f"run scripts/{file} (see its --help)", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "make-data":

        seed = DEFAULT_SEED if args.seed is None else args.seed
        for split, path in write_prm_dataset(args.out, seed=seed).items():
            print(f"{split}: {path}")
        return
    path = script_path(args.command)
    saved = sys.argv
    sys.argv = [str(path), *rest]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved


if __name__ == "__main__":
    main(sys.argv[1:])
