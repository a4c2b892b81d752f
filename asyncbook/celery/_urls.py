"""The book's Redis URL from Celery's: ``sentinel_book_url``."""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

__all__ = ["sentinel_book_url"]


def sentinel_book_url(celery_url: str, master: str) -> str:
    """The book's URL for Celery's ``sentinel://h:p/db;sentinel://h2:p2/db`` and its
    ``master_name``: ``redis+sentinel://[user:password@]h:p,h2:p2/master/db``."""
    chunks = [urlsplit(chunk) for chunk in celery_url.split(";") if chunk]
    hosts = ",".join(f"{chunk.hostname}:{chunk.port or 26379}" for chunk in chunks)
    first = chunks[0]
    credentials = ""
    if first.password:
        user, password = unquote(first.username or ""), unquote(first.password)
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    db = first.path.strip("/") or "0"
    return f"redis+sentinel://{credentials}{hosts}/{quote(master, safe='')}/{db}"
