"""`orchestrator.cli.main` called by another program (as the tests do) leaves that program's Spark
session alone; only the `peerlab` command itself lets go of the analysis's JVM as it exits."""
import pytest

from orchestrator.cli import main

pytestmark = pytest.mark.spark


def test_main_in_process_keeps_the_callers_spark_session(spark):
    assert main(["validate", "scenarios/quickstart.yaml"]) == 0
    assert spark.range(5).count() == 5
