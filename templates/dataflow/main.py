"""Dataflow Flex Template entry point: parse the job's flags and run the pipeline.

The launcher executes this file with the template parameters as command-line
flags (see flex_template.json). All pipeline logic lives in beam_agents.beam.
"""

import logging
import os
import sys

from beam_agents.beam import run
from beam_agents.hosting import otel_flags_from_env

if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    # The standard OTEL_* variables, read here on the launcher; flags win.
    run([*otel_flags_from_env(os.environ), *sys.argv[1:]])
