"""Entry point of the native PyFlink job: ``flink run --python agent_job.py --input_files ...``.

It holds no logic: flags go to ``beam_agents.flink.run``, which builds the
read -> decode -> activate -> write job (see templates/flink/README.md).
"""

import sys

from beam_agents.flink import run

if __name__ == "__main__":
    run(sys.argv[1:])
