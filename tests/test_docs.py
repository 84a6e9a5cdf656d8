"""The documentation keeps up with the code: every policy has a system page that
lists its options, and the README stays a short front page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corral.policies import POLICIES, policy_options
from corral.policies.rounds.planners import ROUND_PLANNERS

ROOT = Path(__file__).parent.parent
SYSTEMS = ROOT / "docs" / "systems"


def _pages() -> dict[str, str]:
    return {p.stem: p.read_text() for p in SYSTEMS.glob("*.md")}


def test_every_policy_has_a_system_page():
    pages = _pages()
    for name in [*POLICIES, *ROUND_PLANNERS]:
        if name == "gavel":  # an alias of gavel-max-min-fairness
            continue
        assert any(f"**`{name}`**" in text for text in pages.values()), name


@pytest.mark.parametrize("name", [n for n in [*POLICIES, *ROUND_PLANNERS] if n != "gavel"])
def test_a_system_page_lists_every_option_with_its_default(name):
    page = next(text for text in _pages().values() if f"**`{name}`**" in text)
    cls = POLICIES.get(name) or ROUND_PLANNERS[name]
    section = page.split(f"`{name}`:", 1)[1] if policy_options(cls) else page
    for option in policy_options(cls):  # type: ignore[arg-type]
        assert re.search(rf"\| `{option}` \| `[^`]*` \|", section), (name, option)


def test_each_system_page_has_the_sections_a_reader_looks_for():
    for slug, text in _pages().items():
        for heading in ("## The paper", "## Where corral departs from it", "## Validation"):
            assert heading in text, (slug, heading)


def test_the_nav_lists_every_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    docs = ROOT / "docs"
    for page in docs.rglob("*.md"):
        rel = page.relative_to(docs).as_posix()
        if not rel.startswith("validation/data/"):
            assert f" {rel}" in nav, rel


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 120
    assert "make demo" in readme and "make test" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


def test_the_validation_index_quotes_the_figures_of_the_pages_it_links():
    """Each ratio (``3.12x``) a row of the validation index gives is on a page the row
    links, or, for a ratio the index works out, the two figures it is made of are
    (the index drifted from its pages before: a stale ratio, a wrong "highest")."""
    import re

    folder = ROOT / "docs" / "validation"
    index = (folder / "README.md").read_text()
    worked_out = {
        "1.65": ("themis-allox.md", "| themis | 27.6 ", "| gavel-finish-time-fairness | 16.7 ")
    }
    checked = 0
    for row in index.splitlines():
        pages = set(re.findall(r"\]\(([\w.-]+\.md)", row)) if row.startswith("| ") else set()
        text = "".join((folder / p).read_text() for p in pages if (folder / p).exists())
        for ratio in set(re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)x\b", row)):
            checked += 1
            if ratio in worked_out:
                page, *cells = worked_out[ratio]
                assert all(cell in (folder / page).read_text() for cell in cells), ratio
                continue
            assert ratio in text, f"the index's {ratio}x is on none of {sorted(pages)}"
    assert checked > 20
    gavel = (folder / "gavel-continuous.md").read_text()
    rows = [line for line in gavel.splitlines() if re.match(r"\| [\d.]+ \| 0\.\d+ \|", line)]
    ratios = [float(re.search(r"\*\*([\d.]+)x\*\*", line)[1]) for line in rows]
    best, last = max(ratios), ratios[-1]
    assert f"**{best:.2f}x" in index and "the highest ratio of the eight rates" in index
    assert best != last and f"gives {last:.2f}x" in index  # (the highest rate's is not it)
