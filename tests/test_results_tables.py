"""docs/results.md's tables against the committed files their numbers come from (issue 49, item 6). Directly above
each table an HTML comment names those files (``<!-- numbers from: figures/a/gaps.md figures/a/summary.md -->``);
every number of the table's body rows must be in them, exactly or as its rounding to the decimals shown (the rule
of test_findings_numbers: signs, inline code and link targets left out), and every named file must be made again
from committed files by its report step (test_tables_regenerate.TABLES) or say below why it is not yet. A number
that is in no committed file is allowed one by one in UNSOURCED, with why; both lists may only shrink. Its limit:
a number is looked for anywhere in its files, unsigned, so a value that also occurs elsewhere there (a small
integer, a setting in a command line) passes by coincidence."""
import functools
import re
import subprocess
from pathlib import Path

import pytest

from test_findings_numbers import numbers, slug
from test_tables_regenerate import TABLES

ROOT = Path(__file__).resolve().parents[1]
COMMENT = re.compile(r"<!-- numbers from: ([^>]*?) -->\n\Z")

NOT_YET_REGENERATED = {
}

_Z = "where-z-carries-information-and-where-it-does-not"
UNSOURCED = {  # (section anchor, |number|): why it is in no committed file
    (_Z, 50000): "the original preset's length (6,250 epochs of 8 steps), a setting",
    (_Z, 0.001): "q(θ)'s initial scale, a setting of experiments/informative.toml",
}


def tables(text=None):
    """Every table of docs/results.md (or ``text``) as (its section's anchor, the files its comment names or
    None, its body rows)."""
    lines = (text if text is not None else (ROOT / "docs" / "results.md").read_text()).splitlines(keepends=True)
    found, anchor, i = [], None, 0
    while i < len(lines):
        if lines[i].startswith("## "):
            anchor = slug(lines[i][3:])
        if not lines[i].startswith("|"):
            i += 1
            continue
        end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines))
        named = COMMENT.search("".join(lines[:i]))
        found.append((anchor, named.group(1).split() if named else None, lines[i + 2:end]))
        i = end
    return found


@functools.lru_cache(maxsize=None)
def rounded(path, decimals):
    """|v| rounded to ``decimals`` for every number v of a committed file (a reconstruction's pixels left out of
    a .jsonl: they would match almost any small number)."""
    text = (ROOT / path).read_text()
    if path.endswith(".jsonl"):
        text = "\n".join(line for line in text.splitlines() if '"kind": "reconstruction"' not in line)
    return frozenset(round(abs(v), decimals) for v, _ in numbers(text))


def missing(named, rows):
    """The numbers (as |value|) of ``rows`` found in none of the files ``named``, exactly or rounded."""
    return sorted({abs(value) for value, decimals in numbers("".join(rows))
                   if not any(abs(value) in rounded(path, decimals) for path in named or ())})


@functools.lru_cache(maxsize=None)
def tracked():
    done = subprocess.run(["git", "ls-files", "figures"], cwd=ROOT, capture_output=True, text=True, check=True)
    return frozenset(done.stdout.split())


IDS = ["%s-%d" % (anchor[:40], i) for i, (anchor, _, _) in enumerate(tables())]


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_a_table_names_the_committed_files_its_numbers_come_from(index):
    """(a) A `<!-- numbers from: ... -->` comment right above the table, naming files tracked under figures/."""
    anchor, named, _ = tables()[index]
    assert named, "a table of #%s has no <!-- numbers from: ... --> comment right above it" % anchor
    assert [p for p in named if p not in tracked()] == [], "named but not tracked under figures/"


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_every_number_of_a_table_is_in_the_files_it_names(index):
    """(b) Every number of the table's body rows is in its named files, exactly or rounded, or in UNSOURCED."""
    anchor, named, rows = tables()[index]
    left = [v for v in missing(named, rows) if (anchor, v) not in UNSOURCED]
    assert left == [], "numbers of a table of #%s in none of %s" % (anchor, named)


def test_every_named_file_is_made_again_or_says_why_not():
    """(c) Each named file is in test_tables_regenerate.TABLES or in NOT_YET_REGENERATED, never both, and the
    list names no file that no table names: a file made again leaves the list."""
    named = {p for _, files, _ in tables() for p in files or ()}
    assert sorted(set(NOT_YET_REGENERATED) & set(TABLES)) == [], "made again now: drop from NOT_YET_REGENERATED"
    assert sorted(named - set(TABLES) - set(NOT_YET_REGENERATED)) == [], "neither made again nor said why"
    assert sorted(set(NOT_YET_REGENERATED) - named) == [], "no table names these any more"


def test_every_unsourced_allowance_is_still_needed():
    """An UNSOURCED (section, number) that its tables' files now hold, or that no table shows, is dropped."""
    needed = {(anchor, v) for anchor, named, rows in tables() for v in missing(named, rows)}
    assert sorted(set(UNSOURCED) - needed, key=str) == []


def test_a_number_changed_by_hand_is_seen():
    """(b) fails for a table whose number was edited by hand (here in memory): 693.2 made 693.9."""
    text = (ROOT / "docs" / "results.md").read_text()
    assert text.count("| 693.2 ± 14.0 |") == 1
    before = next(t for t in tables(text) if any("| 693.2 ± 14.0 |" in row for row in t[2]))
    assert missing(before[1], before[2]) == []
    after = next(t for t in tables(text.replace("| 693.2 ± 14.0 |", "| 693.9 ± 14.0 |"))
                 if any("693.9" in row for row in t[2]))
    assert missing(after[1], after[2]) == [693.9]
