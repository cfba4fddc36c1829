"""The README and the documentation pages point at files that exist; the review guide's walkthrough is the
README's (which tests/test_readme_review.py runs). `make docs` (in CI) builds the site with --strict."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if "://" not in t]


def test_every_relative_link_in_the_readme_exists() -> None:
    missing = [t for t in _relative_links((ROOT / "README.md").read_text()) if not (ROOT / t).exists()]
    assert missing == []


def test_every_page_in_the_site_navigation_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for v in node.values() for p in pages(v)]
        if isinstance(node, list):
            return [p for v in node for p in pages(v)]
        return []

    listed = pages(config["nav"])
    assert listed and [p for p in listed if not (ROOT / "docs" / p).is_file()] == []


def test_the_review_guide_shows_the_readmes_tested_walkthrough() -> None:
    from tests.test_readme_review import review_block

    guide = (ROOT / "docs" / "guide" / "review.md").read_text()
    block = re.search(r"```bash\n(.*?)```", guide, re.S)
    assert block is not None
    assert [line for line in block.group(1).splitlines() if line.strip()] == review_block()


def test_every_committed_result_states_its_scored_and_tuning_split() -> None:
    import json

    paths = sorted((ROOT / "docs" / "results").rglob("result.json"))
    assert len(paths) >= 20
    for path in paths:
        data = json.loads(path.read_text())
        assert data.get("scored_split") and data.get("tuned_on"), path


def test_every_pilot_page_says_which_split_its_figures_come_from() -> None:
    pages = [p for p in sorted((ROOT / "docs" / "pilots").glob("*.md")) if p.name != "README.md"]
    assert pages
    for page in pages:
        text = page.read_text()
        assert "**Splits.**" in text and "no figure here comes from" in text, page
