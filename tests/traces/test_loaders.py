"""Every loader reads its format and rejects malformed rows with file:line:field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corral.errors import CorralError, InputError
from corral.traces import LoadReport, TraceOptions, detect_format, load_trace
from corral.traces.canonical import write_canonical
from corral.traces.philly import PhillyFilter, load_philly

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"
TIRESIAS = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
POLLUX = "name,time,application,num_replicas,batch_size\n"
GAVEL_ROW = (
    "Transformer (batch size 128)\tpython3 train.py\ttranslation\t-step\t1"
    "\t{steps}\t{sf}\t1\t-1.000000\t{t}\n"
)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_bundled_philly_trace_is_whole():
    table = load_philly()
    assert len(table) == 82247
    assert table.df["submit_time"].is_monotonic_increasing
    assert table.df["num_gpus"].max() == 128
    assert table.span() == pytest.approx(108.896875 * 86400)


def test_philly_filters():
    import pandas as pd

    from corral.traces.philly import bundled_philly_path

    raw = pd.read_csv(bundled_philly_path(), parse_dates=["timestamp"])
    expected = raw[
        (raw["cluster"] == "6214e9")
        & (raw["timestamp"] >= "2017-10-01")
        & (raw["timestamp"] < "2017-10-08")
    ]
    table = load_philly(filt=PhillyFilter(vcs=["6214e9"], start="2017-10-01", end="2017-10-08"))
    assert len(table) == len(expected) > 0 and set(table.df["vc"]) == {"6214e9"}
    assert table.gpu_seconds() == pytest.approx((expected["duration"] * expected["num_gpus"]).sum())
    assert len(load_philly(filt=PhillyFilter(max_jobs=100))) == 100


def test_philly_bad_rows(tmp_path):
    good = "2017-10-09 07:01:55,66.0,1,66.0,vc1\n"
    path = write(tmp_path, "p.csv", PHILLY + good + "\n2017-10-09 08:00:00,abc,1,1,vc1\n")
    with pytest.raises(
        InputError, match=r"p.csv:4: field 'duration': expected a number, got 'abc'"
    ):
        load_philly(path)
    path = write(
        tmp_path, "p2.csv", PHILLY + good + "not a date,5,1,5,vc1\n2017-10-09 08:00:00,5,0,0,v\n"
    )
    with pytest.raises(InputError, match=r"p2.csv:3: field 'timestamp'"):
        load_philly(path)
    report = LoadReport(path)
    table = load_philly(path, skip_bad=True, report=report)
    assert len(table) == 1 and report.skipped == 2
    assert "p2.csv:3" in (report.first_problem or "")
    # a row missing its last field (its virtual cluster) is named, not read as VC ''
    short = write(tmp_path, "p3.csv", PHILLY + good + "2017-10-09 08:00:00,5,1,5\n")
    with pytest.raises(InputError, match=r"p3.csv:3: field 'cluster': is empty"):
        load_philly(short)


def test_tiresias_trace(tmp_path):
    path = write(tmp_path, "t.csv", TIRESIAS + "0,1,0,606,vgg19,164,30\n1,8,30,133,vgg11,147,23\n")
    assert detect_format(path) == "tiresias"
    table = load_trace(path, 64)
    assert table.df["model"].tolist() == ["vgg19", "vgg11"]
    bad = write(
        tmp_path, "t2.csv", TIRESIAS + "0,1,0,606,vgg19,164,30\n1,1.5,30,133,vgg11,147,23\n"
    )
    with pytest.raises(InputError, match=r"t2.csv:3: field 'num_gpu': expected a whole number"):
        load_trace(bad, 64)
    dup = write(tmp_path, "t3.csv", TIRESIAS + "0,1,0,6,a,1,3\n0,1,1,6,a,1,3\n")
    # Tiresias' simulator numbers jobs by row: a repeated id is another job.
    assert load_trace(dup, 64).df["job_id"].tolist() == ["0", "0#2"]


def test_gavel_trace(tmp_path):
    path = write(
        tmp_path,
        "g.trace",
        GAVEL_ROW.format(steps=346, sf=2, t=0) + GAVEL_ROW.format(steps=100, sf=1, t=5),
    )
    assert detect_format(path) == "gavel"
    table = load_trace(path, 8)
    assert table.df["num_gpus"].tolist() == [2, 1]
    assert table.df["total_steps"].tolist() == [346.0, 100.0]
    assert (table.df["duration"] > 0).all()
    bad = write(
        tmp_path,
        "g2.trace",
        GAVEL_ROW.format(steps=346, sf=2, t=0) + GAVEL_ROW.format(steps=-1, sf=1, t=5),
    )
    with pytest.raises(InputError, match=r"g2.trace:2: field 'total_steps': must be positive"):
        load_trace(bad, 8)
    # a scale factor Gavel did not measure scales linearly from the one below
    three = load_trace(write(tmp_path, "g3.trace", GAVEL_ROW.format(steps=346, sf=3, t=0)), 8)
    two = load_trace(write(tmp_path, "g4.trace", GAVEL_ROW.format(steps=346, sf=2, t=0)), 8)
    assert three.df["duration"].iloc[0] == pytest.approx(two.df["duration"].iloc[0] * 2 / 3)
    odd = write(
        tmp_path, "g5.trace", GAVEL_ROW.format(steps=346, sf=1, t=0).replace("Transformer", "Tx")
    )
    with pytest.raises(InputError, match=r"g5.trace:1: field 'job_type': no measured throughput"):
        load_trace(odd, 8, TraceOptions(fmt="gavel"))


MSR_ROW = "LM (batch size 20)\tpython3 main.py\t--steps\t1\t{steps}\t{t}\t{sf}\n"
SHOCKWAVE_ROW = (
    "LM (batch size 20)\tpython3 main.py\tlanguage_modeling\t--steps\t1\t{steps}\t{sf}\t"
    "{mode}\t1\t-1.000000\t1418\t{t}\n"
)


def test_gavel_msr_trace(tmp_path):
    # Gavel's older Philly-derived traces: 7 fields, arrival before scale factor;
    # rows of scale factor 0 are skipped as Gavel skips them; 12 GPUs extrapolate
    rows = [(100, 0, 1), (200, 5, 0), (300, 9, 12)]
    path = write(
        tmp_path, "m.trace", "".join(MSR_ROW.format(steps=a, t=b, sf=c) for a, b, c in rows)
    )
    assert detect_format(path) == "gavel-msr"
    report = LoadReport(path)
    table = load_trace(path, 64, report=report)
    assert table.df["num_gpus"].tolist() == [1, 12]
    assert table.df["submit_time"].tolist() == [0.0, 9.0]
    assert table.df["total_steps"].tolist() == [100.0, 300.0]
    assert any("scale factor 0" in note for note in report.notes)
    bad = write(tmp_path, "m2.trace", MSR_ROW.format(steps=1, t="soon", sf=1))
    with pytest.raises(InputError, match=r"m2.trace:1: field 'arrival_time'"):
        load_trace(bad, 64)


def test_shockwave_trace_carries_batch_size_modes(tmp_path):
    rows = [(100, 1, "gns", 0), (200, 2, "accordion", 5), (300, 1, "static", 9)]
    text = "".join(SHOCKWAVE_ROW.format(steps=a, sf=b, mode=c, t=d) for a, b, c, d in rows)
    path = write(tmp_path, "s.trace", text)
    assert detect_format(path) == "shockwave"
    report = LoadReport(path)
    table = load_trace(path, 8, report=report)
    assert table.df["batch_mode"].tolist() == ["gns", "accordion", "static"]
    assert table.df["num_gpus"].tolist() == [1, 2, 1]
    assert any("gns 1" in note for note in report.notes)
    bad = write(tmp_path, "s2.trace", SHOCKWAVE_ROW.format(steps=1, sf=1, mode="magic", t=0))
    with pytest.raises(InputError, match=r"s2.trace:1: field 'mode': batch-size mode 'magic'"):
        load_trace(bad, 8)


def test_pollux_workload(tmp_path):
    path = write(
        tmp_path, "w.csv", POLLUX + "cifar10-0,107,cifar10,6,2048\nncf-2,135,ncf,1,32768\n"
    )
    table = load_trace(path, 64)
    assert table.df["model"].tolist() == ["cifar10", "ncf"]
    assert table.df["total_steps"].tolist() == [3178.0, 1548.0]  # last rows of the curves
    bad = write(tmp_path, "w2.csv", POLLUX + "a,1,cifar10,6,2048\nb,2,resnet9000,1,32\n")
    with pytest.raises(InputError, match=r"w2.csv:3: field 'application'"):
        load_trace(bad, 64)


@pytest.mark.parametrize(
    ("name", "jobs"),
    [
        ("pollux-6", 160),
        ("pollux-6@1.0", 160),
        ("pollux-6@0.5", 80),
        ("pollux-6@1.5", 240),
        ("pollux-6@2.0", 320),
    ],
)
def test_pollux_workloads_at_each_job_load_are_bundled(name, jobs):
    table = load_trace(name, 64)
    assert len(table) == jobs
    assert set(table.df["model"]) <= {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}


def test_a_pollux_job_load_the_artifact_does_not_ship_is_refused():
    with pytest.raises(CorralError, match=r"pollux-6@0\.5"):
        load_trace("pollux-6@3.0", 64)


def test_canonical_round_trip(tmp_path):
    table = load_trace("synthetic:jobs=50,load=0.7", 32)
    # every column travels, the optional ones included
    table.df["priority"] = np.arange(50) % 3 - 1
    table.df["batch_size"] = 64
    table.df.loc[3, "batch_mode"] = "gns"
    path = str(tmp_path / "c.csv")
    write_canonical(table, path)
    assert detect_format(path) == "canonical"
    again = load_trace(path, 32)
    assert again.df.equals(table.df)
    bad = write(tmp_path, "c4.csv", "submit_time,num_gpus,duration,priority\n0,1,5,1\n1,1,5,high\n")
    with pytest.raises(InputError, match=r"c4.csv:3: field 'priority': expected a number"):
        load_trace(bad, 32)
    bad = write(tmp_path, "c2.csv", "submit_time,num_gpus,duration,colour\n0,1,5,red\n")
    with pytest.raises(InputError, match=r"c2.csv:1: field 'colour': unknown column"):
        load_trace(bad, 32)
    bad = write(tmp_path, "c3.csv", "submit_time,num_gpus,duration\n0,1,5\n1,,5\n")
    with pytest.raises(InputError, match=r"c3.csv:3: field 'num_gpus': is empty"):
        load_trace(bad, 32)


def test_too_many_fields_names_the_line(tmp_path):
    path = write(tmp_path, "x.csv", "submit_time,num_gpus,duration\n0,1,5\n1,1,5,9\n")
    with pytest.raises(InputError, match=r"x.csv:3"):
        load_trace(path, 8)


def test_unknown_format_and_missing_file(tmp_path):
    path = write(tmp_path, "u.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(InputError, match="--trace-format"):
        load_trace(path, 8)
    with pytest.raises(CorralError, match="no such file"):
        load_trace(str(tmp_path / "missing.csv"), 8)


def test_synthetic_hits_the_target_load_and_is_seeded():
    a = load_trace("synthetic:jobs=400,load=0.9,seed=5", 100)
    b = load_trace("synthetic:jobs=400,load=0.9,seed=5", 100)
    assert a.df.equals(b.df)
    assert a.offered_load(100) == pytest.approx(0.9)
    assert a.df["num_gpus"].max() <= 100
    with pytest.raises(CorralError):
        load_trace("synthetic:jobs=ten", 8)


def test_shockwave_durations_are_the_traces_own_unless_asked_otherwise(tmp_path):
    """Shockwave's traces give each job's duration (seconds at its scale factor): it
    is read as given; ``durations=throughput`` asks for steps at Gavel's measured
    V100 throughput instead, and the load report gives both totals either way."""
    rows = [(100, 1, "static", 0), (200, 2, "static", 5)]
    text = "".join(SHOCKWAVE_ROW.format(steps=a, sf=b, mode=c, t=d) for a, b, c, d in rows)
    path = write(tmp_path, "s.trace", text)
    report = LoadReport(path)
    own = load_trace(path, 8, report=report)
    assert own.df["duration"].tolist() == [1418.0, 1418.0]
    assert own.df["total_steps"].tolist() == [100.0, 200.0]
    throughput = LoadReport(path)
    steps = load_trace(path, 8, TraceOptions(durations="throughput"), report=throughput)
    assert steps.df["duration"].tolist() != [1418.0, 1418.0]
    gpu_hours = 1418.0 * 3 / 3600
    assert f"durations from the trace's duration column: {gpu_hours:,.1f} GPU-hours" in " ".join(
        report.notes
    )
    assert "with --durations trace" in " ".join(throughput.notes)
    bad = write(tmp_path, "s2.trace", text.replace("\t1418\t0\n", "\t-1\t0\n"))
    with pytest.raises(InputError, match=r"s2.trace:1: field 'duration'"):
        load_trace(bad, 8)
    with pytest.raises(InputError, match="durations"):
        load_trace(path, 8, TraceOptions(durations="guess"))


@pytest.mark.parametrize("layout", ["shockwave", "gavel"])
def test_a_gavel_format_row_that_lost_a_field_is_refused_as_such(tmp_path, layout):
    """A row with a field deleted used to be read shifted, its error named on the next
    field (or none at all); it is refused saying a field is missing, with its line."""
    if layout == "shockwave":
        good = SHOCKWAVE_ROW.format(steps=100, sf=1, mode="static", t=0)
    else:
        good = "ResNet-18 (batch size 16)\tcmd\tdir\t--steps\t1\t100\t1\t1\t-1\t0\n"
    fields = good.rstrip("\n").split("\t")
    del fields[5]  # total_steps
    path = write(tmp_path, "t.trace", good + "\t".join(fields) + "\n")
    with pytest.raises(InputError, match=r"t.trace:2: .*tab-separated fields.*missing or extra"):
        load_trace(path, 8, TraceOptions(fmt=layout))
    report = LoadReport(path)
    kept = load_trace(path, 8, TraceOptions(fmt=layout, skip_bad=True), report=report)
    assert len(kept) == 1 and report.skipped == 1


@pytest.mark.parametrize(
    "text", ["gavel-synthetic:jobs=30,rate=20,multi=0", "jobs=30,rate=20,multi=0"]
)
def test_a_generators_arguments_count_with_or_without_its_name(text: str) -> None:
    """A program passes the list without the name; it was once read as a name, and
    every value silently took its default (200 jobs, not 30)."""
    from corral.traces.gavel_synthetic import GavelWorkload

    spec = GavelWorkload.parse(text)
    assert (spec.jobs, spec.rate, spec.multi) == (30, 20.0, False)
    with pytest.raises(CorralError, match="got 'jobz=3'"):
        GavelWorkload.parse(text.replace("jobs", "jobz").replace("=30", "=3"))
