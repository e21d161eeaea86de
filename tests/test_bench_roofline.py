"""integration/bench_roofline.py's reading of Nsight Compute's CSV details page (no GPU or ncu needed): units, one
record per launch, sums over a kernel's launches, duration-weighted throughputs, rates against the peaks, and what
bounds a kernel."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import bench_roofline as br

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def _rows(i, kernel, metrics):
    return "".join(f'"{i}","1","python3","h","{kernel}","1","7","(256, 1, 1)","(100, 1, 1)","0","9.0","S",'
                   f'"{name}","{unit}","{value}"\n' for name, unit, value in metrics)


def _launch(i, kernel, dur_ns, sm, dram_pct, l2, dram_bytes, dfma, freq_hz=1.98e9):
    return _rows(i, kernel, [("Duration", "ns", f"{dur_ns:,}"), ("Compute (SM) Throughput", "%", sm),
                             ("DRAM Throughput", "%", dram_pct), ("L2 Cache Throughput", "%", l2),
                             ("L1/TEX Cache Throughput", "%", 10), ("SM Frequency", "hz", freq_hz),
                             ("Achieved Occupancy", "%", 40), ("Theoretical Occupancy", "%", 50),
                             ("Registers Per Thread", "register/thread", 72),
                             ("dram__bytes_read.sum", "byte", dram_bytes), ("dram__bytes_write.sum", "byte", 0),
                             ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", "inst", dfma),
                             ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", "inst", "n/a")])


def test_parse_and_aggregate():
    text = ("==PROF== noise before the table\n" + HEAD
            + _launch(0, "shap_table_block<float>(int, const float *)", 1_000_000, 80, 5, 30, 4e9, 1e9)
            + _launch(1, "shap_table_block<float>(int, const float *)", 3_000_000, 40, 5, 30, 2e9, 3e9)
            + _launch(2, "bg_hist<float, unsigned int>(const float *, long)", 2_000_000, 20, 85, 50, 9e9, 0))
    launches = br.parse_details(text)
    assert len(launches) == 3 and launches[0]["duration"] == pytest.approx(1e-3)
    assert "sm__sass_thread_inst_executed_op_dadd_pred_on.sum" not in launches[0]      # "n/a" is no number
    info = {"sms": 132, "dram_peak_Bps": 4.8e12}
    rows = {r["kernel"]: r for r in br.aggregate(launches, info)}
    t = rows["shap_table_block<float>"]
    assert t["launches"] == 2 and t["seconds"] == pytest.approx(4e-3)
    assert t["sm_pct"] == pytest.approx((80 * 1 + 40 * 3) / 4)                       # duration-weighted
    assert t["dram_Bps"] == pytest.approx(6e9 / 4e-3)
    assert t["fp64_flops"] == pytest.approx(2 * 4e9 / 4e-3)                           # an FMA is two operations
    assert t["fp64_of_peak"] == pytest.approx(2e12 / (132 * 64 * 2 * 1.98e9))
    assert t["bound_by"] == "latency (busiest: SM 50%)"
    assert rows["bg_hist<float, unsigned int>"]["bound_by"] == "memory (DRAM 85%)"
    assert br.bound_by({"sm_pct": 75.0, "dram_pct": 10.0}) == "compute (SM 75%)"


def test_no_table_raises():
    with pytest.raises(RuntimeError, match="no ncu details table"):
        br.parse_details("==PROF== nothing was profiled\n")


def test_short_name_keeps_templates():
    assert br.short_name("rows_kernel<double>(const double *, long)") == "rows_kernel<double>"
    assert br.short_name("f<g<(int)1>>(int)") == "f<g<(int)1>>"


def test_a_real_report_of_ncu_2025():
    """A details page as Nsight Compute 2025.3 wrote it on an H200 (`--csv --page details --print-units base`,
    tests/data/ncu): its units ("ns", "hz", "byte", "inst") are read into seconds, hertz and bytes; the kernel's
    figures are the report's own, summed by hand from the file."""
    text = (Path(__file__).resolve().parent / "data" / "ncu" / "roofline_shuffle.csv").read_text()
    launches = br.parse_details(text)
    assert len(launches) == 1
    ln = launches[0]
    assert ln["duration"] == pytest.approx(278_176e-9)                      # "ns"
    assert ln["dram__bytes_read.sum"] == 578_381_824 and ln["dram__bytes_write.sum"] == 153_191_424   # "byte"
    assert 1.5e9 < ln["sm_freq"] < 2.5e9                                      # "hz"
    rows = br.aggregate(launches, {"sms": 132, "dram_peak_Bps": 4.814304e12})
    assert rows[0]["kernel"].startswith("void bij_shuffle<")
    assert rows[0]["seconds"] == pytest.approx(278_176e-9)
    assert rows[0]["dram_of_peak"] == pytest.approx((578_381_824 + 153_191_424) / 278_176e-9 / 4.814304e12)


def test_rebuild_from_kept_csvs(tmp_path):
    """--rebuild: the report of earlier runs from their kept CSVs; a later run's scenario replaces an earlier one's,
    and a scenario without a CSV keeps its recorded error."""
    csv = (Path(__file__).resolve().parent / "data" / "ncu" / "roofline_shuffle.csv").read_text()
    run = {"ncu": "v", "versions": {}, "device": "NVIDIA H200", "dram_peak_Bps": 4.814304e12, "sms": 132}
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (second / "roofline_shuffle.csv").write_text(csv)
    (first / "run.json").write_text(json.dumps(dict(run, scenarios=[
        {"scenario": "shuffle", "description": "", "error": "RuntimeError: failed"},
        {"scenario": "sketch", "description": "", "error": "RuntimeError: failed too"}])))
    (second / "run.json").write_text(json.dumps(dict(run, scenarios=[
        {"scenario": "shuffle", "description": "Bijective shuffle", "device": "NVIDIA H200"}])))
    res = br.rebuild([f"{first}:{first / 'run.json'}", f"{second}:{second / 'run.json'}"])
    by = {sc["scenario"]: sc for sc in res["scenarios"]}
    assert list(by) == ["sketch", "shuffle"]                      # the benchmark's scenario order
    assert by["shuffle"]["kernels"][0]["seconds"] == pytest.approx(278_176e-9)
    assert "error" in by["sketch"]
    assert "Bijective shuffle" in br.report(dict(res, note="two runs"))
