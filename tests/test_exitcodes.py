"""Every exit code dsguard's own processes use is defined once, in dsguard.exitcodes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dsguard
from dsguard import exitcodes
from dsguard.cli import status
from dsguard.cli.doctor import Check, DoctorReport, exit_code

SRC = Path(dsguard.__file__).parent
#: Modules whose functions return process exit codes (the CLI commands and the exec shim).
EXIT_CODE_MODULES = [*sorted((SRC / "cli").glob("*.py")), SRC / "run" / "exec_shim.py"]


def _literal_exits(path: Path) -> list[str]:
    """``return <int literal>`` / ``sys.exit(<int literal>)`` / ``SystemExit(<int>)`` sites."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        value: ast.expr | None = None
        if isinstance(node, ast.Return):
            value = node.value
        elif isinstance(node, ast.Call) and node.args:
            fn = ast.unparse(node.func)
            if fn in ("sys.exit", "SystemExit", "exit", "os._exit"):
                value = node.args[0]
        if isinstance(value, ast.Constant) and type(value.value) is int:
            found.append(f"{path.name}:{getattr(node, 'lineno', '?')}: {ast.unparse(node)}")
    return found


def test_no_literal_exit_codes_in_commands() -> None:
    hits = [hit for path in EXIT_CODE_MODULES for hit in _literal_exits(path)]
    assert hits == []
    # The scan does see literals: the probes (which cannot import dsguard) spell theirs.
    assert any("return 2" in hit for hit in _literal_exits(SRC / "probes" / "env_probe.py"))


def test_no_other_module_defines_an_exit_code_that_disagrees() -> None:
    """A command module may still name a code (status.py re-exports its three until it imports
    them); it must have the value exitcodes gives it."""
    codes = {n: v for n, v in vars(exitcodes).items() if n.startswith("EXIT_")}
    assert all(type(v) is int and 0 <= v < 256 for v in codes.values())
    for path in EXIT_CODE_MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    name = ast.unparse(target)
                    if name.startswith("EXIT_"):
                        assert codes.get(name) == node.value.value, f"{path.name}: {name}"
    assert (status.EXIT_RUNNING, status.EXIT_NOT_RUNNING, status.EXIT_NO_STATE) == (0, 3, 4)


def test_doctor_exit_code_is_the_named_one() -> None:
    ok = DoctorReport(checks=(Check("a", "warn", "x"),), python="p")
    blocked = DoctorReport(checks=(Check("a", "blocker", "x"),), python="p")
    assert exit_code(ok) == exitcodes.EXIT_OK
    assert exit_code(blocked) == exitcodes.EXIT_BLOCKED


def test_exec_shim_cannot_exec_is_127() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dsguard.run.exec_shim", "--", "/nonexistent/launcher"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == exitcodes.EXIT_SHIM_CANNOT_EXEC
    assert "cannot exec" in proc.stderr
