"""One surface, one table: ``RedisBook`` and ``AsyncRedisBook`` offer every call of
``redis/_surface.py`` (``SURFACE``), each the same function of the namespace run by the
facade's driver, so neither can drift from the other."""

from __future__ import annotations

import inspect

import pytest

from asyncbook.redis import AsyncRedisBook, RedisBook
from asyncbook.redis import _surface as surface
from asyncbook.redis._surface import SURFACE


@pytest.mark.parametrize("name", SURFACE)
def test_both_facades_run_the_table_s_call(name: str) -> None:
    plan = getattr(surface, name)
    assert plan.__doc__, f"{name} has no docstring"
    for facade in (RedisBook, AsyncRedisBook):
        method = getattr(facade, name)
        assert method.__wrapped__ is plan, f"{facade.__name__}.{name} is not the table's"
        assert method.__doc__ == plan.__doc__
    assert inspect.iscoroutinefunction(getattr(AsyncRedisBook, name))
    assert not inspect.iscoroutinefunction(getattr(RedisBook, name))


def test_the_table_names_every_plan_of_the_surface_module() -> None:
    """Every public function ``_surface`` defines, but the two runners, is in the table,
    and every name of the table is one of its functions (defined or imported there)."""
    defined = {
        name
        for name, value in vars(surface).items()
        if inspect.isfunction(value)
        and value.__module__ == surface.__name__
        and not name.startswith("_")
    }
    assert defined - {"sync", "awaited"} <= set(SURFACE)
    assert all(inspect.isfunction(getattr(surface, name)) for name in SURFACE)
    assert set(surface.__all__) == {*SURFACE, "SURFACE", "sync", "awaited"}
