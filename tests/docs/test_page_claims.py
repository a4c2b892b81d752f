"""What a few pages state, held to what the code does (each was once copied from the
docs, run, and failed or misled): the status server's answers without a role, its
endpoint table, the scrape target's host name, the broker ``asyncbook resend`` needs, and
the queues the quickstart's worker consumes."""

from __future__ import annotations

import re

import httpx

from asyncbook import MemoryBook
from asyncbook.web import create_app

from ..support import ROOT
from ..support.asgi import serving

TOKEN = "o" * 32


def page(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


def sh_lines(text: str) -> list[str]:
    """The lines of the page's ``sh`` blocks."""
    return [
        line for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()
    ]


def test_access_says_who_gets_401_as_the_server_answers() -> None:
    text = page("access.md")
    assert "Nobody gets `401`" not in text
    assert "gets\n`401` `unauthorized`" in text or "gets `401` `unauthorized`" in text
    with serving(create_app(MemoryBook(), token=TOKEN)) as url:
        missing = httpx.get(url + "/api/tasks")
        wrong = httpx.get(url + "/api/tasks", headers={"Authorization": "Bearer " + "x" * 32})
    for answer in (missing, wrong):
        assert answer.status_code == 401
        assert answer.json()["code"] == "unauthorized"
        assert answer.headers["www-authenticate"].startswith("Bearer")


def test_the_status_server_lists_each_endpoint_once() -> None:
    rows = re.findall(r"^\| `((?:GET|POST|PUT|DELETE) [^`]+)`", page("status-server.md"), re.M)
    assert rows
    assert sorted({row for row in rows if rows.count(row) > 1}) == []


def test_the_scrape_target_is_an_allowed_host() -> None:
    scraping = page("monitoring.md").split("## Scraping", 1)[1].split("\n## ", 1)[0]
    [target] = re.findall(r'targets: \["([^":]+):\d+"\]', scraping)
    assert f"--allowed-host {target}" in scraping


def test_each_resend_command_names_its_broker() -> None:
    exported = False
    for line in sh_lines(page("resend.md")):
        exported = exported or line.startswith("export ASYNCBOOK_BROKER_URL=")
        if line.startswith(("asyncbook resend ", "asyncbook retry ")):
            assert exported or "--broker " in line, line


def test_the_quickstarts_worker_consumes_asyncbooks_queue() -> None:
    """``asyncbook doctor`` warns when no worker consumes it (the page's own check)."""
    [worker] = [line for line in sh_lines(page("quickstart.md")) if "celery -A proj worker" in line]
    queues = worker.split(" -Q ", 1)[1].split()[0].split(",")
    assert "asyncbook" in queues


def named_modules(text: str) -> list[str]:
    """Every Python module a page names: a path (``asyncbook/redis/_book.py``,
    ``redis/_book.py``, ``tests/docs/test_readme.py``) or a bare name (``_merged.py``,
    ``test_readme.py``), in code spans and code blocks alike."""
    return sorted(set(re.findall(r"(?<![\w/.-])((?:[\w-]+/)*\w+\.py)\b", text)))


def module_exists(name: str) -> bool:
    """``name`` is a file of the checkout: a path from the root (``asyncbook/``,
    ``tests/``) or from the package (``redis/_x.py``), or a bare name found in the
    package (``_x.py``) or, for a test module, under ``tests/``."""
    if "/" in name:
        return any((base / name).is_file() for base in (ROOT, ROOT / "asyncbook"))
    where = ROOT / ("tests" if name.startswith("test_") else "asyncbook")
    return any(where.rglob(name))


def test_every_module_the_architecture_page_names_exists() -> None:
    """docs/architecture.md is a map: each module it names is where it says."""
    named = named_modules(page("architecture.md"))
    assert "asyncbook/_machine.py" in named
    assert "_merged.py" in named
    assert [name for name in named if not module_exists(name)] == []
