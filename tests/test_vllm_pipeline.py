"""One tiny pipeline run end to end with `sampler.engine: vllm` (Snakemake, real stages, the vLLM
CPU build): propose and solve through vLLM with every member a LoRARequest, the update on the
recorded segments (its measured gap to the sampler's scores stays small), then CRUXEval-O through our
engine and GSM8K through lm-eval's own `vllm` model. The warm start stays on (bench_base then scores the
raw base and the warm one, each in a process of its own); no held-out pool is proposed (`heldout.per_type:
0`: the pool's proposals sample as propose does) and HumanEval+ is left out (our engine's path again): each
is a vLLM engine's start-up more, and the lane runs beside the main suite, on its two cores.

Runs in the vLLM lane (`bash scripts/run_vllm_tests.sh`); skipped where vLLM is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, copy_snakemake_entry

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
if os.environ.get("POPULORA_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vLLM is not installed here: run `bash scripts/run_vllm_tests.sh`")
BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_params_dict) -> Path:
    from tests.tiny_model import tiny_model_dir

    root = tmp_path_factory.mktemp("vllm-project")
    copy_snakemake_entry(root)
    params = json.loads(json.dumps(tiny_params_dict))
    params["model"]["base_model"] = str(tiny_model_dir(root / "tiny", hidden_size=64, heads=2))  # head size 32
    # vLLM on CPU reserves memory_fraction of the host's memory for the whole process (its own ~0.9 GiB of
    # torch and vLLM included) and gives the KV cache what is left. A second engine in the same process found
    # the first one's cache still held (bench_base scoring the raw base, then the warm one: now each in its
    # own process, populora.bench.jobs.run_one_apart); 0.2 leaves a margin of about 3 GiB a process.
    params["sampler"] = {**params["sampler"], "engine": "vllm", "memory_fraction": 0.2}
    params["dag"] = {**params["dag"], "generations": 1, "arms": ["population"]}
    params["heldout"] = {**params["heldout"], "per_type": 0}  # an empty pool, written without a model
    params["update"] = {**params["update"], "max_seq_len": 2048}  # vLLM's window (max_model_len): the tiny model's
    params["bench"] = {
        **params["bench"],
        "benchmarks": ["cruxeval_o", "gsm8k"],
        "limit": 2,
        "max_new_tokens": 16,
        "data_dir": str(REPO.parent / "shared" / "benchmarks"),
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [f"{BIN}/snakemake", "--cores", "2", "--resources", "gpu=1"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    return root / "results"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_rollouts_come_from_vllm_and_score_as_the_update_scores(finished):
    """Every answer vLLM sampled carries its tokens' scores; the update's own scoring
    (`populora.rl.update.rollout_sequences` + `selected_logprobs`, the student's adapter) agrees.
    (The tiny random model's students solve nothing, so no advantage is non-zero and the update
    itself takes no step here: its gap statistic is computed from the same two functions.)"""
    import torch

    from populora.core.state import adapter_dirs
    from populora.lm.model import attach_adapters, load_base
    from populora.rl.update import rollout_sequences, selected_logprobs

    for arm in ("population",):
        answers = _jsonl(finished / arm / "gen000" / "answers.jsonl")
        assert answers and all(any(s["train"] for s in row["segments"]) for row in answers)
        stats = json.loads((finished / arm / "gen000" / "trained" / "update_stats.json").read_text())
        assert sum(s["rollouts"] for s in stats.values()) >= len(answers)
        gaps = []
        for student in sorted({row["student"] for row in answers}):
            # the stages' frozen base: the warm start's output (the raw base when the warm start is off)
            tokenizer, base = load_base(finished / "warm_base", device="cpu")
            model = attach_adapters(
                base, {student: adapter_dirs(finished / arm / "init", [student])[student]}, trainable=student
            )
            for index, row in enumerate(r for r in answers if r["student"] == student):
                sequences, _ = rollout_sequences(row["segments"], index, max_len=1024)
                with torch.no_grad():
                    ours = selected_logprobs(model, sequences, tokenizer.pad_token_id, torch.device("cpu")).tolist()
                recorded = [x for s in sequences for x in s.sampler_logprobs]
                assert len(recorded) == len(ours) and None not in recorded
                gaps += [abs(a - b) for a, b in zip(ours, recorded)]
        assert gaps and max(gaps) < 2e-2 and sum(gaps) / len(gaps) < 1e-3, (arm, max(gaps), sum(gaps) / len(gaps))


def test_benchmarks_ran_through_the_vllm_engine(finished):
    metrics = json.loads((finished / "metrics.json").read_text())
    for bench in ("cruxeval_o", "gsm8k"):
        assert any(key.startswith(f"bench.{bench}.") for key in metrics), bench
    lmeval = next((finished / "bench" / "base" / "gsm8k").glob("**/results.json"))
    assert json.loads(lmeval.read_text())["config"]["model"] == "vllm"
