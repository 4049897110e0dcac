"""params.yaml validation: bad input fails before any work, naming the key and the fix."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from populora.config import ParamsError, load_params, parse_params
from populora.core.topology import members_of_arm
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
        ({"population": {"students": 0}}, "population.students", "At least one student"),
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
    result = subprocess.run(
        [sys.executable, "-m", "populora.config", str(bad)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 2 and "population.students" in result.stderr


def test_overlay_merges_and_validates(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "populora.config", str(REPO / "params.yaml"), "--overlay", str(TINY_PARAMS)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    merged = yaml.safe_load(result.stdout)
    assert merged["lora"]["rank"] == 4 and merged["ratings"]["mu"] == 25.0


def test_overlays_apply_in_order(tmp_path):
    """A candidate budget's overlay on top of a study's: the later file wins key by key."""
    later = tmp_path / "later.yaml"
    later.write_text(yaml.safe_dump({"update": {"learning_rate": 0.002}}))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "populora.config",
            str(REPO / "params.yaml"),
            "--overlay",
            str(REPO / "params/learning-study.yaml"),
            "--overlay",
            str(later),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    merged = yaml.safe_load(result.stdout)
    assert merged["update"]["learning_rate"] == 0.002 and merged["update"]["steps"] == 1  # the study's key kept
    assert merged["dag"]["generations"] == 6


def test_arm_slots():
    params = parse_params({"population": {"teachers": 3, "students": 2}})
    assert members_of_arm(params, "population") == {
        "teachers": ["teacher0", "teacher1", "teacher2"],
        "students": ["student0", "student1"],
    }
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


# Params that pass a type check and would fail later (at the base_model stage, in the sampler, past the
# window) are refused before any work, by load_params and by `python -m populora.config`.


def _refused_by_cli_and_loader(tmp_path, raw: dict) -> str:
    """The error `python -m populora.config FILE` prints (exit 2); load_params raises the same."""
    from populora.config import main

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError) as error:
        load_params(path)
    import contextlib
    import io

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main([str(path)]) == 2
    assert stderr.getvalue().strip() == str(error.value)
    return str(error.value)


TRR = {"advantage_baseline": "trr++", "scale_rewards": "group"}  # AZR's TRR++ (the default is per_task)


@pytest.mark.parametrize(
    "raw, key, problem, fix",
    [
        (
            {"model": {"base_model": "./models/no-such-model"}},
            "model.base_model",
            "no folder at",
            "Fix: Give an existing local Hugging Face model folder",
        ),
        (
            {"model": {"base_model": "/no/such/model/folder"}},
            "model.base_model",
            "no folder at /no/such/model/folder",
            "a Hugging Face model id such as Qwen/Qwen2.5-7B",
        ),
        ({"model": {"base_model": "models/qwen/7b"}}, "model.base_model", "no folder at", "Fix: Give an existing"),
        ({"model": {"base_model": "Qwen2.5-7B/"}}, "model.base_model", "no folder at", "Fix: Give an existing"),
        (
            {"solve": {"temperature": 1e9}},
            "solve.temperature",
            "less than or equal to 10",
            "Fix: Use 0 (greedy) or a temperature from 0.01 to 10",
        ),
        ({"propose": {"temperature": 0.001}}, "propose.temperature", "neither greedy", "Fix: Use 0 (greedy)"),
        (
            {"control": {"temperature": 0.001}},
            "control.temperature",
            "neither greedy",
            "Fix: Use a temperature from 0.01 to 2",
        ),
        (
            {"pairing": {"temperature": 50}},
            "pairing.temperature",
            "less than or equal to 10",
            "Fix: Use a PFSP temperature",
        ),
        (
            {"solve": {"max_new_tokens": 100000000}},
            "solve.max_new_tokens",
            "less than or equal to 32768",
            "Fix: Give the new tokens an answer needs, at most 32768",
        ),
        (
            {"bench": {"cruxeval": {"max_new_tokens": 100000000}}},
            "bench.cruxeval.max_new_tokens",
            "less than or equal to 32768",
            "at most 32768",
        ),
        (
            {"solve": {"max_new_tokens": 1024}},
            "solve.max_new_tokens",
            "leave no room for the prompt in update.max_seq_len = 1024",
            "Fix: Lower solve.max_new_tokens below update.max_seq_len (1024)",
        ),
        (
            {"propose": {"max_new_tokens": 4096}, "update": {"max_seq_len": 2048}},
            "propose.max_new_tokens",
            "(got 4096)",
            "Fix: Lower propose.max_new_tokens below update.max_seq_len (2048)",
        ),
        (
            {"sampler": {"engine": "vllm"}, "bench": {"max_new_tokens": 2048}},
            "bench.max_new_tokens",
            "vLLM's max_model_len",
            "Fix: Lower bench.max_new_tokens below update.max_seq_len (1024)",
        ),
    ],
)
def test_params_that_would_fail_later_are_refused(tmp_path, raw, key, problem, fix):
    message = _refused_by_cli_and_loader(tmp_path, raw)
    line = next((line for line in message.splitlines() if line.strip().startswith(f"{key}:")), None)
    assert line is not None, message
    assert problem in line and fix in line, line


def test_the_three_bad_params_of_one_file_are_reported_together(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text(
        yaml.safe_dump(
            {"model": {"base_model": "./models/missing"}, "solve": {"temperature": 1e9, "max_new_tokens": 100000000}}
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "populora.config", str(bad)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 2
    for key in ("model.base_model", "solve.temperature", "solve.max_new_tokens"):
        assert f"  {key}: " in result.stderr and "Fix: " in result.stderr.split(f"  {key}: ")[1].splitlines()[0], (
            result.stderr
        )


def test_base_model_accepts_the_embedded_model_hub_ids_and_existing_folders(tmp_path, monkeypatch):
    for value in ("smollm2", "Qwen/Qwen2.5-7B", "HuggingFaceTB/SmolLM2-135M-Instruct", "gpt2"):
        assert parse_params({"model": {"base_model": value}}).model.base_model == value
    folder = tmp_path / "project" / "models" / "base"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path / "project")  # relative paths resolve from the working directory, as the stage's
    for value in (str(folder), "models/base", "./models/base", "../project/models/base/"):
        parse_params({"model": {"base_model": value}})
    monkeypatch.setenv("HOME", str(tmp_path / "project"))
    parse_params({"model": {"base_model": "~/models/base"}})
    with pytest.raises(ParamsError, match=r"model.base_model: no folder at .*models/other"):
        parse_params({"model": {"base_model": "~/models/other"}})
    (folder / "config.json").unlink()  # a folder, but not a model's (what the base_model stage would choke on)
    with pytest.raises(ParamsError, match=r"model.base_model: .*is not a Hugging Face model folder \(no config.json"):
        parse_params({"model": {"base_model": "models/base"}})


@pytest.mark.parametrize("temperature", [0, 0.01, 1.0, 10])
def test_greedy_and_sane_temperatures_pass(temperature):
    parse_params({"propose": {"temperature": temperature}, "solve": {"temperature": temperature}})


def test_benchmark_budgets_meet_the_window_only_on_vllm():
    """The hf engine's benchmark passes are not trained and have no window of ours; vLLM's is update.max_seq_len."""
    assert parse_params({"bench": {"max_new_tokens": 4096}}).bench.max_new_tokens == 4096
    with pytest.raises(ParamsError, match="bench.max_new_tokens"):
        parse_params({"sampler": {"engine": "vllm"}, "bench": {"max_new_tokens": 4096}})
    parse_params({"sampler": {"engine": "vllm"}, "bench": {"max_new_tokens": 4096}, "update": {"max_seq_len": 8192}})


@pytest.mark.parametrize("overlay", sorted(path.name for path in (REPO / "params").glob("*.yaml")) + ["tiny"])
def test_every_overlay_still_validates(overlay):
    from populora.config import merge

    path = TINY_PARAMS if overlay == "tiny" else REPO / "params" / overlay
    raw = merge(yaml.safe_load((REPO / "params.yaml").read_text()), yaml.safe_load(path.read_text()))
    if "livecodebench" in raw["bench"].get("benchmarks", ()):  # it needs the hub or a local copy to validate
        raw["bench"]["benchmarks"] = [b for b in raw["bench"]["benchmarks"] if b != "livecodebench"]
    parse_params(raw, str(path))


def test_fix_messages_keep_acronyms_and_start_with_a_capital():
    from pydantic import BaseModel

    from populora.config import Params, _describe, field_fix, lower_first

    assert lower_first("LoRA rank r.") == "LoRA rank r." and lower_first("CPU-time limit.") == "CPU-time limit."
    assert lower_first("Sampling temperature.") == "sampling temperature." and lower_first("A cap.") == "a cap."
    for raw, key, expected in [
        ({"lora": {"rank": 0}}, "lora.rank", "Fix: Expected LoRA rank r"),
        ({"verify": {"timeout_s": 0}}, "verify.timeout_s", "Fix: Expected CPU-time limit"),
    ]:
        with pytest.raises(ParamsError) as error:
            parse_params(raw)
        assert key in str(error.value) and expected in str(error.value), str(error.value)

    def keys(model, prefix=""):
        for name in type(model).model_fields:
            value = getattr(model, name)
            nested = isinstance(value, BaseModel)
            yield from keys(value, f"{prefix}{name}.") if nested else [f"{prefix}{name}"]

    fixes = {key: _describe(key) for key in keys(Params())}
    fixes |= {f"{key} (fix)": field_fix(key) for key in fixes if field_fix(key)}
    assert len(fixes) > 100 + 15
    for key, fix in fixes.items():
        assert fix[:1].isupper(), (key, fix)
        first = fix.removeprefix("Expected ").split(maxsplit=1)[0]
        assert not (first[:1].islower() and first != first.lower() and first[1:] != first[1:].lower()), (key, fix)
    with pytest.raises(ParamsError, match=r"propose.tempreature: unknown key. Fix: Remove it"):
        parse_params({"propose": {"tempreature": 0.5}})
    with pytest.raises(
        ParamsError,
        match=r"bench.cruxeval.promt: unknown key. Fix: Remove it or use one of: "
        r"max_new_tokens, prompt, worked_examples",
    ):
        parse_params({"bench": {"cruxeval": {"promt": "official"}}})


@pytest.mark.parametrize(
    "raw, fix",
    [
        (
            {"update": {"loss_reduction": "token"}},
            "update.loss_reduction: renamed to the field's name (issue 49). Fix: Write update.loss_type: token",
        ),
        ({"update": {"importance_cap": None}}, "Fix: Write update.importance_sampling_mode: auto"),
        (
            {"update": {"importance_cap": 3.0}},
            "Fix: Write update.importance_sampling_mode: token_truncate and update.importance_sampling_cap: 3.0.",
        ),
    ],
)
def test_the_update_knobs_old_names_are_refused_with_the_new_name(raw, fix):
    """Issue 49: the update's knobs go by TRL's and verl's names; a params file with the old ones is refused,
    the fix naming the new key and value."""
    with pytest.raises(ParamsError) as error:
        parse_params(raw)
    assert fix in str(error.value), str(error.value)


def test_no_benchmark_at_all_is_refused_with_the_fix():
    """DVC fails late (bench_summary's folder was never written) on a run with no benchmark: refused first."""
    with pytest.raises(ParamsError, match=r"bench\.benchmarks.*one benchmark at least"):
        parse_params({"bench": {"benchmarks": []}})


TRR = {"advantage_baseline": "trr++", "scale_rewards": "group"}  # AZR's TRR++ (the default is per_task)


@pytest.mark.parametrize(
    "raw, key, problem, fix",
    [
        (
            {"reward": {"advantage_baseline": "per_task"}, "solve": {"samples": 1}},
            "solve.samples",
            "with one sample there are none, so every solve advantage is 0",
            "Set solve.samples to 2 or more",
        ),
        (
            {"propose": {"per_type": 1}},
            "propose.per_type",
            "every proposer advantage is 0",
            "Set propose.per_type to 2 or more.",
        ),
        (
            {"reward": {"advantage_baseline": "per_task"}, "solve": {"temperature": 0, "worked_examples": 0}},
            "solve.temperature",
            "greedy answers",
            "Sample the answers",
        ),
        (
            {"reward": TRR, "solve": {"tasks_per_type": 1, "samples": 1}},
            "solve.tasks_per_type",
            "one answer leaves each TRR++ group",
            "Set solve.tasks_per_type to 2 or more",
        ),
        (
            {"reward": TRR, "solve": {"tasks_per_type": 1, "samples": 4, "temperature": 0, "worked_examples": 0}},
            "solve.tasks_per_type",
            "identical greedy answers",
            "Set solve.tasks_per_type to 2 or more",
        ),
    ],
)
def test_settings_under_which_a_role_cannot_learn_are_refused(tmp_path, raw, key, problem, fix):
    """Issue 50: every advantage of a role 0 by construction is refused before work, naming the key and the fix."""
    message = _refused_by_cli_and_loader(tmp_path, raw)
    line = next((line for line in message.splitlines() if line.strip().startswith(f"{key}:")), None)
    assert line is not None, message
    assert problem in line and fix in line, line


@pytest.mark.parametrize(
    "raw",
    [
        {"reward": {"advantage_baseline": "per_task"}, "solve": {"samples": 2}},
        {
            "reward": {"advantage_baseline": "per_task"},
            "solve": {"temperature": 0, "worked_examples": 1},
        },  # prompts differ
        {"reward": TRR, "solve": {"tasks_per_type": 2, "samples": 1}},  # trr++: two tasks per group
        {"solve": {"tasks_per_type": 1, "samples": 2}},
        # population only, 3 teachers on 1 student x 1 slot: pairing gives the student 3 slots, a spread is possible
        {
            "dag": {"arms": ["population"]},
            "population": {"teachers": 3, "students": 1},
            "evolve": {"replace": 0},
            "reward": TRR,
            "solve": {"tasks_per_type": 1, "samples": 1},
        },
    ],
)
def test_settings_that_can_learn_pass(raw):
    parse_params(raw)


def test_params_yaml_help_is_written_once_from_the_fields(tmp_path):
    """Issue 49: a key's help is its field's description (and its fix, the field's `json_schema_extra`);
    params.yaml's comment above each key is rendered from it (`python -m workflow.render_params`) and a
    drifted comment fails here. The notes after a value are the file's own and survive a rendering."""
    from pydantic import BaseModel

    from populora.config import Params
    from workflow import render_params

    assert render_params.main(["--check", "--params", str(REPO / "params.yaml")]) == 0, (
        "params.yaml's help differs from the fields' descriptions: run python -m workflow.render_params"
    )
    text = (REPO / "params.yaml").read_text()
    drifted = tmp_path / "params.yaml"
    drifted.write_text(text.replace("  # Master random seed;", "  # The master random seed;"))
    assert render_params.main(["--check", "--params", str(drifted)]) == 1  # the check can fail
    assert render_params.render(drifted.read_text()) == text
    noted = text.replace("  steps: 1\n", "  steps: 1                 # a note on this value\n", 1)
    assert render_params.render(noted) == noted and yaml.safe_load(render_params.render(text)) == yaml.safe_load(text)

    def undocumented(model: type[BaseModel], prefix: str = "") -> list[str]:
        out = [] if model.__doc__ and model.__doc__.strip() else [f"{prefix or 'Params'} (class docstring)"]
        for name, info in model.model_fields.items():
            nested = (
                info.annotation
                if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
                else None
            )
            if nested is not None:
                out += undocumented(nested, f"{prefix}{name}.")
            elif not info.description:
                out.append(prefix + name)
        return out

    assert undocumented(Params) == []
