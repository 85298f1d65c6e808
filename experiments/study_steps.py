"""The parts a study is declared with (experiments/studies.py) and the driver runs (experiments/study.py): the
context it runs in, the steps of a report (commands, globs, copies), what one study reads from another, and
the study itself."""
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class StudyError(Exception):
    """One line for the user, and the exit status."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Context:
    root: Path
    data: str = None  # the MNIST IDX folder, as the scripts get it (relative to the root)

    def matches(self, pattern):
        """The paths under the root matching a glob pattern, relative to the root, sorted."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.glob(pattern))

    def folders(self, pattern):
        """The folders holding a file matching ``pattern`` (e.g. runs/end-*/results.jsonl), or the pattern's
        folder part where none does yet."""
        found = self.matches(pattern)
        return [str(Path(p).parent) for p in found] if found else [str(Path(pattern).parent)]

    def one(self, pattern):
        """The one match of ``pattern`` (a run directory whose dataset folder is a glob), or the pattern."""
        found = self.matches(pattern)
        return found[0] if len(found) == 1 else pattern


@dataclass(frozen=True)
class Glob:
    """An argument standing for every path matching ``pattern`` when the command runs (sorted), or with
    ``parents`` for the folders holding them: shown as the pattern (runs/end-*/ for the folders)."""
    pattern: str
    parents: bool = False

    def text(self):
        return str(Path(self.pattern).parent) + "/" if self.parents else self.pattern

    def expand(self, root):
        found = sorted(p.relative_to(root) for p in root.glob(self.pattern))
        return [str(p.parent if self.parents else p) for p in found] or [self.text()]


@dataclass(frozen=True)
class Command:
    """A command run in the root; with ``stdout`` its output also goes to that file, after a line naming the
    command."""
    argv: tuple
    stdout: str = None

    def text(self, redirect=True):
        return " ".join(a.text() if isinstance(a, Glob) else shlex.quote(a) for a in self.argv) + (
            " > %s" % shlex.quote(self.stdout) if self.stdout and redirect else "")

    def run(self, root):
        argv = [e for a in self.argv for e in (a.expand(root) if isinstance(a, Glob) else [a])]
        argv = [sys.executable if a == "python" else a for a in argv]
        if not self.stdout:
            process = subprocess.Popen(argv, cwd=root)
            try:
                return process.wait()
            except KeyboardInterrupt:  # the command got the same Ctrl-C: let it checkpoint and stop by itself
                process.wait()
                raise
        done = subprocess.run(argv, cwd=root, stdout=subprocess.PIPE, text=True)
        print(done.stdout, end="", flush=True)
        if done.returncode == 0:  # a failed report leaves the previous file as it was
            path = root / self.stdout
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("Command: %s\n\n%s" % (self.text(redirect=False), done.stdout))
            tmp.replace(path)
        return done.returncode


@dataclass(frozen=True)
class Copy:
    """Files copied into a folder (made where missing); ``by_run``: each named RUN-NAME after its run directory."""
    patterns: tuple
    dest: str
    by_run: bool = False

    def text(self):
        return "cp %s %s/%s" % (" ".join(self.patterns), self.dest, "  (each as RUN-FILE)" if self.by_run else "")

    def run(self, root):
        (root / self.dest).mkdir(parents=True, exist_ok=True)
        for pattern in self.patterns:
            found = sorted(root.glob(pattern))
            if not found:
                print("study.py: nothing matches %s" % pattern, file=sys.stderr)
                return 1
            for path in found:
                name = "%s-%s" % (path.parent.name, path.name) if self.by_run else path.name
                shutil.copy2(path, root / self.dest / name)
        return 0


@dataclass(frozen=True)
class Mirror:
    """A comparison folder's small files (its table and results; each run's settings, metrics, summary and gap
    reports) copied into ``dest`` in the same layout, so that the gap tables can be drawn again from what is
    committed once runs/ (ignored: parameters, checkpoints) is gone. A folder not there yet (a study's later
    cell) is noted and skipped."""
    source: str
    dest: str
    FILES = ("summary.md", "results.jsonl", "runs/*/*/config.json", "runs/*/*/metrics.jsonl",
             "runs/*/*/summary.json", "runs/*/*/gap-*.json")

    def text(self):
        return "cp %s/{summary.md,results.jsonl,runs/*/*/{config,summary}.json,...} %s/" % (self.source, self.dest)

    def run(self, root):
        source = root / self.source
        if not source.is_dir():
            print("study.py: no %s yet: skipped" % self.source, file=sys.stderr)
            return 0
        for pattern in self.FILES:
            for path in sorted(source.glob(pattern)):
                target = root / self.dest / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        return 0


@dataclass(frozen=True)
class Need:
    """What a study reads from another: files (relative to the root; a glob stands only for the dataset folder's
    name and must match exactly one file) and, in words, what they are."""
    study: str
    files: tuple
    what: str


def plot(folder):
    """compare's figures and summary.md redrawn from a results.jsonl."""
    return Command(("python", "-m", "amortized_pyro", "plot", "%s/results.jsonl" % folder))


@dataclass(frozen=True)
class Study:
    name: str
    what: str
    figures: str  # the report's folder
    runs: str  # where the script's runs go (the figures folder itself for studies whose compare writes there)
    report: Callable  # Context → [steps]
    reads: tuple  # what the report reads (glob patterns, each must match): checked before --report-only
    needs: tuple = ()
    data: bool = False  # the script's first argument is an MNIST IDX folder
    script_reports: bool = False  # the script itself ends with the report (compare's figures, or a call of --report-only)
    args: Callable = lambda ctx: [()]  # Context → the script's arguments, one tuple per invocation
    script_folder: str = "experiments"  # where its script lies (experiments/archive: a study run once, its report kept)

    @property
    def script(self):
        return "%s/%s.sh" % (self.script_folder, self.name)
