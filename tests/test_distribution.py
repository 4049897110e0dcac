"""The distribution name: `populora` on PyPI is another project's (same import name), so this one is
populora-pipeline, and the README says so (under "Further reading", out of the newcomer's quick start)."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_the_distribution_is_populora_pipeline_and_the_import_package_stays_populora():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["name"] == "populora-pipeline"
    assert "populora*" in project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert (REPO / "populora" / "__init__.py").is_file()


def test_the_readme_warns_that_pip_install_populora_is_another_project():
    readme = (REPO / "README.md").read_text()
    reading = readme[readme.index("## Further reading") :]
    assert "`pip install populora` installs an unrelated" in reading
    assert "`populora-pipeline`" in reading and "PYTHONPATH" in reading
