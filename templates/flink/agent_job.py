"""Entry point of the native PyFlink job: ``flink run --python agent_job.py --input_files ...``.

It holds no logic: flags go to ``beam_agents.flink.run``, which builds the
read -> decode -> activate -> write job (see templates/flink/README.md).
Stop it with ``flink stop --savepointPath DIR JOB_ID`` and restore it, with
the same or a changed agent, at any parallelism up to ``--max_parallelism``,
with ``flink run -s SAVEPOINT --python agent_job.py ...`` (docs/operations.md).
"""

import sys

from beam_agents.flink import run

if __name__ == "__main__":
    run(sys.argv[1:])
