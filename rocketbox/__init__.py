"""rocketbox: the composition root and command line."""
