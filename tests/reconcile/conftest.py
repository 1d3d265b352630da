"""One Spark session per test module (a JVM start costs seconds), stopped with its JVM at the end.

``local[2]``: the machine's two cores, and more than one task at a time, as on a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from reconcile.config import SparkSettings
from reconcile.session import spark_session

TEST_SPARK = SparkSettings(master="local[2]", app_name="rocketbox-reconcile-tests")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session(TEST_SPARK) as session:
        yield session
