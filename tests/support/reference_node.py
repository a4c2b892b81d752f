"""The reference itself under node: ``async-task.ts`` compiled by TypeScript from the npm
registry into a cache folder (test set-up only), and ``reference_driver.mjs`` running whole
batches of operation sequences on it.

The reference is found beside the checkout (``ROOT.parent / "shared" / "reference"``, as
CI lays it out) or at ``ASYNCBOOK_REFERENCE_DIR``. The cache is
``$XDG_CACHE_HOME/asyncbook-tests`` (default ``~/.cache/asyncbook-tests``): TypeScript 5 is
installed there once (``npm install --prefix``), and each reference source is compiled once
(keyed by its hash) beside a tiny ``AiError`` of our own, the class the reference imports
from ``../core/errors.ts``. Without node, npm or the reference the tests skip, except
when ``CI`` is set: then they fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest

from . import ROOT

__all__ = ["ReferenceNode", "reference_node"]

DRIVER = Path(__file__).with_name("reference_driver.mjs")
TYPESCRIPT = "typescript@5"
_QUIET = ["--no-audit", "--no-fund", "--loglevel=error"]

AI_ERROR = """\
export class AiError extends Error {
  code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "AiError";
    this.code = code;
  }
}
"""
"""The reference's ``AiError`` (``../core/errors.ts``): a code and a message."""

TSCONFIG = {
    "compilerOptions": {
        "target": "es2022",
        "module": "nodenext",
        "moduleResolution": "nodenext",
        "rewriteRelativeImportExtensions": True,
        "rootDir": "src",
        "outDir": "out",
        "strict": True,
        "skipLibCheck": True,
        "types": [],
    },
    "include": ["src"],
}


def reference_folder() -> Path:
    """Where ``async-task.ts`` is: ``ASYNCBOOK_REFERENCE_DIR``, else beside the checkout."""
    given = os.environ.get("ASYNCBOOK_REFERENCE_DIR")
    return Path(given) if given else ROOT.parent / "shared" / "reference"


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "asyncbook-tests"


def _missing(what: str) -> NoReturn:
    """Skip for a missing tool or source, or fail under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing, and CI is set: the reference test must run")
    pytest.skip(f"{what} is missing")


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


class ReferenceNode:
    """The compiled reference and the node that runs its driver."""

    def __init__(self, node: str, module: Path, errors: Path) -> None:
        self.node = node
        self.module = module
        self.errors = errors

    def run(self, sequences: list[list[list[Any]]], retention_versions: int = 8) -> list[Any]:
        """Each sequence on a fresh reference book (one node process for the batch):
        every answer as JSON, ``{"error": code}`` for a throw."""
        payload = json.dumps({"retentionVersions": retention_versions, "sequences": sequences})
        done = subprocess.run(
            [self.node, str(DRIVER), str(self.module), str(self.errors)],
            input=payload,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the reference driver failed:\n{done.stderr}")
        answers: list[Any] = json.loads(done.stdout)
        return answers


def reference_node() -> ReferenceNode:
    """The reference compiled (once per source) and ready to run; skips or fails as the
    module docstring says."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        _missing("node")
    if npm is None:
        _missing("npm")
    source = reference_folder() / "async-task.ts"
    if not source.is_file():
        _missing(f"the reference {source}")
    text = source.read_bytes()
    digest = hashlib.sha256(text + AI_ERROR.encode() + json.dumps(TSCONFIG).encode()).hexdigest()
    cache = cache_folder()
    cache.mkdir(parents=True, exist_ok=True)
    build = cache / f"reference-{digest[:16]}"
    module, errors = build / "out" / "orch" / "async-task.js", build / "out" / "core" / "errors.js"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one test process installs and compiles
        tsc = cache / "typescript" / "node_modules" / "typescript" / "bin" / "tsc"
        if not tsc.is_file():
            _run(
                [npm, "install", "--prefix", str(cache / "typescript"), TYPESCRIPT, *_QUIET],
                cache,
            )
        if not module.is_file():
            (build / "src" / "orch").mkdir(parents=True, exist_ok=True)
            (build / "src" / "core").mkdir(parents=True, exist_ok=True)
            (build / "src" / "orch" / "async-task.ts").write_bytes(text)
            (build / "src" / "core" / "errors.ts").write_text(AI_ERROR)
            (build / "package.json").write_text('{"type": "module"}\n')
            (build / "tsconfig.json").write_text(json.dumps(TSCONFIG, indent=2))
            _run([node, str(tsc), "-p", str(build / "tsconfig.json")], build)
    return ReferenceNode(node, module, errors)
