"""Site modules load one way for checks and burn-in measurements (slurmguard/sitemod.py):
the same one-line errors naming the key, and no site may take a built-in's name."""

from __future__ import annotations

import pytest

from slurmguard import config, sitemod
from slurmguard.burnin.measure import registry as measurements
from slurmguard.errors import ConfigError
from slurmguard.node.runner import registry as checks


def _cfg(tmp_path, text: str) -> config.Config:
    p = tmp_path / "sg.toml"
    p.write_text(text)
    return config.load(str(p), env={})


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Real importable site modules in a fresh directory on sys.path."""
    d = tmp_path / "site"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    (d / "sg_site_clash.py").write_text(
        "from slurmguard.checks.gpu import CHECKS as _g\n"
        "CHECKS = [_g[0]]\nMEASUREMENTS = {'disk-io': 'x:y'}\n")
    (d / "sg_site_broken.py").write_text("raise RuntimeError('half-installed')\n")
    (d / "sg_site_ok.py").write_text("MEASUREMENTS = {'my-bench': 'sg_site_ok:run'}\n"
                                     "def run(params):\n    return []\n")
    return d


@pytest.mark.parametrize("section,load", [("checks", checks), ("burnin", measurements)])
def test_unimportable_site_module_is_a_config_error_naming_the_key(tmp_path, site, section, load):
    cfg = _cfg(tmp_path, f'[{section}]\nsite_modules = ["sg_site_broken"]\n')
    with pytest.raises(ConfigError) as e:
        load(cfg)
    assert str(e.value) == (f"{section}.site_modules: cannot import 'sg_site_broken': "
                            "half-installed")


@pytest.mark.parametrize("section,load,what", [
    ("checks", checks, "check 'gpu-count'"),
    ("burnin", measurements, "measurement 'disk-io'"),
])
def test_a_site_may_not_take_a_built_in_name(tmp_path, site, section, load, what):
    cfg = _cfg(tmp_path, f'[{section}]\nsite_modules = ["sg_site_clash"]\n')
    with pytest.raises(ConfigError) as e:
        load(cfg)
    assert str(e.value) == f"{section}.site_modules: sg_site_clash redefines {what}"


def test_site_measurement_is_added_and_its_target_resolves(tmp_path, site):
    reg = measurements(_cfg(tmp_path, '[burnin]\nsite_modules = ["sg_site_ok"]\n'))
    assert reg["my-bench"].target == "sg_site_ok:run"
    assert sitemod.resolve(reg["my-bench"].target)({}) == []


def test_resolve_passes_objects_and_refuses_a_malformed_target():
    assert sitemod.resolve(len) is len
    with pytest.raises(ConfigError, match="expected 'module:function'"):
        sitemod.resolve("no_colon_here")
