"""The README starts with its two set-up commands; its first screen names every capability, and
its documentation list every page.

A newcomer reads the top of README.md and nothing else: each capability page of docs/ must be
linked from the feature list, and that list must end within the first screen."""

from __future__ import annotations

import re

from support.helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
FIRST_SCREEN = 50  # lines of an 80x50 terminal
# Pages that describe how to install, test or look up slurmguard, not something it does.
REFERENCE = {
    "install.md": "setup and doctor (the README's install paragraph links it)",
    "architecture.md": "where the code lives",
    "testing.md": "the test suite",
    "docker.md": "the dockerized test cluster",
    "reliability.md": "test results under load and faults",
    "scale.md": "measurements at 128 to 1,024 nodes",
    "fleet-day.md": "a measured day of faults, with and without slurmguard",
    "cli.md": "generated from --help",
    "configuration.md": "the config file",
    "slurm.md": "the Slurm adapter, inside every capability",
}


def _pages() -> set[str]:
    return {p.name for p in (REPO / "docs").glob("*.md")}


def _features() -> tuple[str, int]:
    lines = README.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("slurmguard keeps GPU time"))
    end = next(i for i in range(start + 1, len(lines))
               if lines[i].strip() == "" and not lines[i + 1].startswith(("- ", "  ")))
    return "\n".join(lines[start:end]), end


def _linked(text: str) -> set[str]:
    return set(re.findall(r"\]\(docs/([a-z-]+\.md)\)", text))


def test_every_capability_page_is_in_the_first_screens_feature_list():
    features, end = _features()
    assert end <= FIRST_SCREEN, f"the feature list ends on line {end}"
    missing = sorted(_pages() - set(REFERENCE) - _linked(features))
    assert missing == [], f"capability pages the README's feature list does not link: {missing}"


def test_the_documentation_list_links_every_page():
    docs_list = README.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    assert sorted(_pages() - _linked(docs_list)) == []


def test_reference_pages_exist():
    assert set(REFERENCE) <= _pages()


def test_the_readme_starts_with_the_two_setup_commands():
    # The brief's rule: the first thing under the title is the block of exactly two commands,
    # install-and-run, then the whole test suite (.ci/run calls the same pytest).
    lines = README.splitlines()
    assert lines[0] == "# slurmguard" and lines[1] == "" and lines[2] == "```", lines[:3]
    block = lines[3:lines.index("```", 3)]
    assert len(block) == 2 and block[1] == "bash .ci/run", block
    assert block[0].startswith("apt-get update && ") and block[0].endswith(" check"), block[0]
