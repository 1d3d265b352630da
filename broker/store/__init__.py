"""The broker's message store: CommitLog, ConsumeQueue, IndexFile, flush, dispatch, recovery."""

from pathlib import Path

# "compiled" when this package was built by mypyc (setup.py, ROCKETBOX_MYPYC=1), as the image is.
STORE_BUILD = "compiled" if Path(__file__).suffix == ".so" else "interpreted"
