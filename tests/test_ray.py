"""compare on Ray: a real local Ray started in the test (2 CPUs, as CI has), the same table as the local
executor, and a worker killed mid-run retried from its checkpoint. (Where Ray is missing these skip; the
clear line for a missing Ray is tested in test_cli.py, which runs everywhere.)"""
import json
import os
import signal
import threading
import time

import pytest
import torch

from amortized_pyro.study.comparison import compare

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

WORKERS_NOT_NICE = {"worker_niceness": 0}
TINY = dict(datasets=("mnist-sample",), n_obs=40, n_test=10, batch_size=20, hidden=8, z_dim=3, device="cpu",
            eval_every=2, predictive_draws=2, epochs=4, progress=False, log=lambda line: None)


@pytest.fixture(scope="module")
def local_ray():
    # Ray starts its workers at niceness 15: beside a busy core (another job, the other test worker) they starve,
    # and this file's two tests took 188 s instead of 22 (docs/testing.md); at 0 they get their share
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _system_config=WORKERS_NOT_NICE)
    yield ray
    ray.shutdown()


def table(results):
    """The results table's rows without wall-clock time."""
    return [{k: v for k, v in row.items() if k != "time"} for row in results.rows]


def test_the_ray_executor_gives_the_local_executors_table(local_ray, tmp_path):
    grid = dict(guides=("amortized", "per-datapoint"), widths=(4,), seeds=(0, 1), **TINY)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a Ray task with one CPU runs, so that the two sum in the same order
    try:
        local = compare(out=tmp_path / "local", **grid)
    finally:
        torch.set_num_threads(threads)
    remote = compare(out=tmp_path / "ray", executor="ray", **grid)
    assert len(remote.rows) == 2 * 2 * 2 and table(remote) == table(local)
    assert remote.reconstructions == local.reconstructions and remote.baselines == local.baselines
    saved = (tmp_path / "ray" / "results.jsonl").read_text().splitlines()
    assert len(saved) == len(remote.rows) + len(remote.baselines) + len(remote.reconstructions)


def test_a_workers_messages_reach_the_user(local_ray, tmp_path):
    lines = []
    grid = dict(TINY, batch_size=100, log=lines.append)  # more than the 40 training images: the run says so
    compare(guides=("amortized",), widths=(4,), seeds=(0,), out=tmp_path / "ray", executor="ray", **grid)
    assert any("training on the full batch" in line for line in lines), lines


def grid_worker():
    """The Ray worker process training a grid run (Ray titles it after the task's function)."""
    for process in psutil.process_iter(["cmdline"]):
        if any("train_grid_run" in part for part in process.info["cmdline"] or []):
            return process
    return None


def test_a_killed_worker_is_retried_and_its_run_resumes_from_its_checkpoint(local_ray, tmp_path):
    grid = dict(TINY, guides=("shared",), widths=(4,), seeds=(0,), n_obs=200, epochs=40, checkpoint_every="1")
    whole = compare(out=tmp_path / "whole", executor="ray", **grid)
    out = tmp_path / "killed"
    metrics = out / "runs" / "mnist-sample" / "constant-VI-seed0" / "metrics.jsonl"
    finished = []
    thread = threading.Thread(target=lambda: finished.append(compare(out=out, executor="ray", **grid)))
    thread.start()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 10):
        assert thread.is_alive()
        time.sleep(0.01)
    worker = grid_worker()
    assert worker is not None
    os.kill(worker.pid, signal.SIGKILL)
    thread.join()
    assert finished, "the grid did not finish after its worker was killed"
    assert table(finished[0]) == table(whole)
    resumes = json.loads((metrics.parent / "config.json").read_text())["resumes"]
    assert len(resumes) == 1 and resumes[0]["from_epoch"] >= 9  # resumed, not started again
