"""A fixed set of varied decision requests, for parity checks and contract suites.

Comparing two implementations (in-process Laya, the reference server, laya-serve, a fake) is
only as good as the requests compared: one English noul question agrees almost by accident.
These 34 requests vary what changes a forward pass -- English and non-English states (German,
French, Spanish, Portuguese, Italian, Dutch, Polish, Russian, Japanese, Chinese, Hindi, Arabic,
Turkish), text, JSON and conversation states, choice questions with 2 to 12 options (as a dict
and as a list), score questions with 2 to 7 levels, noul questions with and without criteria,
and several questions of mixed types in one request -- so that a difference in tokenisation,
option order or question framing shows up as a different answer.

They are plain data in the Jev wire form every server accepts. `VARIED_REQUESTS` is a tuple of
`SampleRequest`; `body()` gives a fresh copy to send or mutate. The first four are the requests
the reference-server parity test has always used, kept byte for byte.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SampleRequest", "VARIED_REQUESTS", "sample_request"]


@dataclass(frozen=True)
class SampleRequest:
    """One request: an `id` for test ids and messages, its `state`, `questions` and `language`.

    Treat `state` and `questions` as read-only (they are shared); `body()` returns copies.
    """

    id: str
    language: str
    state: Any
    questions: Mapping[str, Mapping[str, Any]]

    def body(self) -> dict[str, Any]:
        """``{"state": ..., "questions": ...}``, deep-copied, ready to send."""
        return {"state": copy.deepcopy(self.state), "questions": copy.deepcopy(dict(self.questions))}

    @property
    def types(self) -> frozenset[str]:
        """The question types this request asks."""
        return frozenset(q["type"] for q in self.questions.values())


def _choice(instructions: str, criteria: Any) -> dict[str, Any]:
    return {"type": "choice", "instructions": instructions, "criteria": criteria}


def _score(instructions: str, levels: list[str]) -> dict[str, Any]:
    return {"type": "score", "instructions": instructions, "criteria": levels}


def _noul(instructions: str, criteria: dict[str, str] | None = None) -> dict[str, Any]:
    question: dict[str, Any] = {"type": "noul", "instructions": instructions}
    if criteria is not None:
        question["criteria"] = criteria
    return question


_TEAMS = {"billing": "Charges, invoices and refunds", "technical": "Software problems and crashes",
          "shipping": "Deliveries and parcels", "account": "Logins, passwords and profiles"}

VARIED_REQUESTS: tuple[SampleRequest, ...] = (
    # The reference-server parity test's original four, unchanged.
    SampleRequest("en-noul-refund", "en",
                  "I was charged twice for my order. Please refund the duplicate today.",
                  {"refund": _noul("Does the customer ask for a refund?")}),
    SampleRequest("de-choice-3", "de", "Die App stürzt ab, sobald ich die Rechnung öffne.",
                  {"team": _choice("Welches Team?", {"billing": "Abrechnung", "technical": "Technik", "sales": "Vertrieb"})}),
    SampleRequest("fr-score-3-noul", "fr", "Mon colis n'est jamais arrivé.",
                  {"urgency": _score("Urgence ?", ["faible", "moyenne", "haute"]),
                   "refund": _noul("Remboursement ?")}),
    SampleRequest("en-conversation-choice-12", "en",
                  [{"role": "user", "content": "Where is my parcel?"}, {"role": "agent", "content": "Checking."}],
                  {"topic": _choice("Topic?", [f"topic {i}" for i in range(12)])}),
    # English, every type and option count.
    SampleRequest("en-choice-2", "en", "The invoice shows a charge I do not recognise.",
                  {"team": _choice("Which team should handle this?",
                                   {"billing": _TEAMS["billing"], "technical": _TEAMS["technical"]})}),
    SampleRequest("en-choice-4", "en", "I cannot log in since I changed my password yesterday.",
                  {"team": _choice("Which team should handle this?", dict(_TEAMS))}),
    SampleRequest("en-choice-5-list", "en", "The parcel arrived damaged and the box was open.",
                  {"issue": _choice("What is the main issue?", ["late", "damaged", "missing", "wrong item", "other"])}),
    SampleRequest("en-choice-6", "en", "Please cancel my subscription at the end of this month.",
                  {"intent": _choice("What does the customer want?", {
                      "cancel": "End a subscription", "upgrade": "Move to a bigger plan", "downgrade": "Move to a smaller plan",
                      "pause": "Stop billing for a while", "refund": "Money back", "question": "Only asking"})}),
    SampleRequest("en-choice-7-list", "en", "My card was declined twice although it has funds.",
                  {"cause": _choice("Most likely cause?", ["bank block", "expired card", "wrong CVC", "address mismatch",
                                                          "limit reached", "fraud check", "site error"])}),
    SampleRequest("en-choice-8", "en", "The app shows a blank screen on my tablet after the update.",
                  {"platform": _choice("Which platform is affected?", {
                      "ios": "iPhone", "ipados": "iPad", "android": "Android phone", "android-tablet": "Android tablet",
                      "windows": "Windows", "macos": "Mac", "linux": "Linux", "web": "Browser"})}),
    SampleRequest("en-choice-9-list", "en", "Hello, I'd like to know your opening hours on public holidays.",
                  {"topic": _choice("Topic?", ["hours", "prices", "location", "returns", "warranty", "jobs",
                                               "press", "partnerships", "other"])}),
    SampleRequest("en-choice-10", "en", "The delivery driver left the parcel with a neighbour I don't know.",
                  {"sentiment": _choice("Sentiment?", {f"s{i}": f"level {i} of 10" for i in range(10)})}),
    SampleRequest("en-choice-11-list", "en", "Two items are missing from my order of eleven.",
                  {"count": _choice("How many items are missing?", [str(i) for i in range(11)])}),
    SampleRequest("en-score-2", "en", "Can you tell me whether the blue model is back in stock?",
                  {"urgency": _score("How urgent is the request?", ["Not urgent", "Urgent"])}),
    SampleRequest("en-score-5", "en", "This is the third time I am writing. Nobody answers and I am furious.",
                  {"anger": _score("How angry is the customer?", ["calm", "slightly annoyed", "annoyed", "angry", "furious"])}),
    SampleRequest("en-score-7", "en", "The product works, but setup took me two hours.",
                  {"satisfaction": _score("How satisfied is the customer?",
                                          ["1 - very unhappy", "2", "3", "4 - neutral", "5", "6", "7 - delighted"])}),
    SampleRequest("en-noul-criteria", "en", "Thanks, that solved it. Have a good day!",
                  {"resolved": _noul("Is the problem resolved?", {"true": "The customer says it works now",
                                                                   "false": "The problem remains"})}),
    SampleRequest("en-json-state-mixed", "en",
                  {"subject": "Refund request", "body": "Order 1182 arrived broken. I want my money back.", "tier": "gold"},
                  {"team": _choice("Which team?", {"billing": _TEAMS["billing"], "shipping": _TEAMS["shipping"]}),
                   "urgency": _score("Urgency?", ["low", "medium", "high"]),
                   "refund": _noul("Does the customer ask for a refund?")}),
    SampleRequest("en-mixed-five-questions", "en",
                  [{"role": "user", "content": "My package is late and the tracking link is broken."},
                   {"role": "agent", "content": "Sorry about that. Let me check."},
                   {"role": "user", "content": "Please hurry, it is a birthday present."}],
                  {"zeta": _noul("Is the customer in a hurry?"),
                   "alpha": _choice("Main topic?", ["delivery", "website", "billing"]),
                   "mid": _score("Urgency?", ["low", "medium", "high", "critical"]),
                   "beta": _choice("Channel to answer on?", {"email": "Email", "chat": "Chat", "phone": "Phone"}),
                   "omega": _noul("Should an agent call back?")}),
    # Other languages and scripts.
    SampleRequest("de-mixed", "de", "Ich wurde zweimal belastet und möchte mein Geld zurück.",
                  {"team": _choice("Welches Team ist zuständig?", {"billing": "Abrechnung", "technical": "Technik"}),
                   "refund": _noul("Möchte der Kunde eine Erstattung?")}),
    SampleRequest("fr-choice-4", "fr", "Je n'arrive plus à me connecter à mon compte depuis ce matin.",
                  {"equipe": _choice("Quelle équipe ?", {"facturation": "Factures", "technique": "Problèmes techniques",
                                                          "livraison": "Livraisons", "compte": "Comptes"})}),
    SampleRequest("es-score-4", "es", "El pedido llegó tarde, pero el producto es excelente.",
                  {"satisfaccion": _score("¿Qué tan satisfecho está el cliente?", ["nada", "poco", "bastante", "muy"])}),
    SampleRequest("es-noul", "es", "Quiero cancelar mi suscripción hoy mismo.",
                  {"cancelar": _noul("¿Quiere el cliente cancelar?")}),
    SampleRequest("pt-choice-3-list", "pt", "O aplicativo fecha sozinho quando abro as configurações.",
                  {"categoria": _choice("Qual categoria?", ["bug", "pedido", "pagamento"])}),
    SampleRequest("it-mixed", "it", "Il corriere non è mai passato e nessuno risponde al telefono.",
                  {"urgenza": _score("Quanto è urgente?", ["bassa", "media", "alta"]),
                   "reparto": _choice("Quale reparto?", {"spedizioni": "Spedizioni", "assistenza": "Assistenza"})}),
    SampleRequest("nl-noul", "nl", "Mijn bestelling is beschadigd aangekomen.",
                  {"schade": _noul("Is het product beschadigd?")}),
    SampleRequest("pl-choice-5", "pl", "Nie mogę zapłacić kartą, strona wyświetla błąd.",
                  {"problem": _choice("Jaki to problem?", {"platnosc": "Płatność", "strona": "Strona", "konto": "Konto",
                                                            "dostawa": "Dostawa", "inne": "Inne"})}),
    SampleRequest("ru-score-3", "ru", "Посылка пришла вовремя, всё отлично.",
                  {"urgency": _score("Насколько срочно?", ["не срочно", "средне", "срочно"])}),
    SampleRequest("ja-choice-3", "ja", "注文した商品がまだ届いていません。",
                  {"team": _choice("どのチームが担当しますか？", {"billing": "請求", "shipping": "配送", "technical": "技術"})}),
    SampleRequest("zh-noul", "zh", "我被重复扣款了，请退款。",
                  {"refund": _noul("客户是否要求退款？")}),
    SampleRequest("hi-choice-2", "hi", "मेरा पासवर्ड काम नहीं कर रहा है।",
                  {"team": _choice("कौन सी टीम?", {"account": "खाता", "billing": "बिलिंग"})}),
    SampleRequest("ar-score-4", "ar", "الطلب متأخر جداً وأحتاجه غداً.",
                  {"urgency": _score("ما مدى الإلحاح؟", ["منخفض", "متوسط", "مرتفع", "حرج"])}),
    SampleRequest("tr-mixed-conversation", "tr",
                  [{"role": "user", "content": "Faturamda iki kez ücret görünüyor."},
                   {"role": "agent", "content": "Kontrol ediyorum."}],
                  {"refund": _noul("Müşteri iade istiyor mu?"),
                   "team": _choice("Hangi ekip?", ["fatura", "teknik", "kargo", "hesap", "satış", "diğer"]),
                   "urgency": _score("Aciliyet?", ["düşük", "orta", "yüksek"])}),
    SampleRequest("de-choice-12", "de", "Welche Abteilung kümmert sich um meine defekte Waschmaschine?",
                  {"abteilung": _choice("Abteilung?", {f"abt{i}": f"Abteilung {i}" for i in range(12)})}),
)


def sample_request(request_id: str) -> SampleRequest:
    """The request named `request_id`; a KeyError lists the names there are."""
    for request in VARIED_REQUESTS:
        if request.id == request_id:
            return request
    raise KeyError(f"no sample request {request_id!r}; there are: {', '.join(r.id for r in VARIED_REQUESTS)}")
