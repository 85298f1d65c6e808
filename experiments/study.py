"""Every study of experiments/ as one declared pipeline: what each needs from the others, its script, its report.

    python experiments/study.py --list                  every study, what it needs, where it writes
    python experiments/study.py NAME [SCRIPT OPTIONS]   check NAME's needs, run its script, then its report
    python experiments/study.py NAME --with-needs       ... running first every needed study whose output is missing
    python experiments/study.py NAME --report-only      only the report, from the runs already there
    python experiments/study.py NAME --dry-run          print the commands, in order, and run none

A study (STUDIES, declared in experiments/studies.py from the parts of experiments/study_steps.py) is one
script, experiments/NAME.sh or, for a study run once, experiments/archive/NAME.sh (its runs: resumable, the same command goes on where it stopped), and one report step that writes its folder under figures/ (where the script draws its figures itself,
compare's, or ends with --report-only, the driver does not run the report again). Before the script runs, every
file the study reads from another study must be there (a finished run's summary.json, a gap report): where one
is missing the driver says so in one line and exits 2 naming the command to run, or, with --with-needs, runs that
study first. A study whose script is running now is never started a second time: the driver says to wait for it.
Nothing is ever deleted.

The driver's own options (--list, --with-needs, --report-only, --dry-run, --data DIR, --root DIR) may come
anywhere; every other argument after NAME goes to the study's script (after ``--``, all of them do). --data names
the MNIST IDX folder (the published test file) of the studies that take one, relative to the repository root,
where the scripts run (default ../shared/data/mnist where present: the folder name becomes part of the run
folders' names, so give it as the runs were started). --root (or AMORTIZED_PYRO_STUDY_ROOT) names the
repository to work in (default: the one holding this file).
"""
import os
import shlex
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, also when loaded by path
from studies import STUDIES  # noqa: E402
from study_steps import Command, Context, StudyError  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
MNIST_IDX = "../shared/data/mnist"  # the default --data, relative to the repository root


def missing(need, ctx):
    """What of a need is not there: [(pattern, why)], empty where all is."""
    found = []
    for pattern in need.files:
        matches = ctx.matches(pattern)
        if len(matches) > 1:
            found.append((pattern, "%d files match it, one expected: %s" % (len(matches), ", ".join(matches))))
        elif not matches:
            found.append((pattern, "missing"))
    return found


def running(study, root):
    """The ids of processes running the study's script in ``root`` (Linux's /proc; none found elsewhere)."""
    pids = []
    proc = Path("/proc")
    if not proc.is_dir():
        return pids
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if any(a.decode(errors="replace").endswith(study.script) for a in argv[:3]) and cwd == root.resolve():
            pids.append(int(entry.name))
    return pids


def command_line(name, ctx, flags=""):
    data = " --data %s" % shlex.quote(ctx.data) if STUDIES[name].data and ctx.data not in (None, MNIST_IDX) else ""
    return "python experiments/study.py %s%s%s" % (name, data, flags)


class Driver:
    def __init__(self, ctx, with_needs=False, dry_run=False):
        self.ctx, self.with_needs, self.dry_run, self.done = ctx, with_needs, dry_run, []

    def step(self, step):
        print("+ " + step.text(), flush=True)
        if not self.dry_run:
            status = step.run(self.ctx.root)
            if status:
                raise StudyError("%s exited with status %d" % (step.text(), status), status)

    def needs_of(self, study):
        """The study's needs that are not there, each as one clause: [(need, clause)]."""
        gaps = []
        for need in study.needs:
            absent = missing(need, self.ctx)
            if absent:
                pattern, why = absent[0]
                more = " (and %d more)" % (len(absent) - 1) if len(absent) > 1 else ""
                gaps.append((need, "%s's %s: %s %s%s" % (need.study, need.what, pattern, why, more)))
        return gaps

    def check_needs(self, study):
        gaps = self.needs_of(study)
        if not gaps:
            return
        busy = {need.study: running(STUDIES[need.study], self.ctx.root) for need, _ in gaps}
        clauses = "; ".join(clause + (" (running now, pid %s: wait for it)" % ",".join(map(str, busy[need.study]))
                                      if busy[need.study] else "") for need, clause in gaps)
        if any(busy.values()) or not self.with_needs:
            todo = [command_line(n, self.ctx) for n in dict.fromkeys(need.study for need, _ in gaps) if not busy[n]]
            then = ("run %s first, or %s" % (" and ".join(todo), command_line(study.name, self.ctx, " --with-needs"))
                    if todo else "then run %s again" % command_line(study.name, self.ctx))
            raise StudyError("%s needs %s; %s" % (study.name, clauses, then))
        print("study.py: %s needs %s; running %s first" % (
            study.name, clauses, ", ".join(dict.fromkeys(need.study for need, _ in gaps))), flush=True)
        for name in dict.fromkeys(need.study for need, _ in gaps):
            self.run(name, ())
        if not self.dry_run:
            gaps = self.needs_of(study)
            if gaps:
                raise StudyError("%s still needs %s after running %s" % (
                    study.name, "; ".join(c for _, c in gaps), ", ".join(n.study for n, _ in gaps)), 1)

    def check_data(self, study):
        if not study.data:
            return
        if self.ctx.data is None:
            raise StudyError("%s needs an MNIST IDX folder (the published test file): --data DIR, relative to %s "
                             "(%s is not there)" % (study.name, self.ctx.root, MNIST_IDX))
        if not (self.ctx.root / self.ctx.data).is_dir():
            raise StudyError("%s: no folder %s (--data is relative to %s)" % (study.name, self.ctx.data,
                                                                             self.ctx.root))

    def report(self, study):
        absent = [pattern for pattern in study.reads if not self.ctx.matches(pattern)]
        if absent:
            raise StudyError("%s's report reads %s: missing; run %s" % (
                study.name, ", ".join(absent), command_line(study.name, self.ctx)))
        for step in study.report(self.ctx):
            self.step(step)

    def run(self, name, extra):
        """The study's needs (checked, or run with --with-needs), its script, its report."""
        if name in self.done:
            return
        study = STUDIES[name]
        busy = running(study, self.ctx.root)
        if busy:
            raise StudyError("%s is running now (pid %s): wait for it, or --report-only to report on its runs so far"
                             % (name, ",".join(map(str, busy))))
        self.check_needs(study)
        self.check_data(study)
        print("study.py: %s: %s" % (name, study.what), flush=True)
        for args in study.args(self.ctx):
            self.step(Command(("bash", study.script, *args, *extra)))
        if study.script_reports:  # shown, not run again
            print("  (the script writes %s itself; --report-only redoes it with:)" % study.figures)
            for step in study.report(self.ctx):
                print("  " + step.text(), flush=True)
        elif self.dry_run:
            for step in study.report(self.ctx):
                print("+ " + step.text(), flush=True)
        else:
            self.report(study)
        self.done.append(name)


def listing():
    lines = []
    for study in STUDIES.values():
        needs = [n.study for n in study.needs] + (["MNIST IDX folder"] if study.data else [])
        lines.append((study.name, ", ".join(dict.fromkeys(needs)) or "-",
                      study.figures + ("" if study.runs == study.figures else " (runs: %s)" % study.runs)))
    widths = [max(len(row[i]) for row in lines + [("study", "needs", "")]) for i in range(2)]
    return "\n".join(("%-*s  %-*s  %s" % (widths[0], a, widths[1], b, c)).rstrip()
                     for a, b, c in [("study", "needs", "writes")] + lines)


DRIVER_FLAGS = ("--list", "--with-needs", "--report-only", "--dry-run", "-h", "--help")
DRIVER_OPTIONS = ("--data", "--root")


def parse(argv):
    """(driver options, study name, the script's arguments): the driver's options anywhere before ``--``, the
    first other argument the study's name, the rest the script's."""
    options, name, rest, i = {}, None, [], 0
    while i < len(argv):
        token = argv[i]
        option, eq, value = token.partition("=")
        if token == "--":
            rest.extend(argv[i + 1:])
            break
        if token in DRIVER_FLAGS:
            options[token.lstrip("-")] = True
        elif option in DRIVER_OPTIONS:
            if not eq:
                if i + 1 == len(argv):
                    raise StudyError("%s needs a value" % option)
                i += 1
                value = argv[i]
            options[option.lstrip("-")] = value
        elif name is None and not token.startswith("-"):
            name = token
        else:
            rest.append(token)
        i += 1
    return options, name, rest


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        options, name, extra = parse(argv)
        if options.get("help") or options.get("h"):
            print(__doc__.strip())
            return 0
        if options.get("list"):
            print(listing())
            return 0
        if name is None:
            raise StudyError("usage: python experiments/study.py NAME [options] (--list: every study)")
        if name not in STUDIES:
            raise StudyError("no study %s: one of %s" % (name, ", ".join(STUDIES)))
        root = Path(options.get("root") or os.environ.get("AMORTIZED_PYRO_STUDY_ROOT") or REPOSITORY).resolve()
        if not root.is_dir():
            raise StudyError("no folder %s (--root)" % root)
        data = options.get("data") or (MNIST_IDX if (root / MNIST_IDX).is_dir() else None)
        driver = Driver(Context(root, data), options.get("with-needs", False), options.get("dry-run", False))
        if options.get("report-only"):
            if extra:
                raise StudyError("--report-only takes no script options (%s)" % " ".join(extra))
            if driver.dry_run:
                for step in STUDIES[name].report(driver.ctx):
                    print("+ " + step.text())
            else:
                driver.report(STUDIES[name])
        else:
            driver.run(name, tuple(extra))
        return 0
    except StudyError as error:
        print("study.py: %s" % error, file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        print("study.py: interrupted; the same command goes on from where the runs stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
