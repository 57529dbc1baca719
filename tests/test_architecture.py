"""The import rule and the function-length rule of docs/architecture.md, read from the source.

Imports are parsed with ``ast``, never executed, so the test sees every import a module can
make: top-level, inside functions (the CLI imports lazily to keep start-up fast) and under
``TYPE_CHECKING``. A lazy import is a dependency all the same: if ``core`` imported ``run`` inside
a function, the core would no longer be testable with plain values, and a cycle between units
would come back the first time that function ran.

The checks are functions of a source root, so the first tests run them on small trees with a
known violation (the checks can fail), and the last ones on ``src/dsguard`` (they do not, today).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dsguard"

#: Third-party packages the core may import: msgspec only (its ``Struct`` shapes are plain
#: values, no I/O). Nothing uses it in the core today; it stays allowed by the rule.
CORE_THIRD_PARTY = frozenset({"msgspec"})
#: Top-level dsguard modules the core may import. ``dsguard.errors`` is imported by
#: ``core/ladder.py`` today (``InvariantViolation``: an exception type, no effects);
#: ``dsguard.exitcodes`` is not imported by the core, and is allowed as the other pure leaf.
CORE_DSGUARD_LEAVES = frozenset({"errors", "exitcodes"})
#: Units the function-length rule does not apply to yet, by path under ``src/dsguard``. The
#: run loop is being rewritten; empty this once that lands (the test says when).
LONG_FUNCTION_ALLOWED: frozenset[str] = frozenset()
MAX_FUNCTION_LINES = 100
#: ``python -m dsguard`` must reach the CLI; it is the one module outside ``cli/`` that may.
CLI_ENTRY_POINTS = frozenset({"dsguard.__main__"})


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "dsguard.core.ladder"
    target: str  # the imported module, absolute, e.g. "dsguard.job.knobs"
    line: int


def _module_name(root: Path, path: Path) -> str:
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(root: Path, module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """Absolute names ``from X import a, b`` brings in: ``X.a`` where that is a module of the
    tree (``from dsguard import protocol``), else ``X`` itself (``from dsguard import
    __version__``)."""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    out: list[str] = []
    for alias in node.names:
        candidate = f"{prefix}.{alias.name}"
        rel = Path(*candidate.split(".")[1:])
        is_module = (root / rel).is_dir() or (root / rel).with_suffix(".py").is_file()
        out.append(candidate if candidate.startswith(root.name + ".") and is_module else prefix)
    return out


def imports(root: Path) -> Iterator[Import]:
    """Every import statement anywhere in every module under ``root``."""
    for path in sorted(root.rglob("*.py")):
        module = _module_name(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(module, alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                for target in _resolve(root, module, path.name == "__init__.py", node):
                    yield Import(module, target, node.lineno)


def unit_of(root: Path, module: str) -> str | None:
    """``job``, ``core``, ``run``, ... for a module of the tree (a subpackage, or a top-level
    module such as ``errors``); None for the root package and for other distributions."""
    parts = module.split(".")
    if parts[0] != root.name or len(parts) == 1:
        return None
    return parts[1]


def core_violations(root: Path) -> list[str]:
    """Imports of the core other than the standard library, msgspec, the core, the job model
    and the pure leaves."""
    core = f"{root.name}.core"
    bad: list[str] = []
    for imp in imports(root):
        if imp.module != core and not imp.module.startswith(core + "."):
            continue
        top = imp.target.split(".")[0]
        allowed = (
            top in sys.stdlib_module_names
            or top in CORE_THIRD_PARTY
            or imp.target in {f"{root.name}.{leaf}" for leaf in CORE_DSGUARD_LEAVES}
            or any(
                imp.target == f"{root.name}.{unit}" or imp.target.startswith(f"{root.name}.{unit}.")
                for unit in ("core", "job")
            )
        )
        if not allowed:
            bad.append(f"{imp.module}:{imp.line} imports {imp.target}")
    return bad


def unit_graph(root: Path) -> dict[str, dict[str, str]]:
    """unit -> {unit it imports: one place that does}."""
    graph: dict[str, dict[str, str]] = {}
    for imp in imports(root):
        src, dst = unit_of(root, imp.module), unit_of(root, imp.target)
        if src is not None and dst is not None and src != dst:
            graph.setdefault(src, {}).setdefault(dst, f"{imp.module}:{imp.line}")
    return graph


def unit_cycles(root: Path) -> list[list[str]]:
    """Each import cycle between units, as the path that closes it (``[a, b, a]``)."""
    graph = unit_graph(root)
    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, {})):
            if nxt in path:
                ring = path[path.index(nxt) :]
                first = ring.index(min(ring))  # one spelling per cycle: from its least unit
                ring = ring[first:] + ring[:first]
                if frozenset(ring) not in seen:
                    seen.add(frozenset(ring))
                    cycles.append([*ring, ring[0]])
            else:
                visit(nxt, [*path, nxt])

    for start in sorted(graph):
        visit(start, [start])
    return cycles


def cli_importers(root: Path) -> list[str]:
    """Modules outside ``cli/`` (and the ``python -m`` entry point) that import the CLI."""
    cli = f"{root.name}.cli"
    entry = {f"{root.name}.__main__"} | CLI_ENTRY_POINTS
    return [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for imp in imports(root)
        if (imp.target == cli or imp.target.startswith(cli + "."))
        and not (imp.module == cli or imp.module.startswith(cli + "."))
        and imp.module not in entry
    ]


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, list[str]]:
    """Path under ``root`` -> its functions longer than ``limit`` lines (``name (N lines)``)."""
    out: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    rel = path.relative_to(root).as_posix()
                    out.setdefault(rel, []).append(f"{node.name} ({length} lines)")
    return out


# -- the checks can fail ----------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


GOOD = {
    "__init__.py": "",
    "__main__.py": "from pkg.cli.main import main\n",
    "errors.py": "",
    "job/__init__.py": "",
    "job/model.py": "import re\nfrom pkg.errors import E\n",
    "core/__init__.py": "",
    "core/ladder.py": "import dataclasses\nfrom pkg.job.model import Job\nfrom . import rungs\n",
    "core/rungs.py": "import msgspec\nfrom pkg.errors import E\n",
    "run/__init__.py": "",
    "run/loop.py": "from pkg.core.ladder import decide\n",
    "cli/__init__.py": "",
    "cli/main.py": "from pkg.run import loop\n",
}


def test_checks_pass_on_a_tree_that_keeps_the_rules(tmp_path: Path) -> None:
    root = _tree(tmp_path, GOOD)
    assert core_violations(root) == []
    assert unit_cycles(root) == []
    assert cli_importers(root) == []
    assert unit_graph(root) == {
        "__main__": {"cli": "pkg.__main__:1"},
        "job": {"errors": "pkg.job.model:2"},
        "core": {"job": "pkg.core.ladder:2", "errors": "pkg.core.rungs:2"},
        "run": {"core": "pkg.run.loop:1"},
        "cli": {"run": "pkg.cli.main:1"},
    }


@pytest.mark.parametrize(
    ("rel", "text", "want"),
    [
        ("core/rungs.py", "import os\nfrom pkg.run.loop import x\n", "imports pkg.run.loop"),
        ("core/rungs.py", "def f():\n    import yaml\n", "pkg.core.rungs:2 imports yaml"),
        ("core/ladder.py", "from ..run import loop\n", "imports pkg.run.loop"),
        ("core/ladder.py", "from pkg import cli\n", "imports pkg.cli"),
    ],
)
def test_core_violations_are_found(tmp_path: Path, rel: str, text: str, want: str) -> None:
    root = _tree(tmp_path, {**GOOD, rel: text})
    found = core_violations(root)
    assert any(want in v for v in found), found


def test_unit_cycles_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**GOOD, "job/model.py": "def f():\n    from pkg.run import loop\n"})
    assert unit_cycles(root) == [["core", "job", "run", "core"]]


def test_cli_importers_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**GOOD, "run/loop.py": "from pkg.cli.main import render\n"})
    assert cli_importers(root) == ["pkg.run.loop:1 imports pkg.cli.main"]


def test_long_functions_are_found(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    root = _tree(tmp_path, {"run/loop.py": f"def long():\n{body}", "ok.py": "def f():\n    pass\n"})
    assert long_functions(root) == {"run/loop.py": [f"long ({MAX_FUNCTION_LINES + 1} lines)"]}
    assert long_functions(root, limit=MAX_FUNCTION_LINES + 1) == {}


# -- the rules hold for dsguard -----------------------------------------------------------------


def test_core_imports_only_stdlib_job_and_core() -> None:
    """The core stays pure: every decision is testable with plain values and replayable."""
    assert core_violations(SRC) == []


def test_no_import_cycle_between_units() -> None:
    """Units (``job``, ``core``, ``run``, ``host``, ``cli``, and every other subpackage or
    top-level module) form a DAG, so each can be understood and tested below the ones above."""
    assert unit_cycles(SRC) == [], unit_graph(SRC)


def test_the_layering_is_the_documented_one() -> None:
    """The edges docs/architecture.md draws: the core depends on the job model only; host
    facts on the core; run machinery never on the commands."""
    graph = unit_graph(SRC)
    assert set(graph.get("core", {})) <= {"job", "errors", "exitcodes"}
    assert set(graph.get("job", {})) <= {"errors", "exitcodes"}
    assert "run" not in graph.get("host", {})
    assert "cli" not in graph.get("run", {})


def test_only_the_cli_imports_the_cli() -> None:
    assert cli_importers(SRC) == []


def test_no_function_longer_than_the_limit() -> None:
    """Long functions hide the failure modes they handle; the allow-list is for code being
    rewritten, and must shrink, not grow."""
    found = long_functions(SRC)
    assert set(found) <= LONG_FUNCTION_ALLOWED, {
        k: v for k, v in found.items() if k not in LONG_FUNCTION_ALLOWED
    }
    stale = LONG_FUNCTION_ALLOWED - set(found)
    assert not stale, f"no longer needed in LONG_FUNCTION_ALLOWED, remove: {sorted(stale)}"


def test_queue_and_cluster_keep_their_documented_edges() -> None:
    """issue 16: the queue drives ``dsguard run`` children through job files and the run
    unit's lock and state readers, never the commands; the cluster scripts are pure text."""
    graph = unit_graph(SRC)
    assert set(graph.get("queue", {})) <= {"job", "host", "run", "errors", "exitcodes"}
    assert set(graph.get("cluster", {})) == set()
