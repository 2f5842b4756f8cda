"""Every package folder is listed in setup.cfg, so a built wheel carries it."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_setup_cfg() -> None:
    """A subpackage missing from setup.cfg would be absent from the wheel."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = {line.strip() for line in config["options"]["packages"].splitlines() if line.strip()}
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "xsm_celery").rglob("__init__.py")
        if "migrations" not in init.parts or init.parent.name == "migrations"
    }
    found.add("xsm_celery.charts")
    missing = sorted(found - listed)
    assert not missing, f"add to setup.cfg [options] packages: {missing}"


def test_shipped_charts_are_resources() -> None:
    """xsm_celery.charts resolves to the top-level charts/ folder."""
    from importlib.resources import files

    assert (files("xsm_celery.charts") / "__init__.py").is_file()
