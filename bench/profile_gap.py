"""Where the time of one ``gap`` measurement goes: its phases (q*, the M q*_m, IWAE, AIS, the refinement rows,
the local-ELBO estimates) and Python overhead against torch's own operators, profiled with cProfile.

    python bench/profile_gap.py RUN_DIR --split test --n-images 20          # compare's gap settings
    python bench/profile_gap.py RUN_DIR --wall-only                         # one timed measurement, no profile

The phases are timed by wrapping :mod:`amortized_pyro.local.gaps`'s calls of ``converge`` (its first call is q*, the
second the q*_m of every draw at once), ``local_elbo``, ``per_draw`` (L(q*_m; θ_m) and IWAE),
``ais_log_marginal`` (AIS) and ``refine``, with
the measurement otherwise as ``measure_run`` runs it (compare's settings: M = 4, K = 1,000, AIS 200 steps,
q* capped at 1,500 steps since the averaged iterate, 3,000 before; refinement rows 0 / 5 / 20 / 100). "torch operators" is cProfile's own time in
built-in functions and methods (torch's C++ operators, their dispatch included); "Python" is the own time
of every Python function (the optimizers' loops, Pyro-free here, tensor bookkeeping). cProfile's hooks slow
Python code, so the Python share is an upper bound; the wall time without the profiler is printed too.
"""
import argparse
import cProfile
import pstats
import time
from collections import defaultdict

import torch

from amortized_pyro.autoguides import measure_gap
from amortized_pyro.gap.measure import measure_run
from amortized_pyro.local import gaps
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.study.comparison import COMPARE_GAP, COMPARE_REFINE

PHASES = {"converge": None, "local_elbo": "local-ELBO estimates on the score draws (L(q*), the guide's, refinement)",
          "per_draw": "per-draw estimates (L(q*_m; θ_m), IWAE log p(x | θ_m))", "ais_log_marginal": "AIS log p(x | θ_m)",
          "refine": "refinement rows' Adam steps"}


def timed(seconds):
    """Wrap gap's phase functions so that each call's wall time is added to ``seconds[phase]``."""
    originals = {name: getattr(gaps, name) for name in PHASES}
    calls = defaultdict(int)

    def wrapper(name):
        def run(*args, **kwargs):
            calls[name] += 1
            label = PHASES[name] or ("q* (one optimization over the M draws)" if calls[name] == 1
                                     else "q*_m (the M optimizations, batched)")
            began = time.perf_counter()
            try:
                return originals[name](*args, **kwargs)
            finally:
                seconds[label] += time.perf_counter() - began
        return run

    for name in PHASES:
        setattr(gaps, name, wrapper(name))
    return lambda: [setattr(gaps, name, fn) for name, fn in originals.items()]


def measure_first(run_dir, split, n_images, settings, refine_steps, log):
    """:func:`amortized_pyro.gap.measure.measure_run` on the split's first ``n_images`` images at gap seed
    ``settings.seed``."""
    result, data = finished_run(run_dir, "cpu", log)
    x = (data.train if split == "train" else data.test)[:n_images]
    idx = torch.arange(x.shape[0]) if split == "train" else None
    return measure_gap(result.model, result.guide, x, idx, settings=settings, refine_steps=refine_steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--n-images", type=int, default=20)
    parser.add_argument("--wall-only", action="store_true", help="one timed measurement and its mean gaps")
    parser.add_argument("--images", default="first", choices=["first", "drawn"],
                        help="first: the split's first N images, as the code before issue 28 measured them (so that "
                        "an interleaved before/after measures the same images); drawn: by the gap seed, as `gap` does")
    args = parser.parse_args()
    quiet = dict(settings=COMPARE_GAP, refine_steps=COMPARE_REFINE, log=lambda *a: None)
    measure = measure_first if args.images == "first" else measure_run

    began = time.perf_counter()
    report = measure(args.run_dir, args.split, args.n_images, **quiet)
    plain = time.perf_counter() - began
    if args.wall_only:
        print("wall %.1f s; amortization %.2f, coupling %.2f, approximation %.2f nats (means over the images)"
              % (plain, *(report[gap + "_gap"]["mean"] for gap in ("amortization", "coupling", "approximation"))))
        return

    seconds = defaultdict(float)
    restore = timed(seconds)
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.runcall(measure, args.run_dir, args.split, args.n_images, **quiet)
    total = time.perf_counter() - began
    restore()

    stats = pstats.Stats(profiler).stats
    builtin = sum(tt for (path, _, _), (_, _, tt, _, _) in stats.items() if path == "~")
    own = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    print("gap %s --split %s --n-images %d, compare's settings; torch %s, %d thread(s)"
          % (args.run_dir, args.split, args.n_images, torch.__version__, torch.get_num_threads()))
    print("\nwall time without the profiler: %.1f s; with it: %.1f s\n" % (plain, total))
    print("| phase | s (profiled) | share |\n|---|---|---|")
    for label, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print("| %s | %.1f | %.0f%% |" % (label, s, 100 * s / total))
    rest = total - sum(seconds.values())
    print("| the rest (loading the run and data, the guide's factor, summaries) | %.1f | %.0f%% |"
          % (rest, 100 * rest / total))
    print("\n| own time | s | share |\n|---|---|---|")
    print("| torch operators (built-in functions and methods) | %.1f | %.0f%% |" % (builtin, 100 * builtin / own))
    print("| Python functions | %.1f | %.0f%% |" % (own - builtin, 100 * (own - builtin) / own))
    print("\nthe 12 functions with the most own time:")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
