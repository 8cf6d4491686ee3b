"""``python -m replay``: the ``agentlog`` command line."""

from .cli.entry import main

main()
