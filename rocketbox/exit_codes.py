"""The exit codes the client-side commands share (`send`, `consume`, the broker's admin commands):
one meaning per number, so that a script can tell "fix the command" from "try again later"."""

from __future__ import annotations

# The broker (or sidecar) answered that the operation failed, or a message was refused.
FAILED_EXIT_CODE = 1
# A bad option or argument (click's own usage errors exit 2 too).
USAGE_EXIT_CODE = 2
# The endpoint could not be reached, or did not answer in time: nothing was done.
UNREACHABLE_EXIT_CODE = 3
