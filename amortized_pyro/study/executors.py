"""Running a comparison's runs: one after another in this process (``local``), or as Ray tasks (``ray``).

Both take the same jobs and yield ``(job, outcome)`` as runs end, the outcome a
:class:`~amortized_pyro.runs.fit.FitResult` or, for a run that failed for its own reasons (it diverged, its
data are bad), the error's message. A job is executed by :func:`execute`, which can be called again on
the same run directory at any time: a finished run is loaded, a checkpointed one resumed, anything else
trained from the start. That is what lets Ray retry a task whose worker died: the retry resumes the run
from its last checkpoint. On a cluster, every run directory must be on storage the driver and all workers
share (``--out`` on a shared file system).
"""
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from amortized_pyro.errors import AmortizedPyroError, GuideError, Interrupted
from amortized_pyro.inference.replicas import check_pack
from amortized_pyro.runs.config import FitConfig
from amortized_pyro.runs.fit import fit, load_run, resume
from amortized_pyro.runs.packs import fit_pack
from amortized_pyro.runs.store import read_checkpoint, run_status
from amortized_pyro.support.signals import StopSignals

STATES = {"finished": ", finished: loaded", "partial": ", resumed from its checkpoint"}  # how a run goes on
RAY_INSTALL = "the Ray executor needs Ray: pip install -e \".[ray]\" (or pip install \"ray>=2.9\")"


@dataclass
class Job:
    """One run of the grid: where its results go (dataset, label, seed) and what it is."""

    dataset: str
    label: str
    seed: int
    config: FitConfig
    run_dir: object
    data: object

    def name(self):
        return "%s %s seed %d" % (self.dataset, self.label, self.seed)


def execute(config, data, run_dir, progress=False, log=print):
    """The run ``config`` in ``run_dir``: loaded where finished, resumed where checkpointed, else trained
    (over a run that never reached its first checkpoint). The caller has checked that a run already there
    is this one (:func:`amortized_pyro.study.comparison.plan`)."""
    status = run_status(run_dir) if run_dir else "empty"
    if status == "finished":
        return load_run(run_dir, config.device)
    if status == "partial":
        return resume(run_dir, data=data, progress=progress, log=log)
    return fit(config, data=data, out=run_dir, progress=progress, log=log, overwrite=status == "started")


def run_local(jobs, progress, log, replicas=1):
    """The jobs one after another, in this process. With ``replicas`` > 1, each configuration's seeds go R at
    a time as one batched model (:func:`amortized_pyro.runs.packs.fit_pack`) where the pack can train together
    (all new, or all checkpointed at one epoch, a supported configuration); otherwise, and after a pack
    stopped on one replica's error, one by one (each replica is its single run, so nothing changes but time)."""
    jobs = list(jobs)
    place = {id(job): number for number, job in enumerate(jobs, 1)}
    for group in packs(jobs, replicas):
        if len(group) > 1 and can_pack(group):
            log("runs %d to %d of %d: %s, seeds %s as one batched model" % (
                place[id(group[0])], place[id(group[-1])], len(jobs), group[0].label,
                ", ".join(str(j.seed) for j in group)))
            try:
                yield from zip(group, fit_pack([j.config for j in group], group[0].data, [j.run_dir for j in group],
                                               progress, log))
                continue
            except (Interrupted, GuideError):  # a guide the pack cannot build, where check_pack let it: our bug
                raise
            except AmortizedPyroError as e:
                log("the pack of %s stopped (%s): its runs go on one by one" % (group[0].label, e))
        for job in group:
            log("run %d of %d: %s%s" % (place[id(job)], len(jobs), job.name(), STATES.get(
                run_status(job.run_dir) if job.run_dir else "empty", "")))
            try:
                yield job, execute(job.config, job.data, job.run_dir, progress, log)
            except Interrupted:
                raise
            except AmortizedPyroError as e:
                yield job, str(e)


def packs(jobs, size):
    """Consecutive jobs of one configuration (dataset and label), ``size`` at a time."""
    group = []
    for job in jobs:
        if group and (len(group) == size or (job.dataset, job.label) != (group[0].dataset, group[0].label)):
            yield group
            group = []
        group.append(job)
    if group:
        yield group


def can_pack(group):
    """Whether these runs can train as one model: a supported configuration, all new or all at one checkpoint."""
    try:
        check_pack([job.config for job in group])
    except AmortizedPyroError:
        return False
    statuses = {run_status(job.run_dir) if job.run_dir else "empty" for job in group}
    if statuses <= {"empty", "started"}:
        return True
    return statuses == {"partial"} and len({read_checkpoint(job.run_dir)["epoch"] for job in group}) == 1


def train_grid_run(config, data, run_dir):
    """A Ray task: execute one job on a worker; (``"finished"`` or the message of the run's own failure, the
    lines the run logged), so that a worker's messages (a capped batch, a data fallback) reach the user."""
    lines = []
    try:
        execute(FitConfig(**config), data, run_dir, progress=False, log=lines.append)
    except AmortizedPyroError as e:
        return str(e), lines
    return "finished", lines


def import_ray():
    try:
        import ray
    except ImportError:
        raise AmortizedPyroError(RAY_INSTALL) from None
    return ray


def run_ray(jobs, progress, log, address=None, cpus_per_run=1.0, gpus_per_run=None, retries=3):
    """The jobs as Ray tasks on a local Ray (``address`` None) or an existing cluster (``auto``,
    ``ray://HOST:PORT``): each asks for ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs (by default one
    where the runs use CUDA), and is retried up to ``retries`` times when its worker dies. SIGINT/SIGTERM
    cancel the tasks (their runs keep their last checkpoints) and raise :class:`Interrupted`."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    if gpus_per_run is None:  # one GPU per run where the runs use CUDA
        device = jobs[0].config.device if jobs else "cpu"
        cuda = device.startswith("cuda") or (device == "auto" and ray.cluster_resources().get("GPU", 0) > 0)
        gpus_per_run = 1.0 if cuda else 0.0
    task = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=retries)(train_grid_run)
    data_refs = {}
    pending = {}
    for job in jobs:
        key = id(job.data)
        if key not in data_refs:
            data_refs[key] = ray.put(job.data.to("cpu"))
        run_dir = str(Path(job.run_dir).resolve())
        pending[task.remote(asdict(job.config), data_refs[key], run_dir)] = job
    failed = 0
    bar = tqdm(total=len(jobs), desc="compare (ray)", unit="run", disable=not progress)
    with StopSignals() as stop:
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                bar.set_postfix_str("running %d, failed %d" % (min(len(pending), _slots(ray, cpus_per_run)), failed))
                if stop.signum:
                    raise Interrupted(stop.signum, 0, None)
                for ref in ready:
                    job = pending.pop(ref)
                    outcome, lines = ray.get(ref)
                    for line in lines:
                        log("%s: %s" % (job.name(), line))
                    bar.update()
                    log("run %d of %d done: %s%s" % (bar.n, len(jobs), job.name(),
                                                    "" if outcome == "finished" else " (failed)"))
                    if outcome != "finished":
                        failed += 1
                        yield job, outcome
                    else:
                        yield job, load_run(job.run_dir, job.config.device)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        finally:
            bar.close()


def _slots(ray, cpus_per_run):
    return max(1, math.floor(ray.cluster_resources().get("CPU", 1) / max(cpus_per_run, 1e-9)))

