"""What a PromQL expression names: its metrics and the labels it selects on, and Grafana's
variables replaced so that an expression of a dashboard can be parsed by promtool.

Not a PromQL parser: string literals, range selectors and grouping clauses are removed, and what
is left that reads as an identifier and is neither a function, a keyword nor an aggregation is a
metric name. promtool (tests/helm/test_monitoring.py) parses the same expressions for real, so
an expression this reading would misjudge also fails there.
"""

from __future__ import annotations

import re

# A grouping or matching clause's label list: by (a, b), without (...), on (...), ignoring (...),
# group_left (...), group_right (...).
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENTIFIER = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w.])")
_NUMBER_WORDS = {"inf", "nan", "Inf", "NaN"}
_KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
             "group_left", "group_right", "atan2"}  # fmt: skip
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
# What a Grafana variable stands for when promtool parses a dashboard's expression.
GRAFANA_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "namespace": ".*", "claims": ".*"}


def metric_names(expr: str) -> set[str]:
    """Every metric an expression reads."""
    text = _CLAUSE.sub(" ", expr)
    text = _SELECTOR.sub(lambda m: f" {m.group(1)} ", text)
    text = _STRING.sub(" ", _RANGE.sub(" ", text))
    names = set()
    for found in _IDENTIFIER.finditer(text):
        name = found.group(1)
        following = text[found.end() :].lstrip()
        if following.startswith("(") or name in _KEYWORDS or name in _NUMBER_WORDS:
            continue  # a function or aggregation, a keyword, a number
        names.add(name)
    return names


def selected_labels(expr: str) -> dict[str, set[str]]:
    """{metric: the label names its selectors match on}."""
    found: dict[str, set[str]] = {}
    for selector in _SELECTOR.finditer(_CLAUSE.sub(" ", expr)):
        labels = {m.group(1) for m in _MATCHER.finditer(selector.group(2))}
        found.setdefault(selector.group(1), set()).update(labels)
    return found


def without_grafana_variables(expr: str) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        assert name in GRAFANA_VARIABLES, f"an unknown Grafana variable ${name} in {expr}"
        return GRAFANA_VARIABLES[name]

    return _VARIABLE.sub(value, expr)
