"""infra/streams/*.json (and the cluster's R3 copies) are generated from STREAMS and
stay equal to it; `rote infra streams --check` says so, and fails when they drift."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import subjects as s
from services.cli import main
from services.cli.infra import differences, stream_config_json, stream_files
from services.kernel.settings import Settings, SettingsError
from services.kernel.streams import STREAMS, StreamSpec

ROOT = Path(__file__).resolve().parents[2]
SINGLE = ROOT / "infra" / "streams"
CLUSTER = ROOT / "infra" / "nats" / "cluster" / "streams"

# From the JetStream API's stream configuration schema, which the NATS CLI validates
# `--config` files against: these fields are required, and no others are allowed.
REQUIRED = {
    "retention",
    "max_consumers",
    "max_msgs",
    "max_bytes",
    "max_age",
    "storage",
    "num_replicas",
}
ALLOWED = REQUIRED | {
    "name",
    "description",
    "subjects",
    "max_msgs_per_subject",
    "max_msg_size",
    "compression",
    "discard",
    "duplicate_window",
    "no_ack",
    "sealed",
    "deny_delete",
    "deny_purge",
    "allow_rollup_hdrs",
    "allow_direct",
    "mirror_direct",
    "discard_new_per_subject",
}


def rote(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The real command line, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(("directory", "replicas"), [(SINGLE, 1), (CLUSTER, 3)])
def test_committed_files_equal_what_the_code_generates(directory: Path, replicas: int) -> None:
    assert differences(directory, replicas) == []
    assert sorted(p.name for p in directory.glob("*.json")) == sorted(stream_files(replicas))


@pytest.mark.parametrize(("directory", "replicas"), [(SINGLE, 1), (CLUSTER, 3)])
def test_files_speak_the_jetstream_api_format(directory: Path, replicas: int) -> None:
    for spec in STREAMS:
        config = json.loads((directory / f"{spec.name}.json").read_text())
        assert REQUIRED <= set(config) <= ALLOWED, spec.name
        assert config["name"] == spec.name
        assert config["subjects"] == s.STREAM_SUBJECTS[spec.name]
        assert config["storage"] == "file"
        assert config["num_replicas"] == replicas
        # Durations are integer nanoseconds, not seconds.
        assert config["max_age"] == int(spec.max_age_s) * 10**9
        assert config["duplicate_window"] == 120 * 10**9
        assert config["max_msg_size"] == 1024 * 1024
    work_queues = {
        name
        for name in s.STREAM_SUBJECTS
        if json.loads((directory / f"{name}.json").read_text())["retention"] == "workqueue"
    }
    assert work_queues == {s.STREAM_WORK, s.STREAM_INTAKE}


def test_check_passes_on_the_committed_files() -> None:
    result = rote("infra", "streams", "--check")
    assert result.returncode == 0, result.stderr
    assert "7 stream definitions match the code" in result.stdout
    result = rote("infra", "streams", str(CLUSTER), "--replicas", "3", "--check")
    assert result.returncode == 0, result.stderr


def test_check_fails_when_a_file_was_edited(tmp_path: Path) -> None:
    copy = tmp_path / "streams"
    shutil.copytree(SINGLE, copy)
    runs = copy / f"{s.STREAM_RUNS}.json"
    edited = json.loads(runs.read_text())
    edited["max_age"] = 60 * 10**9
    runs.write_text(json.dumps(edited, indent=2) + "\n")

    result = rote("infra", "streams", str(copy), "--check")
    assert result.returncode == 1
    assert f"differs from the code: {runs}" in result.stderr
    assert result.stdout == ""
    assert json.loads(runs.read_text())["max_age"] == 60 * 10**9  # --check writes nothing

    # Regenerating repairs it.
    assert rote("infra", "streams", str(copy)).returncode == 0
    assert rote("infra", "streams", str(copy), "--check").returncode == 0


def test_check_fails_on_missing_and_stray_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "streams"
    shutil.copytree(SINGLE, copy)
    (copy / f"{s.STREAM_TRACES}.json").unlink()
    (copy / "ROTE_OLD.json").write_text("{}\n")
    assert main(["infra", "streams", str(copy), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"missing: {copy / s.STREAM_TRACES}.json" in err
    assert f"no such stream in the code: {copy / 'ROTE_OLD.json'}" in err


def test_check_of_cluster_files_without_replicas_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["infra", "streams", str(CLUSTER), "--check"]) == 1
    assert "it has num_replicas 3: check it with --replicas 3" in capsys.readouterr().err


def test_writes_one_file_per_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["infra", "streams", str(out), "--replicas", "3"]) == 0
    assert "wrote 7 stream definitions" in capsys.readouterr().out
    for spec in STREAMS:
        written = json.loads((out / f"{spec.name}.json").read_text())
        assert written == stream_config_json(spec, 3)


@pytest.mark.parametrize("replicas", ["0", "6"])
def test_out_of_range_replicas_are_refused(replicas: str, tmp_path: Path) -> None:
    assert main(["infra", "streams", str(tmp_path), "--replicas", replicas]) == 2
    assert not list(tmp_path.glob("*.json"))


def test_stream_replicas_setting() -> None:
    assert Settings.from_env({}).stream_replicas == 1
    assert Settings.from_env({"ROTE_STREAM_REPLICAS": "3"}).stream_replicas == 3
    for bad in ("0", "7", "three"):
        with pytest.raises(SettingsError, match="ROTE_STREAM_REPLICAS"):
            Settings.from_env({"ROTE_STREAM_REPLICAS": bad})


@pytest.mark.parametrize("spec", STREAMS, ids=lambda spec: spec.name)
def test_every_field_in_the_files_is_one_provisioning_repairs(spec: StreamSpec) -> None:
    # ensure_streams compares (and repairs) each field StreamSpec.config sets, so a field
    # the files define but the config leaves to the server would drift unnoticed.
    assert set(stream_config_json(spec)) == set(spec.config().as_dict())
    assert stream_config_json(spec) == json.loads(json.dumps(spec.config().as_dict()))
