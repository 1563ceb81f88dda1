"""Every case, against laya's own laya-serve 0.4.15 on the tiny checkpoint (cassettes/laya-serve-0.4.15/)."""

import pytest
from recording_cases import LAYA_SERVE, case_params, run

KIND = LAYA_SERVE


@pytest.mark.parametrize("case", case_params(KIND))
def test_case(case, recording_server, laya_client):
    assert run(case, KIND, recording_server, laya_client) == list(case.expected[KIND])
