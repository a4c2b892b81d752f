"""The status server: a JSON API, server-sent event streams and the status pages."""

from ._access import AccessRules
from ._app import create_app
from ._feed import BookChangeFeed, Change, ChangeFeed, LocalChangeFeed
from ._resend import Resending
from ._server import BackgroundServer, feed_for, serve

__all__ = [
    "AccessRules",
    "BackgroundServer",
    "BookChangeFeed",
    "Change",
    "ChangeFeed",
    "LocalChangeFeed",
    "Resending",
    "create_app",
    "feed_for",
    "serve",
]
