"""The operator the keyed function runs in: in process mode, one whose checkpoints hold its timers.

PyFlink runs a ``KeyedProcessFunction`` in process mode inside its
``ExternalPythonKeyedProcessOperator``. The timers the Python worker registers
reach that operator on a gRPC thread and are applied by mails on the task
thread; a checkpoint barrier finishes the open bundle and snapshots at once,
before those mails run. So the timers of a checkpoint's last bundle are not in
the checkpoint, while the state the same bundle wrote is: after a restore
(a task manager lost, a worker killed) a key whose wake or release timer was
set in that bundle holds its queued events and is never called back. On a
topic nothing else calls it back; on a file, only another event of its own.

`keyed_process` runs the function in ``SnapshotTimersKeyedProcessOperator``
instead (``java/``, built by ``make flink-operator-jar``), which applies the
pending registrations after the barrier's bundle and before the snapshot, as
PyFlink already does before it advances the watermark. Thread mode registers
timers synchronously and keeps PyFlink's operator.
docs/decisions/0016-timers-across-a-restore.md has the measurements.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pyflink.common import TypeInformation
from pyflink.datastream import DataStream, KeyedStream, StreamExecutionEnvironment
from pyflink.java_gateway import get_gateway

from beam_agents.errors import ConfigError

__all__ = ["OPERATOR_CLASS", "keyed_process", "operator_jar"]

#: The Java class, in the jar `operator_jar` names.
OPERATOR_CLASS = "beam_agents.flink.SnapshotTimersKeyedProcessOperator"

_JAR = "beam-agents-flink-operator.jar"


def operator_jar() -> Path:
    """Where ``make flink-operator-jar`` puts the operator's jar: inside this package."""
    return Path(str(resources.files("beam_agents.flink").joinpath("_jars", _JAR)))


def keyed_process(keyed: KeyedStream, function: Any, output_type: TypeInformation,
                  name: str) -> DataStream:
    """``keyed.process(function)``, in process mode in the operator whose snapshot holds its timers.

    Raises:
        ConfigError: Process mode, and the operator's jar was not built.
    """
    from pyflink.datastream.data_stream import _get_one_input_stream_operator  # noqa: PLC0415
    from pyflink.fn_execution import flink_fn_execution_pb2  # noqa: PLC0415

    kind = flink_fn_execution_pb2.UserDefinedDataStreamFunction.KEYED_PROCESS
    operator, j_output_type = _get_one_input_stream_operator(keyed, function, kind, output_type)
    if operator.getClass().getSimpleName() == "ExternalPythonKeyedProcessOperator":
        jar = operator_jar()
        if not jar.is_file():
            raise ConfigError(
                f"the Flink job's keyed operator jar is missing ({jar}): build it with `make "
                "flink-operator-jar` (javac, against the installed PyFlink), or run with "
                "--python_execution_mode thread; without it a restore can lose timers",
                field="python_execution_mode")
        _add_jar(keyed._j_data_stream.getExecutionEnvironment(), jar.resolve().as_uri())
        ours = get_gateway().jvm
        for part in OPERATOR_CLASS.split("."):
            ours = getattr(ours, part)
        operator = ours(operator.getConfiguration(), operator.getPythonFunctionInfo(),
                        operator.getInputTypeInfo(), operator.getProducedType())
    return DataStream(keyed._j_data_stream.transform(name, j_output_type, operator))


def _add_jar(j_env: Any, uri: str) -> None:
    """Add `uri` to the job's ``pipeline.jars`` (and the client's class loader) once."""
    jvm = get_gateway().jvm
    config = jvm.org.apache.flink.python.util.PythonConfigUtil.getEnvironmentConfig(j_env)
    jars = config.getString(jvm.org.apache.flink.configuration.PipelineOptions.JARS.key(), None)
    if uri not in (jars or ""):
        StreamExecutionEnvironment(j_env).add_jars(uri)
