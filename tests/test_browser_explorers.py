"""Every explorer in JupyterLab, driven as a new user would: hostile values typed into its
controls, then each control's response time.

For each explorer a one-cell notebook is written into the test server's folder (the ``lab``
fixture of ``test_browser.py``: Debian's chromium, JupyterLab on a loopback port, kernels with
``TOKPOOL_QUICK=1``). The test types what broke the explorers before — 100000000 other requests,
0 and 100000 into slider boxes, text into number boxes, a threshold of 5, an empty problem, a
30,000-character text — and asserts that within ``ANSWER_TIMEOUT_S`` a message naming the
problem appears and no figure is left standing. Then it changes each control a few times and
records the median time from the change to the kernel's finished redraw, written to
``explorer_response_times.json`` in the run's output folder (``tests/artifacts.py``); with
``TOKPOOL_UPDATE_DOCS=1`` (``make docs-screenshots``) to the committed
``benchmarks/results/explorer_response_times.json``, where the README's table comes from.

Each trap a reader fell into (issue 30) is played too and must be gone: a CPU in the memory
explorer's device menu, tasks the model does not declare, a hidden policy that looks selected, a
tooltip reading "null", refusals naming engine flags instead of the panel's controls, "1e12 is
not a whole number", a long schedule shrunk to 5-px text, a cut heatmap without a caption, CJK
and emoji labels drawn as boxes, token chips broken inside a word, a 40-step reward chart as a
strip, the labelled error's outline lost on an edit. Screenshots of the changed explorers go to
``explorer_*.png`` in the same output folder (the committed ``docs/explorer_*.png`` only with the
switch; without it the module fails if anything under ``docs/`` or ``benchmarks/results/``
changed).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest
from artifacts import Artifacts, committed_json
from test_browser import (  # noqa: F401  (fixtures, used by name)
    CHROMIUM_ARGS,
    PAGE_TIMEOUT_MS,
    Lab,
    _chromium,
    _writes_nothing_committed,
    artifacts,
    lab,
)

pytestmark = pytest.mark.browser

RESULTS_FILE = "explorer_response_times.json"
#: A refusal must be on screen within this many seconds of the value being committed.
ANSWER_TIMEOUT_S = 30
#: How often each control is changed for its median.
REPEATS = 3

#: Notebook 03's text in full mode (about 90 tokens): the token explorer is timed on it.
NOTEBOOK_03_TEXT = (
    "Token-level pooling keeps one vector per token. A long prompt is split into chunks, "
    "and every chunk must survive until the last one arrives. Process reward models score each "
    "step of a solution at a special tag token, while retrieval models such as ColBERT compare "
    "every query token with every document token. Both need the whole prompt's hidden states, "
    "not just the last one.")

EXPLORERS = {
    "ownership": "import tokpool as tp\nex = tp.ownership_explorer([20, 6, 9], budget=16)\nex",
    "memory": "import tokpool as tp\nex = tp.memory_explorer()\nex",
    "token": ("import tokpool as tp\nmodel = tp.load_model('smollm2-135m')\n"
              f"ex = tp.token_explorer(model, {NOTEBOOK_03_TEXT!r}, layer=15)\nex"),
    "step_reward": ("import tokpool as tp\nprm = tp.load_prm()\n"
                    "ex = tp.step_reward_explorer(prm, 'What is 2 + 3 * 4?', "
                    "['3 * 4 = 12.', '2 + 12 = 15.', 'The answer is 15.'], "
                    "true_first_error=1, step_labels=[True, False, False])\nex"),
    # notebook 06's explorer as the notebook opens it (100 documents of 512 tokens)
    "rerank": "import tokpool as tp\nex = tp.rerank_explorer()\nex",
    # memory_explorer(model=...) given a folder, as the "your model" box takes it
    "memory_model": ("import tempfile, pathlib\nimport tokpool as tp\n"
                     "folder = pathlib.Path(tempfile.mkdtemp())\n"
                     "(folder / 'config.json').write_text({YOUR_MODEL})\n"
                     "ex = tp.memory_explorer(model=folder)\nex"),
}

#: A config.json pasted into the memory explorer's "your model" box (a Qwen3-8B-like decoder).
YOUR_MODEL = json.dumps({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151665,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16"})
EXPLORERS["memory_model"] = EXPLORERS["memory_model"].replace("{YOUR_MODEL}", repr(YOUR_MODEL))

#: What the kernel redraws: the figure and the text below the controls (children 2 and 3: the
#: message line and the output), not the controls, whose readouts the browser updates itself.
SIGNATURE_JS = """el => [...el.querySelectorAll('img')].map(i => i.src.slice(-64)).join('|')
  + '#' + [...el.children].slice(2).map(c => c.innerText).join('#')"""
KERNEL_IDLE_JS = ("() => window.jupyterapp.shell.currentWidget.sessionContext"
                  ".kernelDisplayStatus === 'idle'")


def _write_notebook(folder: Path, name: str, source: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}  # else JupyterLab asks for a kernel
    path = folder / f"explorer_{name}.ipynb"
    nbformat.write(nb, path)
    return path.name


class Driver:
    """One explorer on one page: commit values, wait for the kernel's answer."""

    def __init__(self, page, out: Artifacts) -> None:
        self.page, self.artifacts = page, out
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        self.root = panel.locator(".jp-OutputArea-output .jupyter-widgets.widget-vbox").first

    def _signature(self) -> str:
        return self.root.evaluate(SIGNATURE_JS)

    def _commit(self, act: Callable[[], None]) -> float:
        """Run ``act``; seconds until the explorer changed and the kernel is idle again."""
        before = self._signature()
        start = time.monotonic()
        act()
        self.page.wait_for_function(
            f"([el, old]) => ({SIGNATURE_JS})(el) !== old",
            arg=[self.root.element_handle(), before], timeout=ANSWER_TIMEOUT_S * 1000)
        self.page.wait_for_function(KERNEL_IDLE_JS, timeout=ANSWER_TIMEOUT_S * 1000)
        return time.monotonic() - start

    def type_into(self, locator, value: str, *, blur: bool = False) -> float:
        def act() -> None:
            locator.fill(value)
            if blur:
                locator.evaluate("el => el.blur()")
            else:
                locator.press("Enter")
        return self._commit(act)

    def box(self, label: str):
        """The typed box beside the slider described ``label``."""
        row = self.root.locator(".widget-hbox", has=self.page.locator(
            f".widget-slider:has(label:text-is({json.dumps(label)}))")).last
        return row.locator("input.widget-input, .tokpool-typed input").last

    def _described(self, kind: str, label: str):
        """The ``kind`` widget whose description reads ``label`` exactly (a plain label, or
        the titled span that carries its tooltip)."""
        return self.root.locator(kind).filter(
            has=self.page.locator("label").get_by_text(label, exact=True))

    def text(self, label: str):
        return self._described(".widget-text", label).locator("input").first

    def area(self, label: str):
        return self._described(".widget-textarea", label).locator("textarea").first

    def menu(self, label: str):
        return self._described(".widget-dropdown", label).locator("select").first

    def select(self, label: str, value: str) -> float:
        menu = self.menu(label)
        return self._commit(lambda: menu.select_option(label=value))

    def click(self, text: str) -> float:
        button = self.root.locator(f"button:text-is('{text}')").first
        return self._commit(button.click)

    def check(self, text: str) -> float:
        box = self.root.locator(".widget-checkbox", has_text=text).locator("input").first
        return self._commit(box.click)

    def key(self, label: str, key: str, *, handle: str = ".noUi-handle") -> float:
        """Press ``key`` on the slider described ``label`` (its handle has the focus)."""
        slider = self.root.locator(".widget-slider", has=self.page.locator(
            "label", has_text=label)).last
        target = slider.locator(handle).first
        return self._commit(lambda: (target.focus(), target.press(key)))

    def refused(self, act: Callable[[], float], *needles: str) -> None:
        """``act`` commits a hostile value: a message saying why, and no figure, in time."""
        act()
        error = self.root.locator(".tokpool-error")
        error.wait_for(state="visible", timeout=ANSWER_TIMEOUT_S * 1000)
        message = error.inner_text()
        for needle in needles:
            assert needle in message, f"{needle!r} not in the message {message!r}"
        assert self.root.locator("img").filter(visible=True).count() == 0, (
            f"a figure is still shown under the message {message!r}")

    def shows_figure(self) -> None:
        assert self.root.locator(".tokpool-error").count() == 0
        assert self.root.locator("img").filter(visible=True).count() >= 1

    def options(self, label: str) -> list[str]:
        return self.menu(label).evaluate(
            "el => [...el.options].map(o => o.textContent.replace(/\\u00a0/g, ' '))")

    def tooltips(self) -> list[tuple[str, str | None]]:
        """Every control (button, input, menu) with the tooltip the browser shows for it: its
        own title, or that of the widget around it."""
        return self.root.evaluate("""root => [...root.querySelectorAll(
            'button, input, select, textarea')].filter(e => e.offsetParent !== null).map(e => {
              // a button carries its own title; a described text box, menu or checkbox,
              // the label of its widget (ipywidgets' DescriptionView), a parent or two up
              let tip = e.getAttribute('title'), up = e;
              for (let i = 0; !tip && up && i < 3; i++) {
                up = up.parentElement;
                const label = up && (up.querySelector(':scope > label[title]')
                                     || up.querySelector('span[title]'));
                tip = label ? label.title : (up && up.getAttribute('title'));
              }
              return [e.textContent.trim() || e.value || e.tagName, tip || null];
            })""")

    def figure_scale(self) -> float:
        """Shown CSS width of the figure over the width it was drawn for (1.0: not shrunk)."""
        img = self.root.locator("img").filter(visible=True).first
        return img.evaluate("i => i.getBoundingClientRect().width / (i.naturalWidth / 2)")

    def screenshot(self, name: str, *, figure: bool = False) -> None:
        """The explorer (or only its figure: a tall explorer is cut at the window's edge)."""
        shot = self.root.locator("img").filter(visible=True).first if figure else self.root
        shot.screenshot(path=str(self.artifacts.docs / f"explorer_{name}.png"))


@pytest.fixture(scope="module")
def browser_page(lab: Lab, artifacts: Artifacts  # noqa: F811
                 ) -> Iterator[Callable[[str], Driver]]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        pages: list = []
        try:
            def open_explorer(name: str) -> Driver:
                notebook = _write_notebook(lab.root, name, EXPLORERS[name])
                page = browser.new_page(viewport={"width": 1400, "height": 1400})
                page.set_default_timeout(PAGE_TIMEOUT_MS)
                pages.append(page)
                # a workspace of its own: only this notebook open (no tab of an earlier test)
                page.goto(f"{lab.url}/lab/workspaces/{name}/tree/{notebook}?token={lab.token}"
                          "&reset")
                page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
                page.wait_for_function(
                    "() => { const s = window.jupyterapp?.shell?.currentWidget?.sessionContext;"
                    " return s && s.session && s.session.kernel &&"
                    " s.kernelDisplayStatus === 'idle'; }")
                page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
                page.wait_for_selector(".jp-OutputArea-output .jupyter-widgets img",
                                       timeout=150_000)
                page.wait_for_function(KERNEL_IDLE_JS, timeout=150_000)
                assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()
                driver = Driver(page, artifacts)
                # no editable slider readout (they clamped or blanked what was typed there)
                readouts = driver.root.locator(".widget-readout").filter(visible=True)
                assert readouts.count() == 0
                return driver

            yield open_explorer
        finally:
            for page in pages:
                page.close()
            browser.close()


def _record(d: Driver, explorer: str, times: dict[str, list[float]]) -> None:
    """``explorer``'s medians into the output folder's JSON (started from the committed one, so
    it holds every explorer: the README's table in full)."""
    out = d.artifacts.results / RESULTS_FILE
    data = json.loads(out.read_text()) if out.exists() else committed_json(RESULTS_FILE)
    data[explorer] = {control: {"median_s": round(statistics.median(t), 3),
                                "runs_s": [round(x, 3) for x in t]}
                      for control, t in times.items()}
    # the machine's load when the explorer was timed: on a shared 2-core machine the same
    # control takes several times longer at a load of 10 than at 2
    data.setdefault("_load_average", {})[explorer] = [round(x, 2) for x in os.getloadavg()]
    data["_how"] = ("tests/test_browser_explorers.py: seconds from committing a control's new "
                    "value in headless chromium to the redrawn explorer with the kernel idle "
                    f"again, median of {REPEATS}; JupyterLab on this machine")
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _alternate(act: Callable[[str], float], values: tuple[str, str]) -> list[float]:
    return [act(values[i % 2]) for i in range(REPEATS)]


def test_ownership_explorer_refuses_hostile_values_and_answers(browser_page) -> None:
    d = browser_page("ownership")
    d.refused(lambda: d.type_into(d.text("other requests"), "100000000"),
              "engine steps", "at most")
    d.refused(lambda: d.type_into(d.text("other requests"), "5000"), "engine steps")
    d.refused(lambda: d.type_into(d.text("other requests"), "six"), "positive integers")
    d.type_into(d.text("other requests"), "6, 9")
    d.shows_figure()
    d.refused(lambda: d.type_into(d.box("request 0 tokens"), "0"), "from 1 to 96")
    d.refused(lambda: d.type_into(d.box("tokens per step"), "100000"), "from 2 to 64")
    d.refused(lambda: d.type_into(d.box("tokens per step"), "lots"), "not a whole number")
    d.type_into(d.box("tokens per step"), "16")
    d.shows_figure()
    # every control has a tooltip in words (the async button's read "null")
    for control, tip in d.tooltips():
        assert tip and tip != "null" and len(tip.split()) >= 3, (control, tip)
    # with chunking off the message names this panel's controls, not engine flags
    d.refused(lambda: d.check("chunked prefill"), "tokens per step is 16",
              "Tick chunked prefill")
    assert "max_num_batched_tokens" not in d.root.locator(".tokpool-error").inner_text()
    d.check("chunked prefill")
    d.shows_figure()
    d.refused(lambda: d.type_into(d.box("request 0 tokens"), "1e12"), "from 1 to 96",
              "is out of range")
    assert "not a whole number" not in d.root.inner_text()
    d.type_into(d.box("request 0 tokens"), "20")
    # a long run keeps its text size (a capped width that scrolls, and a caption)
    d.type_into(d.box("tokens per step"), "2")
    d.type_into(d.text("other requests"), "96, 96")
    d.shows_figure()
    assert "steps are labelled every" in d.root.inner_text()
    assert d.figure_scale() > 0.98
    d.screenshot("ownership_long_run")
    d.type_into(d.text("other requests"), "6, 9")
    d.type_into(d.box("tokens per step"), "16")
    d.shows_figure()
    d.screenshot("ownership")
    times = {
        "request 0 tokens": _alternate(lambda v: d.type_into(d.box("request 0 tokens"), v),
                                       ("24", "20")),
        "other requests": _alternate(lambda v: d.type_into(d.text("other requests"), v),
                                     ("6, 10", "6, 9")),
        "tokens per step": _alternate(lambda v: d.type_into(d.box("tokens per step"), v),
                                      ("12", "16")),
        "async scheduling": [d.check("async scheduling") for _ in range(REPEATS)],
        "chunked prefill": [d.check("chunked prefill") for _ in range(REPEATS - 1)],
        "policy": _alternate(d.click, ("legacy", "clone")),
        "vLLM's head": [d.check("vLLM's head") for _ in range(REPEATS - 1)],
    }
    d.shows_figure()
    _record(d, "ownership", times)


def test_memory_explorer_refuses_hostile_values_and_answers(browser_page) -> None:
    d = browser_page("memory")
    assert "32K tokens" in d.root.inner_text()  # opens within Qwen3-Embedding-8B's context
    # opens with vLLM's defaults, says so, and says what sets the peak
    shown = d.root.inner_text()
    assert "sync scheduling (vLLM's default)" in shown and "What sets the peak" in shown
    # a slider's readout keeps a gap before the next control's label ("8Kprompt length")
    gap = d.root.evaluate("""root => {
        const r = [...root.querySelectorAll('.tokpool-readout')]
            .find(e => e.textContent.trim() === '8K').getBoundingClientRect();
        const l = [...root.querySelectorAll('label')]
            .find(e => e.textContent.trim() === 'prompt length').getBoundingClientRect();
        return Math.abs(l.top - r.top) < 6 ? l.left - r.right : 99; }""")
    assert gap >= 8, gap
    d.refused(lambda: d.type_into(d.box("tensor-parallel GPUs"), "100000"), "from 1 to 8")
    d.refused(lambda: d.type_into(d.box("tensor-parallel GPUs"), "four"), "not a whole number")
    d.type_into(d.box("tensor-parallel GPUs"), "1")
    d.refused(lambda: d.type_into(d.text("your model"), "{not json"), "not valid JSON")
    d.refused(lambda: d.type_into(d.text("your model"), "/no/such/model"), "no config.json")
    d.type_into(d.text("your model"), "")
    d.shows_figure()
    # no device whose memory a share makes no sense of; only the tasks the model declares
    assert "CPU" not in d.options("hardware") and "H100 SXM" in d.options("hardware")
    assert d.options("task") == ["default (token_embed)", "embed", "token_embed"]
    for control, tip in d.tooltips():
        assert tip and tip != "null" and len(tip.split()) >= 3, (control, tip)
    # a hidden policy looks hidden: plain, no tick, unlike the shown ones
    d.click("offload")
    look = d.root.evaluate("""root => [...root.querySelectorAll('.tokpool-option')].map(b =>
        [b.textContent.trim(), b.classList.contains('mod-info'),
         getComputedStyle(b).backgroundColor, b.querySelector('i.fa-check') !== null])""")
    shown = {name: (info, colour, tick) for name, info, colour, tick in look}
    assert shown["offload"][0] is False and shown["offload"][2] is False
    assert all(shown[p][0] and shown[p][2] for p in ("legacy", "clone", "prealloc"))
    assert shown["offload"][1] != shown["clone"][1]
    d.click("offload")
    # a narrow range still has three ticks a side (the figure; the ticks are unit-tested)
    for _ in range(4):
        d.key("prompt length", "ArrowLeft", handle=".noUi-handle-upper")
    assert "1K – 2K" in d.root.inner_text()
    d.shows_figure()
    d.screenshot("memory_narrow_range")
    for _ in range(4):
        d.key("prompt length", "ArrowRight", handle=".noUi-handle-upper")
    d.shows_figure()
    d.screenshot("memory")
    times = {
        # first, while the model chunks: the model control ends on the PRM, which vLLM never
        # chunks whatever the task (STEP pooling), so its chunk budget changes nothing
        "chunk budget": _alternate(lambda k: d.key("chunk budget", k),
                                   ("ArrowLeft", "ArrowRight")),
        "model": _alternate(lambda v: d.select("model", v),
                            ("Qwen2.5-Math-PRM-7B", "Qwen3-Embedding-8B")),
        "hardware": _alternate(lambda v: d.select("hardware", v), ("A100 80GB", "H100 SXM")),
        "async scheduling": [d.click("async scheduling") for _ in range(REPEATS)],
        "policies": [d.click("offload") for _ in range(REPEATS - 1)],
        "tensor-parallel GPUs": _alternate(
            lambda v: d.type_into(d.box("tensor-parallel GPUs"), v), ("2", "1")),
        # the PRM declares token_classify alone: back to the embedding model (untimed) for
        # tasks to choose from
        "task": [d.select("model", "Qwen3-Embedding-8B")] and _alternate(
            lambda v: d.select("task", v), ("embed", "token_embed")),
        "head dtype": _alternate(lambda v: d.select("head dtype", v),
                                 ("same as dtype, no cast (not vLLM's default)", "float32")),
        "activation": _alternate(lambda v: d.select("activation", v),
                                 ("off (not vLLM's default)", "default: on (vLLM's)")),
        # after the head dtype: with float32 hidden states "no cast" equals a float32 head
        "dtype": _alternate(lambda v: d.select("dtype", v), ("float32", "bfloat16")),
        "prompt length": _alternate(
            lambda k: d.key("prompt length", k, handle=".noUi-handle-upper"),
            ("ArrowLeft", "ArrowRight")),
        "your model": _alternate(lambda v: d.type_into(d.text("your model"), v),
                                 (YOUR_MODEL, "")),
    }
    d.shows_figure()
    _record(d, "memory", times)


def test_token_explorer_refuses_hostile_values_and_answers(browser_page) -> None:
    d = browser_page("token")
    d.refused(lambda: d.type_into(d.box("layer"), "99"), "from 0 to 30")
    d.refused(lambda: d.type_into(d.area("text"), "x " * 15_000, blur=True), "characters")
    d.refused(lambda: d.type_into(d.area("text"), "   ", blur=True), "write some text")
    d.type_into(d.area("text"), "Ünïcödé text from 東京.", blur=True)
    d.shows_figure()
    shown = d.root.inner_text()
    assert "東" in shown and "Ü" in shown and "\ufffd" not in shown
    # Chinese and emoji labels: drawn with Noto's glyphs, so no "drawn as boxes" note
    d.type_into(d.area("text"), "北京欢迎你 🎉 and 東京 😀 say hello.", blur=True)
    d.shows_figure()
    assert "drawn as boxes" not in d.root.inner_text()
    d.screenshot("token_cjk_emoji")
    # a cut heatmap says so
    d.type_into(d.area("text"), f"{NOTEBOOK_03_TEXT} {NOTEBOOK_03_TEXT}", blur=True)
    d.shows_figure()
    assert "The heatmap shows the first 96 of" in d.root.inner_text()
    d.type_into(d.area("text"), NOTEBOOK_03_TEXT, blur=True)
    assert "The heatmap shows the first" not in d.root.inner_text()
    # the chips wrap between words: every word's chips on one line, and the text wraps
    lines = d.root.evaluate("""root => [...root.querySelectorAll('.tokpool-word')].map(w =>
        [...w.children].map(c => Math.round(c.getBoundingClientRect().top)))""")
    assert all(len(set(tops)) == 1 for tops in lines), lines
    assert len({tops[0] for tops in lines}) >= 2  # it does wrap, between words
    d.screenshot("token")
    times = {
        "layer (new)": [d.type_into(d.box("layer"), v) for v in ("3", "9", "21")],
        "layer (seen)": [d.type_into(d.box("layer"), v) for v in ("3", "9", "21")],
        "metric": _alternate(lambda v: d.select("metric", v),
                             ("cosine to text mean", "relative norm")),
        "text (new)": [d.type_into(d.area("text"), f"{NOTEBOOK_03_TEXT} ({i})", blur=True)
                       for i in range(REPEATS)],
    }
    d.shows_figure()
    _record(d, "token", times)


def test_step_reward_explorer_refuses_hostile_values_and_answers(browser_page) -> None:
    d = browser_page("step_reward")
    d.refused(lambda: d.type_into(d.box("threshold"), "5"), "from 0 to 1")
    d.refused(lambda: d.type_into(d.box("threshold"), "high"), "not a number")
    d.type_into(d.box("threshold"), "0.5")
    d.refused(lambda: d.type_into(d.area("problem"), "", blur=True), "write the problem")
    d.type_into(d.area("problem"), "What is 2 + 3 * 4?", blur=True)
    d.refused(lambda: d.type_into(d.area("steps"), "\n \n", blur=True), "at least one step")
    d.type_into(d.area("steps"), "3 * 4 = 12.\n2 + 12 = 15.\nThe answer is 15.", blur=True)
    d.shows_figure()
    assert "step 0 · " in d.root.inner_text()
    assert "labelled first error: step 1" in d.root.inner_text()
    # an edit after the labelled error keeps its outline (and says what lost its label)
    d.type_into(d.area("steps"), "3 * 4 = 12.\n2 + 12 = 15.\nSo the answer is 15.", blur=True)
    assert "labelled first error: step 1" in d.root.inner_text()
    assert "step 2 was edited" in d.root.inner_text()
    d.screenshot("step_reward")
    # 40 steps: a chart, not a strip
    forty = "\n".join(f"Step {i}: add {i} to the total." for i in range(40))
    d.type_into(d.area("steps"), forty, blur=True)
    d.shows_figure()
    img = d.root.locator("img").filter(visible=True).first
    width, height = img.evaluate("i => [i.getBoundingClientRect().width, "
                                 "i.getBoundingClientRect().height]")
    assert height / width >= 0.3 and d.figure_scale() > 0.98, (width, height)
    d.screenshot("step_reward_40_steps", figure=True)
    d.type_into(d.area("steps"), "3 * 4 = 12.\n2 + 12 = 15.\nThe answer is 15.", blur=True)
    times = {
        "threshold": _alternate(lambda v: d.type_into(d.box("threshold"), v), ("0.3", "0.5")),
        "steps (new)": [d.type_into(d.area("steps"), f"3 * 4 = 12.\n2 + 12 = {14 + i}.",
                                    blur=True) for i in range(REPEATS)],
        "problem (new)": [d.type_into(d.area("problem"), f"What is 2 + 3 * 4? ({i})",
                                      blur=True) for i in range(REPEATS)],
    }
    d.shows_figure()
    _record(d, "step_reward", times)


def test_rerank_explorer_refuses_hostile_values_and_answers(browser_page) -> None:
    d = browser_page("rerank")
    d.shows_figure()
    shown = d.root.inner_text()
    assert "two stages" in shown and "one stage" in shown and "bytes to the host" in shown
    d.refused(lambda: d.type_into(d.box("document length"), "99999"), "from 1 to 8192",
              "is out of range")
    # past SmolLM2's context: the slider ends at the context (issue 48), said in the panel
    d.refused(lambda: d.type_into(d.box("document length"), "9000"), "from 1 to 8192",
              "is out of range")
    d.refused(lambda: d.type_into(d.box("documents"), "0"), "from 1 to 1000")
    d.refused(lambda: d.type_into(d.box("query length"), "many"), "not a whole number")
    d.refused(lambda: d.type_into(d.box("output width (0: model's)"), "99999"), "from 0 to 8192")
    d.type_into(d.box("document length"), "512")
    d.shows_figure()
    d.click("one stage")
    d.shows_figure()
    d.click("two stages")
    d.shows_figure()
    d.screenshot("rerank")
    times = {
        "documents": _alternate(lambda v: d.type_into(d.box("documents"), v), ("200", "100")),
        "document length": _alternate(lambda v: d.type_into(d.box("document length"), v),
                                      ("1024", "512")),
        "query length": _alternate(lambda v: d.type_into(d.box("query length"), v),
                                   ("64", "32")),
        "output width": _alternate(
            lambda v: d.type_into(d.box("output width (0: model's)"), v), ("128", "0")),
        "path": _alternate(d.click, ("one stage", "two stages")),
    }
    d.shows_figure()
    _record(d, "rerank", times)


def test_memory_explorer_takes_a_model_folder(browser_page) -> None:
    d = browser_page("memory_model")
    d.shows_figure()
    box = d.text("your model")
    assert box.input_value().startswith("/")  # the folder, shown in the box it fills
    assert d.options("task") == ["default (token_embed)", "embed", "token_embed"]
    assert "CPU" not in d.options("hardware")
    d.select("task", "embed")
    d.shows_figure()
