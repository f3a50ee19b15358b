"""The parsed-config cache (slurmguard/config.py, docs/configuration.md): a hook that finds a fresh
`.<name>.parsed.json` beside its config does not import tomllib; any change to the file, or a
cache that is not trustworthy, means the TOML is parsed again."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import sg_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.errors import ConfigError

PROBE = ("import json, sys\n"
         "from slurmguard import config\n"
         "cfg = config.load()\n"
         "print(json.dumps({'timeout': cfg['hooks.check_timeout'], "
         "'tomllib': 'tomllib' in sys.modules}))\n")


def load_in_subprocess(cfg: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", PROBE], env=sg_env(SLURMGUARD_CONFIG=str(cfg)),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_second_load_uses_the_cache_and_an_edit_is_seen(tmp_path):
    cfg = tmp_path / "sg.toml"
    cfg.write_text("[hooks]\ncheck_timeout = 4.0\n")
    assert load_in_subprocess(cfg) == {"timeout": 4.0, "tomllib": True}
    cache = tmp_path / ".sg.toml.parsed.json"
    assert cache.exists() and cache.stat().st_mode & 0o777 == 0o600
    assert load_in_subprocess(cfg) == {"timeout": 4.0, "tomllib": False}  # from the cache
    cfg.write_text("[hooks]\ncheck_timeout = 5.0\n")  # same size, new mtime/ctime
    assert load_in_subprocess(cfg) == {"timeout": 5.0, "tomllib": True}
    assert load_in_subprocess(cfg) == {"timeout": 5.0, "tomllib": False}


@pytest.mark.parametrize("spoil", ["garbage", "group-writable", "stale-key", "wrong-version",
                                   "not-a-dict"])
def test_an_untrusted_or_stale_cache_is_ignored(tmp_path, spoil):
    cfg = tmp_path / "sg.toml"
    cfg.write_text("[hooks]\ncheck_timeout = 4.0\n")
    config.load(str(cfg))
    cache = tmp_path / ".sg.toml.parsed.json"
    doc = json.loads(cache.read_text())
    doc["data"] = {"hooks": {"check_timeout": 99.0}}  # what a spoiled cache would claim
    if spoil == "stale-key":
        doc["key"][2] += 1
    elif spoil == "wrong-version":
        doc["version"] = 0
    elif spoil == "not-a-dict":
        doc["data"] = [1, 2]
    cache.write_text("{not json" if spoil == "garbage" else json.dumps(doc))
    if spoil == "group-writable":
        cache.chmod(0o620)
    assert config.load(str(cfg))["hooks.check_timeout"] == 4.0


def test_the_cache_itself_is_trusted_like_the_config(tmp_path):
    """Same owner, no group/other write, key matching: the cache's data is what load sees."""
    cfg = tmp_path / "sg.toml"
    cfg.write_text("[hooks]\ncheck_timeout = 4.0\n")
    config.load(str(cfg))
    cache = tmp_path / ".sg.toml.parsed.json"
    doc = json.loads(cache.read_text())
    doc["data"] = {"hooks": {"check_timeout": 7.0}}
    cache.write_text(json.dumps(doc))
    cache.chmod(0o600)
    assert config.load(str(cfg))["hooks.check_timeout"] == 7.0


def test_bad_toml_is_still_a_one_line_error_and_caches_nothing(tmp_path):
    cfg = tmp_path / "sg.toml"
    cfg.write_bytes(b"[hooks]\ncheck_timeout = \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"sg\.toml: not valid TOML: not UTF-8"):
        config.load(str(cfg))
    cfg.write_text("[hooks\n")
    with pytest.raises(ConfigError, match=r"not valid TOML"):
        config.load(str(cfg))
    cfg.write_text("[hooks]\ncheck_timeout = 1979-05-27\n")  # a date: JSON cannot hold it
    with pytest.raises(ConfigError, match=r"hooks\.check_timeout"):
        config.load(str(cfg))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sg.toml"]


def test_a_missing_config_after_a_cached_load_is_an_error(tmp_path):
    cfg = tmp_path / "sg.toml"
    cfg.write_text("[hooks]\ncheck_timeout = 4.0\n")
    config.load(str(cfg))
    os.unlink(cfg)
    with pytest.raises(ConfigError, match="no such config file"):
        config.load(str(cfg))


scalars = (st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=True) | st.booleans()
           | st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(st.dictionaries(st.text(max_size=8), values, max_size=6))
def test_property_cached_data_equals_what_was_parsed(tmp_path, data):
    """Everything TOML parses to (dates aside) survives the JSON cache with its type: ints stay
    ints, floats floats (inf and nan included), bools bools."""
    f = tmp_path / "any.toml"
    f.write_text("")
    config._save_parse(f, os.stat(f), data)
    assert same(data, config._cached_parse(f))
