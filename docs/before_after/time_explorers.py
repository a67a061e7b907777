"""Kernel-side redraw time of the token and step-reward explorers, two checkouts in one run.

``python docs/before_after/time_explorers.py BEFORE_CHECKOUT AFTER_CHECKOUT`` runs a worker in
each checkout (``PYTHONPATH``), interleaved (before, after, before, after), each timing every
control on values it has not shown yet: the token explorer's layer slider and its text box
(notebook 03's full-mode text and a new text), and the step-reward explorer's threshold on
notebook 04's opening example. Prints each control's median seconds per checkout and the
ratio. The browser adds its round trip on top (tests/test_browser_explorers.py measures that).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = r'''
import json, time
import matplotlib; matplotlib.use("Agg")
import tokpool as tp
TEXT = ("Token-level pooling keeps one vector per token. A long prompt is split into chunks, "
        "and every chunk must survive until the last one arrives. Process reward models score "
        "each step of a solution at a special tag token, while retrieval models such as ColBERT "
        "compare every query token with every document token. Both need the whole prompt's "
        "hidden states, not just the last one.")
model = tp.load_model("smollm2-135m")
ex = tp.token_explorer(model, TEXT, layer=15)
def timed(set_value):
    start = time.perf_counter(); set_value(); took = time.perf_counter() - start
    assert ex_ok(), "the control was refused"
    return took
out = {"token layer": [], "token new text": [], "step-reward threshold": []}
ex_ok = lambda: ex.error is None
for layer in (3, 9, 21, 27, 30):
    out["token layer"].append(timed(lambda: setattr(ex.layer, "value", layer)))
for i in range(4):
    new = TEXT + f" Run {i}."
    out["token new text"].append(timed(lambda: setattr(ex.text_input, "value", new)))
prm = tp.load_prm()
example = next(r for r in tp.load_prm_dataset("test") if r["first_error"] >= 0)
ex = tp.step_reward_explorer(prm, example["prompt"], example["completions"],
                             true_first_error=example["first_error"], step_labels=example["labels"])
for value in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85):
    out["step-reward threshold"].append(timed(lambda: setattr(ex.threshold, "value", value)))
print("RESULT" + json.dumps(out))
'''


def run(checkout: Path) -> dict[str, list[float]]:
    env = os.environ | {"PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True,
                          text=True, check=True, cwd=checkout)
    return json.loads(done.stdout.split("RESULT", 1)[1])


def main() -> None:
    before, after = (Path(p).resolve() for p in sys.argv[1:3])
    times: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for _ in range(2):
        for name, checkout in (("before", before), ("after", after)):
            for control, values in run(checkout).items():
                times[name].setdefault(control, []).extend(values)
    print(f"{'control':24} {'before s':>9} {'after s':>9} {'after/before':>13}")
    for control in times["before"]:
        b = statistics.median(times["before"][control])
        a = statistics.median(times["after"][control])
        print(f"{control:24} {b:9.3f} {a:9.3f} {a / b:13.2f}")
    print(json.dumps({k: {c: round(statistics.median(v), 3) for c, v in d.items()}
                      for k, d in times.items()}))


if __name__ == "__main__":
    main()
