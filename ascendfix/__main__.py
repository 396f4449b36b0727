"""``python -m ascendfix``: the same as the ``ascendfix`` console script."""

from ascendfix.cli import entry

entry()
