/*
 * The keyed operator the native Flink job runs its agent in, in process mode:
 * PyFlink's ExternalPythonKeyedProcessOperator, whose checkpoints hold every
 * timer the Python function registered before the barrier.
 *
 * Why. In process mode the Python worker's timer registrations reach the JVM
 * on a gRPC thread, which queues each as a mail for the task thread. A
 * checkpoint barrier finishes the open bundle (prepareSnapshotPreBarrier) and
 * the snapshot follows in the same mailbox action, before those mails run:
 * the timers the bundle set are missing from the checkpoint, though the state
 * the same bundle wrote is in it. A key whose wake timer was set in that
 * bundle is restored with its queued events and no timer, and never runs
 * again (docs/design.md, "Timers across a restore"). PyFlink drains the
 * pending registrations before it advances the watermark; this operator also
 * drains them after the bundle a barrier finishes, so the snapshot sees them.
 * A drained registration's mail then finds it done and does nothing.
 *
 * Built by `make flink-operator-jar` (tools/toolchain/flink.mk) with javac
 * against the jars of the installed PyFlink, and added to pipeline.jars by
 * beam_agents.flink._operator.
 */
package beam_agents.flink;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.AbstractExternalDataStreamPythonFunctionOperator;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonKeyedProcessOperator;

public class SnapshotTimersKeyedProcessOperator<OUT> extends ExternalPythonKeyedProcessOperator<OUT> {

    private static final long serialVersionUID = 1L;

    public SnapshotTimersKeyedProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            RowTypeInfo inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo) {
        super(config, pythonFunctionInfo, inputTypeInfo, outputTypeInfo);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        super.prepareSnapshotPreBarrier(checkpointId);
        drainUnregisteredTimers();
    }

    /** PyFlink fuses the Python operators chained behind this one by copying it: keep the class. */
    @Override
    public <T> AbstractExternalDataStreamPythonFunctionOperator<T> copy(
            DataStreamPythonFunctionInfo pythonFunctionInfo, TypeInformation<T> outputTypeInfo) {
        return new SnapshotTimersKeyedProcessOperator<>(
                getConfiguration(),
                pythonFunctionInfo,
                (RowTypeInfo) getInputTypeInfo(),
                outputTypeInfo);
    }
}
