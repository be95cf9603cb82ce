"""The test suite's own shape: what would stop pytest from collecting it in a clean checkout."""

from pathlib import Path


def test_test_module_basenames_are_unique_across_the_suite():
    # pytest imports test modules by basename (no packages under tests/): a second
    # test_x.py in another folder stops collection of the whole suite in a clean checkout.
    tests = Path(__file__).resolve().parents[1]
    names = [p.name for p in tests.rglob("test_*.py") if "fixtures" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
