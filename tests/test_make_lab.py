"""`make lab` — a new user's first command — serves the notebooks, as root and as a normal user.

Each case copies what ``make lab`` needs (Makefile, pyproject.toml, notebooks/) into a fresh
folder, runs ``make lab`` there against the current environment (``VENV=`` this interpreter's
venv, ``-o`` its install stamp so nothing is reinstalled) on a free loopback port with no
browser, waits until the server answers HTTP and lists the five notebooks, then stops it. Run as
root, the Makefile must add ``--allow-root`` (Jupyter exits at once without it); a second case
runs it as an unprivileged user (``nobody``, through ``runuser``) and must not add it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
STAMP = VENV / ".tokpool-installed"
SERVER_TIMEOUT = 90
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _checkout(base: Path) -> Path:
    """A minimal fresh project folder: what `make lab` reads."""
    repo = base / "repo"
    repo.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, repo / name)
    shutil.copytree(ROOT / "notebooks", repo / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT / "jupyter", repo / "jupyter")  # the settings `make lab` ships
    return repo


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.status, r.read()


def _serve_and_check(base: Path, *, user: str | None) -> str:
    """Run `make lab` (as ``user`` if given), check it serves the notebooks; return its log."""
    if not (VENV / "bin" / "jupyter").exists():
        pytest.skip(f"no jupyter in {VENV}; `make lab` needs the project's environment")
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    repo = _checkout(base)
    home = base / "home"
    home.mkdir()
    port, token = _free_port(), secrets.token_hex(16)
    lab_args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} "
                f"--ServerApp.port_retries=0 --IdentityProvider.token={token}")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
    }
    cmd = ["make", "-C", str(repo), "-o", str(STAMP), "lab", f"VENV={VENV}",
           f"LAB_ARGS={lab_args}"]
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (base, repo, home, *repo.rglob("*")):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        cmd = ["runuser", "-u", user, "--", "env", "-i",
               *(f"{k}={v}" for k, v in env.items()), *cmd]
    log = base / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=base, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"`make lab` exited with {proc.returncode}:\n{log.read_text()}")
            try:
                status, _ = _get(f"{url}/api/status?token={token}")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"`make lab` did not answer in {SERVER_TIMEOUT}s:\n{log.read_text()}")
            time.sleep(0.3)
        status, page = _get(f"{url}/lab?token={token}")
        assert status == 200 and b"JupyterLab" in page
        _, body = _get(f"{url}/api/contents?token={token}")
        served = sorted(item["name"] for item in json.loads(body)["content"]
                        if item["name"].endswith(".ipynb"))
        assert served == NOTEBOOKS, served
        # the shipped override: no news pop-up over the notebooks, no update check
        _, body = _get(f"{url}/lab/api/settings/@jupyterlab/apputils-extension:notification"
                       f"?token={token}")
        schema = json.loads(body)["schema"]["properties"]
        assert schema["fetchNews"]["default"] == "false", schema["fetchNews"]
        assert schema["checkForUpdates"]["default"] is False
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything left in the group
    return log.read_text()


def test_make_lab_serves_the_notebooks_as_the_current_user(tmp_path: Path) -> None:
    log = _serve_and_check(tmp_path, user=None)
    if os.geteuid() == 0:
        assert "--allow-root" in log  # make echoes the command it runs
    else:
        assert "--allow-root" not in log


def test_make_lab_serves_the_notebooks_as_a_normal_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("already running as a normal user (the other case covers it); switching "
                    "to another user needs root")
    if shutil.which("runuser") is None:
        pytest.skip("runuser is not installed: cannot run `make lab` as another user")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no unprivileged 'nobody' user on this machine")
    # pytest's tmp_path lives under a root-only folder; use a folder nobody can reach
    base = Path(tempfile.mkdtemp(prefix="tokpool-make-lab-"))
    try:
        os.chmod(base, 0o755)
        python = Path(os.path.realpath(sys.executable))  # the venv's interpreter, resolved
        closed = [p for p in (*VENV.parents, *python.parents) if not os.stat(p).st_mode & 0o001]
        if closed:
            pytest.skip(f"this environment cannot run as another user: {closed[0]} (on the "
                        f"way to {python}) is not searchable by other users")
        log = _serve_and_check(base, user="nobody")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert "--allow-root" not in log


def test_make_lab_adds_allow_root_only_for_root() -> None:
    """The command `make lab` would run (``make -n``), as root and as an unprivileged user."""
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    base = Path(tempfile.mkdtemp(prefix="tokpool-make-n-"))
    try:
        os.chmod(base, 0o755)
        repo = _checkout(base)
        cmd = ["make", "-s", "-n", "-C", str(repo), "-o", str(STAMP), "lab", f"VENV={VENV}"]
        mine = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        assert "jupyter lab" in mine and "notebooks/" in mine
        assert ("--allow-root" in mine) == (os.geteuid() == 0)
        if os.geteuid() != 0 or shutil.which("runuser") is None:
            return
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            return
        theirs = subprocess.run(["runuser", "-u", "nobody", "--", *cmd], capture_output=True,
                                text=True, check=True).stdout
        assert "jupyter lab" in theirs and "--allow-root" not in theirs
    finally:
        shutil.rmtree(base, ignore_errors=True)
