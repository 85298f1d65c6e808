"""compare on a Ray cluster that loses a node: a local multi-node cluster (``ray.cluster_utils.Cluster``: a
head and two worker nodes, one CPU each, on this machine), one worker node removed while the grid runs; the
grid finishes, the runs that were on the lost node resume from their checkpoints on the nodes left, and the
table equals the local executor's. (A module of its own: it starts its own Ray, not the one of test_ray.py.)"""
import json
import threading
import time

import pytest
import torch

from amortized_pyro.study.comparison import compare

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

# 50 epochs: the node is lost once every run has 8 (one run was seen 12 epochs ahead of the last to start), so the
# lost node's run is still well short of its end; each epoch more costs the local reference and the cluster alike
GRID = dict(guides=("shared",), widths=(4,), seeds=(0, 1, 2), datasets=("mnist-sample",), n_obs=100, n_test=10,
            batch_size=20, hidden=8, z_dim=3, device="cpu", eval_every=2, predictive_draws=2, epochs=50,
            checkpoint_every="1", progress=False, log=lambda line: None)


@ray.remote(num_cpus=1)
def started_worker():
    """Its node's id, after the imports of a grid's run and a second's wait (so that three of them take the three
    one-CPU nodes)."""
    import amortized_pyro.study.executors  # noqa: F401
    time.sleep(1.0)
    return ray.get_runtime_context().get_node_id()


def table(results):
    return [{k: v for k, v in row.items() if k != "time"} for row in results.rows]


@pytest.fixture
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    # a lost node noticed within about a second (Ray's default health check takes 15 s or more)
    fast_checks = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_failure_threshold": 2,
                   "worker_niceness": 0}  # Ray's workers at niceness 15 starve beside a busy core (tests/test_ray.py)
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": fast_checks})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def test_a_lost_node_loses_no_run(cluster, tmp_path):
    cluster, workers = cluster
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a one-CPU Ray task runs, so that sums run in the same order
    try:
        local = compare(out=tmp_path / "local", **GRID)
    finally:
        torch.set_num_threads(threads)
    # a worker on each node, its imports done, before the grid starts (Ray reuses it for the grid's tasks), so that
    # the three runs start together: a node's first worker, started by the grid, was seen to start so late beside
    # a busy core that another node's run had finished before every run had 8 epochs (and none was lost)
    nodes = ray.get([started_worker.remote() for _ in range(3)])
    assert len(set(nodes)) == 3, nodes
    out = tmp_path / "cluster"
    runs = [out / "runs" / "mnist-sample" / ("constant-VI-seed%d" % seed) for seed in GRID["seeds"]]
    finished = []
    thread = threading.Thread(target=lambda: finished.append(
        compare(out=out, executor="ray", ray_options=dict(address=cluster.address), **GRID)))
    started = time.time()
    thread.start()
    # three runs on three one-CPU nodes: once every run has checkpointed 8 epochs of 50, a node is lost mid-run
    while not all((run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 8
                  for run in runs):
        assert thread.is_alive(), "the grid did not start on the cluster"
        time.sleep(0.05)
    print("every run at epoch 8 after %.1f s" % (time.time() - started))
    lost = time.time()
    cluster.remove_node(workers[0], allow_graceful=False)
    thread.join()
    print("grid finished %.1f s after the node was lost" % (time.time() - lost))
    assert finished, "the grid did not finish after a node was lost"
    assert table(finished[0]) == table(local)
    resumed = [json.loads((run / "config.json").read_text()).get("resumes", []) for run in runs]
    assert sum(len(r) for r in resumed) == 1, resumed  # the lost node's run, and no other, resumed once
    assert next(r for r in resumed if r)[0]["from_epoch"] >= 7  # from its checkpoint, not from the start
