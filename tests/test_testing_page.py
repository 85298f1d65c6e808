"""docs/testing.md's count of the suite kept from going stale (issue 60, item 6): the page gives the tests a
written command passed, failed (where it says why) and skipped; together they are every test the suite collects, so a test added or
removed without the page's count moving fails here, where the whole suite runs (``python -m pytest -q``, the
README's command); a run of some files or some tests (``-k``, ``-m``) says so and skips."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COUNT = re.compile(r"\*\*([\d,]+) passed(?:, ([\d,]+) failed)?, ([\d,]+) skipped")


def page_count():
    """(passed, failed, skipped) of the page's first bold "N passed[, F failed], M skipped"."""
    found = COUNT.search((ROOT / "docs" / "testing.md").read_text())
    assert found, "docs/testing.md gives no **N passed, M skipped** of a written command"
    return tuple(int((group or "0").replace(",", "")) for group in found.groups())


def test_the_testing_page_counts_every_test_of_the_suite(request):
    config = request.config
    files = {Path(str(item.fspath)).resolve() for item in request.session.items}
    if (files != {path.resolve() for path in (ROOT / "tests").glob("test_*.py")} or config.getoption("keyword")
            or config.getoption("markexpr")):
        pytest.skip("not the whole suite: the page's count is of the whole suite")
    passed, failed, skipped = page_count()
    assert passed + failed + skipped == len(request.session.items), (
        "docs/testing.md counts %d tests (%d passed, %d failed, %d skipped); the suite has %d: run the page's "
        "command again and write what it prints" % (passed + failed + skipped, passed, failed, skipped,
                                                    len(request.session.items)))
