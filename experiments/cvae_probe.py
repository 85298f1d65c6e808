"""What a CVAE's z carries about the class (issue 71, item 1), measured on the finished runs of the CVAE accuracy
study (experiments/cvae-accuracy.sh: runs/cvae-accuracy/VARIANT-seedS), each run on its own 2,500 training and
500 held-out labelled images:

  probe      a linear probe: multinomial logistic regression (torch, L-BFGS, float64) from the encoder's means
             μ(x, c) = E_q[z | x, c] to the label, its features standardized by the training images' means and
             spread, its L2 weight (λ/2 ‖W‖² added to the mean cross-entropy, λ in LAMBDAS) the one of least
             cross-entropy on a fifth of the training images held back (by a fixed generator), then fitted on all
             of them; its accuracy and cross-entropy on the held-out images. The same probe fitted on draws
             z ~ q(z | x, c) (DRAWS per image) scores held-out draws.
  I(z; c)    a lower bound in nats (Barber & Agakov 2003): for any classifier q(c | z),
                 I(z; c) = H(c) − H(c | z) ≥ H(c) − E[−log q(c | z)],
             with H(c) the held-out labels' empirical entropy (≤ log 10 = 2.30 nats) and the expectation the
             probe's held-out cross-entropy. From draws z ~ q(z | x, c) it bounds I(z; c) of the codes the decoder
             is trained on; from the means it bounds I(μ; c). Only a bound: a linear probe can miss what a
             nonlinear one reads, and 500 images make H(c) and the cross-entropy noisy (a bound just below 0 is 0).
  KL         per dimension d, KL(q(z_d | x, c) ‖ p(z_d | c)) in closed form (both Gaussian; p(z | c) N(0, 1), or
             the learned N(μ_c, σ_c²) at θ̂), averaged over the held-out images; its sum over d, and the active
             dimensions: those whose average KL exceeds 0.01 nats, and those above 0.1 (ACTIVE; the baseline's
             dimensions fall into two groups, below 0.05 and above 0.4, which 0.1 separates and 0.01 does not).
  analogies  the shared-z analogy accuracy: DRAWN standard-normal draws ε, each shared by all ten class rows
             (z = ε, or μ_c + σ_c ε under the learned prior), decoded at θ̂ for each class, and the share of the
             decoded images that the run's 5-nearest-neighbour classifier
             (amortized_pyro/report/class_accuracy.py, on the run's 3,000 labelled images) reads as their row's class: what
             `sample RUN --same-z` prints (figures/cvae-accuracy/base-analogies.txt: 8 draws per class); a decoder
             that took the class from z alone would score about 10 %.
  draws      the study's own measure on the same run: DRAWN independent z ~ p(z | c) per class (the z draws
             seeded by --seed, as experiments/cvae_accuracy.py draws them), decoded, the share read as their row's
             class; and of the draws read as another class, the share read as the class the probe (fitted on the
             means) reads from their z: whether a misread draw follows its z; beside it, that share were the
             two verdicts independent (Σ_k P(read as k) P(probed as k) over the misread draws).
  nearest    z's class by its 5 nearest training codes μ (Euclidean in z; the class_accuracy classifier): a
             nonlinear probe's accuracy on the held-out codes; of the misread prior draws, the share read as the
             class of the codes nearest their z (the hypothesis that a draw falls among another class's codes and
             the decoder follows z there; beside it, that share were the two independent); the share of prior
             draws whose nearest codes are of their row's class (about 10 % where p(z | c) is N(0, I)); and how far
             prior draws lie from the codes: the median over draws of the distance to the nearest training code ÷
             the same median over held-out codes.
  codes      the held-out images' own codes μ(x, c) decoded with each class c' (the encoder's codes, where the
             decoder was trained, in place of draws from the prior): with c' = c, the share read as c (what the
             decoder makes of a code with its own label); with c' ≠ c, the share read as c' (the label steers a
             real code) and the share read as the image's own class c (the code's class wins over the label).

    python experiments/cvae_probe.py measure runs/cvae-accuracy/*-seed* --out figures/cvae-accuracy
    python experiments/cvae_probe.py table figures/cvae-accuracy/probe.jsonl --out figures/cvae-accuracy

The runs measured in figures/cvae-accuracy/probe.jsonl were trained again for it (`experiments/cvae-accuracy.sh base
z8 recipe learned every noenc obs3 bernoulli`, 2026-11-28; not bit-identical to figures/cvae-accuracy/runs/): their
small files (config, metrics, summary) are in figures/cvae-accuracy/runs-probe/.

``measure`` appends one record per run to OUT/probe.jsonl, skipping a run already recorded there (resumable; an
unfinished run is skipped with a line), then writes the table OUT/probe.md: per variant the mean ± the standard
error over its seeds. ``table`` makes OUT/probe.md (its command first) again from the records alone.
"""
import argparse
import math
import re
import sys
from pathlib import Path

import torch

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.inference.evaluation import factor
from amortized_pyro.models.conditional import class_prior, one_hot
from amortized_pyro.models.generation import draw_grid
from amortized_pyro.report.class_accuracy import nearest_labels
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.support.jsonio import append_jsonl, read_jsonl

LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1)  # the probe's L2 weights tried
DRAWS = 4  # draws z ~ q(z | x, c) per image for the probe on draws
DRAWN = 200  # z draws per class for the analogies and the conditional accuracy (the study's 200)
ACTIVE = (0.01, 0.1)  # nats: a dimension whose average KL exceeds one is active at that threshold


def standardized(train, *others):
    """``train`` and ``others`` scaled by the training features' mean and standard deviation (at least 1e-8)."""
    mean, std = train.mean(0), train.std(0).clamp_min(1e-8)
    return [(t - mean) / std for t in (train, *others)]


def fit_logistic(x, y, classes, l2, max_iter=500):
    """(W [D, K], b [K]) of multinomial logistic regression on features x [N, D] (float64) and labels y [N]:
    the minimum of mean cross-entropy + l2/2 ‖W‖², by L-BFGS with a strong-Wolfe line search."""
    weight = torch.zeros(x.shape[1], classes, dtype=x.dtype, requires_grad=True)
    bias = torch.zeros(classes, dtype=x.dtype, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1, max_iter=max_iter, tolerance_grad=1e-9,
                                  tolerance_change=1e-12, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ weight + bias, y) + 0.5 * l2 * weight.square().sum()
        loss.backward()
        return loss
    optimizer.step(closure)
    return weight.detach(), bias.detach()


def scored(params, x, y):
    """(accuracy, mean cross-entropy in nats) of the probe ``params`` on features x and labels y."""
    logits = x @ params[0] + params[1]
    return ((logits.argmax(1) == y).double().mean().item(),
            torch.nn.functional.cross_entropy(logits, y).item())


def entropy(labels, classes):
    """The empirical entropy of ``labels``, in nats."""
    p = torch.bincount(labels, minlength=classes).double() / len(labels)
    p = p[p > 0]
    return -(p * p.log()).sum().item()


def linear_probe(train_x, train_y, test_x, test_y, classes, groups=None, seed=0):
    """The probe of the module's docstring: {"accuracy", "cross_entropy", "entropy", "bound", "lambda"} on the
    held-out rows, the L2 weight chosen on a fifth of the training rows held back; ``groups`` [N]: each training
    row's image (draws of one image are held back together; default: each row its own)."""
    train_x, test_x = (t.double() for t in (train_x, test_x))
    groups = torch.arange(len(train_x)) if groups is None else groups
    images = groups.unique()
    back = images[torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:len(images) // 5]]
    held = torch.isin(groups, back)
    fit_x, valid_x = standardized(train_x[~held], train_x[held])
    chosen = min(LAMBDAS, key=lambda l2: scored(fit_logistic(fit_x, train_y[~held], classes, l2),
                                                valid_x, train_y[held])[1])
    train_s, test_s = standardized(train_x, test_x)
    accuracy, cross_entropy = scored(fit_logistic(train_s, train_y, classes, chosen), test_s, test_y)
    h = entropy(test_y, classes)
    return {"accuracy": accuracy, "cross_entropy": cross_entropy, "entropy": h, "bound": h - cross_entropy,
            "lambda": chosen}


def kl_normal(loc, scale, prior_loc, prior_scale):
    """KL(N(loc, scale²) ‖ N(prior_loc, prior_scale²)) elementwise, in nats."""
    ratio = (scale / prior_scale).square()
    return 0.5 * (ratio + ((loc - prior_loc) / prior_scale).square() - 1 - ratio.log())


def prior_of(model, theta, labels, like):
    """(μ, σ) [N, z_dim] of p(z | c) for ``labels`` [N]: N(0, I), or the learned N(μ_c, σ_c²) at ``theta``."""
    if model.class_prior == "standard":
        zero = like.new_zeros(len(labels), model.z_dim)
        return zero, zero + 1
    loc, log_scale = class_prior(one_hot(labels, model.n_classes, like), theta)
    return loc, log_scale.exp()


@torch.no_grad()
def prior_draws(model, theta, per_row, generator, same_z=False):
    """z [K, per_row, z_dim] as :func:`~amortized_pyro.models.generation.draw_grid` draws them (the same
    generator calls), so that decoding them gives its images."""
    like = next(iter(theta.values()))
    rows = model.n_classes
    eps = torch.randn((1 if same_z else rows, per_row, model.z_dim), generator=generator, device=like.device,
                      dtype=like.dtype).expand(rows, per_row, model.z_dim)
    if model.class_prior == "standard":
        return eps
    loc, scale = prior_of(model, theta, torch.arange(rows), like)
    return loc[:, None, :] + scale[:, None, :] * eps


def run_name(run_dir, seed):
    found = re.fullmatch(r"(.+)-seed(\d+)", Path(run_dir).name)
    return (found.group(1), int(found.group(2))) if found else (Path(run_dir).name, seed)


@torch.no_grad()
def measured(run_dir, seed=0):
    """The record of one finished conditional run (the module's docstring)."""
    result, data = finished_run(run_dir, log=lambda line: None)
    model, guide = result.model, result.guide
    if not model.n_classes:
        raise AmortizedPyroError("%s is not a conditional run" % run_dir)
    theta, classes = guide.global_mean(), model.n_classes
    codes = {}
    for split, images, labels in (("train", data.train, data.train_labels), ("test", data.test, data.test_labels)):
        loc, scale = factor(guide, model.inputs(images.flatten(1), labels))
        codes[split] = (loc.double(), scale.double(), labels)
    (train_loc, train_scale, train_y), (test_loc, test_scale, test_y) = codes["train"], codes["test"]
    with torch.enable_grad():
        on_means = linear_probe(train_loc, train_y, test_loc, test_y, classes)
        generator = torch.Generator().manual_seed(seed)
        draw = lambda loc, scale: loc + scale * torch.randn((DRAWS,) + loc.shape, generator=generator,  # noqa: E731
                                                            dtype=loc.dtype)
        on_draws = linear_probe(draw(train_loc, train_scale).reshape(-1, model.z_dim), train_y.repeat(DRAWS),
                                draw(test_loc, test_scale).reshape(-1, model.z_dim), test_y.repeat(DRAWS), classes,
                                groups=torch.arange(len(train_y)).repeat(DRAWS))
    prior_loc, prior_scale = prior_of(model, theta, test_y, next(iter(theta.values())))  # in θ's dtype
    kl = kl_normal(test_loc, test_scale, prior_loc.double(), prior_scale.double()).mean(0)
    # the probe on the means again, on all training images, to read the prior draws' z
    train_s = standardized(train_loc)[0]
    with torch.enable_grad():
        probe = fit_logistic(train_s, train_y, classes, on_means["lambda"])
    reference = torch.cat([data.train, data.test]).flatten(1)
    labels = torch.cat([data.train_labels, data.test_labels])
    rows = torch.arange(classes)[:, None].expand(classes, DRAWN)
    verdicts = {}
    for name, same in (("draws", False), ("analogies", True)):
        z = prior_draws(model, theta, DRAWN, torch.Generator().manual_seed(seed), same)
        images = draw_grid(model, theta, DRAWN, torch.Generator().manual_seed(seed), same_z=same)
        decoded = model.mean_image(z, theta, one_hot(rows, classes, z))
        assert torch.equal(decoded, images), "the draws are not draw_grid's"
        read = nearest_labels(images.reshape(-1, images.shape[-1]), reference, labels).reshape(classes, DRAWN)
        mean, std = train_loc.mean(0), train_loc.std(0).clamp_min(1e-8)
        probed = ((z.double() - mean) / std @ probe[0] + probe[1]).argmax(-1)
        verdicts[name] = (read, probed)
    read, probed = verdicts["draws"]
    misread = read != rows
    # z's class by its 5 nearest training codes (Euclidean, in z): of held-out codes, and of the prior draws
    knn = nearest_labels(test_loc, train_loc, train_y)
    z = prior_draws(model, theta, DRAWN, torch.Generator().manual_seed(seed)).double().reshape(-1, model.z_dim)
    near = nearest_labels(z, train_loc, train_y).reshape(classes, DRAWN)
    nearest = lambda points: torch.cdist(points, train_loc).min(1).values  # noqa: E731

    def agreeing(other):
        """Of the misread draws, the share read as ``other``'s class, and that share were the two independent
        (Σ_k P(read k) P(other k) over the misread draws)."""
        found, also = read[misread], other[misread]
        if not len(found):
            return 0.0, 0.0
        independent = (torch.bincount(found, minlength=classes).double() / len(found)
                       * torch.bincount(also, minlength=classes).double() / len(found)).sum().item()
        return (found == also).double().mean().item(), independent
    as_probed, as_near = agreeing(probed), agreeing(near)
    # the held-out images' own codes μ(x, c) decoded as every class c': read as c', or as the image's own class
    swapped = model.mean_image(test_loc.to(reference.dtype)[None].expand(classes, -1, -1), theta,
                               one_hot(torch.arange(classes)[:, None].expand(classes, len(test_y)), classes, reference))
    swap_read = nearest_labels(swapped.reshape(-1, swapped.shape[-1]), reference, labels).reshape(classes, -1)
    target = torch.arange(classes)[:, None].expand_as(swap_read)
    other = target != test_y[None, :]
    variant, run_seed = run_name(run_dir, result.config.seed)
    return {"run": str(run_dir), "variant": variant, "seed": run_seed, "z_dim": model.z_dim,
            "class_prior": model.class_prior, "encoder_label": bool(result.config.encoder_label),
            "train_images": len(train_y), "test_images": len(test_y),
            "probe_means": on_means, "probe_draws": dict(on_draws, draws=DRAWS),
            "kl_per_dim": kl.tolist(), "kl_total": kl.sum().item(),
            "active": {str(threshold): int((kl > threshold).sum()) for threshold in ACTIVE},
            "drawn": DRAWN, "draw_seed": seed,
            "analogy_accuracy": (verdicts["analogies"][0] == rows).double().mean().item(),
            "draw_accuracy": (~misread).double().mean().item(),
            "misread": int(misread.sum()),
            "misread_as_probed": as_probed[0], "misread_as_probed_independent": as_probed[1],
            "prior_draws_probed_as_row": (probed == rows).double().mean().item(),
            "knn_accuracy": (knn == test_y).double().mean().item(),
            "misread_as_nearest_codes": as_near[0], "misread_as_nearest_codes_independent": as_near[1],
            "draws_near_codes_of_row": (near == rows).double().mean().item(),
            "draw_distance_ratio": (nearest(z).median() / nearest(test_loc).median()).item(),
            "codes_own_class": (swap_read == target)[~other].double().mean().item(),
            "codes_swapped_as_asked": (swap_read == target)[other].double().mean().item(),
            "codes_swapped_as_image": (swap_read == test_y[None, :].expand_as(swap_read))[other].double().mean().item()}


COLUMNS = [  # (heading, the record's value, scale, decimals)
    ("probe accuracy from μ, % held out", lambda r: r["probe_means"]["accuracy"], 100, 1),
    ("I(μ; c) ≥, nats", lambda r: r["probe_means"]["bound"], 1, 2),
    ("probe accuracy from z ~ q, %", lambda r: r["probe_draws"]["accuracy"], 100, 1),
    ("I(z; c) ≥, nats", lambda r: r["probe_draws"]["bound"], 1, 2),
    ("KL(q ‖ p(z | c)), nats", lambda r: r["kl_total"], 1, 1),
    ("active dimensions (KL > 0.1)", lambda r: r["active"]["0.1"], 1, 1),
    ("active dimensions (KL > 0.01)", lambda r: r["active"]["0.01"], 1, 1),
    ("shared-z analogies read as their row, %", lambda r: r["analogy_accuracy"], 100, 1),
    ("independent draws read as their row, %", lambda r: r["draw_accuracy"], 100, 1),
    ("5-NN probe accuracy in z, % held out", lambda r: r["knn_accuracy"], 100, 1),
    ("misread draws read as z's probed class, %", lambda r: r["misread_as_probed"], 100, 1),
    ("… were the two independent, %", lambda r: r["misread_as_probed_independent"], 100, 1),
    ("misread draws read as their nearest codes' class, %", lambda r: r["misread_as_nearest_codes"], 100, 1),
    ("… were the two independent, %", lambda r: r["misread_as_nearest_codes_independent"], 100, 1),
    ("prior draws whose nearest codes are of their row's class, %", lambda r: r["draws_near_codes_of_row"], 100, 1),
    ("prior draws' distance to the nearest code ÷ held-out codes'", lambda r: r["draw_distance_ratio"], 1, 2),
    ("held-out codes, own class: read as it, %", lambda r: r["codes_own_class"], 100, 1),
    ("held-out codes, another class c': read as c', %", lambda r: r["codes_swapped_as_asked"], 100, 1),
    ("… read as the image's own class, %", lambda r: r["codes_swapped_as_image"], 100, 1),
]


def mean_se(values):
    mean = sum(values) / len(values)
    se = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
          if len(values) > 1 else float("nan"))
    return mean, se


def table(records, command):
    """The markdown table: one row per variant (in the order of ORDER, then as first seen), each column's mean ±
    the standard error over seeds."""
    order = ["base", "z8", "recipe", "obs3", "bernoulli", "learned", "every", "long", "noenc"]
    variants = sorted(dict.fromkeys(r["variant"] for r in records),
                      key=lambda v: (order.index(v) if v in order else len(order), v))
    lines = ["Command: `%s`" % command, "",
             "Mean ± s.e. over seeds (experiments/cvae_probe.py's docstring says what each column measures; H(c) "
             "of the held-out labels %s nats)." % ", ".join(sorted({"%.3f" % r["probe_means"]["entropy"]
                                                                  for r in records})), "",
             "| variant | seeds | z dims | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(COLUMNS)]
    for variant in variants:
        rows = sorted((r for r in records if r["variant"] == variant), key=lambda r: r["seed"])
        cells = []
        for _, value, scale, decimals in COLUMNS:
            mean, se = mean_se([scale * value(r) for r in rows])
            cells.append("%.*f ± %.*f" % (decimals, mean, decimals, se))
        lines.append("| %s | %s | %s | %s |" % (variant, ", ".join(str(r["seed"]) for r in rows),
                                               ", ".join(sorted({str(r["z_dim"]) for r in rows})), " | ".join(cells)))
    return "\n".join(lines) + "\n"


def write_table(records, jsonl, out):
    command = "python experiments/cvae_probe.py table %s --out %s" % (jsonl, out)
    text = table(records, command)
    Path(out, "probe.md").write_text(text)
    print(text)


def read_records(path):
    """The records of ``path`` (:func:`~amortized_pyro.support.jsonio.read_jsonl`), none where it is not there yet."""
    return read_jsonl(path) if Path(path).exists() else []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("measure", help="measure finished conditional runs")
    measure.add_argument("runs", nargs="+", help="finished conditional runs' folders, named VARIANT-seedS")
    measure.add_argument("--seed", type=int, default=0, help="seed of the draws (probe draws, prior draws)")
    remake = commands.add_parser("table", help="the table again from probe.jsonl")
    remake.add_argument("jsonl")
    for sub in (measure, remake):
        sub.add_argument("--out", required=True, help="the folder of probe.jsonl and probe.md")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.command == "table":
        return write_table(read_records(args.jsonl), args.jsonl, args.out)
    jsonl = out / "probe.jsonl"
    done = {r["run"] for r in read_records(jsonl)}
    for run in args.runs:
        if str(run) in done:
            continue
        if not Path(run, "summary.json").exists():
            print("%s: not finished, skipped" % run)
            continue
        try:
            record = measured(run, args.seed)
        except AmortizedPyroError as error:
            sys.exit("cvae_probe.py: %s" % error)
        append_jsonl(jsonl, record)
        print("%s: probe %.1f %% (from draws %.1f %%), I(z; c) >= %.2f nats, KL %.1f nats, %d active (> 0.1 nats), "
              "analogies %.1f %%, draws %.1f %%" % (run, 100 * record["probe_means"]["accuracy"],
                                         100 * record["probe_draws"]["accuracy"], record["probe_draws"]["bound"],
                                         record["kl_total"], record["active"]["0.1"], 100 * record["analogy_accuracy"],
                                         100 * record["draw_accuracy"]), flush=True)
    write_table(read_records(jsonl), jsonl, args.out)


if __name__ == "__main__":
    main()
