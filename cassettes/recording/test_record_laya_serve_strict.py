"""The strict-mode cases, against laya-serve 0.4.15 with LAYA_JEV_STRICT=1 (cassettes/laya-serve-0.4.15-strict/)."""

import pytest
from recording_cases import LAYA_SERVE_STRICT, case_params, run

KIND = LAYA_SERVE_STRICT


@pytest.mark.parametrize("case", case_params(KIND))
def test_case(case, recording_server, laya_client):
    assert run(case, KIND, recording_server, laya_client) == list(case.expected[KIND])
