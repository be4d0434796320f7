"""File outputs cut into ``--output_shards`` files on the DirectRunner, through `run`.

Each run reads keys with good events, events the counter agent fails on
(dead letters with a key), lines that never decode (DECODE dead letters
without one) and a key that is not UTF-8 (written as ``entity_key_b64``), so
both outputs and both spellings of a key are cut.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.beam import run
from beam_agents.beam._options import AUTO_SHARD_INPUT_BYTES, output_shards_from_options
from beam_agents.beam._pipeline import shard_of, shard_paths
from beam_agents.errors import ConfigError

pytestmark = pytest.mark.timeout(300)

OUTPUTS = ("intents.jsonl", "errors.jsonl")
RAW_KEY = b"\xff\xfe-raw"


def events() -> list[str]:
    """40 keys x 5 events, every 7th a failure, 3 undecodable lines and a non-UTF-8 key."""
    lines = [json.dumps({"entity_key": f"key-{key:02d}", "event_id": f"e-{key}-{i}",
                         "event_time_ms": 1_000 + i,
                         "payload": "fail" if (key + i) % 7 == 0 else f"hi {i}"})
             for key in range(40) for i in range(5)]
    lines += [json.dumps({"entity_key_b64": base64.b64encode(RAW_KEY).decode(),
                          "event_id": f"raw-{i}", "event_time_ms": 1_000 + i, "payload": "hi"})
              for i in range(3)]
    return [*lines, "not json", '{"entity_key": ""}', '["a list"]']


def run_files(out: Path, lines: list[str], *flags: str) -> dict[str, bytes]:
    """Run the batch pipeline over `lines`; every file it left in `out`, by name."""
    out.mkdir()
    source = out / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    run(["--runner=DirectRunner", f"--input_files={source}",
         f"--output_path={out / OUTPUTS[0]}", f"--errors_path={out / OUTPUTS[1]}",
         "--agent=tests.agents:counter", *flags])
    source.unlink()
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def shards_of(files: dict[str, bytes], output: str) -> list[bytes]:
    return [data for name, data in files.items() if name.startswith(f"{output}-")]


def key_of(line: bytes) -> bytes | None:
    doc = json.loads(line)
    if doc.get("entity_key_b64"):
        return base64.b64decode(doc["entity_key_b64"])
    return doc["entity_key"].encode() or None


def test_four_shards_hold_exactly_the_lines_of_one(tmp_path: Path) -> None:
    """4 shards of each output are 4 non-empty files whose lines are the 1-shard run's."""
    one = run_files(tmp_path / "one", events(), "--output_shards=1")
    four = run_files(tmp_path / "four", events(), "--output_shards=4")

    assert sorted(one) == sorted(OUTPUTS)
    assert sorted(four) == sorted(name for output in OUTPUTS for name in
                                  shard_paths(output, 4))
    for output in OUTPUTS:
        shards = shards_of(four, output)
        assert all(shards), f"an empty {output} shard: the lines are not spread"
        assert sorted(b"".join(shards).splitlines()) == one[output].splitlines()
    assert len(one["intents.jsonl"].splitlines()) > 100
    stages = {json.loads(line)["stage"] for line in one["errors.jsonl"].splitlines()}
    assert stages == {"STAGE_AGENT", "STAGE_DECODE"}  # dead letters with a key, and without


def test_a_keys_lines_are_all_in_one_shard_number_of_both_outputs(tmp_path: Path) -> None:
    """Every key's intents and dead letters are in one shard, the same one in both outputs."""
    files = run_files(tmp_path / "run", events(), "--output_shards=4")

    where: dict[bytes, set[int]] = {}
    for output in OUTPUTS:
        for index, data in enumerate(shards_of(files, output)):
            for line in data.splitlines():
                if (key := key_of(line)) is not None:
                    where.setdefault(key, set()).add(index)
    assert len(where) == 41 and RAW_KEY in where
    assert {key: shards for key, shards in where.items() if len(shards) > 1} == {}


def test_each_shard_is_sorted(tmp_path: Path) -> None:
    """Each shard's lines are in byte order, whatever order the input gave them."""
    lines = events()
    random.Random(3).shuffle(lines)
    files = run_files(tmp_path / "run", lines, "--output_shards=4")

    for name, data in files.items():
        assert data.endswith(b"\n") or not data
        assert data.splitlines() == sorted(data.splitlines()), f"{name} is not sorted"


def test_two_input_orders_write_byte_identical_file_sets(tmp_path: Path) -> None:
    """The same lines, reversed and shuffled, give the same file names and bytes."""
    reversed_lines, shuffled = events()[::-1], events()
    random.Random(11).shuffle(shuffled)

    first = run_files(tmp_path / "reversed", reversed_lines, "--output_shards=4")
    second = run_files(tmp_path / "shuffled", shuffled, "--output_shards=4")

    assert len(first) == 8
    assert first == second


def test_the_default_on_a_small_input_is_one_file_at_the_path(tmp_path: Path) -> None:
    """No flag: each output is one sorted file at its path, and no temporary is left."""
    files = run_files(tmp_path / "run", events())

    assert sorted(files) == sorted(OUTPUTS)
    assert files["intents.jsonl"].splitlines() == sorted(files["intents.jsonl"].splitlines())


def test_auto_is_one_shard_per_256_mib_of_input(tmp_path: Path) -> None:
    """0 (the default) sizes the input files: 2.5 x 256 MiB over two files is 3 shards."""
    for name, size_bytes in (("a.jsonl", 2 * AUTO_SHARD_INPUT_BYTES), ("b.jsonl", 1 << 27)):
        with (tmp_path / name).open("wb") as sparse:
            sparse.truncate(size_bytes)
    small = tmp_path / "small" / "c.jsonl"
    small.parent.mkdir()
    small.write_text("{}\n")

    def shards(*flags: str) -> int:
        return output_shards_from_options(PipelineOptions(list(flags)))

    assert shards(f"--input_files={tmp_path}/*.jsonl") == 3
    assert shards(f"--input_files={tmp_path}/*.jsonl", "--output_shards=7") == 7
    assert shards(f"--input_files={small}") == 1
    assert shards(f"--input_files={tmp_path}/nothing-*.jsonl") == 1


@pytest.mark.parametrize("value", ["-1", "10001"])
def test_output_shards_out_of_range_is_a_config_error_naming_the_flag(
        tmp_path: Path, value: str) -> None:
    """A shard count outside 0..10000 fails before the run, naming output_shards."""
    with pytest.raises(ConfigError) as raised:
        run(["--runner=DirectRunner", f"--input_files={tmp_path}/e.jsonl",
             f"--output_path={tmp_path}/i.jsonl", f"--errors_path={tmp_path}/x.jsonl",
             "--agent=tests.agents:counter", f"--output_shards={value}"])
    assert raised.value.field == "output_shards"


def test_a_key_spelt_as_text_or_base64_lands_in_the_same_shard() -> None:
    """The shard hashes the key's bytes, not how the line spells them."""
    text = b'{"entity_key":"key-07","seq":1}'
    spelt = b'{"entity_key_b64":"%s","seq":2}' % base64.b64encode(b"key-07")
    assert [shard_of(line, 97) for line in (text, spelt)] == [shard_of(text, 97)] * 2
    assert len({shard_of(b'{"entity_key":"k-%d"}' % i, 97) for i in range(200)}) > 50
