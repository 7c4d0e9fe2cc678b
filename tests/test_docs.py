"""The docs a newcomer reads: a README of one screen that links every page of docs/ once, and pages whose
links and named files exist."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def links(page: Path) -> list[str]:
    """The local files a Markdown page links to, relative to the repository root."""
    return [str((page.parent / target).resolve().relative_to(ROOT)) for target in LINK.findall(page.read_text())
            if "://" not in target]


def test_the_readme_is_one_screen_and_links_every_page_of_docs_once():
    assert len(README.read_text().splitlines()) <= 120
    linked = links(README)
    pages = [str(page.relative_to(ROOT)) for page in PAGES]
    assert sorted(page for page in pages if linked.count(page) != 1) == [], "each page of docs/ linked once"


@pytest.mark.parametrize("page", [README, *PAGES, ROOT / "tests" / "README.md"], ids=lambda p: p.name)
def test_every_local_link_of_a_page_leads_to_a_file(page):
    assert [target for target in links(page) if not (ROOT / target).exists()] == []
