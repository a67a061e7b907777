"""The package's shape: no import cycles anywhere in ``tokpool/`` (function-level imports
included), and the simulator's rooms import downward only."""

from __future__ import annotations

import ast
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
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
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
         "simulation", "sweeps"]


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
