"""docs/results.md's numbers that issue 60 (item 11) corrected are the ones experiments/audit_numbers_60.py computes
from the committed files: each computed value, printed by the script, and the docs' sentence that quotes it (as
written there: thousands with commas, minus signs U+2212)."""
import functools
from pathlib import Path

import pytest

from in_process import run_python

ROOT = Path(__file__).resolve().parents[1]
RESULTS = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)  # one run of the script per part, for all its numbers
def audit(part):
    done = run_python("experiments/audit_numbers_60.py", part, cwd=ROOT)  # in this process, as python would run it
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("part, computed, quoted", [
    ("original", "at or below F-VI's final 0.8245 ×: A-VI k=64 at 14400 steps (1381.0 s), F-VI at 45200 (3559.1 s): "
                 "3.14 × in steps, 2.58 × on the runs' clocks",
     ["(0.8245) at 14,400 against F-VI's own first time there, 45,200 (3.1×", "1,381 against 3,559 s to 0.82 ×"]),
    ("original", "below 0.9 ×: A-VI k=64 at 12000 steps (1173.4 s), F-VI at 35600 (3058.7 s): 2.97 × in steps, "
                 "2.61 × on the runs' clocks", ["is 2.6× to either level (1,173 against 3,059 s to 0.9 ×"]),
    ("intervals", "k=64 early-stopping 3, held-out gap minus the plain encoder's: -16.0 ± 26.1 (0.61 s.e.); 95% "
                  "interval -128.1 to +96.1", ["−128.1 to +96.1 for early stopping"]),
    ("beta", "mnist β 4 − β 2, paired: +0.9 ± 0.8 (1.16 s.e.); 95% interval -2.6 to +4.5",
     ["β = 4 +0.9 ± 0.8, 1.16 s.e."]),
    ("beta", "mnist β 1 − β 2, paired: +2.7 ± 1.3 (1.98 s.e.); 95% interval -3.1 to +8.4",
     ["β = 1 +2.7 ± 1.3, 1.98 s.e."]),
])
def test_a_corrected_number_is_the_one_computed_from_committed_files(part, computed, quoted):
    assert computed in audit(part)
    for sentence in quoted:
        assert sentence in RESULTS, sentence
