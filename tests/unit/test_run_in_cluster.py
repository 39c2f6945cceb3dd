"""`peerlab run --in-cluster`'s choices made before anything is installed (orchestrator/cli/run_in_cluster.py):
what the Job's orchestrator is told, which store, and the refusals that name their fix."""
import argparse
from types import SimpleNamespace

import pytest

from orchestrator.cli.common import UsageError
from orchestrator.cli.run_in_cluster import LOCAL_STORE, RUN_ID, _store, job_args, run_in_cluster


def test_the_jobs_orchestrator_gets_the_same_choices_as_the_command_line():
    args = argparse.Namespace(overrides=["nodes.count=10", "dilation=2"], seed=7, shaping="delayline", force=True)
    assert job_args(args) == ["--set", "nodes.count=10", "--set", "dilation=2", "--seed", "7",
                              "--shaping", "delayline", "--force"]
    assert job_args(argparse.Namespace(overrides=[], seed=None, shaping="auto", force=False)) == []


def test_the_store_is_the_scenarios_s3_one_or_the_local_clusters_else_refused_by_name():
    scenario = SimpleNamespace(output=SimpleNamespace(store="s3://bucket/runs"))
    assert _store(scenario, False) == "s3://bucket/runs"
    local = SimpleNamespace(output=SimpleNamespace(store="file://./runs"))
    assert _store(local, True) == LOCAL_STORE
    with pytest.raises(UsageError, match=r"output.store is 'file://./runs': --set output.store=s3://.*--store-secret"):
        _store(local, False)


def test_a_matrix_or_another_backend_is_refused_before_the_cluster_is_asked():
    with pytest.raises(UsageError, match="add --backend kubernetes"):
        run_in_cluster(argparse.Namespace(backend="local"), [object()])
    with pytest.raises(UsageError, match="one scenario per Job, and this is a matrix of 2"):
        run_in_cluster(argparse.Namespace(backend="kubernetes"), [object(), object()])


def test_the_run_id_is_read_from_the_jobs_last_line_only_when_it_is_one():
    assert RUN_ID.match("20261129-065038-gossipsub-large-724fed")
    assert not RUN_ID.match("fidelity: faithful")


def test_the_run_directory_is_found_in_the_jobs_log_whichever_stream_came_last():
    """The Job's log merges the orchestrator's stdout (the run's directory) and stderr (its verdict):
    the path is kept though the verdict came after it; without a path, the last line (for the error)."""
    from functools import reduce

    from orchestrator.backends.kube_experiment import _kept

    run = "/tmp/peerlab-cache/s3/peerlab/runs/20261129-112614-ci-smoke-748761"
    assert reduce(_kept, ["plan: 8 nodes", "collected 8 event logs into /tmp/x", run, "fidelity: faithful"], "") == run
    assert reduce(_kept, ["plan: 8 nodes", "fidelity: faithful", run], "") == run
    assert reduce(_kept, ["plan: 8 nodes", "error: no such scenario"], "") == "error: no such scenario"
