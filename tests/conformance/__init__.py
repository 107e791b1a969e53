import pytest

pytest.register_assert_rewrite("tests.conformance.reference")  # its row checks show what differed, as a test's do
