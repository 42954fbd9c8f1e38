"""Unit tests: the pure domain, no database."""

import pytest

# The specification harness asserts on events; rewrite its asserts so failures show diffs.
pytest.register_assert_rewrite("tests.support.specification")
