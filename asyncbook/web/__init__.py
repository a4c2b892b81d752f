"""The status server (``asyncbook serve``): JSON API, task streams, metrics, the page."""

from .app import create_app
from .feed import Change, ChangeFeed, LocalChangeFeed, RedisChangeFeed
from .server import serve

__all__ = ["Change", "ChangeFeed", "LocalChangeFeed", "RedisChangeFeed", "create_app", "serve"]
