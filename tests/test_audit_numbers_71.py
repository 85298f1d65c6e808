"""docs/results.md's sentences that issue 71 rewrote quote what experiments/audit_numbers_71.py computes from the
committed files (the CVAE accuracy study, the diagnostics study, the original study's seeds 1 and 2, the probe of
what the CVAE's z carries): each computed value, printed by the script, and the sentence that quotes it (white space
as one space). A number edited in the committed files or in the sentence fails here."""
import functools
from pathlib import Path

import pytest

from in_process import run_python

ROOT = Path(__file__).resolve().parents[1]
RESULTS = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def audit(part):
    done = run_python("experiments/audit_numbers_71.py", part, cwd=ROOT)  # in this process, as python would run it
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("part, computed, quoted", [
    ("cvae", "noenc: 23.1 ± 0.6 %", ["from 51.7 ± 0.8 % to 23.1 ± 0.6 %"]),
    ("cvae", "z8: 57.7 ± 0.3 %, +6.0 points from the baseline (7.4 s.e., unpaired)", ["(+6.0 and +5.7 points, 7.4"]),
    ("cvae", "every: 57.4 ± 0.6 %, +5.7 points from the baseline (5.8 s.e., unpaired)", ["7.4 and 5.8 standard"]),
    ("cvae", "long: 63.3 ± 1.0 %", ["three times the training to 63.3 ± 1.0 %"]),
    ("cvae", "learned: 80.7 ± 0.8 %, +29.0 points from the baseline", ["to 80.7 ± 0.8 % at the baseline's",
                                                                        "the learned prior gains 29 points"]),
    ("cvae", "learned: 80.7 ± 0.8 %, +29.0 points from the baseline (25.8 s.e., unpaired); worst class per seed 60.5, "
             "60.5, 57.5, mean 60 %; classifier leave-one-out per seed 90.7, 90.7, 90.7; held-out MSE ratio 0.22",
     ["held-out MSE (0.22)"]),
    ("cvae", "recipe: 96.5 ± 0.3 %, +44.9 points from the baseline (53.4 s.e., unpaired); worst class per seed 86.0, "
             "92.0, 91.0", ["each seed's own worst class 86.0, 92.0, 91.0 %"]),
    ("cvae", "classifier leave-one-out per seed 87.4, 86.4, 86.3", ["(86.3–87.4 % of the binarized ones, by seed)"]),
    ("cvae", "base seed 0, one z shared by all ten rows: 61.3 % of 80 draws", ["61.3 % of draws are read as their"]),
    ("diagnose", "k-hat minus spread of log w (2,000 × 4): train 0.05 (1.4 s.e.), held out 0.03 (1.3 s.e.); its cost "
                 "8000 passes against k-hat's 8000", ["weights 0.05 and 0.03, 1.4 and\n1.3 standard errors"]),
    ("diagnose", "k-hat minus − local ELBO (2,000 × 4): train 0.14 (1.9 s.e.), held out 0.02 (1.4 s.e.)",
     ["over the local ELBO 0.14 and 0.02, 1.9 and 1.4"]),
    ("diagnose", "k-hat minus spread of log w (8 × 4): train 0.16 (3.6 s.e.), held out 0.08 (3.6 s.e.); its cost 32 "
                 "passes against k-hat's 8000 (250 times)", ["8 log weights per θ draw, 250 times cheaper"]),
    ("seeds", "table row: | 0 | 0.59, −512.86, 12,000 | 0.82, −518.68, 35,600 |",
     ["| 0 | 0.59, −512.86, 12,000 | 0.82, −518.68, 35,600 |"]),
    ("seeds", "table row: | 1 | 0.62, −513.38, 11,600 | 1.00, −522.91, never |",
     ["| 1 | 0.62, −513.38, 11,600 | 1.00, −522.91, never |"]),
    ("seeds", "table row: | 2 | 0.62, −513.07, 11,200 | 1.00, −522.82, never |",
     ["| 2 | 0.62, −513.07, 11,200 | 1.00, −522.82, never |"]),
    ("seeds", "A-VI k=64, seeds 0-2: leaves the mean image (below 0.9 × at the end) in 3 of 3, 0.59–0.62 × at the "
              "end, true ELBO −512.86 to −513.38, below 0.9 × by 11,200–12,000 steps",
     ["leaves the mean image in every seed (0.59–0.62 × at the end, true ELBO −512.86 to −513.38), below 0.9 × "
      "by 11,200–12,000 steps"]),
    ("seeds", "F-VI, seeds 0-2: leaves the mean image (below 0.9 × at the end) in 1 of 3 (seed 0: 0.82 ×); the "
              "others 1.00 and 1.00 ×, true ELBO −522.91 and −522.82",
     ["F-VI leaves it in one seed of three (seed 0's 0.82 ×); in seeds 1 and 2 F-VI is still on the mean image at "
      "50,000 steps (1.00, true ELBO −522.91 and −522.82,"]),
    ("seeds", "constant-VI seed 0: 1.00 ×, true ELBO −522.86", ["as constant-VI's −522.86 at seed 0"]),
    ("seeds", "seed 0, F-VI's first step below 0.9 × over A-VI k=64's: 35,600 / 12,000 = 3.0 ×",
     ["where F-VI leaves the mean image at all (1 seed of 3) it does so about 3× later"]),
])
def test_a_rewritten_sentence_quotes_the_number_computed_from_committed_files(part, computed, quoted):
    assert computed in audit(part)
    for sentence in quoted:
        assert flat(sentence) in flat(RESULTS), sentence


def flat(text):
    """``text`` with every run of white space one space: a sentence quoted across a line break still matches."""
    return " ".join(text.split())


@pytest.mark.parametrize("computed, quoted", [
    ("A-VI k=64, seeds 0-2: leaves the mean image (below 0.9 × at the end) in 3 of 3, 0.59–0.62 ×",
     "A-VI k = 64 leaves the mean image in every seed (0.59–0.62 of its MSE)"),
    ("F-VI, seeds 0-2: leaves the mean image (below 0.9 × at the end) in 1 of 3 (seed 0: 0.82 ×); the others 1.00",
     "F-VI in one of three (0.82; 1.00 in the others)"),
    ("A-VI k=1 seed 0: 1.00 ×", "k = 1 and constant-VI never (1.00; one seed)"),
])
def test_the_readme_s_seeds_finding_quotes_the_recomputed_decision(computed, quoted):
    assert computed in audit("seeds")
    assert flat(quoted) in flat((ROOT / "README.md").read_text(encoding="utf-8"))


def probed(variant):
    """The audit's line of one variant of the probe (figures/cvae-accuracy/probe.jsonl)."""
    return next(line for line in audit("probe").splitlines() if line.startswith(variant + " (seeds 0, 1, 2): "))


P_ANALOGIES, P_DRAWS = "shared-z analogies", "independent draws"
P_ASKED, P_IMAGE = "codes with another class, read as it", "codes with another class, read as the image's"
P_NEAR, P_INDEPENDENT = "misread draws as the nearest codes' class", "independent"


@pytest.mark.parametrize("computed, quoted", [
    ([("base", "linear probe from the means 60.6 ± 1.2 %"), ("base", "5-NN probe 77.3 ± 1.0 %")],
     "the probe reads the label from μ for 60.6 ± 1.2 % of held-out images, the 5 nearest training codes (by μ) for "
     "77.3 ± 1.0 % (chance 10 %)"),
    ([("base", "I(z; c) >= 0.49 ± 0.00 nats"), ("base", "KL 79.5 ± 0.5 nats"),
      ("base", "active dimensions (KL > 0.1) 36.0 ± 0.6"), ("base", "active dimensions (KL > 0.01) 62.7 ± 0.3")],
     "I(z; c) ≥ 0.49 ± 0.00 nats; z's KL is 79.5 ± 0.5 nats, 36.0 ± 0.6 dimensions above 0.1 nats each (62.7 ± 0.3 "
     "above 0.01)"),
    ([("noenc", "I(z; c) >= 1.61 ± 0.03 nats")], "(q(z | x)) I(z; c) ≥ 1.61 ± 0.03 nats"),
    ([("bernoulli", "I(z; c) >= 0.07 ± 0.01 nats"), ("obs3", "I(z; c) >= 0.03 ± 0.01 nats"),
      ("recipe", "I(z; c) >= 0.10 ± 0.01 nats"), ("bernoulli", "KL 22.3 ± 0.2 nats"), ("obs3", "KL 20.8 ± 0.1 nats"),
      ("recipe", "KL 9.0 ± 0.0 nats")],
     "0.07 ± 0.01, 0.03 ± 0.01 and 0.10 ± 0.01 nats (KL 22.3 ± 0.2, 20.8 ± 0.1 and 9.0 ± 0.0 nats)"),
    ([("bernoulli", "linear probe from the means 77.9 ± 0.9 %"), ("obs3", "linear probe from the means 82.3 ± 0.5 %"),
      ("bernoulli", "linear probe from draws 17.8 ± 1.0 %"), ("obs3", "linear probe from draws 15.0 ± 1.5 %")],
     "(the probe from μ 77.9 ± 0.9 % and 82.3 ± 0.5 % for the first two) where the draws' noise hides it (from draws "
     "z ~ q: 17.8 ± 1.0 % and 15.0 ± 1.5 %)"),
    ([("base", P_IMAGE + " 66.5 ± 0.7 %"), ("base", P_ASKED + " 19.7 ± 0.8 %"),
      ("base", "codes with their own class 95.3 ± 0.8 %"), ("noenc", P_IMAGE + " 90.7 ± 0.7 %"),
      ("noenc", P_ASKED + " 2.7 ± 0.1 %")],
     "read as the image's own class for 66.5 ± 0.7 % and as the label's for 19.7 ± 0.8 % (decoded with its own "
     "label, 95.3 ± 0.8 % are read as it); with q(z | x), 90.7 ± 0.7 and 2.7 ± 0.1 %"),
    ([("base", P_ANALOGIES + " 52.5 ± 0.9 %"), ("base", P_DRAWS + " 51.6 ± 0.2 %"),
      ("noenc", P_ANALOGIES + " 23.4 ± 1.0 %"), ("noenc", P_DRAWS + " 22.8 ± 1.1 %")],
     "52.5 ± 0.9 % of 200 draws per class, as independent draws are (51.6 ± 0.2 %); with q(z | x) 23.4 ± 1.0 % and "
     "22.8 ± 1.1 %"),
    ([("base", P_NEAR + " 37.8 ± 1.4 %; " + P_INDEPENDENT + " 14.9 ± 0.7 %"),
      ("noenc", P_NEAR + " 50.9 ± 0.7 %; " + P_INDEPENDENT + " 13.4 ± 0.1 %")],
     "for 37.8 ± 1.4 % (14.9 ± 0.7 % were the two independent), 50.9 ± 0.7 % with q(z | x) (13.4 ± 0.1 %)"),
    ([("base", P_DRAWS + " 51.6 ± 0.2 %")], "their baseline's draws read as their row 51.6 ± 0.2 %"),
    ([(v, "%s %s %%; " % (P_DRAWS, d)) for v, d in (("recipe", "96.1 ± 0.5"), ("obs3", "86.5 ± 0.9"),
                                                     ("bernoulli", "83.5 ± 1.3"), ("z8", "57.2 ± 0.6"),
                                                     ("every", "57.2 ± 1.0"), ("base", "51.6 ± 0.2"),
                                                     ("noenc", "22.8 ± 1.1"))]
     + [(v, "%s %s %%; " % (P_ASKED, a)) for v, a in (("recipe", "96.8 ± 0.2"), ("obs3", "87.9 ± 0.4"),
                                                       ("bernoulli", "83.6 ± 0.4"), ("z8", "52.0 ± 0.5"),
                                                       ("every", "25.9 ± 1.0"), ("base", "19.7 ± 0.8"),
                                                       ("noenc", "2.7 ± 0.1"))],
     "z of 2 dimensions 96.8 ± 0.2 % and 96.1 ± 0.5 %, the wider likelihood 87.9 ± 0.4 % and 86.5 ± 0.9 %, Bernoulli "
     "83.6 ± 0.4 % and 83.5 ± 1.3 %, z of 8 dimensions 52.0 ± 0.5 % and 57.2 ± 0.6 %, the label at every layer "
     "25.9 ± 1.0 % and 57.2 ± 1.0 %, the baseline 19.7 ± 0.8 % and 51.6 ± 0.2 %, q(z | x) 2.7 ± 0.1 % and "
     "22.8 ± 1.1 %"),
    ([("learned", P_ASKED + " 6.2 ± 0.4 %"), ("learned", "I(z; c) >= 1.15 ± 0.03 nats"),
      ("learned", "draws among their row's codes 47.9 ± 0.4 %"), ("base", "draws among their row's codes 10.2 ± 0.1 %"),
      ("learned", P_DRAWS + " 80.9 ± 0.3 %")],
     "(6.2 ± 0.4 % of codes read as another label; I(z; c) ≥ 1.15 ± 0.03 nats), but p(z | c) puts 47.9 ± 0.4 % of its "
     "draws among their row's codes (their 5 nearest training codes of that class; 10.2 ± 0.1 % in the baseline), so "
     "z's class is mostly the row's, and 80.9 ± 0.3 % of its draws"),
    ([("learned", "KL 77.4 ± 0.4 nats"), ("base", "KL 79.5 ± 0.5 nats")],
     "with z's KL unchanged (77.4 ± 0.4 against 79.5 ± 0.5 nats)"),
    ([("recipe", "KL 9.0 ± 0.0"), ("bernoulli", "KL 22.3 ± 0.2"), ("z8", "KL 28.7 ± 0.3 nats"),
      ("z8", "I(z; c) >= 0.77 ± 0.03 nats")],
     "with fewer nats in z, 9.0–22.3 against 79.5, the ELBO spends them on what the label does not give, but z of 8 "
     "dimensions, 28.7 ± 0.3 nats, keeps at least 0.77 ± 0.03 nats"),
    ([("z8", P_ASKED + " 52.0 ± 0.5 %"), ("every", P_ASKED + " 25.9 ± 1.0 %")],
     "take the label at different rates (52.0 ± 0.5 and 25.9 ± 1.0 %)"),
    ([("base", "draws' distance ratio 1.82 ± 0.03"), ("obs3", "draws' distance ratio 4.11 ± 0.03"),
      ("bernoulli", "draws' distance ratio 4.36 ± 0.13")],
     "prior draws lie 1.82 ± 0.03 times as far from their nearest training code as held-out codes do, under the wider "
     "and the Bernoulli likelihoods 4.11 ± 0.03 and 4.36 ± 0.13 times"),
])
def test_the_probe_s_sentences_quote_what_the_probe_s_records_give(computed, quoted):
    """docs/results.md's "What z carries, measured" and its cause: each number recomputed from
    figures/cvae-accuracy/probe.jsonl by experiments/audit_numbers_71.py probe."""
    for variant, piece in computed:
        assert piece in probed(variant), (variant, piece)
    assert flat(quoted) in flat(RESULTS), quoted
