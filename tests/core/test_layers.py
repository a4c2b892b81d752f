"""The package's layers: imports point one way, core <- redis <- {celery, web, cli}."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "asyncbook"
INTEGRATIONS = (
    "celery",
    "kombu",
    "starlette",
    "uvicorn",
    "click",
    "rich",
    "anyio",
    "httpx",
    "boto3",
)
LAYER_OF = {"redis": 1, "artifacts": 1, "celery": 2, "web": 2, "cli": 3}
"""A module may import from its own layer and those below (the core is layer 0)."""
DEPRECATED_ALIASES = {"signals.py", "progress.py"}
"""Old module paths kept for one release; they forward to ``asyncbook.celery``."""


def _layer(path: Path) -> int:
    parts = path.relative_to(PACKAGE).parts
    return LAYER_OF.get(parts[0], 0) if len(parts) > 1 else 0


def _imported_layers(path: Path) -> set[tuple[str, int]]:
    """(module, layer) of every asyncbook module ``path`` imports, relative or absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = list(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
                names = [module] + [f"{module}.{alias.name}" for alias in node.names]
            elif node.module:
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "asyncbook" and len(parts) > 1 and parts[1] in LAYER_OF:
                found.add((name, LAYER_OF[parts[1]]))
    return found


def _modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if not (path.parent == PACKAGE and path.name in DEPRECATED_ALIASES | {"__init__.py"})
    )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: Path) -> None:
    layer = _layer(path)
    upward = sorted(name for name, other in _imported_layers(path) if other > layer)
    if path.parent == PACKAGE.joinpath("cli"):
        upward = [name for name in upward if not name.startswith("asyncbook.cli")]
    assert upward == [], f"{path.relative_to(PACKAGE)} imports upward: {upward}"


def test_siblings_do_not_import_each_other() -> None:
    """celery and web stand side by side: neither imports the other."""
    for sibling, other in (("celery", "web"), ("web", "celery")):
        for path in PACKAGE.joinpath(sibling).rglob("*.py"):
            names = {name for name, _ in _imported_layers(path)}
            assert not any(name.startswith(f"asyncbook.{other}") for name in names), path


def _imported_roots(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path``, at any depth (an import
    inside a function counts)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_redis_layer_imports_neither_kombu_nor_celery() -> None:
    """Publishing a Celery message (a resend's) and reading a broker are Celery's
    knowledge: they live in ``asyncbook.celery``, the Redis layer only decides."""
    found = {
        str(path.relative_to(PACKAGE)): sorted(_imported_roots(path) & {"kombu", "celery"})
        for path in sorted(PACKAGE.joinpath("redis").rglob("*.py"))
    }
    assert {module: names for module, names in found.items() if names} == {}


def test_core_modules_import_no_upper_layer() -> None:
    core = [path for path in PACKAGE.glob("*.py") if path.name not in DEPRECATED_ALIASES]
    core.remove(PACKAGE / "__init__.py")  # the public façade re-exports RedisBook
    assert core, "no core modules found"
    for path in core:
        assert _imported_layers(path) == set(), path


def test_import_asyncbook_loads_no_integration_library() -> None:
    code = (
        "import sys, asyncbook\n"
        "from asyncbook import MemoryBook, RedisBook, parse_event\n"
        f"loaded = sorted(m for m in {INTEGRATIONS!r} if m in sys.modules)\n"
        "print(','.join(loaded))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""


def test_deprecated_module_paths_still_work() -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from asyncbook.signals import install, uninstall\n"
        "    from asyncbook.progress import report_progress\n"
        "import asyncbook.celery as c\n"
        "assert install is c.install and uninstall is c.uninstall\n"
        "assert report_progress is c.report_progress\n"
        "print(sorted({w.category.__name__ for w in caught}), len(caught))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "['DeprecationWarning'] 2"


@pytest.mark.parametrize("path", sorted(PACKAGE.joinpath("redis").rglob("*")), ids=lambda p: p.name)
def test_the_redis_layer_holds_no_celery_knowledge(path: Path) -> None:
    """Celery's formats live in ``celery/``: no module or script of ``redis/`` parses a
    Celery callback id (``celery:<id>:...``), reads kombu's broker layout
    (``_kombu.binding.``) or imports Celery or kombu."""
    if not path.is_file() or path.suffix not in (".py", ".lua"):
        return
    text = path.read_text(encoding="utf-8")
    assert "celery:" not in text, path
    assert "_kombu." not in text, path
    if path.suffix == ".py":
        imported: set[str] = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
        assert not imported & {"celery", "kombu"}, path


DRIVERS = {"_driver.py", "_engine.py", "_async_engine.py", "_sender.py", "_deferred.py"}
"""The Redis layer's drivers: the only modules that know NOSCRIPT and the replica WAIT.
``_sender.py`` (the publisher's create sender, a protocol of its own on a raw connection)
is one for now: its port onto the drivers' steps hung publishes on redis-py 5 (Celery
5.5's), and was taken back (issue 31, open). ``_deferred.py`` (the result backend's
execution writes, sent on a raw connection, answered later) reads a NOSCRIPT answer to
send the call again through ``Engine.execute``; it sends no WAIT (it makes no sender for
a book that waits for replicas)."""


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.joinpath("redis").rglob("*.py")), ids=lambda p: p.name
)
def test_only_the_drivers_know_noscript_and_the_replica_wait(path: Path) -> None:
    """A plan (or the create sender) yields script calls; a script Redis lost (NOSCRIPT)
    and the WAIT for replicas behind writes are the drivers' (``_driver``, ``Engine``,
    ``AsyncEngine``): nothing else in ``redis/`` imports ``NoScriptError``, calls a
    client's ``wait`` or builds a ``WAIT`` command."""
    if path.name in DRIVERS:
        return
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom | ast.Import):
            assert "NoScriptError" not in {alias.name for alias in node.names}, path
        elif isinstance(node, ast.Attribute):
            assert node.attr != "NoScriptError", path
        elif isinstance(node, ast.Call):
            func = node.func
            assert not (isinstance(func, ast.Attribute) and func.attr == "wait"), path
            words = [arg.value for arg in node.args if isinstance(arg, ast.Constant)]
            assert not (words and str(words[0]).lower() == "wait"), path
