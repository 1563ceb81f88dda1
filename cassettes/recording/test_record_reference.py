"""Every case, against the reference server on the tiny checkpoint (cassettes/reference/)."""

import pytest
from recording_cases import REFERENCE, case_params, run

KIND = REFERENCE


@pytest.mark.parametrize("case", case_params(KIND))
def test_case(case, recording_server, laya_client):
    assert run(case, KIND, recording_server, laya_client) == list(case.expected[KIND])
