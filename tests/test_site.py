"""``tokpool site``: the static explorers, built into a temporary folder and driven in headless
Chromium from ``file://`` with the network off.

Moving each control changes the picture and the numbers; for every state of the sample site the
numbers on the page equal ``render_*``'s for that state, and the picture is the one ``render_*``
drew; no request leaves the folder; a control between grid points snaps and says so.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from test_browser import CHROMIUM_ARGS, _chromium

from tokpool.site import build_site, provenance_line
from tokpool.site.states import EXPLORERS, shrink_png

PAGE_TIMEOUT_MS = 30_000
_NUMBER = re.compile(r"\d[\d,.]*")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    summary = build_site(out, sample=True, progress=False)
    assert summary.states == {e.name: e.count(True) for e in EXPLORERS}
    return out


def numbers(text: str) -> list[str]:
    """The numbers of an HTML fragment's visible text, in order."""
    return _NUMBER.findall(html.unescape(re.sub(r"<[^>]+>", " ", text)))


def test_the_site_links_nothing_outside_its_folder(site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert {p.name for p in pages} == {"index.html", "buffer.html", "ownership.html",
                                      "memory.html", "example.html", "glossary.html",
                                      "figures.html"}
    for page in pages:
        text = page.read_text()
        assert provenance_line() in html.unescape(text)
        for ref in re.findall(r"""(?:src|href)=["']([^"']+)""", text):
            assert "://" not in ref and not ref.startswith("/"), (page.name, ref)
            assert (site / ref).exists(), (page.name, ref)


def test_the_first_example_and_the_glossary_are_the_library_s(site: Path) -> None:
    from tokpool.site.extras import first_example, glossary_rows

    printed, png = first_example()
    page = (site / "example.html").read_text()
    assert html.escape(printed) in page and "pooling holds" in printed
    src = re.search(r"<img id='figure' src='([^']+)'", page).group(1)
    assert (site / src).read_bytes() == shrink_png(png)
    rows = glossary_rows(Path(__file__).resolve().parents[1] / "README.md")
    assert len(rows) >= 20
    glossary = (site / "glossary.html").read_text()
    assert glossary.count("<tr>") == len(rows) + 1
    from tokpool.site.figures import FIGURES

    figures = (site / "figures.html").read_text()
    for notebook, _, draw in FIGURES:
        src = re.search(rf"<img src='([^']+)' width='\d+' alt='{notebook}'>", figures).group(1)
        assert (site / src).read_bytes() == shrink_png(draw()), notebook


def test_provenance_line_names_the_deployment() -> None:
    import tokpool as tp

    assert provenance_line(tp.SimConfig(usage="llm")).endswith("· offline LLM defaults")


def _python_view(explorer: str, key: dict):
    from tokpool.site import states

    if explorer == "buffer":
        run = states._buffer_run(key["workload"], key["budget"], key["policy"],
                                 key["async_scheduling"])
        return states.render_buffer_reuse(run, key["step"])
    if explorer == "ownership":
        return states.render_ownership(
            [int(n) for n in key["workload"].split(",")], max_num_batched_tokens=key["budget"],
            async_scheduling=key["async_scheduling"], policy=key["policy"],
            vllm_head=key["vllm_head"])
    return states.render_memory(model=key["model"], hardware=key["hardware"],
                                async_scheduling=key["async_scheduling"],
                                head_dtype=key["head_dtype"])


@pytest.mark.browser
def test_the_site_works_from_file_with_the_network_off(site: Path) -> None:
    if _chromium() is None:
        pytest.skip("chromium not found (install Debian's 'chromium' package: make browser-deps)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright (python) is not installed")
    outside: list[str] = []
    root = site.resolve().as_uri()

    def guard(route) -> None:
        url = route.request.url
        if url.startswith(root + "/") or url.startswith("data:"):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1400,
                                                                  "height": 1000})
            context.route("**/*", guard)
            page = context.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            for explorer in EXPLORERS:
                _drive(page, site, explorer)
            _snaps(page, site)
            _prompt_lengths(page, site)
            for name in ("index", "example", "glossary", "figures"):
                page.goto((site / f"{name}.html").resolve().as_uri())
                assert page.inner_text("#provenance") == provenance_line()
            page.goto((site / "example.html").resolve().as_uri())
            page.wait_for_function("() => document.getElementById('figure').naturalWidth > 0")
        finally:
            browser.close()
    assert not outside, f"the site fetched from outside its folder: {outside}"


def _show(page, values: list[int], moved: int = 0) -> None:
    """Set every control to a value index, then fire control ``moved``'s input event (as a
    user dragging it would)."""
    page.evaluate("""([vals, m]) => { const e = [...document.querySelectorAll('.controls input')];
        vals.forEach((v, i) => { e[i].value = v; });
        e[m].dispatchEvent(new Event('input')); }""", [values, moved])
    page.wait_for_function("() => { const i = document.getElementById('figure');"
                           " return i.style.display === 'none' || i.complete; }")


def _shown(page) -> tuple[str, str, str]:
    return (page.inner_text("#readout"), page.get_attribute("#figure", "src") or "",
            page.inner_text("#provenance"))


def _drive(page, site: Path, explorer) -> None:
    page.goto((site / f"{explorer.name}.html").resolve().as_uri())
    assert page.inner_text("#provenance") == provenance_line()
    controls = explorer.controls(True)
    data = page.evaluate("JSON.parse(document.getElementById('tokpool-states').textContent)")
    assert len(data["states"]) == explorer.count(True)
    # every state: the page's numbers and picture are render_*'s for that state
    for state in data["states"]:
        _show(page, state["k"])
        key = {c.name: c.values[i] for c, i in zip(controls, state["k"], strict=True)}
        view = _python_view(explorer.name, key)
        readout, src, _ = _shown(page)
        assert numbers(readout) == numbers(view.html), (explorer.name, key)
        assert (site / src).read_bytes() == shrink_png(view.png), (explorer.name, key)
        assert page.inner_text("#snap") == ""
    # each control that has a second value: moving it changes the picture and the numbers
    first = data["states"][0]["k"]
    for j, c in enumerate(controls):
        if len(c.values) < 2:
            continue
        moved = [*first]
        moved[j] = next(s["k"][j] for s in data["states"] if s["k"][j] != first[j])
        _show(page, first)
        before = _shown(page)
        page.evaluate("""([j, v]) => { const e = document.querySelectorAll('.controls input')[j];
            e.value = v; e.dispatchEvent(new Event('input')); }""", [j, moved[j]])
        page.wait_for_function("() => document.getElementById('figure').complete")
        after = _shown(page)
        assert after[1] != before[1], f"{explorer.name}: {c.name} did not change the picture"
        assert numbers(after[0]) != numbers(before[0]) or after[0] != before[0], (
            f"{explorer.name}: {c.name} did not change the readout")


def _snaps(page, site: Path) -> None:
    """The sample's budget 16 has no step 2: asking for it shows step 1 and says so."""
    page.goto((site / "buffer.html").resolve().as_uri())
    controls = [c.name for c in EXPLORERS[0].controls(True)]
    wanted = [0] * len(controls)
    wanted[controls.index("budget")] = 1
    wanted[controls.index("step")] = 2
    _show(page, wanted, moved=controls.index("budget"))
    snap = page.inner_text("#snap")
    assert "Nearest computed state" in snap and "was not computed: showing 1" in snap, snap
    step = page.evaluate("Number(document.getElementById('c-step').value)")
    assert step == 1
    assert "Engine step 1 of 1" in page.inner_text("#readout")


def test_tokpool_site_refuses_a_file_as_its_folder(tmp_path: Path, capsys) -> None:
    from tokpool.cli import main

    target = tmp_path / "taken.txt"
    target.write_text("a file")
    assert main(["site", str(target), "--sample"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokpool site: error:") and "is a file" in err


def _prompt_lengths(page, site: Path) -> None:
    """The memory page's prompt-length slider: at each length, render_memory's sweep's exact
    bytes per policy and vLLM's verdict for that length."""
    from tokpool.site.states import MEMORY_POINTS_PER_DOUBLING, memory_points, memory_view

    explorer = next(e for e in EXPLORERS if e.name == "memory")
    page.goto((site / "memory.html").resolve().as_uri())
    key = {c.name: c.values[0] for c in explorer.controls(True)}
    points = memory_points(memory_view(key, points_per_doubling=MEMORY_POINTS_PER_DOUBLING))
    assert page.evaluate("Number(document.getElementById('c-prompt-len').max)") == (
        len(points["lens"]) - 1)
    seen = set()
    for i in (0, len(points["lens"]) // 2, len(points["lens"]) - 1):
        page.evaluate("""(i) => { const e = document.getElementById('c-prompt-len');
            e.value = i; e.dispatchEvent(new Event('input')); }""", i)
        text = page.inner_text("#at-len")
        assert page.inner_text("#v-prompt-len") == f"{points['lens'][i]:,} tokens"
        for policy, peaks in points["peaks"].items():
            assert f"{policy}\t{peaks[i]:,} bytes" in text, (policy, i, text)
        verdict = points["verdict"][i]
        assert ("vLLM starts" in text) == (verdict is None)
        if verdict is not None:
            assert points["refusals"][verdict] in text
        seen.add(text)
    assert len(seen) == 3, "the prompt-length slider did not change the numbers"
