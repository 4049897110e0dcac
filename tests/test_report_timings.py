"""Per-job timings in the report: Snakemake's benchmark TSVs parsed and summed per stage."""

from __future__ import annotations

import pytest

from populora.report.timings import NO_TIMINGS, parse_benchmark, read_timings, stage_timings, timings_table

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def tsv(seconds: float, rss: str) -> str:
    return HEADER + f"{seconds}\t0:00:{int(seconds):02d}\t{rss}\t900.5\t{rss}\t{rss}\t0.01\t0.20\t95.0\t{seconds}\n"


def test_parse_benchmark_reads_wall_seconds_and_max_rss():
    assert parse_benchmark(tsv(12.5, "310.25")) == {"s": 12.5, "max_rss": 310.25}
    # a job faster than Snakemake's first sample: NA for every sampled value
    assert parse_benchmark(HEADER + "0.4\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n") == {"s": 0.4, "max_rss": None}
    assert parse_benchmark(tsv(0.35, "0.00")) == {"s": 0.35, "max_rss": None}  # sampled after its process ended
    repeated = tsv(10, "100") + tsv(20, "300").split("\n", 1)[1]  # repeat(): one row per repetition
    assert parse_benchmark(repeated) == {"s": 15.0, "max_rss": 300.0}
    with pytest.raises(ValueError):
        parse_benchmark(HEADER)  # killed before its row was written


def test_stage_timings_sum_per_stage_longest_first_then_every_stage():
    jobs = {
        "verify": [{"s": 2.0, "max_rss": 50.0}, {"s": 4.0, "max_rss": None}, {"s": 30.0, "max_rss": 60.0}],
        "update": [{"s": 100.0, "max_rss": 900.0}],
        "pair": [{"s": 0.5, "max_rss": None}],
    }
    rows = stage_timings(jobs)
    assert [r["stage"] for r in rows] == ["update", "verify", "pair", "all stages"]
    assert rows[1] == {"stage": "verify", "jobs": 3, "total_s": 36.0, "median_s": 4.0, "max_rss_mib": 60.0}
    assert rows[2]["max_rss_mib"] is None
    assert rows[-1] == {"stage": "all stages", "jobs": 5, "total_s": 136.5, "median_s": 4.0, "max_rss_mib": 900.0}
    table = timings_table(rows)
    assert "| `verify` | 3 | 36.0 | 4.0 | 60 |" in table
    assert "| `pair` | 1 | 0.5 | 0.5 | - |" in table
    assert table.splitlines()[-1] == "| **all stages** | 5 | 136.5 | 4.0 | 900 |"


def test_no_benchmark_files_say_so(tmp_path):
    assert stage_timings(read_timings(None)) == stage_timings(read_timings(tmp_path / "absent")) == []
    assert stage_timings(read_timings(tmp_path)) == []  # an empty folder
    assert timings_table([]) == NO_TIMINGS == "No per-job timings (run under Snakemake for them)."


def test_read_timings_takes_stage_from_the_folder_and_skips_unreadable_files(tmp_path):
    for stage, key, text in (
        ("propose", "population-000", tsv(8, "200")),
        ("propose", "baseline-000", tsv(6, "150")),
        ("report", "all", HEADER),
    ):  # a job killed mid-write
        (tmp_path / stage).mkdir(exist_ok=True)
        (tmp_path / stage / f"{key}.tsv").write_text(text)
    (tmp_path / "propose" / "notes.txt").write_text("not a benchmark")
    assert read_timings(tmp_path) == {"propose": [{"s": 6.0, "max_rss": 150.0}, {"s": 8.0, "max_rss": 200.0}]}


def test_a_hosted_jobs_own_peak_replaces_the_stand_ins_sampled_one(tmp_path):
    """The stage host leaves `<key>.usage.json` beside the TSV (populora/core/stagehost/): the kernel's peak of the
    stage's process, where Snakemake sampled the stand-in. Unreadable or empty figures leave the TSV's."""
    (tmp_path / "solve").mkdir()
    for key, usage in (
        ("population-000", '{"max_rss_mib": 812.5, "cpu_s": 40.1}'),
        ("population-001", "{not json"),
        ("population-002", '{"cpu_s": 3.0}'),
        ("population-003", '{"max_rss_mib": 0}'),
        ("population-004", None),
    ):
        (tmp_path / "solve" / f"{key}.tsv").write_text(tsv(10, "13.2"))
        if usage is not None:
            (tmp_path / "solve" / f"{key}.usage.json").write_text(usage)
    assert [job["max_rss"] for job in read_timings(tmp_path)["solve"]] == [812.5, 13.2, 13.2, 13.2, 13.2]
