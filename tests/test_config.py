"""Config: layered files, groups by NodeSet, and one-line errors naming key and value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.errors import ConfigError


def write(p: Path, text: str) -> str:
    p.write_text(text)
    return str(p)


def test_defaults_without_any_file(tmp_path):
    cfg = config.load(str(write(tmp_path / "empty.toml", "")), env={})
    assert cfg["slurm.scontrol"] == "/usr/bin/scontrol"
    assert cfg["hooks.budget"] == 20.0


def test_missing_default_path_means_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "nope" / "slurmguard.toml"))
    cfg = config.load(env={})
    assert cfg.sources == []


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        config.load(str(tmp_path / "missing.toml"), env={})


def test_wrong_type_names_key_and_value(tmp_path):
    p = write(tmp_path / "a.toml", '[hooks]\nbudget = "twenty"\n')
    with pytest.raises(ConfigError) as ei:
        config.load(p, env={})
    assert str(ei.value).startswith('hooks.budget: expected a number, got "twenty"')
    assert "\n" not in str(ei.value)


def test_unknown_key_and_relative_path(tmp_path):
    with pytest.raises(ConfigError, match=r"^hooks\.budgett: unknown key"):
        config.load(write(tmp_path / "a.toml", "[hooks]\nbudgett = 1\n"), env={})
    with pytest.raises(ConfigError, match=r'^slurm\.scontrol: expected an absolute path, got "scontrol"'):
        config.load(write(tmp_path / "b.toml", '[slurm]\nscontrol = "scontrol"\n'), env={})


def test_malformed_toml_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(write(tmp_path / "a.toml", "[hooks\nbudget = 1\n"), env={})


def test_conf_d_layers_in_name_order(tmp_path):
    main = write(tmp_path / "slurmguard.toml", "[hooks]\nbudget = 10\ncheck_timeout = 4\n")
    (tmp_path / "conf.d").mkdir()
    write(tmp_path / "conf.d" / "10-a.toml", "[hooks]\nbudget = 11\n")
    write(tmp_path / "conf.d" / "20-b.toml", "[hooks]\nbudget = 12\n")
    cfg = config.load(main, env={})
    assert cfg["hooks.budget"] == 12.0 and cfg["hooks.check_timeout"] == 4.0
    assert len(cfg.sources) == 3


def test_env_var_selects_the_file(tmp_path):
    p = write(tmp_path / "x.toml", "[hooks]\nbudget = 7\n")
    assert config.load(env={"SLURMGUARD_CONFIG": p})["hooks.budget"] == 7.0


def test_groups_apply_by_nodeset(tmp_path):
    p = write(tmp_path / "g.toml", """
[hooks]
budget = 10
[[group]]
nodes = "gpu[001-004]"
hooks.budget = 30
[[group]]
nodes = "gpu004"
hooks.budget = 40
""")
    cfg = config.load(p, env={})
    assert cfg.for_node("gpu002")["hooks.budget"] == 30.0
    assert cfg.for_node("gpu004")["hooks.budget"] == 40.0
    assert cfg.for_node("cpu001")["hooks.budget"] == 10.0


def test_group_errors_name_the_group(tmp_path):
    with pytest.raises(ConfigError, match=r"group\[0\]\.nodes"):
        config.load(write(tmp_path / "a.toml", '[[group]]\nhooks.budget = 3\n'), env={})
    with pytest.raises(ConfigError, match=r"hooks\.budget: expected a number"):
        config.load(write(tmp_path / "b.toml", '[[group]]\nnodes = "n1"\nhooks.budget = "x"\n'), env={})


def test_negative_budget_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"hooks\.budget: expected a number >= 0.5, got -1"):
        config.load(write(tmp_path / "a.toml", "[hooks]\nbudget = -1\n"), env={})


toml_values = st.one_of(
    st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.lists(st.integers(0, 5), max_size=3),
)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        # a TOML basic string: control characters (U+007F too) must be escaped, the rest raw
        return '"' + "".join(c if c >= " " and c not in '"\\\x7f' else f"\\u{ord(c):04x}"
                             for c in v) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return repr(v)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["hooks.budget", "hooks.prolog", "slurm.scontrol", "hooks.drain_on_degraded",
                        "hooks.spool_max", "checks.disabled"]), toml_values)
def test_any_value_is_accepted_or_refused_with_its_key(tmp_path_factory, key, value):
    d = tmp_path_factory.mktemp("h")
    section, name = key.rsplit(".", 1)
    p = d / "c.toml"
    p.write_text(f"[{section}]\n{name} = {_toml(value)}\n")
    try:
        cfg = config.load(str(p), env={})
    except ConfigError as exc:
        assert str(exc).startswith(key + ":")
        assert "\n" not in str(exc)
    else:
        assert cfg[key] is not None


def test_unknown_key_lists_the_valid_keys_of_its_section(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[hooks]\nbudgte = 5\n")
    with pytest.raises(ConfigError) as exc:
        config.load(str(f))
    msg = exc.value.message
    assert msg.startswith("hooks.budgte: unknown key") and "valid keys of [hooks]: " in msg
    assert "budget, check, check_timeout," in msg and "\n" not in msg
    f.write_text("[checks.gpu]\nexpected = 8\n")
    with pytest.raises(ConfigError, match=r"valid keys of \[checks\.gpu\]: .*expected_count"):
        config.load(str(f))
    f.write_text("[hookz]\nbudget = 5\n")
    with pytest.raises(ConfigError, match=r"^hookz: unknown key .*valid keys of the top level: .*hooks"):
        config.load(str(f))


# One row per field kind: a value it takes (and what it becomes), and values it refuses with
# the one-line message naming key, expectation and value (config._coerce's table of kinds).
_F = config.Field
COERCE_TABLE = [
    (config.Str("x"), "abc", "abc", [(1, 'expected a string, got 1')]),
    (config.AbsPath("/x"), "/usr/bin/x", "/usr/bin/x",
     [("usr/bin/x", 'expected an absolute path, got "usr/bin/x"'), (3, "expected a string, got 3")]),
    (config.Choice("a", ["a", "b"]), "b", "b", [("c", 'expected one of a, b, got "c"')]),
    (config.Int(1, minimum=1), 3, 3, [(True, "expected an integer, got True"),
                                      (2.5, "expected an integer, got 2.5"),
                                      (0, "expected a number >= 1, got 0")]),
    (config.Float(1.0, minimum=0.5), 2, 2.0, [("2", 'expected a number, got "2"'),
                                              (False, "expected a number, got False"),
                                              (0, "expected a number >= 0.5, got 0.0")]),
    (config.Bool(False), True, True, [(1, "expected true or false, got 1")]),
    (config.StrList([]), ["a"], ["a"], [(["a", 1], "expected a list of strings, got ['a', 1]"),
                                       ("a", 'expected a list of strings, got "a"')]),
    (config.IntList([]), [1, 2], [1, 2], [([1, True], "expected a list of integers, got [1, True]")]),
    (config.Table(), {"a": "b"}, {"a": "b"}, [({"a": 1}, "expected a table of strings, got {'a': 1}")]),
    (_F("str", "", validate=lambda v: "bad" if v == "no" else None), "yes", "yes",
     [("no", 'bad, got "no"')]),
]


@pytest.mark.parametrize(("spec", "good", "becomes", "bad"), COERCE_TABLE,
                         ids=[row[0].kind for row in COERCE_TABLE])
def test_each_field_kind_takes_its_type_and_names_what_it_refuses(spec, good, becomes, bad):
    value = config._coerce(spec, good, "a.key", Path("/etc/x.toml"))
    assert value == becomes and type(value) is type(becomes)
    for value, message in bad:
        with pytest.raises(ConfigError) as ei:
            config._coerce(spec, value, "a.key", Path("/etc/x.toml"))
        assert str(ei.value) == f"a.key: {message} (in /etc/x.toml)"
