"""``python -m rocketbox``: the same as the ``rocketbox`` console script."""

from rocketbox.cli import main

main()
