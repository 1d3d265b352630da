"""One Spark session per test process (a JVM start costs seconds, more on a loaded machine), made
when a test first asks for it and stopped with its JVM when the process ends: the modules that
run the Spark engine share it. A test must not start a session of its own beside it (a run with
``engine="spark"`` is given this one): Spark would hand back this one and stop it after.

``local[2]``: the machine's two cores, and more than one task at a time, as on a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from reconcile.config import SparkSettings
from reconcile.session import spark_session

TEST_SPARK = SparkSettings(master="local[2]", app_name="rocketbox-reconcile-tests")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    with spark_session(TEST_SPARK) as session:
        yield session
