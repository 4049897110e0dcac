"""params.yaml validation: bad input fails before any work, naming the key and the fix."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from populora.config import ParamsError, load_params, members_of_arm, parse_params
from tests.conftest import REPO, TINY_PARAMS


def test_repository_params_are_valid():
    params = load_params(REPO / "params.yaml")
    assert params.population.teachers >= 1 and params.dag.generations >= 1


def test_tiny_params_are_valid():
    from populora.config import merge

    parse_params(merge(yaml.safe_load((REPO / "params.yaml").read_text()), yaml.safe_load(TINY_PARAMS.read_text())))


@pytest.mark.parametrize(
    "raw, key, hint",
    [
        ({"population": {"students": 0}}, "population.students", "at least one student"),
        ({"propose": {"temperature": "hot"}}, "propose.temperature", "valid number"),
        ({"propose": {"tempreature": 0.5}}, "propose.tempreature", "unknown key"),
        ({"dag": {"generations": 1.5}}, "dag.generations", "whole number"),
        ({"dag": {"arms": ["population", "population"]}}, "dag.arms", "once"),
        ({"lora": {"rank": 0}}, "lora.rank", "greater than or equal to 1"),
        ({"pairing": {"strategy": "elo"}}, "pairing.strategy", "pfsp"),
        ({"evolve": {"operators": {}}}, "evolve.operators", "positive weight"),
        ({"surprise": 1}, "surprise", "unknown key"),
        ({"evolve": {"operators": {"teleport": 1.0}}}, "evolve.operators", "unknown operators"),
    ],
)
def test_bad_values_name_the_key(raw, key, hint):
    with pytest.raises(ParamsError) as error:
        parse_params(raw)
    assert key in str(error.value) and hint in str(error.value)


def test_replacing_a_whole_subpopulation_is_refused():
    with pytest.raises(ParamsError, match="evolve.replace"):
        parse_params({"population": {"teachers": 2, "students": 3}, "evolve": {"replace": 2}})


def test_not_a_mapping():
    with pytest.raises(ParamsError, match="mapping"):
        parse_params(["a"])


def test_cli_reports_and_exits_nonzero(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump({"population": {"students": 0}}))
    result = subprocess.run([sys.executable, "-m", "populora.config", str(bad)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "population.students" in result.stderr


def test_overlay_merges_and_validates(tmp_path):
    result = subprocess.run([sys.executable, "-m", "populora.config", str(REPO / "params.yaml"), "--overlay", str(TINY_PARAMS)],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    merged = yaml.safe_load(result.stdout)
    assert merged["lora"]["rank"] == 4 and merged["ratings"]["mu"] == 25.0


def test_arm_slots():
    params = parse_params({"population": {"teachers": 3, "students": 2}})
    assert members_of_arm(params, "population") == {"teachers": ["teacher0", "teacher1", "teacher2"],
                                                     "students": ["student0", "student1"]}
    assert members_of_arm(params, "baseline") == {"teachers": ["solo"], "students": ["solo"]}


def test_operator_names_match_the_registry():
    from populora.config import KNOWN_OPERATORS
    from populora.population.operators import CROSSOVERS, MUTATIONS

    assert set(KNOWN_OPERATORS) == set(MUTATIONS) | set(CROSSOVERS)


def test_config_defaults_are_params_yaml():
    """One source for every default: the config model's defaults are exactly params.yaml's values,
    so a stage or library call that falls back on a default gets what the user reads in params.yaml."""
    from populora.config import Params, load_params

    assert Params().model_dump() == load_params(REPO / "params.yaml").model_dump()


def test_params_yaml_spells_out_every_key():
    """DVC reads the keys a stage tracks from params.yaml itself, not from the config's defaults: a
    tracked key missing from the file fails `dvc exp run` ("Parameters ... are missing")."""
    import yaml

    from populora.config import Params

    raw = yaml.safe_load((REPO / "params.yaml").read_text())

    def missing(model, mapping, prefix=""):
        out = []
        for name in type(model).model_fields:
            value = getattr(model, name)
            if name not in mapping:
                out.append(prefix + name)
            elif hasattr(value, "model_fields") and isinstance(mapping[name], dict):
                out += missing(value, mapping[name], f"{prefix}{name}.")
        return out

    assert missing(Params(), raw) == []
