"""Reports of runs: joining the JSON reports of a split run (`merge`), and the HTML page (`html`).

Plain data in, plain data out: nothing here needs pytest. matplotlib is imported only by
`html`, and only when a page is rendered.
"""

from __future__ import annotations

from pytest_laya.report.merge import ReportError, merge_reports, read_report

__all__ = ["ReportError", "merge_reports", "read_report"]
