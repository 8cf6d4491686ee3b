"""``python -m replay.drill CMD STORE_URL RUN_ID BOOKS_PATH``: one drilled step (child)."""

import sys

from .child import main

raise SystemExit(main(sys.argv[1:]))
