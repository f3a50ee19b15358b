"""The parsed-config cache (slurmguard/config.py, docs/configuration.md): a hook that finds a
fresh <$SLURMGUARD_STATE_DIR>/config.parsed.json does not import tomllib; any change to a
config file, or a cache that is not trustworthy, means the TOML is parsed again."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers import sg_env

from slurmguard import config
from slurmguard.errors import ConfigError

PROBE = ("import json, sys\n"
         "from slurmguard import config\n"
         "cfg = config.load()\n"
         "print(json.dumps({'timeout': cfg['hooks.check_timeout'], 'budget': cfg['hooks.budget'],"
         " 'tomllib': 'tomllib' in sys.modules}))\n")


def load_in_subprocess(cfg: Path, state: Path | None) -> dict:
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    env.pop("SLURMGUARD_STATE_DIR", None)
    if state is not None:
        env["SLURMGUARD_STATE_DIR"] = str(state)
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def setup_config(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "state"
    state.mkdir()
    cfg = tmp_path / "sg.toml"
    cfg.write_text("[hooks]\ncheck_timeout = 4.0\n")
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-site.toml").write_text("[hooks]\nbudget = 30.0\n")
    return cfg, state


def test_second_load_uses_the_cache_and_an_edit_is_seen(tmp_path):
    cfg, state = setup_config(tmp_path)
    assert load_in_subprocess(cfg, state) == {"timeout": 4.0, "budget": 30.0, "tomllib": True}
    cache = state / "config.parsed.json"
    assert cache.stat().st_mode & 0o777 == 0o600
    assert sorted(json.loads(cache.read_text())["files"]) == [
        str(tmp_path / "conf.d" / "10-site.toml"), str(cfg)]
    assert load_in_subprocess(cfg, state) == {"timeout": 4.0, "budget": 30.0, "tomllib": False}
    cfg.write_text("[hooks]\ncheck_timeout = 5.0\n")  # same size, new mtime/ctime
    assert load_in_subprocess(cfg, state) == {"timeout": 5.0, "budget": 30.0, "tomllib": True}
    assert load_in_subprocess(cfg, state)["tomllib"] is False
    (tmp_path / "conf.d" / "10-site.toml").unlink()  # a file gone from conf.d
    assert load_in_subprocess(cfg, state) == {"timeout": 5.0, "budget": 20.0, "tomllib": False}
    assert list(json.loads(cache.read_text())["files"]) == [str(cfg)]


def test_no_state_dir_no_cache(tmp_path):
    """Admin commands run without the entry scripts' $SLURMGUARD_STATE_DIR: nothing written."""
    cfg, state = setup_config(tmp_path)
    assert load_in_subprocess(cfg, None)["tomllib"] is True
    assert load_in_subprocess(cfg, tmp_path / "missing")["tomllib"] is True
    assert list(state.iterdir()) == [] and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("spoil", ["garbage", "group-readable", "stale-key", "wrong-version",
                                   "not-a-dict"])
def test_an_untrusted_or_stale_cache_is_ignored(tmp_path, spoil):
    cfg, state = setup_config(tmp_path)
    env = {"SLURMGUARD_STATE_DIR": str(state)}
    config.load(str(cfg), env=env)
    cache = state / "config.parsed.json"
    doc = json.loads(cache.read_text())
    entry = doc["files"][str(cfg)]
    entry["data"] = {"hooks": {"check_timeout": 99.0}}  # what a spoiled cache would claim
    if spoil == "stale-key":
        entry["key"][2] += 1
    elif spoil == "wrong-version":
        doc["version"] = 0
    elif spoil == "not-a-dict":
        entry["data"] = [1, 2]
    cache.write_text("{not json" if spoil == "garbage" else json.dumps(doc))
    if spoil == "group-readable":
        cache.chmod(0o640)
    assert config.load(str(cfg), env=env)["hooks.check_timeout"] == 4.0
    assert json.loads(cache.read_text())["files"][str(cfg)]["data"] == {
        "hooks": {"check_timeout": 4.0}}  # and it was rewritten from the file


def test_the_cache_is_trusted_like_the_state_dir(tmp_path):
    """Ours, mode 0600, key matching: the cached data is what load sees (validated as usual)."""
    cfg, state = setup_config(tmp_path)
    env = {"SLURMGUARD_STATE_DIR": str(state)}
    config.load(str(cfg), env=env)
    cache = state / "config.parsed.json"
    doc = json.loads(cache.read_text())
    doc["files"][str(cfg)]["data"] = {"hooks": {"check_timeout": 7.0}}
    cache.write_text(json.dumps(doc))
    assert config.load(str(cfg), env=env)["hooks.check_timeout"] == 7.0
    doc["files"][str(cfg)]["data"] = {"hooks": {"check_timeout": "soon"}}
    cache.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"hooks\.check_timeout"):
        config.load(str(cfg), env=env)


def test_groups_survive_the_cache(tmp_path):
    """load() takes [[group]] out of what it read: the cache keeps what the file said."""
    state = tmp_path / "state"
    state.mkdir()
    cfg = tmp_path / "sg.toml"
    cfg.write_text('[hooks]\ncheck_timeout = 4.0\n[[group]]\nnodes = "n[1-2]"\n'
                   'hooks.check_timeout = 2.0\n')
    env = {"SLURMGUARD_STATE_DIR": str(state)}
    for _ in range(3):
        c = config.load(str(cfg), env=env)
        assert c.for_node("n2")["hooks.check_timeout"] == 2.0
        assert c.for_node("n3")["hooks.check_timeout"] == 4.0


def test_bad_toml_is_still_a_one_line_error_and_caches_nothing(tmp_path):
    cfg, state = setup_config(tmp_path)
    env = {"SLURMGUARD_STATE_DIR": str(state)}
    cfg.write_bytes(b"[hooks]\ncheck_timeout = \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"sg\.toml: not valid TOML: not UTF-8"):
        config.load(str(cfg), env=env)
    cfg.write_text("[hooks\n")
    with pytest.raises(ConfigError, match=r"not valid TOML"):
        config.load(str(cfg), env=env)
    cfg.write_text("[hooks]\ncheck_timeout = 1979-05-27\n")  # a date: JSON cannot hold it
    with pytest.raises(ConfigError, match=r"hooks\.check_timeout"):
        config.load(str(cfg), env=env)
    assert list(state.iterdir()) == []


def test_a_missing_config_after_a_cached_load_is_an_error(tmp_path):
    cfg, state = setup_config(tmp_path)
    env = {"SLURMGUARD_STATE_DIR": str(state)}
    config.load(str(cfg), env=env)
    os.unlink(cfg)
    with pytest.raises(ConfigError, match="no such config file"):
        config.load(str(cfg), env=env)


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
    cache = config._ParseCache(str(tmp_path))
    cache.put(f, os.stat(f), data)
    cache.save()
    assert same(data, config._ParseCache(str(tmp_path)).get(f, os.stat(f)))
