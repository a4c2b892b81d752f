"""The status server (``asyncbook serve``): JSON API, task streams, metrics, the page."""

from .app import create_app
from .feed import BookChangeFeed, Change, ChangeFeed, LocalChangeFeed, RedisChangeFeed
from .server import BackgroundServer, feed_for, serve

__all__ = [
    "BackgroundServer",
    "BookChangeFeed",
    "Change",
    "ChangeFeed",
    "LocalChangeFeed",
    "RedisChangeFeed",
    "create_app",
    "feed_for",
    "serve",
]
