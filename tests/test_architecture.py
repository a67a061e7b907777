"""The package's shape: no import cycles anywhere in ``tokpool/`` (function-level imports
included), the house's wings import downward only, and so do the simulator's rooms."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tokpool"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines inside ``if TYPE_CHECKING:`` blocks (never executed: not a runtime import)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(name: str) -> set[str]:
    """Every tokpool module ``name`` imports, at any level of the file."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [f"{module}.{alias.name}" for alias in node.names]
            # ``from .. import _args`` loads the module ``_args``; the package itself counts only
            # when a name is taken from it
            targets = names if all(n in MODULES for n in names) else [module, *names]
        else:
            continue
        found.update(t for t in targets if t in MODULES)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    graph = {name: imports_of(name) for name in MODULES}
    # A package's __init__ runs when any of its modules is imported: importing
    # "tokpool.sim.config" also imports "tokpool.sim" and "tokpool". Model that, so that a
    # module importing its own package's __init__ (which imports it back) shows as a cycle.
    return graph


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (function-level imports count too):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: The simulator's rooms, bottom to top: a module may import only from its own room or below.
ROOMS = ["vllm_rules", "config", "schedule", "vllm_run", "memory", "backends", "results",
         "simulation", "sweeps", "startup", "startup_limits"]


def _room(name: str) -> str | None:
    if not name.startswith("tokpool.sim."):
        return None
    return name.split(".")[2]


def test_simulator_rooms_import_downward_only():
    upward = []
    for name in MODULES:
        room = _room(name)
        if room is None or room not in ROOMS:
            continue
        for target in imports_of(name):
            other = _room(target)
            if other in ROOMS and ROOMS.index(other) > ROOMS.index(room):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that go up a room:\n" + "\n".join(upward)


def test_every_room_is_listed():
    rooms = {p.name for p in (PACKAGE / "sim").iterdir() if p.is_dir() and
             (p / "__init__.py").exists()}
    files = {p.stem for p in (PACKAGE / "sim").glob("*.py") if not p.stem.startswith("_")}
    assert rooms | (files - {"__init__"}) <= set(ROOMS)


def _layout_block(path: Path) -> str:
    text = path.read_text()
    start = text.index("## Layout")
    return text[text.index("```", start): text.index("```", text.index("```", start) + 3)]


def test_the_documented_layouts_match_the_tree():
    """DESIGN.md's and the README's layout name every simulator room and module, and every
    package of tokpool; nothing they name under sim/ is missing from the tree."""
    sim = PACKAGE / "sim"
    names = {p.name + "/" for p in sim.iterdir() if (p / "__init__.py").exists()}
    names |= {p.name for p in sim.glob("*.py") if not p.name.startswith("_")}
    names |= {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    names.discard("__init__.py")
    root = PACKAGE.parent
    for doc in (root / "docs" / "DESIGN.md", root / "README.md"):
        block = _layout_block(doc)
        missing = sorted(n for n in names if n not in block)
        assert not missing, f"{doc.name}'s layout does not name {missing}"
        sim_block = block[block.index("sim/"):]
        for room in ("vllm_rules/", "schedule/", "memory/", "backends/", "results/"):
            assert room in sim_block and (sim / room).is_dir()


#: The house, bottom to top (DESIGN.md, "The house has an order"): a module may import only from
#: its own wing or a wing below it, at module or function level (``TYPE_CHECKING`` imports are
#: never run and do not count). ``helpers`` are the small modules at ``tokpool/``'s top that every
#: wing may need; ``front`` is the command line, the report, ``tp.viz`` and the package's own
#: ``__init__`` (which imports every wing to re-export its names: nothing below may import it).
HOUSE = ["helpers", "pooler", "sim", "late_interaction", "deploy", "plots", "models", "prm",
         "widgets", "engine", "site", "front"]
#: Loose modules at ``tokpool/``'s top and the wing each belongs to.
LOOSE = {"_args": "helpers", "_deprecation": "helpers", "_moved_modules": "helpers",
         "_package": "helpers", "_text": "helpers", "guard": "helpers",
         "cli": "front", "report": "front", "viz": "front"}


def wing(name: str) -> str:
    """The wing module ``name`` stands in (``tokpool`` itself: the front door)."""
    parts = name.split(".")
    if len(parts) == 1:
        return "front"
    if parts[1] in HOUSE:
        return parts[1]
    if len(parts) == 2 and parts[1] in LOOSE:
        return LOOSE[parts[1]]
    raise AssertionError(f"{name} stands in no wing: add it to HOUSE or LOOSE in "
                         "tests/test_architecture.py (and to the layout in README/DESIGN)")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a lower wing into a higher one, as ``importer -> imported`` with both
    files named."""
    found = []
    for name in sorted(graph):
        for target in sorted(graph[name]):
            if HOUSE.index(wing(target)) > HOUSE.index(wing(name)):
                found.append(f"{MODULES[name].relative_to(PACKAGE.parent)} ({wing(name)}) -> "
                             f"{MODULES[target].relative_to(PACKAGE.parent)} ({wing(target)})")
    return found


def test_every_module_stands_in_a_wing():
    for name in MODULES:
        wing(name)


def test_the_wings_import_downward_only():
    upward = upward_imports(_graph())
    assert not upward, "imports that run up the house (a lower wing may not reach into a " \
        "higher one; move the piece down, or pass it in):\n" + "\n".join(upward)


def test_the_house_check_finds_an_upward_import():
    graph = {"tokpool.pooler.pooling": {"tokpool.sim.config"}, "tokpool.sim.config": set()}
    assert upward_imports(graph) == [
        "tokpool/pooler/pooling.py (pooler) -> tokpool/sim/config.py (sim)"]
    assert upward_imports({"tokpool.sim.config": {"tokpool.pooler.pooling"},
                           "tokpool.pooler.pooling": set()}) == []


def test_few_loose_modules_at_the_top():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 12, f"{len(loose)} loose modules at tokpool/'s top: {loose}"


def test_no_module_is_too_long():
    """A module holds one idea: none over 800 lines, at most four over 700."""
    lengths = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    over_800 = sorted(n for n, k in lengths.items() if k > 800)
    over_700 = sorted(n for n, k in lengths.items() if k > 700)
    assert not over_800, f"modules over 800 lines: {over_800}"
    assert len(over_700) <= 4, f"more than four modules over 700 lines: {over_700}"


#: Libraries imported inside functions on purpose: `import tokpool` stays light (no model
#: library, no plotting, no notebook machinery, no vLLM until asked for).
LAZY_LIBRARIES = ("transformers", "matplotlib", "ipywidgets", "IPython", "nbformat", "nbclient",
                  "nbconvert", "safetensors", "psutil", "tqdm", "vllm", "sentence_transformers",
                  "playwright", "gguf", "accelerate", "peft", "sklearn", "scipy")


def test_function_level_imports_keep_import_light_or_say_why():
    """A function-level import either loads a heavy library listed above, or carries its
    reason in a comment on its line or the line before."""
    silent = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                module = (node.names[0].name if isinstance(node, ast.Import)
                          else node.module or "")
                if not getattr(node, "level", 0) and module.split(".")[0] in LAZY_LIBRARIES:
                    continue
                here = lines[node.lineno - 1]
                before = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                end = lines[(node.end_lineno or node.lineno) - 1]
                if "#" in here or "#" in end or before.startswith("#"):
                    continue
                silent.append(f"{name}:{node.lineno}: {here.strip()}")
    assert not silent, "function-level imports without a reason:\n" + "\n".join(silent)


_CITED = re.compile(r"\btokpool(?:\.[A-Za-z_]\w*)+")
#: ``room.module`` (or ``room.module.name``) cited inside the simulator's docs.
_ROOM_CITED = re.compile(r"``((?:vllm_rules|schedule|vllm_run|memory|backends|results)"
                         r"(?:\.[A-Za-z_]\w*)+)``")


def _resolves(dotted: str) -> bool:
    """``dotted`` names a real module (not an old path kept by ``tokpool._moved_modules``) or
    an attribute of one."""
    from tokpool._moved_modules import MOVED_MODULES

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in MOVED_MODULES:
            return False  # an old path: it imports, with a deprecation warning
        try:
            obj = importlib.import_module(module)
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_cited_module_path_exists():
    """A docstring or comment that names ``tokpool.x.y`` (or, in the simulator, a room's
    ``backends.loop``) names a real module or attribute, not a path that moved."""
    stale = []
    for name, path in MODULES.items():
        if name in ("tokpool._moved_modules", "tokpool"):  # they name the old paths on purpose
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            cited = [m.group(0).rstrip(".") for m in _CITED.finditer(line)]
            if name.startswith("tokpool.sim"):
                cited += ["tokpool.sim." + m.group(1) for m in _ROOM_CITED.finditer(line)]
            stale += [f"{path.relative_to(PACKAGE.parent)}:{n}: {c}" for c in cited
                      if not _resolves(c)]
    assert not stale, "cited paths that do not exist (any more):\n" + "\n".join(stale)
    assert not _resolves("tokpool.sim.hardware") and _resolves("tokpool.sim.backends.loop")
