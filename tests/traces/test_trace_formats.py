"""The traces the literature uses: Helios, Alibaba PAI 2020, Gavel's older
layouts and Tiresias' tf_job.csv, each on a small fixture in its real format."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corral.errors import InputError
from corral.traces import FORMATS, LoadReport, TraceOptions, detect_format, load_trace
from corral.traces.rows import read_text_chunks

FIXTURES = Path(__file__).parent.parent / "fixtures" / "traces"


def load(path: Path | str, report: LoadReport | None = None, **options: object):
    return load_trace(str(path), 64, TraceOptions(**options), report)  # type: ignore[arg-type]


def test_every_new_format_is_listed():
    assert {"helios", "pai", "gavel-6", "gavel-5", "tiresias"} <= set(FORMATS)


def test_helios_keeps_gpu_jobs_that_ran():
    path = FIXTURES / "helios_cluster_log.csv"
    assert detect_format(str(path)) == "helios"
    report = LoadReport(str(path))
    df = load(path, report).df
    # 6 rows: one CPU-only and one cancelled before it ran are left out, and said.
    assert list(df["job_id"]) == ["1425511", "1425512", "1425514", "1425516"]
    assert list(df["num_gpus"]) == [1, 4, 16, 2]
    assert list(df["duration"]) == [36848, 249, 26489, 172800]
    assert list(df["submit_time"]) == [0, 26, 64, 239]
    assert list(df["vc"]) == ["vcJkd", "vchbv", "vcpDC", "vchbv"]
    assert list(df["user"]) == ["uXBbc", "uVMrF", "uzqls", "uVMrF"]
    notes = " ".join(report.notes)
    assert "1 CPU-only job(s) left out" in notes
    assert "1 GPU job(s) that never ran" in notes
    assert "TIMEOUT 1" in notes and report.rows == 6


def test_helios_bad_row_names_line_and_field(tmp_path):
    text = (FIXTURES / "helios_cluster_log.csv").read_text().splitlines()
    text[2] = text[2].replace(",4,16,", ",four,16,")
    path = tmp_path / "cluster_log.csv"
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(InputError, match=r"cluster_log.csv:3: field 'gpu_num': expected a number"):
        load(path)
    report = LoadReport(str(path))
    assert len(load(path, report, skip_bad=True)) == 3
    assert report.skipped == 1 and "cluster_log.csv:3" in (report.first_problem or "")


def test_helios_header_must_have_its_columns(tmp_path):
    path = tmp_path / "cluster_log.csv"
    path.write_text("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time\n")
    with pytest.raises(InputError, match="field 'duration': column missing"):
        load(path, fmt="helios")


def test_pai_joins_jobs_with_their_tasks(tmp_path):
    folder = FIXTURES / "pai"
    for given in (folder, folder / "pai_job_table.csv", folder / "pai_task_table.csv"):
        assert detect_format(str(given)) == "pai"
    report = LoadReport(str(folder))
    df = load(folder, report).df.set_index("job_id")
    assert list(df.index) == [
        "4b3f04b66a525d2df903eb16",
        "a5a2d3c66e2c9c6e4ae5c6f1",
        "c0f1e2d3b4a5968778695a4b",
    ]
    # 8 worker instances x 100% of a GPU; the PS tasks ask for none.
    assert df.loc["4b3f04b66a525d2df903eb16", "num_gpus"] == 8
    assert df.loc["4b3f04b66a525d2df903eb16", "gpu_type"] == "V100"
    assert df.loc["4b3f04b66a525d2df903eb16", "duration"] == 19655.0 - 5079.0
    # Half a T4 becomes one; 2 x 100% + 1 x 25% becomes 3.
    assert df.loc["a5a2d3c66e2c9c6e4ae5c6f1", "num_gpus"] == 1
    assert df.loc["c0f1e2d3b4a5968778695a4b", "num_gpus"] == 3
    assert df.loc["c0f1e2d3b4a5968778695a4b", "gpu_type"] == "P100"
    assert list(df["submit_time"]) == [0.0, 42.0, 122.0]
    assert df.loc["a5a2d3c66e2c9c6e4ae5c6f1", "user"] == "0ac76b2f3a0a"
    notes = " ".join(report.notes)
    assert "1 job(s) without GPUs left out" in notes
    assert "1 GPU job(s) unfinished" in notes
    assert "2 job(s) asked for a fraction of a GPU" in notes


def test_pai_with_a_header_line_and_a_missing_table(tmp_path):
    folder = tmp_path / "pai"
    shutil.copytree(FIXTURES / "pai", folder)
    jobs = folder / "pai_job_table.csv"
    jobs.write_text("job_name,inst_id,user,status,start_time,end_time\n" + jobs.read_text())
    assert len(load(folder)) == 3
    (folder / "pai_task_table.csv").unlink()
    with pytest.raises(Exception, match=r"pai_task_table\.csv is missing"):
        load(folder)


def test_pai_bad_task_row_names_its_line(tmp_path):
    folder = tmp_path / "pai"
    shutil.copytree(FIXTURES / "pai", folder)
    tasks = folder / "pai_task_table.csv"
    lines = tasks.read_text().splitlines()
    lines[2] = lines[2].replace(",50.0,", ",half,")
    tasks.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"pai_task_table.csv:3: field 'plan_gpu'"):
        load(folder)


@pytest.mark.parametrize("table", ["pai_job_table.csv", "pai_task_table.csv"])
def test_pai_row_that_lost_a_field_is_refused_not_read_shifted(tmp_path, table):
    """A row missing a field in its middle would be read with the later fields in the
    wrong columns (a CSV reader pads short rows); it is refused with its line, or
    left out and counted when bad rows are skipped."""
    folder = tmp_path / "pai"
    shutil.copytree(FIXTURES / "pai", folder)
    path = folder / table
    lines = path.read_text().splitlines()
    fields = lines[1].split(",")
    del fields[2]  # the user (jobs) or the instance count (tasks)
    lines[1] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"{table}:2: .*comma-separated fields"):
        load(folder)
    report = LoadReport(str(folder))
    kept = load(folder, report, skip_bad=True)
    assert report.skipped == 1 and len(kept) <= 3


@pytest.mark.parametrize(
    ("name", "layout", "gpus"),
    [
        ("gavel_old_6.trace", "gavel-6", [1, 4, 2]),
        ("gavel_old_5.trace", "gavel-5", [1, 1]),
    ],
)
def test_gavel_older_layouts(name, layout, gpus):
    path = FIXTURES / name
    assert detect_format(str(path)) == layout
    df = load(path).df
    assert list(df["num_gpus"]) == gpus
    assert df["job_type"].iloc[0] == "ResNet-18 (batch size 64)"
    assert df["total_steps"].iloc[0] == 57600
    assert (df["duration"] > 0).all()
    assert list(df["submit_time"])[-1] == 7200


def test_tiresias_tf_job_keeps_repeated_ids_as_jobs():
    path = FIXTURES / "tiresias_tf_job.csv"
    assert detect_format(str(path)) == "tiresias"
    report = LoadReport(str(path))
    df = load(path, report).df
    assert sorted(df["job_id"]) == ["10", "10#2", "10#3", "11"]
    assert list(df["num_gpu" if "num_gpu" in df else "num_gpus"]) == [12, 12, 4, 2]
    assert list(df["model"]) == ["vgg19", "vgg19", "resnet50", "vgg16"]
    assert "2 row(s) repeat an earlier job id" in " ".join(report.notes)


def test_chunks_keep_the_files_line_numbers(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + "".join(f"{i},x\n" for i in range(10)) + "\n7,y\n")
    seen = []
    for raw, first in read_text_chunks(str(path), rows_per_chunk=4):
        seen += [(int(r) + first, b) for r, b in zip(raw["__row"], raw["b"], strict=True)]
    assert seen[:2] == [(2, "x"), (3, "x")]
    assert seen[-1] == (13, "y")  # the blank line 12 is skipped, not renumbered
    assert len(seen) == 11


def test_a_chunked_error_names_the_line_in_a_later_chunk(tmp_path, monkeypatch):
    header = (
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue\n"
    )
    row = "{i},u,vc,1,1,1,COMPLETED,2020-06-09 18:41:{i:02d},,,60,0\n"
    rows = [row.format(i=i) for i in range(10)]
    rows[8] = rows[8].replace("2020-06-09 18:41:08", "yesterday")
    path = tmp_path / "cluster_log.csv"
    path.write_text(header + "".join(rows))
    monkeypatch.setattr("corral.traces.rows.ROWS_PER_CHUNK", 3)
    with pytest.raises(InputError, match=r"cluster_log.csv:10: field 'submit_time'"):
        load(path)
    report = LoadReport(str(path))
    assert len(load(path, report, skip_bad=True)) == 9
    assert report.rows == 10 and report.skipped == 1


def test_a_job_the_job_table_marks_running_is_left_out_though_its_tasks_ended(tmp_path):
    """PAI's job table says a job is still Running (no end time) though every task row
    of it has ended: its run time is unknown, so it is left out, as the docs say."""
    folder = tmp_path / "pai"
    shutil.copytree(FIXTURES / "pai", folder)
    jobs = folder / "pai_job_table.csv"
    jobs.write_text(
        jobs.read_text().replace(
            "a5a2d3c66e2c9c6e4ae5c6f1,1a7c5d3e9f10,0ac76b2f3a0a,Terminated,5120.0,7320.0",
            "a5a2d3c66e2c9c6e4ae5c6f1,1a7c5d3e9f10,0ac76b2f3a0a,Running,5120.0,",
        )
    )
    report = LoadReport(str(folder))
    kept = load(folder, report).df["job_id"].tolist()
    assert "a5a2d3c66e2c9c6e4ae5c6f1" not in kept and len(kept) == 2
    assert "2 GPU job(s) unfinished when the trace ends left out" in " ".join(report.notes)
