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
