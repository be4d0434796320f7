"""The Beam pipeline on Prism, the portable runner the DirectRunner of Beam 2.64+ tries first.

Prism is the binary `make prism` builds for this Beam line (both lines run
this file). A bounded input runs the batch path there as it does on the
DirectRunner, through the Fn API: state, bundles and a long-lived DoFn.
`beam-agents run` names the runner that ran, whichever it was.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from beam_agents.cli import main
from beam_agents.hosting import decode_event_json
from beam_agents.stores import SqliteLongtermConfig
from tests._toolchain import REPO, prism_binary, prism_flags

pytestmark = pytest.mark.timeout(240)

SAMPLE = REPO / "examples" / "events.jsonl"
FN_API_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
AGENT = ["--agent=examples.support_agent:agent", "--longterm_store=sqlite"]


def rows(path: Path) -> list[bytes]:
    """Every long-term row of the sample's entities, serialized deterministically."""
    entities = set()
    for line in SAMPLE.read_bytes().splitlines():
        try:
            entities.add(decode_event_json(line).entity_key)
        except ValueError:
            continue  # the sample's deliberately undecodable lines

    async def read() -> list[bytes]:
        store = SqliteLongtermConfig(path=str(path)).open()
        try:
            found = []
            for entity in sorted(entities):
                found += [row.SerializeToString(deterministic=True)
                          for row in await store.search(entity, "", 10_000)]
            return found
        finally:
            await store.close()

    return asyncio.run(read())


def run_sample(out: Path, runner: list[str]) -> tuple[bytes, bytes, list[bytes]]:
    result = run_beam([*runner, f"--input_files={SAMPLE}",
                       f"--output_path={out / 'intents.jsonl'}",
                       f"--errors_path={out / 'errors.jsonl'}", *AGENT,
                       f"--sqlite_path={out / 'longterm.sqlite'}"])
    asked = runner[0].rsplit(".", 1)[-1].removeprefix("--runner=")
    # The DirectRunner runs a batch pipeline on its FnApiRunner (after trying Prism, on 2.7x).
    assert result.beam_agents_runner.ran == {"DirectRunner": "FnApiRunner"}.get(asked, asked)
    return ((out / "intents.jsonl").read_bytes(), (out / "errors.jsonl").read_bytes(),
            rows(out / "longterm.sqlite"))


def test_bounded_input_on_prism_writes_the_direct_runners_bytes(tmp_path: Path) -> None:
    """Intents, dead letters and long-term rows: byte-identical to the DirectRunner's."""
    # The DirectRunner's batch runner by name: the DirectRunner itself would try
    # Prism first on the Beam-latest line.
    direct = run_sample(tmp_path / "direct", [f"--runner={FN_API_RUNNER}"])
    prism = run_sample(tmp_path / "prism", prism_flags())

    intents, errors, longterm = direct
    assert intents.count(b"\n") > 900 and errors.count(b"\n") >= 5  # the sample's known mix
    assert longterm  # the example agent keeps a long-term profile
    assert prism == direct


def test_beam_agents_run_names_prism_when_prism_ran(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The summary's runner line names Prism and the binary it was given."""
    assert main(["run", *prism_flags(), f"--input_files={SAMPLE}",
                 f"--output_path={tmp_path / 'intents.jsonl'}",
                 f"--errors_path={tmp_path / 'errors.jsonl'}",
                 "--agent=examples.support_agent:agent"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines()
              if line.startswith("  runner")]
    assert line.split(maxsplit=1)[1] == f"PrismRunner, prism at {prism_binary()}"


def test_prism_after_a_direct_runner_run_still_uses_its_own_binary(tmp_path: Path) -> None:
    """A DirectRunner run first (Beam 2.7x tries Prism there, offline): Prism then still runs."""
    run_sample(tmp_path / "direct", ["--runner=DirectRunner"])
    run_sample(tmp_path / "prism", prism_flags())


def test_a_prism_that_is_not_there_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    """--runner=PrismRunner with a missing binary: exit 2 naming it; nothing runs elsewhere.

    In a process of its own: Beam keeps a Prism it started for the process's
    later jobs, which would answer in place of the missing binary.
    """
    missing = tmp_path / "no-prism"
    done = subprocess.run(
        [sys.executable, "-m", "beam_agents", "run", "--runner=PrismRunner",
         f"--prism_location={missing}", f"--input_files={SAMPLE}",
         f"--output_path={tmp_path / 'out' / 'i.jsonl'}",
         f"--errors_path={tmp_path / 'out' / 'e.jsonl'}", "--agent=examples.support_agent:agent"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.startswith("beam-agents:")]
    assert str(missing) in line
    assert not (tmp_path / "out" / "i.jsonl").exists()


def test_a_direct_runner_that_falls_back_from_prism_says_so_in_its_summary(
        tmp_path: Path) -> None:
    """Beam 2.64+'s DirectRunner tries Prism first; a try that fails is named, never silent.

    The binary it is pointed at is missing, so the try fails on any machine
    (with or without a network). On the dev line (2.61) there is no try: the
    summary names the FnApiRunner and no fallback.
    """
    import apache_beam  # noqa: PLC0415

    missing = tmp_path / "no-prism"
    done = subprocess.run(
        [sys.executable, "-m", "beam_agents", "run", "--runner=DirectRunner",
         f"--prism_location={missing}", f"--input_files={SAMPLE}",
         f"--output_path={tmp_path / 'out' / 'i.jsonl'}",
         f"--errors_path={tmp_path / 'out' / 'e.jsonl'}", "--agent=examples.support_agent:agent"],
        cwd=REPO, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = [line for line in done.stdout.splitlines() if line.strip().startswith("runner ")]
    assert "FnApiRunner (chosen by DirectRunner)" in line
    tries_prism = tuple(map(int, apache_beam.__version__.split(".")[:2])) >= (2, 64)
    assert ("fell back" in line and str(missing) in line) == tries_prism, line
    assert (tmp_path / "out" / "i.jsonl").read_text().count("\n") > 100
