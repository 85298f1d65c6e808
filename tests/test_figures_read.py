"""A comparison's figures and texts read without a guide (issue 47, what a new user tripped over): the ELBO on
an axis with no symmetric-log cliff and its band named (fig1, fig6); constant-VI's line visible beside the
mean image's (fig2); a speed not set by how often the runs were evaluated (fig4); an empty refinement panel
saying why (fig7, gap-report); no summary column n/a in every row; IWAE − AIS said in words. Synthetic
inputs; the figures are caught at Figure.savefig and read."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.container import ErrorbarContainer

from amortized_pyro.report.figures import plot_all
from amortized_pyro.report.gap_figures import gap_figure
from amortized_pyro.report.tables import format_gap, format_summary
from amortized_pyro.study.results import Results

BASELINE = {"kind": "baseline", "dataset": "d", "train_mse": 0.063, "test_mse": 0.064}
GUIDES = {"A-VI": "amortized", "F-VI": "per-datapoint", "constant-VI": "shared"}
REFERENCE = "mean training image (ignores z)"


def run(label, seed, elbo, mse=lambda it: 0.05, every=1, epochs=10, steps=10, ms_per_step=10.0):
    """A run's metrics rows, evaluated every ``every`` epochs of ``steps`` SVI steps: ELBO ``elbo(epoch)``,
    train MSE ``mse(iteration)``, a training clock of ``ms_per_step`` per step."""
    guide = GUIDES[label.split(" ")[0]]
    return [{"kind": "metrics", "study": "s", "dataset": "d", "guide": guide, "width": 8 if guide == "amortized" else None,
             "label": label, "seed": seed, "n_obs": 100, "epoch": e, "iteration": e * steps, "elbo": 100 * elbo(e),
             "elbo_per_obs": elbo(e), "train_plugin_mse": mse(e * steps), "train_predictive_mse": mse(e * steps),
             "test_plugin_mse": mse(e * steps), "test_predictive_mse": mse(e * steps),
             "time": e * steps * ms_per_step / 1000, "theta_scale_mean": 0.1} for e in range(every, epochs + 1, every)]


def crossing_zero(seed):
    return lambda e: -2000.0 + 250.0 * e + 5 * seed  # −1750 at epoch 1, +500 at epoch 10


def below_zero(seed):
    return lambda e: -2000.0 / e - 5 * seed


def lines(ax):
    return {line.get_label(): np.asarray(line.get_ydata(), float) for line in ax.get_lines()}


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def tick_labels_apart(ax):
    """Whether no two of the y axis's visible tick labels overlap."""
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    low, high = sorted(ax.get_ylim())
    boxes = [t.get_window_extent(renderer) for t, y in zip(ax.get_yticklabels(), ax.get_yticks())
             if low <= y <= high and t.get_text()]
    return not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@pytest.mark.parametrize("elbo, scale", [(crossing_zero, "linear"), (below_zero, "log")])
def test_the_elbo_has_no_symmetric_log_cliff_and_its_band_is_named(tmp_path, saved_figures, elbo, scale):
    """An ELBO that turns positive: the ELBO itself on a linear axis (higher is better); one negative
    throughout: −ELBO on a log scale. Never symlog. The curves are the mean over seeds, the band is named."""
    rows = [r for label in ("A-VI k=8", "F-VI") for seed in (0, 1) for r in run(label, seed, elbo(seed))]
    plot_all(Results(rows, baselines=[BASELINE]), tmp_path)
    sign = 1 if scale == "linear" else -1
    expected = sign * np.mean([[elbo(seed)(e) for e in range(1, 11)] for seed in (0, 1)], 0)  # the mean over seeds
    (ax,) = saved_figures["fig1_neg_elbo.png"].axes
    assert ax.get_yscale() == scale
    assert ax.get_ylabel().startswith("ELBO per observation" if sign > 0 else "−ELBO per observation")
    assert lines(ax)["A-VI k=8"] == pytest.approx(expected)
    low, high = ax.get_ylim()
    band = sign * np.array([[elbo(seed)(e) for e in range(1, 11)] for seed in (0, 1)])
    assert low <= band.min() and high >= band.max()  # the whole band inside the axes
    assert any("lowest to highest" in text for text in legend_texts(ax))
    assert tick_labels_apart(ax)
    panels = [a for a in saved_figures["fig6_elbo_seeds.png"].axes if a.get_visible()]
    assert len(panels) == 2
    for panel in panels:
        assert panel.get_yscale() == scale and panel.get_ylabel() == ax.get_ylabel()
        assert tick_labels_apart(panel)
    assert lines(panels[0])["seed 1"] == pytest.approx([sign * elbo(1)(e) for e in range(1, 11)])


def test_constant_vi_stays_visible_on_the_mean_image_line(tmp_path, saved_figures):
    """constant-VI reconstructs the mean image: its curves lie on the reference line. The reference is drawn
    wide and pale under every curve, in a colour of its own, so both show."""
    rows = run("constant-VI", 0, below_zero(0), mse=lambda it: BASELINE["train_mse"])
    rows += run("A-VI k=8", 0, below_zero(0), mse=lambda it: 0.05)
    plot_all(Results(rows, baselines=[BASELINE]), tmp_path)
    (ax,) = saved_figures["fig2_train_mse.png"].axes
    (reference,) = [line for line in ax.get_lines() if line.get_label() == REFERENCE]
    curves = [line for line in ax.get_lines() if line is not reference]
    constant = [line for line in curves if line.get_label().startswith("constant-VI")]
    assert len(constant) == 2 and np.allclose(constant[0].get_ydata(), reference.get_ydata()[0])
    assert all(reference.get_zorder() < line.get_zorder() for line in curves)
    assert all(reference.get_linewidth() >= 2.5 * line.get_linewidth() for line in curves)
    assert all(to_rgb(reference.get_color()) != to_rgb(line.get_color()) for line in curves)
    assert REFERENCE in legend_texts(ax)


def crossings(ax):
    """(y, lower end, upper end) of each error bar drawn on ``ax``."""
    out = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            (segments,) = [c.get_segments() for c in container.lines[2]]
            for y, segment in zip(container.lines[0].get_ydata(), segments):
                out.append((float(y), min(p[1] for p in segment), max(p[1] for p in segment)))
    return out


@pytest.mark.parametrize("every, bracket", [(1, (230, 240)), (5, (200, 250)), (10, (200, 300))])
def test_speed_is_not_set_by_the_evaluation_spacing(tmp_path, saved_figures, every, bracket):
    """The train MSE falls linearly, 0.08 − 0.0001 × step, below 0.9 × 0.063 at step 233: that is the crossing
    drawn whether the runs were evaluated every 10, 50 or 100 steps, with a bar between the evaluations
    around it; the training clock (10 ms a step) says 2.33 s. A run already below at its first evaluation:
    a bar from step 0 to that evaluation, no interpolated point."""
    falling = [r for seed in (0, 1) for r in run("A-VI k=8", seed, below_zero(seed), lambda it: 0.08 - 1e-4 * it, every, 40)]
    rows = falling + run("F-VI", 0, below_zero(0), lambda it: 0.01, every, 40)
    plot_all(Results(rows, baselines=[BASELINE]), tmp_path)
    top, bottom = saved_figures["fig4_speed.png"].axes
    drawn = crossings(top)
    assert len(drawn) == 3
    avi = [c for c in drawn if c[0] != pytest.approx(10 * every)]
    assert [c[0] for c in avi] == pytest.approx([233, 233]) and all(c[1:] == pytest.approx(bracket) for c in avi)
    fvi = [c for c in drawn if c not in avi]
    assert fvi == [(10 * every, 0, 10 * every)]
    assert "evaluated every %d steps" % (10 * every) in top.get_title()
    texts = [t.get_text() for t in bottom.texts]
    assert any("2.33 s" in text for text in texts) and any("≤ %g s" % (every / 10) in text for text in texts)


def report(label, guide, split, refinement=True, **more):
    gap = {"mean": 5.0, "stderr": 1.0}
    return dict({"label": label, "guide": guide, "width": 4 if guide == "amortized" else None, "split": split,
                 "seed": 0, "n_images": 5, "amortization_gap": gap, "elbo_guide": {"mean": -100.0, "stderr": 1.0},
                 "refine_steps": [0, 5] if refinement else [], "q_family": "gaussian",
                 "refinement": [{"steps": s, "gap_left": gap} for s in (0, 5)] if refinement else []}, **more)


@pytest.mark.parametrize("reports, says", [
    ([report("A-VI k=4", "amortized", split, False) for split in ("train", "test")], "--refine-steps"),
    ([report("A-VI k=4", "amortized", "test", False, q_family="flow")], "flow"),
    ([report("F-VI", "per-datapoint", "test", False, elbo_guide=None, amortization_gap=None)], "held-out")])
def test_an_empty_refinement_panel_says_why(tmp_path, reports, says):
    left, right = gap_figure(reports, tmp_path / "gap_figure.png").axes
    assert not right.axison and not right.containers and not right.get_lines()
    (note,) = right.texts
    assert note.get_text().startswith("No refinement to draw") and says in note.get_text()
    if says == "held-out":  # F-VI alone on held-out images: no amortization gap either, said so
        assert not left.axison and left.texts[0].get_text().startswith("No amortization gap to draw")
    full = gap_figure(reports + [report("A-VI k=8", "amortized", "train")], tmp_path / "full.png").axes[1]
    assert full.axison and not full.texts and full.containers  # a panel with data has no note


def summary_rows(fvi_elbo):
    rows = [r for label, value in (("A-VI k=8", -90.0), ("F-VI", fvi_elbo)) if value is not None
            for r in run(label, 0, lambda e, value=value: value, epochs=2)]
    return Results(rows, baselines=[BASELINE]).summary()


def cells(text, label):
    return next(line for line in text.splitlines() if line.startswith("| d | %s |" % label)).split(" | ")


@pytest.mark.parametrize("fvi_elbo, percent, nats", [(-100.0, True, True), (100.0, False, True), (None, False, False)])
def test_no_summary_column_reads_na_in_every_row(fvi_elbo, percent, nats):
    """gap (%) is shown where some row has one, and said why where none has (F-VI's ELBO positive); with no
    F-VI, no gap to F-VI at all. The rows keep the header's columns."""
    text = format_summary(summary_rows(fvi_elbo))
    header = text.splitlines()[0]
    assert ("| gap (%) |" in header) == percent and ("gap to F-VI" in header) == nats
    for label in ("A-VI k=8",) + (("F-VI",) if fvi_elbo else ()):
        assert len(cells(text, label)) == header.count(" | ") + 1 == text.splitlines()[1].count("|---")
    row = cells(text, "A-VI k=8")
    if percent:  # F-VI's −100 minus A-VI's −90, and that in % of |−100|
        assert row[6:8] == ["-10.00", "-10.00"]
    elif nats:
        assert row[6] == "190.00" and "in % is left out" in text and "positive" in text
    else:
        assert "no F-VI run" in text


def gap_text(difference):
    settings = {"importance_samples": 100, "theta": "mean", "theta_draws": 1, "max_steps": 300, "ais_steps": 200}
    return format_gap({"n_images": 5, "run": "r", "split": "test", "settings": settings, "optimizer_steps": 40,
                       "refinement": [], "optimized_plugin_mse": 0.05, "capped": 0, "capped_per_theta": 0,
                       "stderr_over": "images", "iwae_minus_ais": {"mean": difference, "stderr": 0.5}})


def test_iwae_against_ais_says_which_bound_is_tighter_and_what_to_raise():
    words = gap_text(-6.0)
    assert "IWAE − AIS = -6.000 ± 0.500" in words and "DISAGREE" not in words
    assert "AIS is the tighter lower bound here" in words and "--importance-samples" in words
    assert "approximation gap" in words  # what the looser IWAE does to the table
    words = gap_text(4.0)
    assert "IWAE is the tighter lower bound here" in words and "--ais-steps" in words and "DISAGREE" not in words
    assert "agree within 3 s.e." in gap_text(1.0)


def test_a_gap_table_without_per_image_values_says_its_errors_are_over_the_seeds_means():
    """A results.jsonl keeps the reports without their per-image values: its summary's gap table pools the seeds'
    image means (here 2.0 and 4.0: 3.0 ± 1.0), and says so rather than "over seeds and images together"."""
    from amortized_pyro.report.tables import format_reports
    reports = [{"label": "A-VI k=8", "split": "train", "seed": seed, "n_images": 5, "amortization_gap":
                {"mean": mean, "stderr": 0.1}, "coupling_gap": None, "approximation_gap": {"mean": 1.0, "stderr": 0.1},
                "refinement": [], "capped": 0, "capped_per_theta": 0, "hit_cap": False, "score_draws": 8,
                "optimized_plugin_mse": 0.01, "settings": {"importance_samples": 10},
                "select_draws": 8} for seed, mean in ((0, 2.0), (1, 4.0))]
    text = format_reports(reports)
    assert "| 3.0 ± 1.0 |" in text and "over the seeds' image means" in text
    assert "over seeds and images together" not in text
