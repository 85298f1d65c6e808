"""Every study of experiments/ as one declared pipeline: what each needs from the others, its script, its report.

    python experiments/study.py --list                  every study, what it needs, where it writes
    python experiments/study.py NAME [SCRIPT OPTIONS]   check NAME's needs, run its script, then its report
    python experiments/study.py NAME --with-needs       ... running first every needed study whose output is missing
    python experiments/study.py NAME --report-only      only the report, from the runs already there
    python experiments/study.py NAME --dry-run          print the commands, in order, and run none

A study (STUDIES, below) is one script, experiments/NAME.sh (its runs: resumable, the same command goes on where
it stopped), and one report step that writes its folder under figures/ (where the script draws its figures itself,
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
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPOSITORY = Path(__file__).resolve().parents[1]
MNIST_IDX = "../shared/data/mnist"  # the default --data, relative to the repository root
SEEDS = (0, 1, 2)
INFORMATIVE = "runs/informative/runs/mnist-sample"  # the informative study's run directories


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

    @property
    def script(self):
        return "experiments/%s.sh" % self.name


def runs_of(*labels, seeds=SEEDS, folder=INFORMATIVE, file="summary.json"):
    return tuple("%s/%s-seed%d/%s" % (folder, label, seed, file) for label in labels for seed in seeds)


GAP_VS_N_SIZES = (1000, 2500, 8000)  # experiments/gap-vs-n.sh's N
ARCHITECTURE_CELLS = ("mlp-normal", "mlp-none", "conv-normal", "conv-none")  # experiments/architectures.sh's
REMEDY_CELLS = ("a-vi", "f-vi", "flow-2", "flow-4", "f-vi-flow-2", "ia-vi-5", "sa-vi-5", "sa-vi-5-momentum",
                "sa-vi-20")  # experiments/remedies.sh's
GAP_VS_N = "runs/gap-vs-n/n%d/runs/*/A-VI_k_64-seed0"  # a gap-vs-n run; * is the MNIST folder's name
CAP_CHECK = (  # cap-check's three runs: (run directory, name of its report with q* capped at 20,000 steps)
    ("runs/sa-vi-5/runs/mnist-sample/A-VI_k_64-seed0", "A-VI_k_64-seed0-test-20000"),
    (GAP_VS_N % 8000, "n8000-A-VI_k_64-seed0-test-20000"),
    (INFORMATIVE + "/F-VI-seed0", "informative-F-VI-seed0-test-20000"),
)
REFERENCE_CPU = ("original", "seed", "original-long", "seed-long")  # reference-cpu.sh's four studies


def comparison_copies(folder, dest):
    """A comparison folder's table, results and gap reports copied into ``dest`` (its runs stay ignored)."""
    return [Copy(("%s/summary.md" % folder, "%s/results.jsonl" % folder), dest),
            Copy(("%s/runs/*/*/gap-*.json" % folder,), "%s/reports" % dest, by_run=True)]


def compare_study(name, what, figures=None, **kwargs):
    """A study whose script is one compare writing into figures/NAME: its report redraws the figures."""
    figures = figures or "figures/%s" % name
    return Study(name, what, figures, figures, lambda ctx: [plot(figures)], ("%s/results.jsonl" % figures,),
                 script_reports=True, **kwargs)


STUDIES = {study.name: study for study in (
    compare_study("offline", "the reference grid shrunk to a 2-core CPU, on the shipped sample"),
    compare_study("offline-long", "offline's A-VI k = 64, F-VI and constant-VI for 1,500 epochs"),
    Study("informative", "the informative preset's grid on the shipped sample, with gaps", "figures/informative",
          "runs/informative",
          lambda ctx: [Copy(("runs/informative/results.jsonl", "runs/informative/summary.md",
                             "runs/informative/fig*.png"), "figures/informative"),
                       Command(("python", "experiments/gap_tables.py", "runs/informative", "--out",
                                "figures/informative/gaps", "--title", "Informative preset")),
                       Copy((INFORMATIVE + "/*/gap-*.json",), "figures/informative/gaps/reports", by_run=True),
                       Command(("python", "experiments/theta_scales.py", Glob(INFORMATIVE + "/*")),
                               stdout="figures/informative/theta_scales.md")],
          ("runs/informative/results.jsonl", INFORMATIVE + "/*/gap-*.json", INFORMATIVE + "/*/params.pt"),
          script_reports=True),
    Study("informative-ablation", "the informative preset with settings put back to the studies' values",
          "figures/informative-ablation", "figures/informative-ablation",
          lambda ctx: [plot(f) for f in ctx.folders("figures/informative-ablation/*/results.jsonl")],
          ("figures/informative-ablation/*/results.jsonl",), script_reports=True),
    Study("sa-vi", "A-VI against SA-VI (5 steps straight-through and unrolled, 20 steps), with gaps",
          "figures/sa-vi", "runs/sa-vi-*",
          lambda ctx: [Command(("python", "experiments/gap_tables.py", "runs/sa-vi-5", "runs/sa-vi-5-unrolled",
                                "runs/sa-vi-20", "--out", "figures/sa-vi"))],
          ("runs/sa-vi-*/runs/*/*/gap-*.json",)),
    Study("gap-vs-n", "the gap against N = 1,000, 2,500, 8,000, each run trained to one criterion",
          "figures/gap-vs-n", "runs/gap-vs-n",
          lambda ctx: [Command(("python", "experiments/gap_tables.py")
                               + tuple("runs/gap-vs-n/n%d" % n for n in GAP_VS_N_SIZES)
                               + ("--by-n", "--out", "figures/gap-vs-n"))]
          + [step for n in GAP_VS_N_SIZES for step in comparison_copies("runs/gap-vs-n/n%d" % n,
                                                                        "figures/gap-vs-n/n%d" % n)],
          ("runs/gap-vs-n/n*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("capacity", "fresh encoders of 3 widths and 3 depths on a frozen q(θ) (Cremer et al.)",
          "figures/capacity", "runs/capacity",
          lambda ctx: [Command(("python", "experiments/capacity_status.py", "runs/capacity/capacity.jsonl",
                                "--out", "figures/capacity"))],
          ("runs/capacity/capacity.jsonl",),
          needs=(Need("gap-vs-n", ((GAP_VS_N % 2500) + "/summary.json",), "a finished A-VI k = 64 run at N = 2,500"),)),
    Study("held-out", "where the held-out gap comes from: fresh encoders on subsets, transductive, regularized",
          "figures/held-out", "runs/held-out",
          lambda ctx: [Copy(("runs/held-out/held_out.jsonl", "runs/held-out/references.jsonl",
                             "runs/held-out/held_out.md", "runs/held-out/*.png"), "figures/held-out")],
          ("runs/held-out/held_out.md",), script_reports=True,
          needs=(Need("informative", runs_of("A-VI_k_64"), "the finished A-VI k = 64 runs, seeds 0, 1, 2"),)),
    Study("converged", "the informative F-VI and A-VI k = 64 runs trained on to convergence, with gaps",
          "figures/converged", "runs/converged",
          lambda ctx: [Command(("python", "experiments/gap_tables.py", "runs/converged", "--out",
                                "figures/converged")),
                       Copy(("runs/converged/runs/*/*/gap-*.json",), "figures/converged/reports", by_run=True)],
          ("runs/converged/runs/*/*/gap-*.json",),
          needs=(Need("informative", runs_of("F-VI", "A-VI_k_64"),
                      "the finished F-VI and A-VI k = 64 runs, seeds 0, 1, 2"),)),
    Study("architectures", "the gap across decoders: {MLP, conv} × {Bayesian, standard VAE}, A-VI k = 64 and F-VI",
          "figures/architectures", "runs/architectures",
          lambda ctx: [Command(("python", "experiments/gap_tables.py")
                               + tuple("runs/architectures/%s" % cell for cell in ARCHITECTURE_CELLS)
                               + ("--out", "figures/architectures", "--title", "Decoders"))]
          + [step for cell in ARCHITECTURE_CELLS for step in comparison_copies(
              "runs/architectures/%s" % cell, "figures/architectures/%s" % cell)],
          ("runs/architectures/*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("remedies", "the chapter's remedies: SA-VI, iterative amortized inference, flows, beside A-VI and F-VI",
          "figures/remedies", "runs/remedies",
          lambda ctx: [Command(("python", "experiments/gap_tables.py")
                               + tuple("runs/remedies/%s" % cell for cell in REMEDY_CELLS)
                               + ("--out", "figures/remedies", "--title", "Remedies")),
                       Command(("python", "experiments/inference_costs.py")
                               + tuple("runs/remedies/%s" % cell for cell in REMEDY_CELLS),
                               stdout="figures/remedies/inference.md")]
          + [step for cell in REMEDY_CELLS for step in comparison_copies(
              "runs/remedies/%s" % cell, "figures/remedies/%s" % cell)],
          ("runs/remedies/*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("cap-check", "three gap reports measured again with q* capped at 20,000 steps, paired per image",
          "figures/cap-check", "runs/cap-check",
          lambda ctx: [Command(("python", "experiments/cap_check.py", ctx.one(run) + "/gap-test.json",
                                "runs/cap-check/%s.json" % name), stdout="figures/cap-check/%s.md" % name)
                       for run, name in CAP_CHECK],
          tuple("runs/cap-check/%s.json" % name for _, name in CAP_CHECK)
          + tuple(run + "/gap-test.json" for run, _ in CAP_CHECK), script_reports=True,
          needs=(Need("sa-vi", (CAP_CHECK[0][0] + "/gap-test.json",), "the A-VI k = 64 seed 0 run's test gap report"),
                 Need("gap-vs-n", (CAP_CHECK[1][0] + "/gap-test.json",),
                      "the N = 8,000 A-VI k = 64 seed 0 run's test gap report"),
                 Need("informative", (CAP_CHECK[2][0] + "/gap-test.json",), "the F-VI seed 0 run's test gap report"))),
    Study("plateau", "when A-VI and F-VI leave the mean image, both objectives, 3 seeds", "figures/plateau",
          "runs/plateau-*",
          lambda ctx: [Command(("python", "experiments/plateau_report.py", Glob("runs/plateau-*/results.jsonl", True),
                                "--out", "figures/plateau"))],
          ("runs/plateau-*/results.jsonl",), data=True, args=lambda ctx: [(ctx.data, " ".join(map(str, SEEDS)))]),
    Study("studies-end", "both studies to their end, both objectives, one seed", "figures/studies-end", "runs/end-*",
          lambda ctx: [Command(("python", "experiments/plateau_report.py", Glob("runs/end-*/results.jsonl", True),
                                "--out", "figures/studies-end")),
                       Command(("python", "experiments/studies_end_status.py", Glob("runs/end-*/runs", True)),
                               stdout="figures/studies-end/status.md")],
          ("runs/end-*/results.jsonl",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("reference-cpu", "both presets on MNIST 8,000 / 2,000, one seed, truncated to a CPU",
          "figures/*-study-cpu", "figures/*-study-cpu",
          lambda ctx: [plot(f) for f in ctx.folders("figures/*-study-cpu/results.jsonl")],
          ("figures/*-study-cpu/results.jsonl",), data=True, script_reports=True,
          args=lambda ctx: [(study, ctx.data) for study in REFERENCE_CPU]),
    compare_study("mnist", "the reference grid at the reference study's scale on MNIST (a GPU)"),
    compare_study("fashion-mnist", "the same on FashionMNIST (a GPU)"),
)}


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
