"""JupyterLab in a real browser: notebook 02 runs, its widget and plots render, no widget errors,
and the explorer answers a user: a click on a policy, a dragged slider and the async toggle each
change what it shows.

Starts JupyterLab on a free loopback port over a temporary copy of ``notebooks/`` (kernels get
``TOKPOOL_QUICK=1``), drives Debian's ``chromium`` with Playwright's Python API (never a
downloaded browser), runs all cells, and checks what a user would see. Screenshots of the
explorer go to the run's output folder (``tests/artifacts.py``), and replace the committed
``docs/jupyterlab_*.png`` only with ``TOKPOOL_UPDATE_DOCS=1`` (``make docs-screenshots``); without
it the module fails if anything under ``docs/`` or ``benchmarks/results/`` changed. Skipped, with
the reason, when chromium or playwright is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from artifacts import Artifacts, Protected, artifact_dirs, updating_docs

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "02_chunked_prefill_ownership.ipynb"
SCREENSHOT = "jupyterlab_ownership_explorer.png"
WINDOW_SCREENSHOT = "jupyterlab_notebook02.png"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Seconds to wait for the server, the page, and the notebook's cells.
SERVER_TIMEOUT = 60
PAGE_TIMEOUT_MS = 60_000
RUN_TIMEOUT_MS = 150_000

# JupyterLab user settings for the test session: render every cell (no windowing, so off-screen
# cells are in the DOM) and fetch no news or update checks.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
}

ALL_CELLS_RAN_JS = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
    .map(e => e.textContent.trim());
  return prompts.length > 0 && prompts.every(t => /^\\[\\d+\\]:$/.test(t));
}"""


def _chromium() -> str | None:
    for candidate in (os.environ.get("TOKPOOL_CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str
    token: str
    root: Path


def _write_settings(settings_dir: Path) -> None:
    for rel, values in LAB_SETTINGS.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_for_server(url: str, token: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"jupyter lab did not answer within {SERVER_TIMEOUT}s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server we started (it shuts its kernels down), then its process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    # kernels the server may have left behind live in the process group we created for it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    """Where screenshots and timings go: the committed folders only with TOKPOOL_UPDATE_DOCS=1."""
    return artifact_dirs(tmp_path_factory)


@pytest.fixture(scope="module", autouse=True)
def _writes_nothing_committed() -> Iterator[None]:
    """Without TOKPOOL_UPDATE_DOCS=1 the module's tests leave docs/ and benchmarks/results/ as
    they found them (``make test`` keeps a clean checkout clean)."""
    if updating_docs():
        yield
        return
    guard = Protected()
    yield
    changed = guard.changed()
    assert not changed, (f"the browser tests wrote {changed} without TOKPOOL_UPDATE_DOCS=1: "
                         "write into the `artifacts` fixture's folders instead")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if _chromium() is None:
        pytest.skip("chromium not found (install Debian's 'chromium' package: make browser-deps)")
    pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None and (
        shutil.which("jupyter-lab") is None
    ):
        pytest.skip("jupyterlab is not installed")
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    _write_settings(base / "settings")
    token, port = secrets.token_hex(16), _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(
        TOKPOOL_QUICK="1",
        JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
    )
    log = base / "lab.log"
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI often run as root
        cmd.append("--allow-root")
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(url, token, proc, log)
        yield Lab(url, token, root)
    finally:
        _stop(proc)


def _wait_changed(page, locator, attribute: str, old: str | None) -> None:
    """Wait until the kernel has redrawn: ``attribute`` of the element differs from ``old``."""
    page.wait_for_function(
        "([el, name, old]) => el.getAttribute(name) !== old",
        arg=[locator.element_handle(), attribute, old],
        timeout=PAGE_TIMEOUT_MS,
    )


def test_notebook_02_renders_widget_and_plot_in_jupyterlab(
        lab: Lab, artifacts: Artifacts) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1900})
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            page.goto(f"{lab.url}/lab/tree/{NOTEBOOK}?token={lab.token}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
            page.wait_for_function(
                "() => { const s = window.jupyterapp?.shell?.currentWidget?.sessionContext;"
                " return s && s.session && s.session.kernel && s.kernelDisplayStatus === 'idle'; }"
            )
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(ALL_CELLS_RAN_JS, timeout=RUN_TIMEOUT_MS)
            page.wait_for_function(
                "() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus"
                " === 'idle'",
                timeout=RUN_TIMEOUT_MS,
            )
            outputs = page.locator(".jp-OutputArea-output")
            # widgets render asynchronously after the kernel is idle
            page.wait_for_selector(".jp-OutputArea-output .jupyter-widgets img")
            text = page.locator(".jp-Notebook").inner_text()
            assert "Error displaying widget" not in text
            assert "Traceback" not in text
            assert page.locator(".jp-OutputArea-output img").count() >= 2  # plots + explorer
            assert page.locator(".jp-OutputArea-output .widget-slider").count() >= 1
            assert outputs.count() > 0

            explorer = page.locator(".jp-OutputArea-output:has(.jupyter-widgets img)").last
            explorer.scroll_into_view_if_needed()
            image = explorer.locator(".jupyter-widgets img").first
            verdict = explorer.locator(".widget-html-content").filter(has_text="outputs").first

            # 1. Click a policy: legacy corrupts this workload, clone delivers it intact.
            assert "corrupted" in verdict.inner_text()
            before = image.get_attribute("src")
            explorer.locator(".widget-toggle-buttons button", has_text="clone").first.click()
            _wait_changed(page, image, "src", before)
            page.wait_for_function("el => el.innerText.includes('intact')",
                                   arg=verdict.element_handle(), timeout=PAGE_TIMEOUT_MS)

            # 2. Drag the "tokens per step" slider to the left: fewer tokens per step, more steps.
            slider = explorer.locator(".widget-slider", has_text="tokens per step").first
            # the value shows in the typed box beside the slider (it refuses, never clamps)
            readout = explorer.locator(".widget-hbox:has(.widget-slider:has-text('tokens per "
                                       "step'))").last.locator(".tokpool-typed input")
            old_budget = int(readout.input_value())
            handle = slider.locator(".noUi-handle").first.bounding_box()
            track = slider.locator(".noUi-target").first.bounding_box()
            assert handle and track
            x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
            before = image.get_attribute("src")
            page.mouse.move(x, y)
            page.mouse.down()
            page.mouse.move(track["x"] + track["width"] * 0.05, y, steps=12)
            page.mouse.up()
            _wait_changed(page, image, "src", before)
            assert int(readout.input_value()) < old_budget

            # 3. Tick async scheduling: the kernel redraws the schedule.
            before = image.get_attribute("src")
            box = explorer.locator(".widget-checkbox", has_text="async scheduling")
            box.locator("input").first.click()
            _wait_changed(page, image, "src", before)
            explorer.scroll_into_view_if_needed()
            shot, window = artifacts.docs / SCREENSHOT, artifacts.docs / WINDOW_SCREENSHOT
            explorer.screenshot(path=str(shot))
            page.set_viewport_size({"width": 1400, "height": 1000})
            explorer.scroll_into_view_if_needed()
            page.screenshot(path=str(window))
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000 and window.stat().st_size > 10_000
