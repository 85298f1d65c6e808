"""The registry of experiments/: every study (one script experiments/NAME.sh, or experiments/archive/NAME.sh for a
study run once whose report is kept, its report, what it needs from the others), read by the driver
experiments/study.py."""
from study_steps import Command, Copy, Glob, Mirror, Need, Study, plot

SEEDS = (0, 1, 2)
ARCHIVE = "experiments/archive"  # the scripts of studies run once (one-time validations), kept to redo their reports
INFORMATIVE = "runs/informative/runs/mnist-sample"  # the informative study's run directories


def runs_of(*labels, seeds=SEEDS, folder=INFORMATIVE, file="summary.json"):
    return tuple("%s/%s-seed%d/%s" % (folder, label, seed, file) for label in labels for seed in seeds)


GAP_VS_N_SIZES = (1000, 2500, 8000)  # experiments/gap-vs-n.sh's N
ARCHITECTURE_CELLS = ("mlp-normal", "mlp-none", "conv-normal", "conv-none")  # experiments/architectures.sh's
REMEDY_CELLS = ("a-vi", "f-vi", "flow-2", "flow-4", "f-vi-flow-2", "ia-vi-5", "sa-vi-5", "sa-vi-5-momentum",
                "sa-vi-20")  # experiments/remedies.sh's
SA_VI_CELLS = ("sa-vi-5", "sa-vi-5-unrolled", "sa-vi-20")  # experiments/sa-vi.sh's comparison folders, runs/CELL
CVAE_ACCURACY_VARIANTS = ("base", "z8", "noenc", "learned", "every", "bernoulli", "obs3", "recipe",
                          "long")  # experiments/cvae-accuracy.sh's, in its order
CVAE_GAP_DESIGNS = ("vae", "cvae")  # experiments/cvae-gap.sh's: the VAE and the CVAE (p(z | c) = N(0, I))
GAP_VS_N = "runs/gap-vs-n/n%d/runs/*/A-VI_k_64-seed0"  # a gap-vs-n run; * is the MNIST folder's name
OWN_REPORT = GAP_VS_N % 2500 + "/gap-%s.json"  # the capacity sweep's frozen run's own gap reports
CAP_CHECK = (  # cap-check's three runs: (run directory, name of its report with q* capped at 20,000 steps)
    ("runs/sa-vi-5/runs/mnist-sample/A-VI_k_64-seed0", "A-VI_k_64-seed0-test-20000"),
    (GAP_VS_N % 8000, "n8000-A-VI_k_64-seed0-test-20000"),
    (INFORMATIVE + "/F-VI-seed0", "informative-F-VI-seed0-test-20000"),
)
REFERENCE_CPU = ("original", "seed", "original-long", "seed-long")  # archive/reference-cpu.sh's four studies
SEED_RUNS = ("end-original-reference-amortized", "end-original-reference-per-datapoint")  # experiments/original-seeds.sh
ORIGINAL_RUNS = tuple("end-original-%s" % run for run in (  # experiments/studies-end.sh's original study (issue 48)
    "reference-per-datapoint", "reference-amortized", "reference-amortized-k1", "reference-shared", "elbo-amortized",
    "elbo-per-datapoint", "elbo-shared"))


def compare_study(name, what, figures=None, **kwargs):
    """A study whose script is one compare writing into figures/NAME: its report redraws the figures."""
    figures = figures or "figures/%s" % name
    return Study(name, what, figures, figures, lambda ctx: [plot(figures)], ("%s/results.jsonl" % figures,),
                 script_reports=True, **kwargs)


def mirrored_gap_tables(pairs, out, *options):
    """A report drawn from committed files: each (comparison folder under runs/, folder under figures/) of ``pairs``
    mirrored (its small files, same layout), then the gap table of the mirrors into ``out`` with gap_tables.py's
    ``options``."""
    return [Mirror(source, dest) for source, dest in pairs] + [
        Command(("python", "experiments/gap_tables.py") + tuple(dest for _, dest in pairs) + ("--out", out) + options)]


def cells_of(name, cells):
    """The (runs/NAME/CELL, figures/NAME/CELL) pairs of a study of cells."""
    return [("runs/%s/%s" % (name, cell), "figures/%s/%s" % (name, cell)) for cell in cells]


def against(*labels):
    """gap_tables.py's options for a difference table against each of ``labels``."""
    return tuple(x for label in labels for x in ("--against", label))


STUDIES = {study.name: study for study in (
    compare_study("offline", "the reference grid shrunk to a 2-core CPU, on the shipped sample"),
    compare_study("offline-long", "offline's A-VI k = 64, F-VI and constant-VI for 1,500 epochs"),
    Study("informative", "the informative preset's grid on the shipped sample, with gaps", "figures/informative",
          "runs/informative",
          lambda ctx: mirrored_gap_tables([("runs/informative", "figures/informative")], "figures/informative/gaps",
                                          "--title", "Informative preset")
          + [plot("figures/informative"),  # compare's figures and summary.md, drawn again with their command
             Command(("python", "experiments/theta_scales.py", Glob(INFORMATIVE + "/*")),
                     stdout="figures/informative/theta_scales.md")],
          ("runs/informative/results.jsonl", INFORMATIVE + "/*/gap-*.json", INFORMATIVE + "/*/params.pt"),
          script_reports=True),
    Study("informative-ablation", "the informative preset with settings put back to the studies' values",
          "figures/informative-ablation", "figures/informative-ablation",
          lambda ctx: [plot(f) for f in ctx.folders("figures/informative-ablation/*/results.jsonl")],
          ("figures/informative-ablation/*/results.jsonl",), script_reports=True, script_folder=ARCHIVE),
    Study("sa-vi", "A-VI against SA-VI (5 steps straight-through and unrolled, 20 steps), with gaps",
          "figures/sa-vi", "runs/sa-vi-*",
          lambda ctx: mirrored_gap_tables([("runs/%s" % cell, "figures/sa-vi/%s" % cell) for cell in SA_VI_CELLS],
                                          "figures/sa-vi", "--title", "SA-VI", *against("A-VI k=64"))
          + [plot("figures/sa-vi/%s" % cell) for cell in SA_VI_CELLS],  # each summary.md with its command
          ("runs/sa-vi-*/runs/*/*/gap-*.json",)),
    Study("gap-vs-n", "the gap against N = 1,000, 2,500, 8,000, each run trained to one criterion",
          "figures/gap-vs-n", "runs/gap-vs-n",
          lambda ctx: mirrored_gap_tables(cells_of("gap-vs-n", ("n%d" % n for n in GAP_VS_N_SIZES)),
                                          "figures/gap-vs-n", "--by-n")
          + [plot("figures/gap-vs-n/n%d" % n) for n in GAP_VS_N_SIZES],  # each summary.md with its command
          ("runs/gap-vs-n/n*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("capacity", "fresh encoders of 3 widths and 1–3 hidden layers on a frozen q(θ) (Cremer et al.)",
          "figures/capacity", "runs/capacity",
          lambda ctx: [Command(("python", "experiments/capacity_status.py", "runs/capacity/capacity.jsonl",
                                "--out", "figures/capacity")
                               + tuple(x for split in ("train", "test")
                                       for x in ("--own", ctx.one(OWN_REPORT % split))))],
          ("runs/capacity/capacity.jsonl",) + tuple(OWN_REPORT % split for split in ("train", "test")),
          needs=(Need("gap-vs-n", ((GAP_VS_N % 2500) + "/summary.json",) + tuple(OWN_REPORT % split for split in (
              "train", "test")), "a finished A-VI k = 64 run at N = 2,500 and its gap reports"),)),
    Study("held-out", "where the held-out gap comes from: fresh encoders on subsets, transductive, regularized",
          "figures/held-out", "runs/held-out",
          lambda ctx: [Copy(("runs/held-out/held_out.jsonl", "runs/held-out/references.jsonl"), "figures/held-out"),
                       Command(("python", "experiments/held_out_report.py", "figures/held-out", "--out",
                                "figures/held-out"))],
          ("runs/held-out/held_out.md",), script_reports=True,
          needs=(Need("informative", runs_of("A-VI_k_64"), "the finished A-VI k = 64 runs, seeds 0, 1, 2"),)),
    Study("converged", "the informative F-VI and A-VI k = 64 runs trained on to convergence, with gaps",
          "figures/converged", "runs/converged",
          lambda ctx: mirrored_gap_tables([("runs/converged", "figures/converged")], "figures/converged"),
          ("runs/converged/runs/*/*/gap-*.json",),
          needs=(Need("informative", runs_of("F-VI", "A-VI_k_64"),
                      "the finished F-VI and A-VI k = 64 runs, seeds 0, 1, 2"),)),
    Study("architectures", "the gap across decoders: {MLP, conv} × {Bayesian, standard VAE}, A-VI k = 64 and F-VI",
          "figures/architectures", "runs/architectures",
          lambda ctx: mirrored_gap_tables(cells_of("architectures", ARCHITECTURE_CELLS), "figures/architectures",
                                          "--title", "Decoders",
                                          *against("A-VI k=64", "A-VI k=64, conv decoder, point θ")),
          ("runs/architectures/*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("remedies", "the chapter's remedies: SA-VI, iterative amortized inference, flows, beside A-VI and F-VI",
          "figures/remedies", "runs/remedies",
          lambda ctx: mirrored_gap_tables(cells_of("remedies", REMEDY_CELLS), "figures/remedies", "--title", "Remedies",
                                          *against("A-VI k=64"))
          + [Copy(("runs/remedies/inference.jsonl",), "figures/remedies"),
             Command(("python", "experiments/inference_costs.py", "table", "figures/remedies/inference.jsonl",
                      "--out", "figures/remedies"))],
          ("runs/remedies/*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("cvae-accuracy", "why a CVAE's draws did not show their class, one setting at a time, and the recipe's",
          "figures/cvae-accuracy", "runs/cvae-accuracy",
          lambda ctx: [Copy(tuple("runs/cvae-accuracy/*-seed*/%s" % f for f in ("config.json", "metrics.jsonl",
                                                                                  "summary.json")),
                            "figures/cvae-accuracy/runs", by_run=True),  # each run's small files, as RUN-FILE
                       Command(("python", "experiments/cvae_accuracy.py", "measure")
                               + tuple("runs/cvae-accuracy/%s-seed%d" % (v, s) for v in CVAE_ACCURACY_VARIANTS
                                       for s in SEEDS) + ("--out", "figures/cvae-accuracy"))]
          + [Command(("python", "-m", "amortized_pyro", "sample", "runs/cvae-accuracy/%s-seed0" % run, "--per-class",
                      "8", "--overwrite", "--out", "figures/cvae-accuracy/%s-%s.png" % (run, name)) + same,
                     stdout="figures/cvae-accuracy/%s-%s.txt" % (run, name))
             for run in ("recipe", "base") for name, same in (("samples", ()), ("analogies", ("--same-z",)))],
          tuple("runs/cvae-accuracy/%s-seed%d/summary.json" % (v, s) for v in CVAE_ACCURACY_VARIANTS for s in SEEDS)),
    Study("diagnose-study", "which per-image score ranks A-VI's amortization gaps, and what refining the worst share keeps",
          "figures/diagnose", "runs/diagnose-study",
          lambda ctx: [Copy(tuple("runs/diagnose-study/avi64-seed*/%s" % f for f in (
                               "config.json", "metrics.jsonl", "summary.json", "gap-train.json", "gap-test.json",
                               "diagnose.json", "diagnose_khat.png", "diagnose_ecdf.png")),
                            "figures/diagnose/runs", by_run=True),  # each run's small files, as RUN-FILE
                       Command(("python", "experiments/diagnose_study.py", "measure")
                               + tuple("runs/diagnose-study/avi64-seed%d" % s for s in SEEDS)
                               + ("--out", "figures/diagnose"))],
          tuple("runs/diagnose-study/avi64-seed%d/diagnose.json" % s for s in SEEDS)),
    Study("cvae-gap", "the CVAE's gap against the VAE's, A-VI k = 64 and F-VI, paired per (seed, image)",
          "figures/cvae-gap", "runs/cvae-gap",
          lambda ctx: mirrored_gap_tables(cells_of("cvae-gap", CVAE_GAP_DESIGNS), "figures/cvae-gap", "--title",
                                          "CVAE against VAE", *against("A-VI k=64", "F-VI")),
          ("runs/cvae-gap/*/runs/*/*/gap-*.json",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("cap-check", "three gap reports measured again with q* capped at 20,000 steps, paired per image",
          "figures/cap-check", "runs/cap-check",
          lambda ctx: [Command(("python", ARCHIVE + "/cap_check.py", ctx.one(run) + "/gap-test.json",
                                "runs/cap-check/%s.json" % name), stdout="figures/cap-check/%s.md" % name)
                       for run, name in CAP_CHECK],
          tuple("runs/cap-check/%s.json" % name for _, name in CAP_CHECK)
          + tuple(run + "/gap-test.json" for run, _ in CAP_CHECK), script_reports=True,
          needs=(Need("sa-vi", (CAP_CHECK[0][0] + "/gap-test.json",), "the A-VI k = 64 seed 0 run's test gap report"),
                 Need("gap-vs-n", (CAP_CHECK[1][0] + "/gap-test.json",),
                      "the N = 8,000 A-VI k = 64 seed 0 run's test gap report"),
                 Need("informative", (CAP_CHECK[2][0] + "/gap-test.json",), "the F-VI seed 0 run's test gap report")),
          script_folder=ARCHIVE),
    Study("plateau", "when A-VI and F-VI leave the mean image, both objectives, 3 seeds", "figures/plateau",
          "runs/plateau-*",
          lambda ctx: [Command(("python", "experiments/plateau_report.py", Glob("runs/plateau-*/results.jsonl", True),
                                "--out", "figures/plateau")),
                       # drawn again from the merged results.jsonl it wrote, so that the committed table names
                       # committed files only (tests/test_tables_regenerate.py)
                       Command(("python", "experiments/plateau_report.py", "figures/plateau", "--out",
                                "figures/plateau"))],
          ("runs/plateau-*/results.jsonl",), data=True, args=lambda ctx: [(ctx.data, " ".join(map(str, SEEDS)))]),
    Study("studies-end", "both studies to their end, both objectives, one seed", "figures/studies-end", "runs/end-*",
          lambda ctx: [Command(("python", "experiments/plateau_report.py", Glob("runs/end-*/results.jsonl", True),
                                "--out", "figures/studies-end")),
                       Command(("python", "experiments/studies_end_status.py", Glob("runs/end-*/runs", True)),
                               stdout="figures/studies-end/status.md")]
          + [Mirror("runs/%s" % run, "figures/studies-end/%s" % run) for run in ORIGINAL_RUNS]
          + [Command(("python", "experiments/studies_end_report.py")
                     + tuple("figures/studies-end/%s" % run for run in ORIGINAL_RUNS)
                     + ("--out", "figures/studies-end"))],
          ("runs/end-*/results.jsonl",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("original-seeds", "the original study's decision at seeds 1 and 2 (A-VI k = 64, F-VI, authors' objective)",
          "figures/studies-end/seeds12", "runs/seeds12/end-*",
          lambda ctx: [Mirror("runs/seeds12/%s" % run, "figures/studies-end/seeds12/%s" % run) for run in SEED_RUNS]
          + [Command(("python", "experiments/studies_end_report.py")
                     + tuple("figures/studies-end/%s" % run for run in SEED_RUNS)
                     + tuple("figures/studies-end/seeds12/%s" % run for run in SEED_RUNS)
                     + ("--out", "figures/studies-end/seeds12"))],
          ("runs/seeds12/end-*/results.jsonl",), data=True, args=lambda ctx: [(ctx.data,)]),
    Study("reference-cpu", "both presets on MNIST 8,000 / 2,000, one seed, truncated to a CPU",
          "figures/*-study-cpu", "figures/*-study-cpu",
          lambda ctx: [plot(f) for f in ctx.folders("figures/*-study-cpu/results.jsonl")],
          ("figures/*-study-cpu/results.jsonl",), data=True, script_reports=True,
          args=lambda ctx: [(study, ctx.data) for study in REFERENCE_CPU], script_folder=ARCHIVE),
)}
