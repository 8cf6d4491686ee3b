"""``python -m replay``: the ``agentlog`` command line."""

from .cli import main

main()
