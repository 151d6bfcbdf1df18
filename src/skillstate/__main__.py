"""``python -m skillstate``: the same as the ``skillstate`` command."""

from skillstate.cli import main

main()
