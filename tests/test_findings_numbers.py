"""README's findings say what docs/results.md (and docs/gallery.md, made by experiments/gallery/report.py) say (issue
49, item 6): every number of a "What we found" bullet appears, exactly or as its rounding (README rounds 79.9 to 80),
in the sections of those pages that the bullet links to. A number changed by hand in either file fails here."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])[−-]?\d[\d,]*(?:\.\d+)?")
LINK = re.compile(r"\(docs/((?:results|gallery)\.md#[^)]+)\)")
PAGES = ("results.md", "gallery.md")


def numbers(text):
    """The numbers of ``text`` as (value, decimals), link targets and inline code left out."""
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets carry anchors full of digits
    text = re.sub(r"`[^`]*`", "", text)
    found = []
    for token in NUMBER.findall(text):
        plain = token.replace(",", "").replace("−", "-")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        found.append((float(plain), decimals))
    return found


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections():
    """{"page.md#anchor": the section's text} of the pages findings link to."""
    found = {}
    for page in PAGES:
        parts = re.split(r"^## (.+)$", (ROOT / "docs" / page).read_text(), flags=re.M)
        found.update({"%s#%s" % (page, slug(title)): body for title, body in zip(parts[1::2], parts[2::2])})
    return found


def bullets():
    text = (ROOT / "README.md").read_text().split("## What we found", 1)[1].split("\n## ", 1)[0]
    return [b for b in re.split(r"\n(?=\* )", text) if b.startswith("* ")]


def missing_numbers(bullet, by_anchor):
    anchors = LINK.findall(bullet)
    assert anchors, "a finding without a link to a section of docs/results.md or docs/gallery.md: %s" % bullet[:80]
    unknown = [a for a in anchors if a not in by_anchor]
    assert not unknown, "links to no section of docs/results.md or docs/gallery.md: %s" % unknown
    values = {v for a in anchors for v, _ in numbers(by_anchor[a])}
    return sorted({value for value, decimals in numbers(bullet)
                   if not any(round(abs(v), decimals) == abs(value) for v in values)})


@pytest.mark.parametrize("index", range(len(bullets())))
def test_every_number_of_a_finding_is_in_the_sections_it_links_to(index):
    bullet = bullets()[index]
    missing = missing_numbers(bullet, sections())
    assert not missing, "README's finding %r holds numbers its docs/results.md sections do not: %s" % (
        bullet[:70], missing)


def test_a_number_changed_by_hand_is_seen():
    bullet = next(b for b in bullets() if "1.6 ± 0.1" in b)
    assert missing_numbers(bullet, sections()) == []
    assert 0.9 in missing_numbers(bullet.replace("1.6 ± 0.1", "1.6 ± 0.9"), sections())
