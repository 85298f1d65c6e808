"""New Python processes for scripts that must run alone (tests/test_docs.py's blocks of the pages), without each
paying the imports of torch, Pyro, NumPy, SciPy and matplotlib (about 1.5 s of the 2 s a block's process spent
starting here): :class:`FreshPython` starts this file as a server that imports those third-party libraries once,
then forks one child per script. The child runs the script as ``python SCRIPT`` would: its folder the working
folder and first on sys.path, sys.argv, stdin empty, stdout and stderr to files, the exit status Python's own (an
uncaught exception's traceback and 1, sys.exit's code), Python's default warnings. Nothing of the package under
test (amortized_pyro) nor of a script run before is imported in it: each script imports what it uses, as in a new
interpreter, and a script that forgets an import fails as it would there. The server is started with the
environment the scripts run in (the libraries read OMP_NUM_THREADS and MPLBACKEND when imported).

Protocol: one request a line on the server's stdin, a JSON list [script, stdout file, stderr file], answered by
two lines on its stdout, the child's pid, then its exit status (negative: killed by that signal)."""
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PRELOADED = ("numpy", "scipy.io", "torch", "pyro", "pyro.infer", "pyro.distributions", "pyro.contrib.zuko", "zuko",
             "matplotlib.figure", "matplotlib.ticker", "matplotlib.backend_bases")


class FreshPython:
    """The server, started on the first run; ``run(script, timeout)`` as ``subprocess.run([sys.executable,
    script], cwd=script's folder, capture_output=True, text=True, timeout=timeout)`` answers."""

    def __init__(self, env):
        self.env, self.server, self.folder = env, None, Path(tempfile.mkdtemp(prefix="fresh-python-"))

    def run(self, script, timeout):
        script = Path(script).resolve()
        if self.server is None:
            self.server = subprocess.Popen([sys.executable, __file__], env=self.env, stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True)
            self.lines = queue.Queue()  # the server's answers, read as they come (a timeout waits on this)
            threading.Thread(target=lambda: [self.lines.put(line) for line in self.server.stdout] + [self.lines.put("")],
                             daemon=True).start()
        out, err = self.folder / "stdout", self.folder / "stderr"  # not beside the script: its folder is its own
        self.server.stdin.write(json.dumps([str(script), str(out), str(err)]) + "\n")
        self.server.stdin.flush()
        pid = int(self._line(None))
        try:
            status = int(self._line(timeout))
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._line(None)
            raise
        return subprocess.CompletedProcess([sys.executable, str(script)], status, out.read_text(), err.read_text())

    def _line(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise subprocess.TimeoutExpired(str(self.server.args), timeout) from None
        assert line, "the fresh-Python server ended (exit status %s)" % self.server.wait()
        return line

    def close(self):
        if self.server is not None:
            self.server.stdin.close()
            self.server.wait()
            self.server = None
        shutil.rmtree(self.folder, ignore_errors=True)


def serve():
    """Answer requests until stdin ends (the server's exit), or, in a child, return its request."""
    for name in PRELOADED:
        try:
            __import__(name)
        except ImportError:  # not installed here: a script that needs it fails as it would in a new interpreter
            pass
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            return request
        print(pid, flush=True)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)


if __name__ == "__main__":
    script, out, err = serve()
    # the child: the script as python SCRIPT runs it; an exception or sys.exit leaves through Python's own handling
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(os.path.dirname(script))
    sys.argv, sys.path[0] = [os.path.basename(script)], os.path.dirname(script)  # python NAME, in its folder
    import runpy  # noqa: E402

    runpy.run_path(script, run_name="__main__")
