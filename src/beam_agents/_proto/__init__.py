"""Generated from proto/beam_agents/v1 by tools/gen_protos.py. Do not edit."""
