"""``python -m asyncbook.cli``: the same as the ``asyncbook`` command."""

from ._commands import main

main()
