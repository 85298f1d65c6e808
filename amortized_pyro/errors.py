"""The exceptions the package raises for the user. Where a message tells what to change it names the option as
the command line spells it (``--allow-sample``; the same word, underscored, is the Python keyword); the CLI
prints each as one line and adds how to go on there (:func:`amortized_pyro.cli.common.hint`)."""
import signal


class AmortizedPyroError(Exception):
    """A user-facing error: bad option, missing or corrupt data, absent device, diverged run."""


class GuideError(AmortizedPyroError, ValueError):
    """A guide builder cannot serve this model or these options; also a ``ValueError``, as Pyro's autoguides
    raise for bad options."""


class InvalidSettings(AmortizedPyroError):
    """Settings that break a field's rule or disagree with each other, before anything runs; ``fields`` names
    them (the command line names their options and exits with its usage status, 2)."""

    def __init__(self, message, fields):
        self.fields = list(fields)
        super().__init__(message)


class Diverged(AmortizedPyroError):
    """The loss turned non-finite at ``epoch``; ``out`` is the run directory (if any) and ``kept`` the epoch
    of the last good checkpoint kept there; ``replica`` the run's index among seeds packed as replicas."""

    def __init__(self, epoch, loss, out=None, kept=None, replica=0):
        self.epoch, self.loss, self.out, self.kept, self.replica = epoch, loss, out, kept, replica
        where = "" if out is None else "; the last good checkpoint (epoch %d) is kept in %s" % (kept, out)
        super().__init__("training diverged at epoch %d (the loss is %s)%s" % (epoch, loss, where))


class Interrupted(AmortizedPyroError):
    """SIGINT or SIGTERM stopped a run after a finished epoch; what was finished is saved in ``out`` (if
    any). ``exit_code`` is the shell's 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum, epoch, out=None):
        self.signum, self.epoch, self.out = signum, epoch, out
        self.exit_code = 128 + signum
        where = "; checkpointed in %s" % out if out else " (no run directory: nothing was saved)"
        super().__init__("interrupted by %s after epoch %d%s" % (signal.Signals(signum).name, epoch, where))


class FixedSettings(InvalidSettings):
    """A resume asked to change ``fields``, which define the run; only ``allowed`` may change."""

    def __init__(self, fields, allowed):
        self.allowed = list(allowed)
        super().__init__("a resumed run keeps its definition: it cannot change %s (only %s)"
                         % (", ".join(fields), ", ".join(self.allowed)), fields)


class RunExists(AmortizedPyroError):
    """``out`` holds a run already (``status``: started, partial or finished)."""

    def __init__(self, out, status):
        self.out, self.status = out, status
        super().__init__("%s holds a run already (%s)" % (out, status))
