"""The projection benchmark's verdict and its command line (common.tools.projection_check); the
benchmark itself runs on the SLURM test cluster, as root, by hand (docs/communication.md)."""

import pytest

from common.tools import projection_check
from common.tools.projection_check import judged, table


def test_a_measurement_inside_a_narrow_range_holds():
    row = judged("ddp", "50mbit", 8, measured=100.0, low=98.0, high=104.0)
    assert row.error == 0.0
    assert row.ok


@pytest.mark.parametrize(("measured", "ok"), [(95.5, True), (94.5, False), (104.9, True)])
def test_the_error_is_taken_against_the_nearer_end(measured, ok):
    row = judged("mwms", "200mbit", 8, measured=measured, low=100.0, high=100.0)
    assert row.error == pytest.approx(measured / 100.0 - 1)
    assert row.ok is ok


def test_a_range_wider_than_ten_percent_fails_even_around_the_measurement():
    row = judged("fsdp2", "200mbit", 8, measured=300.0, low=297.0, high=375.0)
    assert row.error == 0.0
    assert row.width == pytest.approx(375 / 297 - 1)
    assert not row.ok


def test_the_table_gives_each_row_its_projection_and_verdict():
    rows = [
        judged("ddp", "50mbit", 8, measured=430.0, low=376.0, high=376.0),
        judged("fsdp2", "200mbit", 8, measured=268.0, low=297.0, high=375.0),
    ]
    lines = table(rows).splitlines()
    assert lines[2] == "| ddp | 50mbit | 8 | 430 | 376 | +14.4% | 0.0% | no |"
    assert lines[3] == "| fsdp2 | 200mbit | 8 | 268 | 297-375 | -9.8% | 26.3% | no |"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--nodes", "8"], "two node counts at least"),
        (["--nodes", "1,8"], "the fewest 2 or more"),
        (["--nodes", "two,8"], "give node counts such as 2,8"),
        (["--strategies", "ddp,zero3"], "unknown zero3"),
        (["--rates", "off"], "'off' checks no link"),
        (["--rates", "25mbit", "--from", "/nonexistent"], "no folder of 25mbit"),
    ],
)
def test_bad_arguments_name_the_problem_and_exit_2(argv, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        projection_check.arguments(argv)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_every_strategy_is_priced_by_a_profile_the_check_measures():
    for framework, _, per_node, profile in projection_check.CASES.values():
        module, profile_per_node, _, _ = projection_check.PROFILES[profile]
        assert module.startswith(f"{framework}_impl.")
        assert profile_per_node == per_node
