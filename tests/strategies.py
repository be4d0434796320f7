"""Shared hypothesis strategies."""

from __future__ import annotations

from hypothesis import strategies as st

#: A small key space, so operations collide on keys often.
memory_keys = st.sampled_from(["a", "b", "c", "log", "ring", "ü-ключ"])

#: Values mostly small, sometimes crossing varint-length boundaries (127/128, 16383/16384).
memory_values = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([127, 128, 16_383, 16_384]).map(lambda n: b"v" * n),
)

#: Operations on Memory: (name, key, value, max_items).
memory_operations = st.tuples(
    st.sampled_from(["set", "get", "delete", "append", "ring"]),
    memory_keys,
    memory_values,
    st.integers(min_value=1, max_value=5),
)
