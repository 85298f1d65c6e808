"""SIGINT and SIGTERM taken between epochs, so that a run stops at a checkpoint, not in the middle of an update."""
import signal
import threading


class StopSignals:
    """SIGINT and SIGTERM set ``signum``, which the loop reads after each epoch; a second one stops at once.
    Handlers are installed only in the main thread (elsewhere signals cannot be caught)."""

    def __enter__(self):
        self.signum, self.previous = None, {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
