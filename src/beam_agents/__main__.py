"""``python -m beam_agents`` is the ``beam-agents`` command."""

from beam_agents.cli import main

raise SystemExit(main())
