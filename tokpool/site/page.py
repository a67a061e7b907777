"""The static pages: HTML with the states inlined as JavaScript data and the figures beside.

The script on a page only *chooses*: it turns the controls' values into a key, shows the state
with that key, or, where no state was computed for that combination, the nearest one (fewest
grid steps away, the control just moved kept where it can be) and says which. It computes no
rule of the engine. ``window.tokpoolShown`` records each switch's time (ms) for the benchmark.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["control_spec", "explorer_page", "index_page", "page"]

_CSS = """body{font-family:sans-serif;margin:16px 24px;max-width:1500px;color:#222}
header.tp{font-size:13px;color:#333;background:#f3f5f8;padding:6px 10px;border-radius:4px;
margin-bottom:12px}
nav a{margin-right:14px}
.controls{display:flex;flex-wrap:wrap;gap:8px 20px;align-items:center;margin:10px 0}
.controls label{font-size:13px}
.snap{font-size:12px;color:#8a4b00;min-height:1.2em}
.figure{overflow-x:auto;max-width:100%}
.figure img{max-width:none}
"""


def page(title: str, header: str, body: str, *, script: str = "") -> str:
    """A whole page: its title, the visible provenance line, the navigation and ``body``."""
    nav = ('<nav><a href="index.html">index</a><a href="buffer.html">buffer stepper</a>'
           '<a href="ownership.html">ownership</a><a href="memory.html">memory</a>'
           '<a href="example.html">first example</a>'
           '<a href="figures.html">figures</a><a href="glossary.html">glossary</a></nav>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
            f'<header class="tp" id="provenance">{html.escape(header)}</header>{nav}'
            f"<h1>{html.escape(title)}</h1>{body}"
            + (f"<script>{script}</script>" if script else "") + "</body></html>")


def _value_label(value: Any) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    if value is None:
        return "none (no cast)"
    return str(value)


_SCRIPT = r"""
const D = JSON.parse(document.getElementById('tokpool-states').textContent);
const index = new Map(D.states.map((s, i) => [JSON.stringify(s.k), i]));
const ctl = D.controls.map(c => document.getElementById('c-' + c.name));
const shownValue = D.controls.map(c => document.getElementById('v-' + c.name));
window.tokpoolShown = [];
function current() { return ctl.map(e => Number(e.value)); }
function setControls(k) {
  k.forEach((v, i) => { ctl[i].value = v; });
  k.forEach((v, i) => { shownValue[i].textContent = D.controls[i].labels[v]; });
}
function nearest(k, moved) {
  let best = -1, bestD = Infinity;
  D.states.forEach((s, i) => {
    let d = 0;
    s.k.forEach((v, j) => { d += Math.abs(v - k[j]) * (j === moved ? 1000 : 1); });
    if (d < bestD) { bestD = d; best = i; }
  });
  return best;
}
function show(moved) {
  const t0 = performance.now();
  const k = current();
  let i = index.get(JSON.stringify(k));
  const snap = document.getElementById('snap');
  if (i === undefined) {
    i = nearest(k, moved);
    const s = D.states[i].k;
    const diff = s.map((v, j) => v === k[j] ? null :
      D.controls[j].label + ' ' + D.controls[j].labels[k[j]] + ' was not computed: showing ' +
      D.controls[j].labels[v]).filter(x => x);
    snap.textContent = 'Nearest computed state: ' + diff.join('; ') + '.';
  } else {
    snap.textContent = '';
  }
  const s = D.states[i];
  window.tokpoolState = i;
  setControls(s.k);
  showLen();
  document.getElementById('readout').innerHTML = s.html;
  const img = document.getElementById('figure');
  document.getElementById('state').textContent = 'state ' + (i + 1) + ' of ' + D.states.length;
  const done = () => window.tokpoolShown.push({state: i, ms: performance.now() - t0});
  if (s.img) {
    if (img.getAttribute('src') === s.img) { done(); }
    else { img.onload = done; img.src = s.img; img.width = s.w; }
    img.style.display = '';
  } else { img.style.display = 'none'; done(); }
}
const lenCtl = document.getElementById('c-prompt-len');
function showLen() {
  const s = D.states[window.tokpoolState], box = document.getElementById('at-len');
  if (!lenCtl || !s.p) return;
  const p = s.p, i = Math.min(Number(lenCtl.value), p.lens.length - 1);
  lenCtl.max = p.lens.length - 1; lenCtl.value = i;
  const n = p.lens[i];
  document.getElementById('v-prompt-len').textContent = n.toLocaleString('en-US') + ' tokens';
  const rows = Object.keys(p.peaks).map(k => '<tr><th align="left">' + k +
    '</th><td align="right">' + p.peaks[k][i].toLocaleString('en-US')
    + ' bytes</td></tr>').join('');
  const v = p.verdict[i];
  box.innerHTML = '<table>' + rows + '</table><div class="verdict">' + (v === null ?
    'vLLM starts for a prompt of this length.' : 'vLLM refuses to start: ' +
    p.refusals[v].replace(/&/g, '&amp;').replace(/</g, '&lt;')) + '</div>';
}
if (lenCtl) lenCtl.addEventListener('input', showLen);
ctl.forEach((e, j) => e.addEventListener('input', () => show(j)));
show(-1);
"""


def explorer_page(*, title: str, header: str, blurb: str, controls: Sequence[dict[str, Any]],
                  states: Sequence[dict[str, Any]]) -> str:
    """One explorer's page: a slider per control over its computed values, the readout and
    the figure, and every state inlined as JSON (``{"k": [value index per control], "html",
    "img", "w"}``)."""
    rows = []
    for c in controls:
        rows.append(
            f'<label>{html.escape(c["label"])} <input type="range" id="c-{c["name"]}" '
            f'min="0" max="{len(c["labels"]) - 1}" step="1" value="0"> '
            f'<b id="v-{c["name"]}"></b></label>')
    data = json.dumps({"controls": list(controls), "states": list(states)},
                      separators=(",", ":")).replace("</", "<\\/")
    if any("p" in s for s in states):  # a slider over the sweep's prompt lengths
        lengths = ("<div class='lengths'><label>peak pooling bytes at a prompt length "
                   "<input type='range' id='c-prompt-len' min='0' max='0' step='1' value='0'>"
                   " <b id='v-prompt-len'></b></label> (the sweep's lengths, "
                   "each exact from the simulator)<div id='at-len'></div></div>")
    else:
        lengths = ""
    body = (f"<p>{html.escape(blurb)}</p><div class='controls'>{''.join(rows)}</div>"
            "<div class='snap' id='snap'></div>"
            "<div style='font-size:11px;color:#777' id='state'></div>"
            f"{lengths}<div id='readout'></div>"
            "<div class='figure'><img id='figure' alt='figure'></div>"
            f"<script type='application/json' id='tokpool-states'>{data}</script>")
    return page(title, header, body, script=_SCRIPT)


def index_page(*, header: str, entries: Sequence[tuple[str, str, str, int]],
               extra: str = "") -> str:
    """The index: one link per explorer page (file name, title, blurb, number of states)."""
    items = "".join(
        f'<li><a href="{html.escape(f)}">{html.escape(t)}</a> — {html.escape(b)} '
        f"({n} precomputed states)</li>" for f, t, b, n in entries)
    body = ("<p>tokpool's explorers as static pages: every state below was computed by the "
            "same functions the notebooks call, when the site was built; the page only "
            "chooses which to show. No server, no network: open this file from disk or "
            f"publish the folder as it is.</p><ul>{items}</ul>{extra}")
    return page("tokpool: the explorers without a kernel", header, body)


def control_spec(name: str, label: str, values: Sequence[Any]) -> dict[str, Any]:
    """A control as the page's data: its name, label, values (JSON) and their shown labels."""
    return {"name": name, "label": label, "values": [v for v in values],
            "labels": [_value_label(v) for v in values]}
