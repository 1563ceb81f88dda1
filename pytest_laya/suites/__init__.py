"""Contract suites that ship with pytest-laya and run with ``pytest --pyargs``.

`pytest_laya.suites.server` is the HTTP contract of a served Laya: point it at any
/v1/systemone server (``--laya-mode=live --laya-url URL``) and it checks status codes, bodies,
limits, determinism, health and batch against the chosen spec, lists the target spec's gaps,
and measures option-order and question independence. See docs/server-contract.md.
"""
