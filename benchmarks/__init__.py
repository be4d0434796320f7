"""Reproducible benchmarks for beam-agents: ``python -m benchmarks`` (``make bench``).

Every figure is a ratio of two things measured side by side, in the same run,
over several repetitions, because the machines this runs on are small and
shared: an absolute number would say more about the neighbours than about the
code. Each benchmark reports the median of its per-repetition ratios with the
minimum and maximum, and states its target where it has one. Nothing here is
asserted in tests; ``tests/unit/test_benchmarks.py`` only checks that the
quick mode runs and writes every field.

The benchmarks (see each module's docstring for what it measures and why):

* B1 `benchmarks.b1_activation`: one activation's state work against a raw
  protobuf parse and serialize of the same bytes.
* B2 `benchmarks.b2_pipeline`: the library's batch path (``GroupByKey`` then
  `AgentBatchDoFn`) against a bare stateful DoFn on the DirectRunner.
* B3 `benchmarks.b3_scaling`: activation cost against blob size and cache entries.
* B4 `benchmarks.b4_soak`: per-key state under 100,000 events that grow memory
  without limit.
* B5 `benchmarks.b5_cache_key`: the replay-cache key against a naive hash.
* B6 `benchmarks.b6_latency`: throughput when the model takes 200 ms to answer,
  64 keys in flight, on the Beam batch and streaming paths and on Flink,
  against one activation at a time.
* B7 `benchmarks.b7_journal`: the time a journaled model call adds over an
  unjournaled one at the activation core, on SQLite and on the Firestore
  test server, as a share of a 200 ms model call; reads and writes counted.
* B8 `benchmarks.b8_paid_calls`: paid model calls per committed activation
  under a bundle retry, a crash/restore, a rerun and a transient outage,
  with the journal and without.
"""
