"""``python -m replay.cli``: the ``agentlog`` command line."""

from .entry import main

main()
