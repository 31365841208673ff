from tests.tiers import TESTS, starts_processes


def test_files_that_start_processes_are_in_the_slow_tier():
    assert starts_processes(TESTS / "faults" / "test_startup.py")  # subprocess itself
    assert starts_processes(TESTS / "faults" / "test_frozen_rank.py")  # through a helper
    assert starts_processes(TESTS / "torch" / "test_units.py")  # through its conftest
    assert not starts_processes(TESTS / "common" / "test_metrics.py")
    assert not starts_processes(TESTS / "compare" / "test_at_scale.py")
