"""SupportTriage holds to pytest-laya's DecisionModel contract, over replayed decisions."""

import pytest
from acme_triage import SupportTriage

from pytest_laya.contract import DecisionModelContract, scripted_served_model


class TestSupportTriage(DecisionModelContract):
    # The tiny checkpoint behind these cassettes leans on option order, as real Laya does:
    # no adapter can fix that, so this one is not held to it (the other behaviour checks run).
    behaviour_properties = DecisionModelContract.behaviour_properties - {"option_order"}

    @pytest.fixture
    def decision_model(self, laya_model):
        # laya_model is pytest-laya's served model: replayed from cassettes here, live with
        # --laya-mode=live --laya-url URL, re-recorded with --laya-record --laya-url URL.
        return SupportTriage(laya_model)

    @pytest.fixture
    def scripted_decision_model(self):
        # For the checks that feed malformed answers: a served model whose "server" is scripted.
        return lambda answers: SupportTriage(scripted_served_model(answers))
