"""The exceptions the package raises for the user; the CLI prints each as a single line."""
import signal


class AmortizedPyroError(Exception):
    """A user-facing error: bad option, missing or corrupt data, absent device, diverged run."""


class Interrupted(AmortizedPyroError):
    """SIGINT or SIGTERM stopped a run after a finished epoch; what was finished is saved. ``exit_code``
    is the shell's 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum, epoch, out=None):
        self.signum, self.epoch, self.out = signum, epoch, out
        self.exit_code = 128 + signum
        where = ("; checkpointed: resume with python -m amortized_pyro fit --resume %s" % out) if out else \
            " (no run directory: nothing was saved)"
        super().__init__("interrupted by %s after epoch %d%s" % (signal.Signals(signum).name, epoch, where))
