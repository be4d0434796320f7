"""What Dataflow's ``--update`` depends on stays pinned: the stateful steps, their state, timers.

Dataflow replaces a running streaming job in place only if the new job's
stateful steps keep their names and compatible state and timer specs; else the
update check fails, or a cell's state is dropped. This test builds the
pipeline as `beam_agents.beam.run` builds it for Dataflow (without running
it), reads every stateful step out of the runner API proto, and compares it
with ``update_compat.json``. A failure names what changed and what a
deployment must do about it (docs/operations.md, "Update and drain").

To change the pin on purpose, regenerate it and commit it with the change::

    BEAM_AGENTS_UPDATE_PIN=1 pytest tests/beam/test_update_compat.py

Coders are described by URN, recursively, never by their ids in the proto,
which are not stable. Every URN pinned here is the same on Beam 2.61 and 2.77
(both lines run this test), so the pin is one file for both. A timer family's
id is the Python SDK's: ``ts-`` and the `TimerSpec`'s name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import Pipeline
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.runner import PipelineRunner

from beam_agents.beam import AgentDoFn, _pipeline
from beam_agents.hosting import CELLS, QUEUE_CELLS

PIN = Path(__file__).with_name("update_compat.json")
REGENERATE = "BEAM_AGENTS_UPDATE_PIN"
RECIPE = f"{REGENERATE}=1 pytest tests/beam/test_update_compat.py"

AGENT = ["--agent", "examples.support_agent:agent"]
# The names do not reach any step's name; Beam only wants a valid project id.
STREAMING = ["--input_subscription", "projects/my-project/subscriptions/s",
             "--output_topic", "projects/my-project/topics/o",
             "--errors_topic", "projects/my-project/topics/e", *AGENT]
BATCH = ["--input_files", "x", "--output_path", "o", "--errors_path", "e", *AGENT]
PATHS = {"streaming": STREAMING, "batch": BATCH}
# `run` then builds the graph it submits to Dataflow (not a local run's).
DATAFLOW = ["--runner", "DataflowRunner"]

Spec = dict[str, Any]


class _Built(Exception):
    def __init__(self, pipeline: Pipeline) -> None:
        super().__init__("built, not run")
        self.pipeline = pipeline


class _BuildOnly(Pipeline):
    """`run` builds this in place of a Pipeline; its run() hands the graph back unrun.

    Its runner is Beam's base one, not the DataflowRunner the options name:
    that one checks the GCS buckets over the network when the pipeline is
    made, and adds nothing to the graph before it runs (neither overrides
    `PipelineRunner.apply`, in 2.61 or 2.77).
    """

    def __init__(self, runner: Any = None, options: PipelineOptions | None = None,
                 **kwargs: Any) -> None:
        super().__init__(runner=PipelineRunner(), options=options, **kwargs)

    def run(self, test_runner_api: Any = "AUTO") -> Any:
        raise _Built(self)


def built(argv: list[str]) -> beam_runner_api_pb2.Pipeline:
    """The runner API proto of the pipeline `run(argv)` submits to Dataflow."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_pipeline, "Pipeline", _BuildOnly)
        with pytest.raises(_Built) as caught:
            _pipeline.run([*argv, *DATAFLOW])
    pipeline = caught.value.pipeline
    expected = "--input_subscription" in argv
    assert pipeline.options.view_as(StandardOptions).streaming is expected
    return pipeline.to_runner_api()


def coder(components: beam_runner_api_pb2.Components, coder_id: str) -> str:
    """A coder as its URN and its components', recursively: ``urn(component, ...)``."""
    found = components.coders[coder_id]
    parts = ", ".join(coder(components, part) for part in found.component_coder_ids)
    return f"{found.spec.urn}({parts})" if parts else found.spec.urn


def state_spec(components: beam_runner_api_pb2.Components,
               spec: beam_runner_api_pb2.StateSpec) -> Spec:
    """Kind (read_modify_write, bag, combining, ...), coders and protocol of one state spec."""
    kind = spec.WhichOneof("spec")
    assert kind is not None, f"a state spec of no kind: {spec}"
    described: Spec = {"kind": kind.removesuffix("_spec"), "protocol": spec.protocol.urn}
    for field, value in getattr(spec, kind).ListFields():
        if field.name.endswith("coder_id"):
            described[field.name.removesuffix("_id")] = coder(components, value)
        elif field.name == "combine_fn":
            described["combine_fn"] = value.urn  # its payload is a pickle: not stable
    return described


def stateful_steps(proto: beam_runner_api_pb2.Pipeline) -> dict[str, Spec]:
    """Every ParDo declaring state or timers, by full unique name."""
    components = proto.components
    steps: dict[str, Spec] = {}
    for transform in components.transforms.values():
        if transform.spec.urn != common_urns.primitives.PAR_DO.urn:
            continue
        payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
        if not (payload.state_specs or payload.timer_family_specs):
            continue
        [main] = [pcoll for tag, pcoll in transform.inputs.items()
                  if tag not in payload.side_inputs]
        collection = components.pcollections[main]
        windowing = components.windowing_strategies[collection.windowing_strategy_id]
        steps[transform.unique_name] = {
            # State is kept per encoded key and window: these coders and the
            # window function are part of what an update must carry over.
            "input_coder": coder(components, collection.coder_id),
            "window_fn": windowing.window_fn.urn,
            "state": {name: state_spec(components, spec)
                      for name, spec in payload.state_specs.items()},
            "timers": {name: {
                "time_domain": beam_runner_api_pb2.TimeDomain.Enum.Name(timer.time_domain),
                "coder": coder(components, timer.timer_family_coder_id)}
                for name, timer in payload.timer_family_specs.items()},
        }
    return steps


def current() -> Spec:
    return {path: stateful_steps(built(argv)) for path, argv in PATHS.items()}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _mapping(old: str, new: str) -> str:
    return (f"keep the name {old!r} (a label in _pipeline.py, or the DoFn's class name), or "
            f"deploy with --transform_name_mapping '{json.dumps({old: new})}' (Flex Template: "
            f"gcloud dataflow flex-template run ... --update "
            f"--transform-name-mappings='{old}={new}'), or drain and replace the job")


def step_differences(name: str, old: Spec, new: Spec) -> list[str]:
    """What changed inside one stateful step, each with what a deployment must do."""
    lines = []
    for field in ("input_coder", "window_fn"):
        if old[field] != new[field]:
            lines.append(f"{name}: {field} changed from {old[field]} to {new[field]}: every "
                         "key's state is stored under it; drain and replace the job")
    gone = sorted(old["state"].keys() - new["state"].keys())
    came = sorted(new["state"].keys() - old["state"].keys())
    for cell in list(gone):
        twin = next((other for other in came if new["state"][other] == old["state"][cell]), None)
        if twin is not None:
            gone.remove(cell)
            came.remove(twin)
            lines.append(f"{name}: state spec renamed {cell!r} -> {twin!r}: --update would drop "
                         f"{cell!r} of every key, and no transform name mapping renames a cell; "
                         f"keep the name {cell!r}, or drain and replace the job")
    for cell in gone:
        lines.append(f"{name}: state spec {cell!r} removed: --update would drop that cell of "
                     "every key, and no transform name mapping renames a cell; keep it, or "
                     "drain and replace the job")
    for cell in came:
        lines.append(f"{name}: state spec {cell!r} added: after --update it starts empty for "
                     "every running key; safe only if empty means the default, else drain and "
                     "replace the job")
    for cell in sorted(old["state"].keys() & new["state"].keys()):
        if old["state"][cell] != new["state"][cell]:
            lines.append(f"{name}: state spec {cell!r} changed from {_json(old['state'][cell])} "
                         f"to {_json(new['state'][cell])}: state already written cannot be read "
                         "with it, and no mapping fixes that; drain and replace the job")
    for timer in sorted(old["timers"].keys() - new["timers"].keys()):
        lines.append(f"{name}: timer {timer!r} removed: the timers of that family already set "
                     "would fire into nothing; keep it, or drain and replace the job")
    for timer in sorted(new["timers"].keys() - old["timers"].keys()):
        lines.append(f"{name}: timer {timer!r} added: no running key has one set after "
                     "--update; safe only if the code sets it on the key's next element, else "
                     "drain and replace the job")
    for timer in sorted(old["timers"].keys() & new["timers"].keys()):
        if old["timers"][timer] != new["timers"][timer]:
            lines.append(f"{name}: timer {timer!r} changed from {_json(old['timers'][timer])} "
                         f"to {_json(new['timers'][timer])}: drain and replace the job")
    return lines


def differences(pinned: Spec, now: Spec) -> list[str]:
    """Each change between two pins, as one line naming it and what to do."""
    lines = []
    for path in sorted(pinned.keys() | now.keys()):
        old, new = pinned.get(path, {}), now.get(path, {})
        gone = sorted(old.keys() - new.keys())
        came = sorted(new.keys() - old.keys())
        # A step gone and one come with the same specs: a rename.
        renames = []
        for name in list(gone):
            twin = next((other for other in came if new[other] == old[name]), None)
            if twin is not None:
                renames.append((name, twin))
                gone.remove(name)
                came.remove(twin)
        if len(gone) == len(came) == 1:  # renamed and changed
            renames.append((gone.pop(), came.pop()))
        for was, now_named in renames:
            lines.append(f"{path}: stateful transform renamed {was!r} -> {now_named!r}: "
                         + _mapping(was, now_named))
            lines += [f"{path}: {line}"
                      for line in step_differences(now_named, old[was], new[now_named])]
        lines += [f"{path}: stateful transform {name!r} removed: --update would drop its "
                  "state; map it to its new name if it has one, or drain and replace the job"
                  for name in gone]
        lines += [f"{path}: stateful transform {name!r} added: it starts with no state; if it "
                  "replaces an old step, map the old name to it with --transform_name_mapping"
                  for name in came]
        for name in sorted(old.keys() & new.keys()):
            lines += [f"{path}: {line}" for line in step_differences(name, old[name], new[name])]
    return lines


def failure(lines: list[str]) -> str:
    return "\n".join([
        f"The pipeline's stateful steps no longer match {PIN.name}, so a running job may not "
        "take this version with Dataflow's --update (docs/operations.md, 'Update and drain'):",
        *(f"  - {line}" for line in lines),
        "A renamed step can be mapped with --transform_name_mapping; a state spec's name or "
        "coder cannot: drain the old job, then start the new one.",
        f"If the change is meant, regenerate the pin and commit it with the change: {RECIPE}",
    ])


def render(pin: Spec) -> str:
    return json.dumps(pin, indent=2, sort_keys=True) + "\n"


def load() -> Spec:
    if not PIN.exists():
        pytest.fail(f"{PIN} is missing; write it with: {RECIPE}")
    pinned: Spec = json.loads(PIN.read_text(encoding="utf-8"))
    return pinned


@pytest.fixture(scope="module")
def now() -> Spec:
    return current()


def test_the_stateful_steps_match_the_pin(now: Spec) -> None:
    if os.environ.get(REGENERATE) == "1":
        PIN.write_text(render(now), encoding="utf-8")
    pinned = load()

    assert not (lines := differences(pinned, now)), failure(lines)
    assert pinned == now, failure(["the pin differs in a way not named above"])
    assert PIN.read_text(encoding="utf-8") == render(pinned), (
        f"{PIN.name} is not in its canonical form (sorted keys, 2-space indent): {RECIPE}")


def test_the_pin_holds_every_cell_the_engine_defines() -> None:
    pinned = load()
    [name] = [step for step in pinned["streaming"]
              if step.endswith(f"/ParDo({AgentDoFn.__name__})")]

    missing = sorted({*CELLS, *QUEUE_CELLS} - pinned["streaming"][name]["state"].keys())
    assert not missing, f"{name} in {PIN.name} has no state spec for engine cells {missing}"


def test_a_changed_step_is_named_with_what_to_do() -> None:
    """The differences name renames, cells and timers, so a failure says what to do."""
    cell = {"kind": "bag", "protocol": "beam:user_state:bag:v1",
            "element_coder": "beam:coder:bytes:v1"}
    step = {"input_coder": "beam:coder:kv:v1(beam:coder:bytes:v1, beam:coder:bytes:v1)",
            "window_fn": "beam:window_fn:global_windows:v1",
            "state": {"queue": cell}, "timers": {"ts-wake": {"time_domain": "PROCESSING_TIME"}}}
    varint = {**cell, "element_coder": "beam:coder:varint:v1"}

    [renamed] = differences({"streaming": {"A/ParDo(F)": step}},
                            {"streaming": {"B/ParDo(F)": step}})
    changed = differences({"streaming": {"A": step}},
                          {"streaming": {"A": {**step, "state": {"queue": varint, "new": cell},
                                                "timers": {}}}})

    assert "renamed 'A/ParDo(F)' -> 'B/ParDo(F)'" in renamed
    assert """--transform_name_mapping '{"A/ParDo(F)": "B/ParDo(F)"}'""" in renamed
    expected = ("streaming: A: state spec 'new' added", "streaming: A: state spec 'queue' changed",
                "streaming: A: timer 'ts-wake' removed")
    assert all(line.startswith(start) for line, start in zip(changed, expected, strict=True))
    assert "drain and replace" in changed[1]
