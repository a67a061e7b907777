"""Redraws per burst of slider values, in a real kernel (issue 48: the memory explorer's
chunk-budget drag took 3.4 s in the browser at load 4.5-9 while one redraw is 0.2 s of work).

The browser sends one message per value a slider takes while committed (a drag's release, each
arrow-key press, each click on the track); this script sends the same ``comm_msg`` updates to a
real ``ipykernel`` (``jupyter_client``, no browser) for the memory explorer's chunk budget and
counts the redraws and the seconds until the kernel is quiet again: one value, and five values
30 ms apart (an arrow key pressed quickly). Each is run with the explorer as it is (browser
values share one pending redraw, ``tokpool/widgets/coalesce.py``) and, side by side in the same
kernel, with one redraw per value (as before). Results, with the load average, go to
``benchmarks/results/explorer_drag.json``.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/explorer_drag.py   # about 1 minute
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from queue import Empty

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "explorer_drag.json"

SETUP = """
import matplotlib; matplotlib.use('Agg')
import tokpool as tp
ex = tp.memory_explorer()
renders = []
_render = ex.render
def _counted():
    renders.append(ex.budget.value)
    return _render()
ex.render = _counted
_ask = ex._redraws.ask
def one_per_value(on):  # as before: every value from the browser redraws, in turn
    ex._redraws.ask = (lambda change=None: ex._redraws._run()) if on else _ask
print(ex.budget.comm.comm_id, ex.budget.index)
"""


def main() -> None:
    from jupyter_client.manager import start_new_kernel

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT), env=env)

    def run(code: str) -> str:
        msg_id = kc.execute(code)
        out: list[str] = []
        while True:
            m = kc.get_iopub_msg(timeout=300)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream":
                out.append(m["content"]["text"])
            if m["msg_type"] == "error":
                raise RuntimeError("\n".join(m["content"]["traceback"]))
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return "".join(out)

    def quiet(seconds: float = 1.0) -> None:
        last = time.monotonic()
        while time.monotonic() - last < seconds:
            try:
                kc.get_iopub_msg(timeout=0.1)
                last = time.monotonic()
            except Empty:
                pass

    try:
        comm_id, index = run(SETUP).split()
        start = int(index)

        def send(i: int) -> None:
            kc.session.send(kc.shell_channel.socket, "comm_msg", {"comm_id": comm_id, "data": {
                "method": "update", "state": {"index": i}, "buffer_paths": []}})

        cases = {"one value (a drag's release)": [start - 1],
                 "five values 30 ms apart (arrow key pressed quickly)":
                     [start - 1, start - 2, start - 3, start - 2, start - 1]}
        result: dict = {}
        for mode, before in (("one redraw per value (before)", True),
                             ("browser values share a redraw (now)", False)):
            run(f"one_per_value({before})")
            for case, values in cases.items():
                runs = []
                for _ in range(3):
                    run("renders.clear()")
                    t = time.monotonic()
                    for i in values:
                        send(i)
                        time.sleep(0.03)
                    quiet()
                    took = time.monotonic() - t - 1.0
                    drawn = json.loads(run("print(renders)").replace("'", '"'))
                    runs.append({"redraws": len(drawn), "seconds_until_quiet": round(took, 2)})
                    send(start)  # back, untimed
                    quiet()
                result.setdefault(mode, {})[case] = runs
                print(mode, "|", case, "|", runs)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    result.update({
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.machine(), "python": platform.python_version(),
        "how": "benchmarks/explorer_drag.py: comm_msg updates of the memory explorer's chunk "
               "budget sent to a real ipykernel (jupyter_client, no browser); redraws counted "
               "in the kernel; seconds from the first value to the kernel's last output",
    })
    OUT.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
