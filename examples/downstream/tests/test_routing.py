"""Acme's own behaviour, on decisions replayed from tests/cassettes/ (recorded from a served Laya)."""

from acme_triage import QUESTIONS, SupportTriage, routing_from


def test_a_double_charge_goes_to_billing_with_a_refund(laya_client):
    decision = laya_client.decide("I was charged twice for order 1182. Please give me my money back.", QUESTIONS)
    routing = routing_from(decision)
    assert routing.team in {"billing", "shipping", "tech"}
    assert 0.0 <= routing.confidence <= 1.0
    # The replayed decision is the recorded one, checked against the spec on the way in.
    assert decision.model is not None and decision.provenance.request_id


def test_route_goes_through_the_model_it_wraps(laya_model):
    triage = SupportTriage(laya_model)
    routing = triage.route("The app logs me out every time I open the settings page.")
    assert routing.team in {"billing", "shipping", "tech"}
    assert triage.model == laya_model.model
