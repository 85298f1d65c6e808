"""How long a comparison takes: :class:`GridClock` says the grid's expected time at its start and again as each
run and each run's gap reports end, each line saying what its estimate rests on.

At the start, training's time comes from a short trial: the first configuration to train, fitted now for a few
epochs in memory (nothing written; every run seeds its own random streams, so the runs are the same with or
without it), its SVI seconds per epoch and the seconds of one evaluation. Once runs have ended, from their own
clock: the seconds since training began over the epochs trained. The gap reports' time is known once the first
run's are measured: the seconds since they began over the runs measured. Epochs of runs found finished (or up to
their checkpoint) count as done already; a stopping rule that ends a run early makes the estimate high.
"""
import math
import time
from dataclasses import replace

from amortized_pyro.errors import AmortizedPyroError, Interrupted
from amortized_pyro.runs.fit import fit
from amortized_pyro.runs.store import read_checkpoint, run_status

TRIAL_EPOCHS = 5  # epochs of the first configuration timed at the start


def epochs_left(job):
    """The epochs ``job``'s run has still to train: none where finished, from its checkpoint where partial."""
    status = run_status(job.run_dir) if job.run_dir else "empty"
    if status == "finished":
        return 0
    if status == "partial":
        return max(job.config.epochs - read_checkpoint(job.run_dir)["epoch"], 0)
    return job.config.epochs


def runs(count):
    """'1 run', '3 runs'."""
    return "%d run%s" % (count, "s" * (count != 1))


def brief(seconds):
    """'15 ms', '2.1 s': a step's or an evaluation's time."""
    return "%.0f ms" % (1000 * seconds) if seconds < 1 else "%.1f s" % seconds


def duration(seconds):
    """'40 s', '7.5 min', '25 min', '3.2 h'."""
    if seconds < 90:
        return "%d s" % round(seconds)
    if seconds < 600:
        return "%.1f min" % (seconds / 60)
    return "%d min" % round(seconds / 60) if seconds < 5400 else "%.1f h" % (seconds / 3600)


class GridClock:
    """The expected time of a grid of training runs (``jobs``: :class:`~amortized_pyro.study.executors.Job`)
    followed by the gap reports of ``measured_runs`` of them (train and test each), said through ``log``."""

    def __init__(self, jobs, measured_runs, log):
        self.left = {id(job): epochs_left(job) for job in jobs}
        self.total, self.reports_left, self.log = len(jobs), measured_runs, log
        self.began = self.training_began = time.perf_counter()
        self.epochs_done, self.reports_done, self.gaps_began = 0, 0, None

    def start(self, trial_job=None):
        """The first line: the work, and training's expected time from a trial of ``trial_job``'s
        configuration (None: no trial, the time is said as runs end)."""
        epochs = sum(self.left.values())
        work = "time: %d of %s to train (%d epochs)%s" % (
            sum(1 for e in self.left.values() if e), runs(self.total), epochs, self.gaps_part())
        trial = self.trial(trial_job) if trial_job is not None and epochs else None
        self.training_began = time.perf_counter()
        if trial is None:
            self.log(work + ("; expected time said as runs end" if epochs else ""))
            return
        per_epoch, per_evaluation, timed = trial
        evaluations = sum(math.ceil(e / trial_job.config.eval_every) for e in self.left.values())
        training = epochs * per_epoch + evaluations * per_evaluation
        self.log("%s; expected: training about %s (%s per epoch and %s per evaluation, from %d epochs of %s timed "
                 "now)%s" % (work, duration(training), brief(per_epoch), brief(per_evaluation), timed, trial_job.label,
                             self.then(training)))

    def trial(self, job):
        """(SVI seconds per epoch, seconds per evaluation, epochs timed) of a few epochs of ``job``'s configuration
        fitted now, in memory, and one more evaluation of it (timed warm: the first call's setup left out);
        None where they fail (the run will say why)."""
        timed = min(TRIAL_EPOCHS, job.config.epochs)
        try:
            result = fit(replace(job.config, epochs=timed), data=job.data, progress=False, log=lambda line: None)
        except Interrupted:  # Ctrl-C stops the comparison, not the trial alone
            raise
        except AmortizedPyroError:
            return None
        began = time.perf_counter()
        result.evaluate(job.data, job.config.predictive_draws)
        return result.train_seconds / timed, time.perf_counter() - began, timed

    def ran(self, job):
        """A run of the grid has ended (trained, loaded or failed); a line where it trained."""
        trained = self.left.pop(id(job), 0)
        if not trained:
            return
        self.epochs_done += trained
        now, left = time.perf_counter(), sum(self.left.values())
        per_epoch = (now - self.training_began) / self.epochs_done
        if not left:
            self.log("time: %s so far; training done%s" % (duration(now - self.began), self.then(0)))
            return
        self.log("time: %s so far; training about %s left (%d epochs, at the %s per epoch of the %d trained so far)%s"
                 % (duration(now - self.began), duration(per_epoch * left), left, brief(per_epoch), self.epochs_done,
                    self.then(per_epoch * left)))

    def measuring(self, count):
        """The gap reports of ``count`` runs begin."""
        self.gaps_began, self.reports_left = time.perf_counter(), count

    def measured(self):
        """One run's gap reports (train and test) are made."""
        self.reports_done, self.reports_left = self.reports_done + 1, self.reports_left - 1
        now = time.perf_counter()
        left = (now - self.gaps_began) / self.reports_done * self.reports_left
        self.log("time: %s so far; expected: %s in all, about %s left (the gap reports of %s, at the %s per run of "
                 "the %d measured so far)" % (duration(now - self.began), duration(now - self.began + left),
                                              duration(left), runs(self.reports_left),
                                              duration((now - self.gaps_began) / self.reports_done), self.reports_done))

    def gaps_part(self):
        return ", then the gap reports of %s (train and test images)" % runs(self.reports_left) if \
            self.reports_left else ""

    def then(self, training):
        """The end of a line with training's time left: the whole grid's where that is all."""
        if self.reports_left:
            return "; the gap reports' time said once the first run's are measured"
        return "; in all about %s" % duration(time.perf_counter() - self.began + training)
