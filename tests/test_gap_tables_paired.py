"""experiments/gap_tables.py says exactly what its files show (issue 49, items 1 and 2): --against pairs two
configurations by (training seed, image) where both were measured on the same images of the same seeds, and
says so; falls back to unpaired differences, and says why, where the images differ; and the table and the figure
mark a capped q* (the amortization gap) apart from a capped q*_m (the coupling and approximation gaps), with
their counts. Each runs the script on synthetic reports (tests/test_experiment_figures.py's)."""
import math
import statistics

import pytest
from matplotlib.container import BarContainer
from test_experiment_figures import all_text, gap_report, run_script, write_run

from amortized_pyro.gap.pooling import gap_over_seeds

GAPS = ("amortization_gap", "coupling_gap", "approximation_gap")
SEEDS, IMAGES = (0, 1, 2), 10


def summary(values):
    return {"mean": statistics.fmean(values), "stderr": statistics.stdev(values) / math.sqrt(len(values))}


def measured(label, split, seed, images, amortization, **caps):
    """A report of one training seed on ``images`` with per-image amortization gaps (coupling and approximation
    gaps a function of the image alone), its summaries those of its per-image values."""
    per_image = {"amortization_gap": amortization, "coupling_gap": [1.0 + 0.2 * (i % 4) for i in images],
                 "approximation_gap": [2.0 - 0.2 * (i % 4) for i in images]}
    report = gap_report(label, split, None, per_image=per_image, **{k: v for k, v in caps.items() if k == "capped"})
    report.update({name: summary(values) for name, values in per_image.items()},
                  seed=seed, images=list(images), n_images=len(images),
                  **{k: v for k, v in caps.items() if k != "capped"})
    return report


def image_effect(seed, i):
    """A wide spread over images and seeds, which both configurations share on the same images."""
    return 60.0 + 10.0 * seed + 30.0 * math.sin(1.7 * i + 2.3 * seed)


def write(folder, label, per_seed, n_obs=100):
    """One run per training seed under ``folder`` with its train report (``per_seed[seed]``: images, gaps)."""
    for seed, (images, gaps) in per_seed.items():
        write_run(folder, "%s-seed%d" % (label.replace(" ", "_"), seed),
                  [measured(label, "train", seed, images, gaps)], seed=seed, n_obs=n_obs)


def against(text):
    """{label: (the heading its row sits under, [its cells after the split])} of gaps.md's --against table."""
    rows, heading = {}, None
    for line in text.split("Each configuration's gaps minus")[1].splitlines():
        if line.startswith(("Paired", "Unpaired")):
            heading = line
        elif line.startswith("| ") and not line.startswith("| configuration"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = (heading, cells[2:])
    return rows


def ratio(cell):
    """The difference over its standard error, as a cell "+3.0 ± 0.2 (+12.4 s.e.)" reads."""
    return float(cell.split("(")[1].split(" s.e.")[0])


def test_a_paired_design_reads_the_difference_the_unpaired_error_hides(tmp_path, monkeypatch):
    """The same images per seed on both sides (one side in another order), a wide spread over images and
    seeds and a difference of about 3 nats: paired it reads above 3 s.e., unpaired below 2."""
    images = {s: [100 * s + i for i in range(IMAGES)] for s in SEEDS}
    base = {s: (images[s], [image_effect(s, i) for i in range(IMAGES)]) for s in SEEDS}
    shift = {s: [3.0 + 0.4 * math.cos(2.9 * i + s) for i in range(IMAGES)] for s in SEEDS}
    mine = {s: (images[s][::-1], [image_effect(s, i) + shift[s][i] for i in range(IMAGES)][::-1]) for s in SEEDS}
    write(tmp_path / "a", "A-VI k=8", base)
    write(tmp_path / "b", "A-VI k=32", mine)
    run_script(monkeypatch, "gap_tables.py", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "out",
               "--against", "A-VI k=8")
    heading, cells = against((tmp_path / "out" / "gaps.md").read_text())["A-VI k=32"]
    assert heading.startswith("Paired by (training seed, image)") and "nested: each seed its own images" in heading
    difference = statistics.fmean(statistics.fmean(shift[s]) for s in SEEDS)
    assert cells[0].startswith("%+.1f ± " % difference) and ratio(cells[0]) > 3
    assert cells[1:3] == ["+0.0 (s.e. 0)", "+0.0 (s.e. 0)"]  # the same values image by image: no spread at all
    assert cells[3] == ", ".join("%d: %+.1f" % (s, statistics.fmean(shift[s])) for s in SEEDS)  # seed by seed
    # the same difference read unpaired: under 2 standard errors
    reports = {label: [measured(label, "train", s, *side[s]) for s in SEEDS]
               for label, side in (("base", base), ("mine", mine))}
    one, other = (gap_over_seeds(reports[label], "amortization_gap") for label in ("mine", "base"))
    unpaired = (one["mean"] - other["mean"]) / math.hypot(one["stderr"], other["stderr"])
    assert unpaired == pytest.approx(difference / math.hypot(one["stderr"], other["stderr"])) and 0 < unpaired < 2


@pytest.mark.parametrize("change, why", [("images", "different images"), ("seeds", "different training seeds"),
                                         ("data", "different data")])
def test_where_the_images_differ_it_falls_back_to_unpaired_and_says_why(tmp_path, monkeypatch, change, why):
    """Other images on one side (or other training seeds, or the same indices into other data: N 200 against
    100): the difference of the pooled means over √(s.e.₁² + s.e.₂²), under a heading that says it is unpaired
    and why."""
    base = {s: ([100 * s + i for i in range(IMAGES)], [image_effect(s, i) for i in range(IMAGES)]) for s in SEEDS}
    other = {s: ([100 * s + i + (50 if change == "images" else 0) for i in range(IMAGES)],
                 [image_effect(s + 5, i) + 3.0 for i in range(IMAGES)]) for s in SEEDS}
    write(tmp_path / "a", "A-VI k=8", base)
    if change == "seeds":  # seeds 0, 1 and 3 against 0, 1 and 2
        other[3] = other.pop(2)
    write(tmp_path / "b", "A-VI k=32", other, n_obs=200 if change == "data" else 100)
    run_script(monkeypatch, "gap_tables.py", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "out",
               "--against", "A-VI k=8")
    heading, cells = against((tmp_path / "out" / "gaps.md").read_text())["A-VI k=32"]
    assert heading == "Unpaired (%s), the two standard errors taken as independent:" % why
    pooled = [gap_over_seeds([measured(label, "train", s, *side[s]) for s in side], "amortization_gap")
              for label, side in (("mine", other), ("base", base))]
    difference = pooled[0]["mean"] - pooled[1]["mean"]
    stderr = math.hypot(*(p["stderr"] for p in pooled))
    assert cells[0] == "%+.1f ± %.1f (%+.1f s.e.)" % (difference, stderr, difference / stderr)


def capped_study(folder):
    """Three configurations of one seed each: A-VI k=8 with 2 capped q*, A-VI k=32 with 3 capped q*_m pairs,
    F-VI of an earlier version (no counts) whose q* reached the cap."""
    images = list(range(4))
    gaps = [3.0, 4.0, 5.0, 6.0]
    write_run(folder, "A-VI_k_8-seed0", [measured("A-VI k=8", "train", 0, images, gaps, capped=True)])
    write_run(folder, "A-VI_k_32-seed0", [measured("A-VI k=32", "train", 0, images, gaps, capped_per_theta=3,
                                                   hit_cap=True)])
    old = measured("F-VI", "train", 0, images, gaps, capped=True)
    for field in ("capped", "capped_per_theta", "hit_cap"):  # as an earlier version wrote it: the step count only
        del old[field]
    write_run(folder, "F-VI-seed0", [old])


def test_a_capped_q_star_and_a_capped_q_m_are_marked_apart_with_their_counts(tmp_path, monkeypatch, saved_figures):
    capped_study(tmp_path / "study")
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    text = (tmp_path / "out" / "gaps.md").read_text()
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in text.split("\n\n")[1].splitlines()[2:])}
    # columns: 8 amortization gap, 10 coupling gap, 11 approximation gap; L(q*) (5) unmarked
    assert [rows["A-VI k=8"][i] for i in (5, 8, 10, 11)] == ["-100.0 ± 0.5", "4.5 ± 0.6 †", "1.3 ± 0.1",
                                                             "1.7 ± 0.1"]
    assert [rows["A-VI k=32"][i] for i in (8, 10, 11)] == ["4.5 ± 0.6", "1.3 ± 0.1 ‡", "1.7 ± 0.1 ‡"]
    assert [rows["F-VI"][i] for i in (8, 10, 11)] == ["4.5 ± 0.6 †", "1.3 ± 0.1", "1.7 ± 0.1"]
    assert ("† 2 of 3 rows hold q* optimizations stopped at their step cap, not by the stopping rule (q* capped "
            "for 2 of 12 images, and 1 report of an earlier version that did not count them; per row: A-VI k=8 "
            "train 2 of 4 images; F-VI train 0 of 4 images, and 1 report of an earlier version that did not count "
            "them): there L(q*) and the amortization gap are lower bounds") in text
    assert ("‡ 1 of 3 rows hold q*_m optimizations stopped at their step cap, not by the stopping rule (q*_m capped "
            "for 3 of 12 (image, θ) pairs; per row: A-VI k=32 train 3 of 4 (image, θ) pairs): there the coupling "
            "gap may read low and the approximation gap high.") in text
    # the figure: each gap hatched by what touches it, each hatch explained
    fig = saved_figures.last
    hatches = [{t.get_text(): "" for t in ax.get_xticklabels()} for ax in fig.axes[:3]]
    for ax, marks in zip(fig.axes, hatches):
        for patch in (p for c in ax.containers if isinstance(c, BarContainer) for p in c.patches):
            label = ax.get_xticklabels()[round(patch.get_x() + patch.get_width() / 2)].get_text()
            marks[label] = patch.get_hatch() or ""
    assert hatches[0] == {"A-VI k=8": "//", "A-VI k=32": "", "F-VI": "//"}
    assert hatches[1] == hatches[2] == {"A-VI k=8": "", "A-VI k=32": "\\\\", "F-VI": ""}
    words = all_text(fig)
    assert "some q* stopped at its step cap" in words and "some q*_m stopped at its step cap" in words


def test_per_image_gaps_below_zero_are_counted_per_row_with_the_lowest(tmp_path, monkeypatch):
    """Item 4: the table's note counts the per-image amortization and coupling gaps below zero, per row, with the
    lowest value and the row's mean; a table with none says so."""
    images = range(4)
    write(tmp_path / "clean", "A-VI k=8", {0: (images, [3.0, 4.0, 5.0, 6.0])})
    run_script(monkeypatch, "gap_tables.py", tmp_path / "clean", "--out", tmp_path / "out-clean")
    assert "No per-image amortization or coupling gap is below zero (8 values)." in (
        tmp_path / "out-clean" / "gaps.md").read_text()
    write(tmp_path / "noisy", "A-VI k=8", {0: (images, [3.0, -0.5, 5.0, -2.25]), 1: (images, [1.0, 2.0, 3.0, 4.0])})
    run_script(monkeypatch, "gap_tables.py", tmp_path / "noisy", "--out", tmp_path / "out-noisy")
    text = (tmp_path / "out-noisy" / "gaps.md").read_text()
    assert ("2 of 16 per-image amortization and coupling gaps are below zero" in text
            and "amortization gap: A-VI k=8 train 2 of 8 (lowest -2.25; row mean 1.9)." in text), text


def test_a_value_below_zero_is_said_in_its_own_scoring_standard_errors_where_the_report_kept_them(tmp_path,
                                                                                                  monkeypatch):
    """Item 4's "scoring noise, with its size": seed 0's report keeps each value's scoring s.e. (−0.5 with 0.5:
    1.0 s.e.; −2.25 with 0.75: 3.0 s.e.), seed 1's (an earlier report) none; the note says by how many."""
    images = range(4)
    reports = {seed: measured("A-VI k=8", "train", seed, images, gaps) for seed, gaps in (
        (0, [3.0, -0.5, 5.0, -2.25]), (1, [1.0, -1.0, 3.0, 4.0]))}
    reports[0]["per_image"]["amortization_gap_stderr"] = [1.0, 0.5, 1.0, 0.75]
    for seed, report in reports.items():
        write_run(tmp_path / "study", "A-VI_k_8-seed%d" % seed, [report], seed=seed, n_obs=100)
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    text = (tmp_path / "out" / "gaps.md").read_text()
    assert "A-VI k=8 train 3 of 8 (lowest -2.25; row mean 1.5; 2 of them with their scoring s.e., by at most " \
           "3.0 s.e.)" in text, text


def test_the_table_gives_ais_minus_iwae_from_the_reports_not_from_rounded_columns(tmp_path, monkeypatch):
    """Item 5's AIS − IWAE: its own last column, pooled from the reports' per-image IWAE − AIS, sign turned."""
    values = {s: [-3.0 - 0.013 * i - 0.3 * s for i in range(IMAGES)] for s in SEEDS}
    for s in SEEDS:
        report = measured("A-VI k=8", "train", s, range(IMAGES), [5.0] * IMAGES)
        report["per_image"]["iwae_minus_ais"] = values[s]
        report["iwae_minus_ais"] = summary(values[s])
        write_run(tmp_path / "study", "A-VI_k_8-seed%d" % s, [report], seed=s, n_obs=100)
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    text = (tmp_path / "out" / "gaps.md").read_text()
    header, _, row = text.split("\n\n")[1].splitlines()[:3]
    assert header.split(" | ")[-1] == "AIS − IWAE |"
    expected = statistics.fmean(-v for s in SEEDS for v in values[s])
    assert row.split(" | ")[-1].startswith("%.2f ± " % expected), row
