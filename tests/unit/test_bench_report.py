"""Merging benchmark runs for one summary: a measurement repeated in a later run is kept once,
from the first run named; different measurements all stay."""

from __future__ import annotations

from bench.harness import merge_reports


def result(kind: str, wall: float, **extra) -> dict:
    return {"kind": kind, "scenario": "tumbling", "events": 200_000, "batch_size": 1_000,
            "label": "flat", "wall_seconds": wall, **extra}


def test_a_repeated_measurement_is_kept_from_the_first_run_named():
    after = {"run": "after", "command": "a", "machine": {"cores": 2},
             "results": [result("replay", 340.2, pass_max_records=1_000)]}
    before = {"run": "before", "command": "b", "machine": {"cores": 2},
              "results": [result("replay", 409.7, pass_max_records=1_000),
                          result("replay", 20.1, pass_max_records=1_000_000),
                          result("sss", 297.8, parts=200)]}
    merged = merge_reports([after, before])
    assert merged["run"] == "after + before"
    walls = sorted(r["wall_seconds"] for r in merged["results"])
    assert walls == [20.1, 297.8, 340.2]


def test_the_scenarios_run_at_the_sizes_asked_for_in_any_order():
    from bench.harness import parse_args, plan

    def replays(argv: list[str]) -> set[tuple[str, int]]:
        args = parse_args([*argv, "--scenarios", "tumbling,session", "--flat", "0x0", "--no-flink"])
        return {(item["scenario"], item["batch_size"]) for item in plan(args) if item["kind"] == "replay"}

    asked = {("tumbling", 100_000), ("tumbling", 1_000_000), ("session", 100_000), ("session", 1_000_000)}
    assert replays(["--events", "1000000", "--batch-sizes", "100000,1000000"]) == asked
    assert replays(["--events", "1000000", "--batch-sizes", "1000000,100000"]) == asked
    # By default: tumbling at events/100, /10 and events; the others at the two largest.
    assert replays(["--events", "1000000"]) == {
        ("tumbling", 10_000), ("tumbling", 100_000), ("tumbling", 1_000_000),
        ("session", 100_000), ("session", 1_000_000),
    }


def test_the_fixed_cost_is_fitted_only_over_batches_of_spread_sizes():
    from bench.harness import fixed_overhead

    def run(scenario: str, *passes: tuple[int, float]) -> dict:
        return {"kind": "replay", "scenario": scenario,
                "per_batch": [{"records": n, "seconds": s, "cpu_seconds": s} for n, s in passes]}

    # One pass of a 1M archive's 999,021 records and ten of 1,000,000 from a 10M run: no line.
    same_size = run("session", (999_021, 16.8), *[(1_000_000, 8.7)] * 10)
    # One-batch passes of 2,000 records and one pass of 1M: 0.5 s + 2 us a record.
    spread = run("tumbling", *[(2_000, 0.504)] * 10, (1_000_000, 2.5))
    fits = fixed_overhead([same_size, spread])
    assert "wall_fixed_seconds" not in fits["session"]
    assert fits["session"]["wall_median_seconds"] == 8.7
    assert fits["tumbling"]["wall_fixed_seconds"] == 0.5
    assert fits["tumbling"]["wall_microseconds_per_record"] == 2.0


def test_the_plot_compares_one_batch_passes_with_each_scenarios_largest_passes():
    from bench.harness import pass_kinds

    def replay(scenario: str, events: int, batch_size: int, records: int, **extra) -> dict:
        per_batch = [{"records": records, "seconds": 1.0, "steps": {"operator": 0.5}},
                     {"records": 0, "seconds": 3.0, "steps": {"writes": 2.0}}]  # the finalize pass
        return {"kind": "replay", "scenario": scenario, "events": events, "batch_size": batch_size,
                "per_batch": per_batch, **extra}

    results = [
        replay("tumbling", 600_000, 2_000, 2_000, label="flat", pass_max_records=2_000),
        replay("tumbling", 600_000, 2_000, 600_000, label="flat", pass_max_records=1_000_000),
        replay("tumbling", 1_000_000, 100_000, 999_021),
        replay("session", 10_000_000, 1_000_000, 1_000_000),
        replay("tumbling", 10_000_000, 1_000_000, 1_000_000),
        {"kind": "sss", "scenario": "tumbling", "events": 10_000_000, "per_batch": []},
    ]
    kinds = pass_kinds(results)
    assert [label for label, _ in kinds] == [
        "flat test\n2,000 a pass",
        "session, 10,000,000\n1,000,000 a pass",
        "tumbling, 10,000,000\n1,000,000 a pass",
    ]
    assert all(len(passes) == 1 and passes[0]["records"] for _, passes in kinds)


def test_the_flink_job_is_rebuilt_when_its_classpath_names_a_missing_jar(tmp_path):
    import os
    import time

    from bench.harness import flink_build_stale

    source = tmp_path / "Job.java"
    source.write_text("class Job {}")
    jar, listing, dependency = tmp_path / "job.jar", tmp_path / "classpath.txt", tmp_path / "dep.jar"
    assert flink_build_stale(jar, listing, [source])  # never built
    later = time.time() + 10
    for built in (jar, dependency):
        built.write_bytes(b"jar")
    listing.write_text(os.pathsep.join([str(dependency), str(dependency)]) + "\n")
    for built in (jar, listing):
        os.utime(built, (later, later))
    assert not flink_build_stale(jar, listing, [source])
    os.utime(source, (later + 10, later + 10))  # a source newer than the build
    assert flink_build_stale(jar, listing, [source])
    os.utime(source, (later - 20, later - 20))
    dependency.unlink()  # the Maven cache moved or was cleaned
    assert flink_build_stale(jar, listing, [source])
