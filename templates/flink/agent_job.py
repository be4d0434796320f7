"""Entry point of the native PyFlink job: ``flink run --python agent_job.py --input_files ...``.

It holds no logic: flags go to ``beam_agents.flink.main``, which builds the
read -> decode -> activate -> write job (see templates/flink/README.md) and,
on a bounded input, ends with the summary ``beam-agents run`` prints.
Stop it with ``flink stop --savepointPath DIR JOB_ID`` and restore it, with
the same or a changed agent, at any parallelism up to ``--max_parallelism``,
with ``flink run -s SAVEPOINT --python agent_job.py ...`` (docs/operations.md).
"""

import os
import sys

from beam_agents.flink import main
from beam_agents.hosting import otel_flags_from_env

if __name__ == "__main__":
    # The standard OTEL_* variables, read here on the client; flags win.
    sys.exit(main([*otel_flags_from_env(os.environ), *sys.argv[1:]]))
