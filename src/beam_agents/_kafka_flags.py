"""The Kafka flags' shared vocabulary: one parsing of ``--kafka_property``, one set of starts.

The native Flink job (``beam_agents.flink``) and the Beam pipeline
(``beam_agents.beam``) both read and write Kafka topics, with flags of the
same names; what the names mean is kept here, so the two hosts parse them
alike and a user moves between them with one vocabulary. Neither host's Kafka
client is imported here.
"""

from __future__ import annotations

from typing import Literal, get_args

from beam_agents.errors import ConfigError

__all__ = ["DEFAULT_GROUP_ID", "STARTING_OFFSETS", "StartingOffsets", "parse_properties"]

#: Where a job with no position of its own starts reading the input topic.
StartingOffsets = Literal["committed", "earliest", "latest"]
STARTING_OFFSETS: tuple[str, ...] = get_args(StartingOffsets)

#: The consumer group both hosts read with unless ``--kafka_group_id`` names another.
DEFAULT_GROUP_ID = "beam-agents"


def parse_properties(pairs: list[str] | tuple[str, ...],
                     flag: str = "kafka_property") -> dict[str, str]:
    """``KEY=VALUE`` strings (a repeated `flag`) -> a dict; names the bad one.

    A value may hold ``=`` (``sasl.jaas.config`` does); the key is stripped,
    the value kept as given.

    Raises:
        ConfigError: a pair has no ``=`` or an empty key.
    """
    properties: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--{flag} takes KEY=VALUE, got {pair!r}", field=flag)
        properties[name.strip()] = value
    return properties
