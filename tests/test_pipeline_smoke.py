"""Smoke test: the whole DAG on tiny params through Snakemake (a random tiny model, real stages).

Runs in a scratch copy of the project's entry files so results/ of the checkout is untouched,
then checks the artifacts every stage must leave, and that a second run has nothing to do
(interrupted runs continue from the last finished stage, finished ones are not redone).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from populora.core.declared import READS_ENV, unread
from tests.conftest import REPO, copy_snakemake_entry
from workflow.dag import STAGES

pytestmark = pytest.mark.slow
BIN = str(Path(sys.executable).parent)
PARAM_READS = "param_reads"  # under the project: one file per stage process (populora.core.declared.record_reads)
# Keys a stage declares and reads only on a path this tiny run does not take (stage -> keys, each with its path).
# The test fails when one of them is read after all, so the table stays exact.
VLLM_LIMITS = {"lora.rank", "update.max_seq_len"}  # the vLLM engine's sizes (sampler.engine: vllm; the vLLM lane)
DVC_THREADS = {"model.cpu_threads"}  # a chain stage's threads, read under DVC (Snakemake sets OMP_NUM_THREADS)
# the base proposing its pool (no heldout.pool_file: the DVC experiments and the SLURM run take that path)
POOL_PROPOSALS = {f"propose.{key}" for key in ("batch_size", "references", "mode", "temperature", "top_p")} | {
    "propose.max_new_tokens",
    "solve.worked_examples",
}
NOT_READ_HERE: dict[str, set[str]] = {
    "heldout_pool": VLLM_LIMITS | DVC_THREADS | POOL_PROPOSALS,
    "propose": VLLM_LIMITS | DVC_THREADS,
    "solve": VLLM_LIMITS | DVC_THREADS,
    "update": DVC_THREADS | {"dag.update_side_by_side"},  # how many update jobs share them, likewise
    "heldout": VLLM_LIMITS | DVC_THREADS | {"dag.generations"},  # the last generation, with heldout.every > 1
    # this run gives every benchmark its own limit and CRUXEval its own answer budget (bench.limits, bench.cruxeval)
    "bench_base": VLLM_LIMITS | {"bench.limit", "bench.max_new_tokens"},
    "bench": VLLM_LIMITS | {"bench.limit", "bench.max_new_tokens"},
    "bench_base_together": VLLM_LIMITS,
    "bench_together": VLLM_LIMITS,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_params_dict) -> Path:
    root = tmp_path_factory.mktemp("project")
    copy_snakemake_entry(root)
    params = dict(tiny_params_dict)
    # two update jobs of two adapters each (the default one job per adapter, four, runs in the SLURM test)
    params["dag"] = {**params["dag"], "update_jobs": 2}
    # one problem each, short answers: a math benchmark in the together job (bench.together), CRUXEval-O in a
    # job of its own; exercises export, both kinds of bench job, summary and report
    params["bench"] = {
        **params["bench"],
        "benchmarks": ["gsm8k", "cruxeval_o"],
        "limit": 1,
        "max_new_tokens": 16,
        "limits": {"cruxeval_o": 1},
        "cruxeval": {**params["bench"]["cruxeval"], "max_new_tokens": 16},
        "data_dir": str(REPO.parent / "shared" / "benchmarks"),
    }
    # a pool to score (the tiny model proposes none): 2 + 2 tasks of the committed one, 2 answers at T = 1 each
    params["heldout"] = {**params["heldout"], "pool_file": "data/pool-v3/pool.jsonl", "samples": 2}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def _snakemake(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(REPO)}
    env[READS_ENV] = str(project / PARAM_READS)  # each stage writes the params keys it read (the test below)
    # targets first: `--resources` takes every following word as a resource
    return subprocess.run(
        [f"{BIN}/snakemake", *args, "--cores", "2", "--resources", "gpu=1"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.fixture(scope="module")
def finished(project) -> Path:
    result = _snakemake(project)
    assert result.returncode == 0, result.stderr[-4000:]
    return project / "results"


def test_every_generation_leaves_its_artifacts(finished):
    for arm in ("population", "baseline"):
        for gen in ("000", "001"):
            folder = finished / arm / f"gen{gen}"
            for name in (
                "pairing.json",
                "proposals.jsonl",
                "tasks.jsonl",
                "answers.jsonl",
                "graded.jsonl",
                "rollouts.jsonl",
                "ratings.json",
                "metrics.json",
            ):
                assert (folder / name).is_file(), f"{arm}/gen{gen}/{name} missing"
            checkpoint = folder / "checkpoint"
            assert (checkpoint / "state.json").is_file() and (checkpoint / "buffer.jsonl").is_file()
            slots = ["solo"] if arm == "baseline" else ["teacher0", "teacher1", "student0", "student1"]
            for slot in slots:
                assert (checkpoint / "adapters" / slot / "adapter_model.safetensors").is_file()
        assert (finished / "dynamics" / arm / "dynamics.json").is_file()
        assert (finished / "dynamics" / arm / "family_tree.png").is_file()
        for slot in slots:  # every final member exported; those of bench.roles (students) benchmarked
            assert (finished / "models" / arm / slot / "model.json").is_file()
            benchmarked = not slot.startswith("teacher")
            assert (finished / "bench" / arm / "together" / "gsm8k" / f"{arm}-{slot}.json").is_file() == benchmarked
            assert (finished / "bench" / arm / "cruxeval_o" / f"{arm}-{slot}.json").is_file() == benchmarked
        assert not (finished / "bench" / arm / "gsm8k").exists()  # no job of its own under Snakemake
    assert (finished / "bench" / "base" / "together" / "gsm8k" / "base.json").is_file()
    summary = json.loads((finished / "metrics.json").read_text())
    assert any(key.startswith("bench.gsm8k.") for key in summary)
    assert any(key.startswith("bench.cruxeval_o.") for key in summary)
    assert (finished / "report" / "report.md").is_file()


def test_every_stage_reads_every_params_key_it_declares(finished):
    """The declared-params view refuses a read of an undeclared key (every stage of this run went through it);
    here the other direction: a key a stage declares but never reads would rerun it needlessly when it changes."""
    reads: dict[str, set[str]] = {}
    for path in (finished.parent / PARAM_READS).glob("*.json"):
        row = json.loads(path.read_text())
        reads.setdefault(row["stage"], set()).update(row["reads"])
    assert set(reads) == {stage.name for stage in STAGES}, "a stage of the DAG did not run through the view"
    found = {stage.name: unread(stage.params, reads[stage.name]) for stage in STAGES}
    found = {name: set(keys) for name, keys in found.items() if keys}
    assert found == NOT_READ_HERE, f"declared but unread (stage -> keys): {found}"


def test_metrics_report_what_the_issue_asks(finished):
    metrics = json.loads((finished / "population" / "gen000" / "metrics.json").read_text())
    for key in (
        "code_o.proposals",
        "code_o.validity_rate",
        "code_f.solve_rate",
        "teacher_reward_mean",
        "student_reward_mean",
        "tokens.teacher0/propose",
        "optimizer_steps.student0",
        "rating.teacher0.mu",
        "validity_rate",
        "solve_rate",
    ):
        assert key in metrics, key
    pairing = json.loads((finished / "population" / "gen000" / "pairing.json").read_text())
    for teacher, row in pairing["counts"].items():
        for student, count in row.items():
            assert metrics[f"pairing.{teacher}.{student}"] == count
    # the DVC plots table: every row has every key (DVC's renderer fails on ragged rows)
    rows = json.loads((finished / "dynamics" / "population" / "dynamics.json").read_text())
    assert len({tuple(row) for row in rows}) == 1 and "pairing.teacher0.student0" in rows[0]
    baseline = json.loads((finished / "baseline" / "gen000" / "metrics.json").read_text())
    assert "tokens.solo/propose" in baseline and "tokens.solo/solve" in baseline


def test_evolution_happened_on_schedule(finished):
    state = json.loads((finished / "population" / "gen001" / "checkpoint" / "state.json").read_text())
    children = [e for e in state["lineage"] if e["operator"] != "init"]
    assert len(children) == 2  # interval 2, one teacher and one student replaced after gen001
    assert {e["generation"] for e in children} == {2}


def test_benchmarks_see_trained_members_never_a_fresh_child(finished):
    state = json.loads((finished / "population" / "gen001" / "checkpoint" / "state.json").read_text())
    replaced = {e["slot"]: e for e in state["lineage"] if e["operator"] != "init"}
    assert replaced  # evolution ran after the final generation (so an extended run continues the same way) ...
    for slot, event in replaced.items():
        exported = json.loads((finished / "models" / "population" / slot / "model.json").read_text())
        assert exported["member"] == event["replaces"] != event["child_id"]  # ... but what is benchmarked was trained
        trained = finished / "population" / "gen001" / "trained" / "adapters" / slot / "adapter_model.safetensors"
        adapter = finished / "models" / "population" / slot / "adapter" / "adapter_model.safetensors"
        assert adapter.read_bytes() == trained.read_bytes()


def test_evolution_crosses_carries_moments_and_records_how_sure_it_was(finished):
    evolution = json.loads((finished / "population" / "gen001" / "evolved" / "evolution.json").read_text())
    assert any(len(e["parents"]) == 2 for e in evolution["events"])  # the default mix and seed: crossovers
    for event in evolution["events"]:
        assert 0.0 <= event["confidence"] <= 1.0 and isinstance(event["within_noise"], bool)
        assert len(event["distance_to_parents"]) == len(event["parents"])
        parent = (
            finished / "population" / "gen001" / "trained" / "optimizer" / f"{event['parent_slots'][0]}.safetensors"
        )
        moments = finished / "population" / "gen001" / "checkpoint" / "optimizer" / f"{event['slot']}.safetensors"
        # the child's moments are its first parent's, under its own slot's names (a tiny run's parent may
        # have taken no step: then it has none, and the child starts fresh as the parent would)
        expected = {k.replace(f".{event['parent_slots'][0]}.", f".{event['slot']}.") for k in load_file(str(parent))}
        assert event["moments"] == ("carried" if expected else "fresh")
        assert set(load_file(str(moments))) == expected if moments.is_file() else not expected
    for rows in evolution["rankings"].values():
        assert all(row["error"] is not None and "rewards" in row for row in rows)


def test_the_pool_and_the_benchmarks_score_the_same_members(finished):
    """The held-out curve's last point and the benchmarks measure the members as trained; a child born
    after the generation is its own point."""
    scores = json.loads((finished / "population" / "gen001" / "heldout.json").read_text())
    for slot in ("student0", "student1"):
        exported = json.loads((finished / "models" / "population" / slot / "model.json").read_text())
        assert scores["members"][slot] == exported["member"]
        assert len(scores["verdicts"][slot]) == 4 and len(scores["pass_rates"][slot]) == 4
    state = json.loads((finished / "population" / "gen001" / "checkpoint" / "state.json").read_text())
    born = {e["slot"]: e for e in state["lineage"] if e["operator"] != "init" and e["role"] == "students"}
    assert set(scores["born"]) == set(born)
    for slot, child in scores["born"].items():
        assert child["member"] == born[slot]["child_id"] != scores["members"][slot] and len(child["verdicts"]) == 4
    rows = json.loads((finished / "dynamics" / "population" / "dynamics.json").read_text())
    for key in (
        "diversity.students.weight_distance",
        "diversity.teachers.weight_distance",
        "diversity.students.verdict_agreement",
        "heldout.students.pass_rate",
    ):
        assert rows[-1][key] is not None, key


def test_games_are_only_this_generations_paired_attempts(finished):
    for gen in ("000", "001"):
        folder = finished / "population" / f"gen{gen}"
        stats = json.loads((folder / "reward_stats.json").read_text())
        tasks = {json.loads(line)["task_id"] for line in (folder / "tasks.jsonl").read_text().splitlines()}
        graded = [json.loads(line) for line in (folder / "graded.jsonl").read_text().splitlines()]
        pairing = json.loads((folder / "pairing.json").read_text())["counts"]
        expected = sum(
            a["task_id"] in tasks and pairing[a["teacher"]][a["student"]] > 0 for a in graded if a.get("teacher")
        )
        assert stats["games"] == expected == sum(stats["games_per_teacher"].values())
        assert all(a["teacher"] is None for a in graded if a.get("task_origin") == "buffer")
        assert stats["same_program_example_answers"] == 0


def test_rows_match_one_to_one(finished):
    folder = finished / "population" / "gen000"
    proposals = (folder / "proposals.jsonl").read_text().splitlines()
    tasks = (folder / "tasks.jsonl").read_text().splitlines()
    assert len(proposals) == len(tasks) == 2 * 3 * 2  # 2 teachers x 3 types x per_type 2
    assert [json.loads(a)["task_id"] for a in proposals] == [json.loads(b)["task_id"] for b in tasks]


def test_second_run_has_nothing_to_do(finished, project):
    result = _snakemake(project, "-n")
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr


def test_jobs_are_timed_and_the_snakemake_report_holds_the_figures(finished, project):
    """Every job leaves a benchmark TSV; report.md tabulates them per stage; `snakemake --report`
    builds one self-contained HTML holding the report's figures, report.md and the family trees."""
    import re

    from workflow.dag import STAGES

    timed = sorted((finished / "timings").glob("*/*.tsv"))
    assert {p.parent.name for p in timed} == {stage.name for stage in STAGES}
    text = (finished / "report" / "report.md").read_text()
    table = text.split("## Per-job timings", 1)[1]
    rows = {
        stage: (int(jobs), float(total), float(med))
        for stage, jobs, total, med in re.findall(
            r"^\| `(\w+)` \| (\d+) \| (\d+\.\d) \| (\d+\.\d) \| (?:\d+|-) \|$", table, flags=re.M
        )
    }
    # the report is timed when it ends, after it wrote the table: every other stage is in it
    assert set(rows) == {stage.name for stage in STAGES} - {"report"}
    assert rows["propose"][0] == 4 and rows["update"][0] > 0  # 2 arms x 2 generations
    everything = re.search(r"^\| \*\*all stages\*\* \| (\d+) \| (\d+\.\d) \| (\d+\.\d) \| (\d+) \|$", table, flags=re.M)
    assert everything and int(everything[1]) == len(timed) - 1 and float(everything[2]) > 1.0
    # MiB: a Python process with torch loaded, as Snakemake sampled it (0 or none would say the timings were never
    # sampled); under the suite's stage host (tests/conftest.py) the stage's own peak that the host reported beside
    # the TSV (Snakemake samples the stand-in there, a bare Python process of ~13 MiB)
    assert int(everything[4]) > 50
    if os.environ.get("POPULORA_STAGE_HOST"):
        assert {p.parent.name for p in (finished / "timings").glob("*/*.usage.json")} >= {"propose", "update"}

    result = _snakemake(project, "--report", "report.html")
    assert result.returncode == 0, result.stderr[-4000:]
    html = (project / "report.html").read_text()
    shown = [
        f"results/report/{name}"
        for name in ("report.html", "report.md", "benchmarks.png", "dynamics.png", "complexity.png", "ratings.png")
    ]
    shown += [f"results/dynamics/{arm}/family_tree.png" for arm in ("population", "baseline")]
    for path in shown:
        assert f'"{path}": {{"name": ' in html, path  # a result entry, with its caption
    assert html.count("data:image/png") >= 6  # the figures themselves, embedded
    assert "The family tree of arm <strong>baseline</strong>" in html  # captions rendered per wildcard
    assert "Per-job timings</h2>" in (finished / "report" / "report.html").read_text()


def _digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix != ".log"
    }


def test_interrupted_run_resumes_to_the_same_artifacts(finished, project, tmp_path_factory):
    """Interrupt a run in the middle of a generation, re-run the same command: the results equal
    those of the uninterrupted run (same seed), stage for stage. (After a hard kill -9 or a power
    loss, Snakemake first needs `snakemake --unlock`.)"""
    import signal
    import time

    other = tmp_path_factory.mktemp("resumed")
    for name in ("Snakefile", "workflow", "profiles", "params.yaml", "data"):
        src = project / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, other / name)
    target = "results/dynamics/population/dynamics.json"
    first = _snakemake(other, "results/population/gen001/rollouts.jsonl")  # stops mid-generation 1
    assert first.returncode == 0, first.stderr[-2000:]
    # the live history exists during the run: generation 0's row, before any dynamics stage ran
    history = other / "results/dynamics/population/dynamics.json"
    assert [row["generation"] for row in json.loads(history.read_text())] == [0]
    assert not (other / "results/dynamics/population/summary.json").exists()
    assert json.loads((other / "results/progress.json").read_text())["population.generation"] == 0
    # one row per optimizer step so far (the random tiny model may earn no signal, hence no step)
    steps = json.loads((other / "results/dynamics/population/update_steps.json").read_text())
    assert isinstance(steps, list) and {row["generation"] for row in steps} <= {0}
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [f"{BIN}/snakemake", target, "--cores", "2", "--resources", "gpu=1"],
        cwd=other,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while not (other / "results/population/gen001/trained").exists() and time.time() < deadline:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the running stage dies mid-way, Snakemake releases its lock
    proc.wait(timeout=120)
    # the same command again, up to the last generation's checkpoint and held-out scores (not the dynamics
    # stage, which would write the tables whole): the live history has one row per generation
    resumed = _snakemake(other, "results/population/gen001/heldout.json", "results/population/gen000/heldout.json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    live = json.loads(history.read_text())
    assert [row["generation"] for row in live] == [0, 1]
    resumed = _snakemake(other, target)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads(history.read_text())  # the dynamics stage's tables, from every generation's files
    assert [{k: v for k, v in row.items() if v is not None} for row in final] == [
        {k: v for k, v in row.items() if v is not None} for row in live
    ]
    for gen in ("000", "001"):
        for name in ("checkpoint", "metrics.json", "rollouts.jsonl", "tasks.jsonl", "answers.jsonl"):
            a, b = finished / "population" / f"gen{gen}" / name, other / "results/population" / f"gen{gen}" / name
            if a.is_dir():
                assert _digest(a) == _digest(b), f"gen{gen}/{name} differs after resume"
            else:
                assert a.read_bytes() == b.read_bytes(), f"gen{gen}/{name} differs after resume"
