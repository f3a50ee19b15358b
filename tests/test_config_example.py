"""etc/slurmguard.toml.example lists every key the config knows, at its default, and loads."""

from __future__ import annotations

import re

from support.helpers import REPO

from slurmguard import config
from slurmguard.install.config_example import REGENERATE, render, sections

EXAMPLE = REPO / "etc" / "slurmguard.toml.example"
KEY_LINE = re.compile(r"^#([a-z_][a-z0-9_]*) = ")


def test_example_is_current() -> None:
    assert EXAMPLE.read_text() == render(), (
        f"etc/slurmguard.toml.example is stale (a config key changed). Regenerate it with:\n\n"
        f"    {REGENERATE}\n")


def test_example_lists_every_key_of_the_config() -> None:
    listed, section = set(), ""
    for line in EXAMPLE.read_text().splitlines():
        if line.startswith("[") and not line.startswith("[["):
            section = line.strip("[]")
        m = KEY_LINE.match(line)
        if m:
            listed.add(f"{section}.{m.group(1)}")
    known = {f"{name}.{key}" for name, fields in sections(config.SCHEMA) for key, _ in fields}
    assert known and listed == known, (sorted(known - listed), sorted(listed - known))


def test_example_loads_as_is_and_with_every_key_uncommented(tmp_path) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text(EXAMPLE.read_text())
    assert config.load(str(plain)).as_dict() == config.defaults()
    on = tmp_path / "all.toml"
    on.write_text("\n".join(KEY_LINE.sub(lambda m: m.group(1) + " = ", ln)
                            for ln in EXAMPLE.read_text().splitlines()) + "\n")
    assert "\nbudget = 20.0\n" in on.read_text()
    assert config.load(str(on)).as_dict() == config.defaults()
