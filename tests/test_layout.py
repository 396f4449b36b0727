"""The package's architecture, held to what each wing's ``__init__`` says it may import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ascendfix"
WINGS = ("cli", "job", "cluster", "doctor", "patching", "checkpoint", "profile", "transforms")
LOOSE = {p.stem for p in PACKAGE.glob("*.py")}


def _unit(module: str) -> str:
    """The wing (or loose module) a dotted ``ascendfix.…`` name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ascendfix"


def _imports(path: Path) -> set[str]:
    """The ascendfix wings and loose modules ``path`` imports (at any depth of the file)."""
    return {_unit(module) for module in _module_imports(path)}


def _graph() -> dict[str, set[str]]:
    graph = {}
    for wing in WINGS:
        graph[wing] = set().union(*(_imports(p) for p in (PACKAGE / wing).rglob("*.py"))) - {wing}
    for name in LOOSE:
        graph[name] = _imports(PACKAGE / f"{name}.py") - {name}
    return graph


def _declared(wing: str) -> set[str]:
    """The names after "May import:" in the wing's docstring, up to the end of that paragraph."""
    doc = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text())) or ""
    match = re.search(r"May import:(.*?)(\n\n|$)", doc, re.S)
    assert match, f"ascendfix/{wing}/__init__.py: its docstring does not say what the wing may import"
    return set(re.findall(r"``(\w+)``", match.group(1)))


def test_every_sub_package_is_a_known_wing_and_few_modules_are_loose():
    assert {p.parent.name for p in PACKAGE.glob("*/__init__.py")} == set(WINGS)
    assert len(LOOSE - {"__init__", "__main__"}) <= 9, sorted(LOOSE)


def test_each_wing_imports_only_what_its_docstring_names():
    graph = _graph()
    for wing in WINGS:
        if wing == "cli":
            continue  # the command line may import everything
        undeclared = graph[wing] - _declared(wing)
        assert not undeclared, f"ascendfix/{wing} imports {sorted(undeclared)}, which its __init__ does not name"


SUB_WINGS = ("cluster/watch",)  # a wing's family grown into a folder of its own, with its own rules


def test_each_sub_wing_imports_only_what_its_docstring_names_and_its_wing_does_not_import_it():
    for sub in SUB_WINGS:
        wing, name = sub.split("/")
        inside = f"ascendfix.{wing}.{name}"
        used = set()
        for path in (PACKAGE / sub).rglob("*.py"):
            for module in _module_imports(path):
                if module == inside or module.startswith(inside + "."):
                    continue
                parts = module.split(".")  # a module of its own wing by its name, anything else by its wing
                used.add(parts[2] if parts[1] == wing and len(parts) > 2 else parts[1])
        undeclared = used - _declared(sub)
        assert not undeclared, f"ascendfix/{sub} imports {sorted(undeclared)}, which its __init__ does not name"
        for path in (PACKAGE / wing).rglob("*.py"):
            if (PACKAGE / sub) in path.parents:
                continue
            users = {m for m in _module_imports(path) if m == inside or m.startswith(inside + ".")}
            assert not users, f"{path.relative_to(PACKAGE.parent)} imports {sorted(users)}: only cli may"


def test_no_import_cycle_between_wings_and_loose_modules():
    graph = _graph()

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in graph.get(start, ())
        )

    cycles = sorted(unit for unit in graph if reaches(unit, unit, {unit}))
    assert not cycles, f"import cycles through {cycles}"


def _module_imports(path: Path) -> set[str]:
    """The ``ascendfix`` modules and packages ``path`` imports, at any depth of the file (a deferred import too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ascendfix.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ascendfix":
            for alias in node.names:  # `from ascendfix.wing import module` names the module (or package)
                name = f"{node.module}.{alias.name}"
                where = PACKAGE.parent.joinpath(*name.split("."))
                found.add(name if where.with_suffix(".py").is_file() or where.is_dir() else node.module)
    return found


def test_no_two_modules_import_each_other_in_a_circle():
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = _module_imports(path) - {name}

    def circle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], {start}
        while stack:
            module, route = stack.pop()
            for nxt in graph.get(module, ()):
                if nxt == start:
                    return route
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, route + [nxt]))
        return None

    circles = [route for module in sorted(graph) if (route := circle_from(module))]
    assert not circles, f"modules that import each other in a circle: {circles[0]}"


def test_the_engine_hands_every_write_to_the_journal():
    for planner in ("engine", "evaluate", "revert"):
        text = (PACKAGE / "patching" / f"{planner}.py").read_text()
        assert "fsutil" not in text and "patching.tree" not in text and "import tree" not in text, planner


def _test_module_imports(path: Path) -> set[str]:
    """The ``tests.*`` modules ``path`` imports (``from tests import x`` names ``tests.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("tests.")}
        elif isinstance(node, ast.ImportFrom) and node.module == "tests":
            found |= {f"tests.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests."):
            found.add(node.module)
    return found


def test_no_test_module_imports_another():
    """What tests share lives in support modules (conftest, tests/stack.py, tests/cluster.py, …), not in a test."""
    tests = PACKAGE.parent / "tests"
    for path in sorted(tests.glob("*.py")):
        borrowed = sorted(m for m in _test_module_imports(path) if m.split(".")[1].startswith("test_"))
        assert not borrowed, f"tests/{path.name} imports {borrowed}: move what it shares into a support module"


def test_named_tuples_and_enumerations_are_the_packages_own():
    """Every named tuple is an ``ascendfix.tuples.NamedTuple`` and every enumeration an ``ascendfix.states.Name``:
    ``typing.NamedTuple`` and ``enum.Enum`` cost each command's start-up several times as much to define
    (docs/explanation/layout.md, "Start-up")."""
    stock = {"typing": "NamedTuple", "enum": "Enum"}
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("tuples.py", "states.py"):
            continue  # the two stand-ins, which give mypy the stock classes
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in stock:
                names = {alias.name for alias in node.names}
                assert stock[node.module] not in names, f"{path.relative_to(PACKAGE.parent)} imports {node.module}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                assert (node.value.id, node.attr) not in stock.items(), f"{path.relative_to(PACKAGE.parent)}"
