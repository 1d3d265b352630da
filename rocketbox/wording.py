"""Counts in the CLI's sentences: "1 entry", "2 entries", never "1 entries".

English only, and only the nouns rocketbox prints: a noun ending in a consonant and ``y`` takes
``ies`` (entry, entries), one ending in ``s``, ``x``, ``ch`` or ``sh`` takes ``es``, every other
one ``s``; an irregular noun passes its plural.
"""

from __future__ import annotations


def noun_form(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``noun`` as ``count`` of it takes it: the singular for exactly 1, else the plural."""
    if count == 1:
        return noun
    if plural_noun is not None:
        return plural_noun
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def plural(count: int, noun: str, plural_noun: str | None = None, *, grouped: bool = False) -> str:
    """``count`` and its noun: "1 entry", "3 entries"; ``grouped``: thousands separated, "1,024"."""
    number = f"{count:,}" if grouped else str(count)
    return f"{number} {noun_form(count, noun, plural_noun)}"
