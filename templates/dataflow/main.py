"""Dataflow Flex Template entry point: parse the job's flags and run the pipeline.

The launcher executes this file with the template parameters as command-line
flags (see flex_template.json). All pipeline logic lives in beam_agents.beam.
"""

import logging
import sys

from beam_agents.beam import run

if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run(sys.argv[1:])
