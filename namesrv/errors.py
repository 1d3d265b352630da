"""The NameServer's errors::

    NamesrvError                     (not retriable unless said)
    ├── NamesrvConfigError           a setting out of its limits, at start
    ├── RegistrationRefusedError     a registration with a field out of its limits
    └── BrokersFullError             a new broker beyond brokers_max (retriable: one may expire)

The gRPC edge (servicer.py) answers them INVALID_ARGUMENT and RESOURCE_EXHAUSTED.
"""

from __future__ import annotations


class NamesrvError(Exception):
    retriable = False


class NamesrvConfigError(NamesrvError, ValueError):
    pass


class RegistrationRefusedError(NamesrvError, ValueError):
    """``str(e)`` names the field and the limit it breaks."""


class BrokersFullError(NamesrvError):
    retriable = True
