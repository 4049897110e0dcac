"""Pure helpers of the benchmark runners: the members' pass of lm-eval (rows kept per member, their keys,
the batch handed back to lm-eval) and EvalPlus's sample rows."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from populora.bench import evalplus, lmeval

PAD = 0


def test_store_read_back_merges_every_batch_and_skips_a_line_cut_by_a_kill(tmp_path):
    store = tmp_path / "store.jsonl"
    first = {"row-a": {"m0": [1, 2], "m1": [3]}}
    later = {"row-a": {"m2": [4]}, "row-b": {"m0": [5]}}
    store.write_text(json.dumps(first) + "\n" + json.dumps(later) + "\n" + json.dumps(later)[:7] + "\n")
    assert lmeval._read_store(store) == {"row-a": {"m0": [1, 2], "m1": [3], "m2": [4]}, "row-b": {"m0": [5]}}
    assert lmeval._read_store(tmp_path / "absent.jsonl") == {} and lmeval._read_store(None) == {}


def test_a_prompt_has_one_row_key_whatever_the_padding_of_its_batch():
    alone = lmeval._row_keys(torch.tensor([[7, 8, 9]]), torch.tensor([[1, 1, 1]]), 8, ["stop"], {"do_sample": False})
    padded = lmeval._row_keys(
        torch.tensor([[PAD, 7, 8, 9], [4, 5, 6, 7]]),
        torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]),
        9,
        ["stop"],
        {"do_sample": False},
    )
    assert padded[0] == alone[0] and padded[1] != alone[0]  # same prompt and token budget (max_length - width)
    assert lmeval._row_keys(torch.tensor([[7, 8, 9]]), None, 8, ["stop"], {"do_sample": False}) == alone
    assert lmeval._row_keys(torch.tensor([[7, 8, 9]]), None, 9, ["stop"], {"do_sample": False}) != alone


def test_generated_ids_are_split_member_by_member_without_the_trailing_padding():
    width = 2  # the prompts' columns, dropped
    output = torch.tensor(
        [
            [1, 1, 10, 11, PAD],  # m0, row x
            [2, 2, 12, PAD, PAD],  # m0, row y
            [1, 1, 20, PAD, 21],  # m1, row x: padding only stripped at the end
            [2, 2, PAD, PAD, PAD],  # m1, row y: nothing generated
        ]
    )
    made = lmeval._ids_per_member(output, width, ["m0", "m1"], ["x", "y"], PAD)
    assert made == {"x": {"m0": [10, 11], "m1": [20, PAD, 21]}, "y": {"m0": [12], "m1": []}}


def test_the_batch_handed_back_holds_each_rows_ids_padded_to_the_longest():
    context = torch.tensor([[5, 6], [7, 8]])
    out = lmeval._with_generated(context, [[1, 2, 3], [4]], PAD)
    assert out.tolist() == [[5, 6, 1, 2, 3], [7, 8, 4, PAD, PAD]] and out.dtype == context.dtype
    assert lmeval._with_generated(context, [[], []], PAD).tolist() == context.tolist()


def test_an_evalplus_sample_passes_only_with_base_and_plus_tests_and_drops_the_failing_inputs():
    completions = [
        evalplus.Completion("t/0", "p0", "raw0", "sol0", 5, False),
        evalplus.Completion("t/1", "p1", "raw1", "sol1", 9, True),
    ]
    verdicts = {
        "t/0": {"base_status": "pass", "plus_status": "pass", "base_fail_tests": [], "plus_fail_tests": []},
        "t/1": {"base_status": "pass", "plus_status": "fail", "base_fail_tests": [], "plus_fail_tests": [[1]]},
    }
    rows = evalplus._sample_rows(completions, verdicts)
    assert [row["passed"] for row in rows] == [True, False]
    assert rows[1] == {
        "task_id": "t/1",
        "prompt": "p1",
        "raw": "raw1",
        "solution": "sol1",
        "new_tokens": 9,
        "hit_token_limit": True,
        "base_status": "pass",
        "plus_status": "fail",
        "passed": False,
    }


def test_a_failing_member_is_named_by_its_adapter_folder(monkeypatch):
    """The fix a user needs (re-export) names the member's folder, not its name in the stacked model."""

    def fails(*args, **kwargs):
        raise RuntimeError("adapter_model.safetensors: no such tensor")

    monkeypatch.setattr(lmeval, "_simple_evaluate", fails)
    lm = SimpleNamespace(member=None, progress_desc=None)
    where = ("results/warm_base", Path("results/export/population-student0"), "data")
    with pytest.raises(lmeval.BenchError) as error:
        lmeval._evaluate_member(lm, "population-student0", "gsm8k", 1, None, {}, where)
    assert "the adapter folder results/export/population-student0 does not load on results/warm_base" in str(
        error.value
    )


def test_a_benchmark_result_names_its_data_by_file_and_content_not_by_folder(tmp_path):
    """Two clones with the benchmark folder in different places record the same source (a study's results once
    held the machine's own absolute folder); other rows get another digest; downloaded rows are named as given."""
    from populora.bench import data_source

    for folder, text in (("a", "rows\n"), ("b/c", "rows\n"), ("d", "other rows\n")):
        (tmp_path / folder / "cruxeval").mkdir(parents=True)
        (tmp_path / folder / "cruxeval" / "cruxeval.jsonl").write_text(text)
    a, b, d = (data_source(tmp_path / f, "cruxeval/cruxeval.jsonl", "official") for f in ("a", "b/c", "d"))
    assert a == b != d and a.startswith("cruxeval/cruxeval.jsonl sha256:") and str(tmp_path) not in a
    assert (
        data_source(None, "cruxeval/cruxeval.jsonl", "https://example/official.jsonl")
        == "https://example/official.jsonl"
    )
