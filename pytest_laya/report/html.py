"""One self-contained HTML page from a report (one run's, or a merged one).

Figures are drawn by matplotlib and inlined as SVG; the page loads nothing (its
Content-Security-Policy forbids any fetch), so it can be mailed, attached to a CI run or opened
offline. Sections: the conformance matrix (servers x specs x rule families), the violations with
the exchange each was found in, drift as recorded-against-live numbers (verify mode), the
behaviour the server contract measured (``check``), latency per server, and the cassettes: what
the run wrote (recorded whole, appended to, or left untouched), the unused and the stale ones.
matplotlib is imported only here, when a page is rendered: ``pip install 'pytest-laya[report]'``.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Mapping
from typing import Any

from pytest_laya.report.merge import ReportError, violations_of

__all__ = ["render_html", "drift_points", "measures_of"]

#: The rule families of the conformance table: what each counts.
FAMILIES = (("operations", "operations"), ("headers", "headers"))
#: The server contract's section of measured behaviour (pytest_laya.suites.server_under_test).
#: The server contract's section of behaviour figures (its name before the behaviour checks, too).
MEASURED_SECTIONS = ("behaviour measured", "measured (reported, never failed on)")
#: A test record's cassette `outcome` when its run recorded, as the Cassettes section says it.
WRITTEN_WORDS = {"written": "recorded whole", "appended": "appended to (the requests it lacked)",
                 "unchanged": "unchanged (file untouched)"}
_DRIFT = re.compile(r"body at (?P<where>\S+) \(recorded (?P<recorded>-?[0-9.eE+-]+), now (?P<live>-?[0-9.eE+-]+)")
_MEASURE = re.compile(r"^(?P<name>[^:]+): (?P<changed>\d+) of (?P<pairs>\d+)\b.*?largest probability (?:change|deviation) "
                      r"(?P<change>[0-9.]+)")
_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;color:#1b1f24;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.8em}
.meta{color:#57606a}table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{color:#57606a;font-size:.9em}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;white-space:pre-wrap}.bad{color:#cf222e}.good{color:#1a7f37}
details{margin:.3em 0}summary{cursor:pointer}.none{color:#57606a;font-style:italic}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ReportError("the HTML report draws its figures with matplotlib: pip install 'pytest-laya[report]'") from None
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, and no glyph ids to clash
    matplotlib.rcParams["svg.hashsalt"] = "pytest-laya"  # the same report renders the same bytes
    from matplotlib.figure import Figure

    return Figure


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # no XML prolog or DOCTYPE (it names a DTD on the network)


def _figure(name: str, svg: str, caption: str) -> str:
    return (f'<figure class="chart" data-figure="{_esc(name)}">{svg}'
            f"<figcaption>{_esc(caption)}</figcaption></figure>")


# -- the figures ------------------------------------------------------------------------------

def _conformance(report: Mapping[str, Any], Figure: Any) -> str:
    rows = list(report.get("conformance") or [])
    if not rows:
        return '<p class="none">No response was checked against a spec in this run.</p>'
    servers = sorted({str(row["server"]) for row in rows})
    specs = sorted({str(row["spec"]) for row in rows})
    columns = [(spec, family, label) for spec in specs for family, label in FAMILIES]
    by_key = {(str(row["server"]), str(row["spec"])): row for row in rows}
    values, texts = [], []
    for server in servers:
        line, words = [], []
        for spec, family, _ in columns:
            row = by_key.get((server, spec))
            seen = int(row.get(f"{family}_seen", 0)) if row else 0
            met = int(row.get(f"{family}_met", 0)) if row else 0
            line.append(met / seen if seen else float("nan"))
            words.append(f"{met}/{seen}" if seen else "-")
        values.append(line)
        texts.append(words)
    figure = Figure(figsize=(1.6 + 1.35 * len(columns), 0.9 + 0.55 * len(servers)))
    axes = figure.add_subplot()
    image = axes.imshow(values, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    axes.set_xticks(range(len(columns)), [f"{spec}\n{label}" for spec, _, label in columns])
    axes.set_yticks(range(len(servers)), servers)
    axes.xaxis.tick_top()
    for y, words in enumerate(texts):
        for x, word in enumerate(words):
            axes.text(x, y, word, ha="center", va="center", fontsize=10)
    figure.colorbar(image, ax=axes, label="share met")
    table = ["<table><tr><th>server</th><th>spec</th><th>operations met</th><th>headers met</th>"
             "<th>violations</th><th>responses</th></tr>"]
    for row in rows:
        bad = ' class="bad"' if row.get("violations") else ""
        table.append(f"<tr><td>{_esc(row['server'])}</td><td>{_esc(row['spec'])}</td>"
                     f"<td>{_esc(row.get('operations_met'))}/{_esc(row.get('operations_seen'))}</td>"
                     f"<td>{_esc(row.get('headers_met'))}/{_esc(row.get('headers_seen'))}</td>"
                     f"<td{bad}>{_esc(row.get('violations'))}</td><td>{_esc(row.get('exchanges'))}</td></tr>")
    table.append("</table>")
    return _figure("conformance", _svg(figure), "Each server's responses against each spec: the share of "
                   "operations and headers met (green: all).") + "".join(table)


def _violations(report: Mapping[str, Any]) -> str:
    found = violations_of(report)
    if not found:
        return '<p class="good">No violations.</p>'
    items = []
    for violation in found:
        first = violation["message"].splitlines()[0] if violation["message"] else ""
        items.append(f"<details><summary><b>{_esc(violation['test'])}</b> ({_esc(violation['server'])}): "
                     f"{_esc(first)}</summary><pre>{_esc(violation['message'])}</pre></details>")
    return "".join(items)


def _verify_results(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's verify results, once each (a run's ``verify`` and its tests' ``drift`` repeat them)."""
    results, seen = [], set()
    candidates = list(report.get("verify") or [])
    candidates += [record["drift"] for record in report.get("tests") or [] if isinstance(record.get("drift"), dict)]
    for result in candidates:
        key = (result.get("cassette"), result.get("server"))
        if key not in seen:
            seen.add(key)
            results.append(result)
    return results


def drift_points(report: Mapping[str, Any]) -> list[tuple[float, float, str, bool]]:
    """(recorded, live, pointer, moved) for every probability verify compared; `moved` when it
    moved beyond the tolerance. Reports without ``probabilities`` give the moved numbers only."""
    points = []
    for result in _verify_results(report):
        tolerance = float(result.get("tolerance") or 0.0)
        for check in result.get("interactions") or []:
            pairs = check.get("probabilities")
            if pairs:
                for where, recorded, live in pairs:
                    points.append((float(recorded), float(live), str(where), abs(recorded - live) > tolerance))
                continue
            for difference in check.get("differences") or []:
                match = _DRIFT.search(str(difference))
                if match:
                    try:
                        points.append((float(match.group("recorded")), float(match.group("live")),
                                       match.group("where"), True))
                    except ValueError:
                        continue
    return points


def _drift(report: Mapping[str, Any], Figure: Any) -> str:
    results = _verify_results(report)
    if not results:
        return ('<p class="none">No verify run in this report (run with --laya-mode=verify to compare recordings '
                'with live answers).</p>')
    compared = sum(len(result.get("interactions") or []) for result in results)
    points = drift_points(report)
    moved = [p for p in points if p[3]]
    if not points:
        return f'<p class="good">No probabilities to compare ({compared} interactions compared).</p>'
    figure = Figure(figsize=(5.2, 5.0))
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], color="#8c959f", linewidth=1, linestyle="--", label="recorded = live")
    kept = [p for p in points if not p[3]]
    if kept:
        axes.scatter([p[0] for p in kept], [p[1] for p in kept], color="#1a7f37", s=18, alpha=0.7,
                     label="within the tolerance", zorder=2)
    if moved:
        axes.scatter([p[0] for p in moved], [p[1] for p in moved], color="#cf222e", s=30, label="moved", zorder=3)
    axes.set_xlabel("recorded probability")
    axes.set_ylabel("live probability")
    axes.set_xlim(-0.02, 1.02)
    axes.set_ylim(-0.02, 1.02)
    axes.set_aspect("equal")
    axes.legend(loc="upper left")
    listed = "".join(f"<li><code>{_esc(where)}</code>: recorded {recorded:g}, live {live:g}</li>"
                     for recorded, live, where, _ in moved[:50])
    caption = (f"Each probability of each answer verify compared, recorded against live: {len(points)} over "
               f"{compared} interactions, {len(moved)} moved beyond the tolerance.")
    return _figure("drift", _svg(figure), caption) + (f"<ul>{listed}</ul>" if listed else
                                                      '<p class="good">None moved beyond the tolerance.</p>')


def _measured_lines(report: Mapping[str, Any]) -> list[Any]:
    notes = report.get("notes") or {}
    return [line for section in MEASURED_SECTIONS for line in notes.get(section, [])]


def measures_of(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The server contract's measured behaviour (``check``), one mapping per measure."""
    found = []
    for line in _measured_lines(report):
        match = _MEASURE.match(str(line))
        if match:
            found.append({"name": match.group("name"), "changed": int(match.group("changed")),
                          "pairs": int(match.group("pairs")), "max_change": float(match.group("change")),
                          "line": str(line)})
    return found


def _measures(report: Mapping[str, Any], Figure: Any) -> str:
    lines = _measured_lines(report)
    if not lines:
        return '<p class="none">No behaviour measured (the server contract, python -m pytest_laya check URL, measures it).</p>'
    measures = measures_of(report)
    listed = "<ul>" + "".join(f"<li>{_esc(line)}</li>" for line in lines) + "</ul>"
    if not measures:
        return listed
    figure = Figure(figsize=(7.5, 0.8 + 0.6 * len(measures)))
    rate, change = figure.subplots(1, 2, sharey=True)
    names = [m["name"] for m in measures]
    rate.barh(names, [m["changed"] / m["pairs"] if m["pairs"] else 0 for m in measures], color="#0969da")
    rate.set_xlim(0, 1)
    rate.set_xlabel("share of answers decided differently")
    change.barh(names, [m["max_change"] for m in measures], color="#8250df")
    change.set_xlabel("largest probability change")
    return _figure("measures", _svg(figure), "How answers move when options are reordered or questions asked "
                   "together (measured; failed on only where invariance is required).") + listed


def _latency(report: Mapping[str, Any], Figure: Any) -> str:
    by_server: dict[str, list[float]] = {}
    for record in report.get("tests") or []:
        values = [float(v) for v in record.get("latency_ms") or [] if isinstance(v, (int, float))]
        if values:
            by_server.setdefault(str(record.get("server")), []).extend(values)
    if not by_server:
        return '<p class="none">No exchange timings in this report.</p>'
    servers = sorted(by_server)
    figure = Figure(figsize=(7.5, 0.9 + 0.6 * len(servers)))
    axes = figure.add_subplot()
    axes.boxplot([by_server[s] for s in servers], orientation="horizontal", tick_labels=servers, showfliers=True)
    axes.set_xlabel("milliseconds per exchange (a replay answers from the cassette)")
    axes.set_xlim(0, max(1.0, 1.1 * max(max(values) for values in by_server.values())))

    def quantile(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    table = ["<table><tr><th>server</th><th>exchanges</th><th>median ms</th><th>p95 ms</th><th>max ms</th></tr>"]
    for server in servers:
        values = by_server[server]
        table.append(f"<tr><td>{_esc(server)}</td><td>{len(values)}</td><td>{quantile(values, 0.5):.2f}</td>"
                     f"<td>{quantile(values, 0.95):.2f}</td><td>{max(values):.2f}</td></tr>")
    table.append("</table>")
    return _figure("latency", _svg(figure), "Latency of each exchange, per server.") + "".join(table)


def _cassettes(report: Mapping[str, Any]) -> str:
    parts = []
    counts = ", ".join(f"{count} {name}" for name, count in (report.get("cassettes") or {}).items() if count)
    parts.append(f"<p>Cassettes: {_esc(counts or 'none used')}.</p>")
    written = sorted({(str(record["cassette"]), WRITTEN_WORDS[record["outcome"]])
                      for record in report.get("tests") or []
                      if record.get("cassette") and record.get("outcome") in WRITTEN_WORDS})
    if written:
        parts.append("<p>Recorded by this run:</p><ul>" + "".join(
            f"<li><code>{_esc(path)}</code> {_esc(what)}</li>" for path, what in written) + "</ul>")
    unused = report.get("unused_cassettes")
    if unused is None:
        why = "; ".join(report.get("unused_why") or []) or "the run was not the whole suite"
        parts.append(f'<p class="none">Unused cassettes were not worked out: {_esc(why)}.</p>')
    elif unused:
        parts.append(f"<p class=\"bad\">{len(unused)} unused cassette(s) (no test used them):</p><ul>"
                     + "".join(f"<li><code>{_esc(path)}</code></li>" for path in unused) + "</ul>")
    else:
        parts.append('<p class="good">No unused cassettes.</p>')
    stale = report.get("stale_cassettes") or []
    if stale:
        parts.append(f"<p class=\"bad\">{len(stale)} stale cassette(s):</p><ul>"
                     + "".join(f"<li><code>{_esc(s.get('cassette'))}</code> {_esc(s.get('reason'))}</li>" for s in stale)
                     + "</ul>")
    return "".join(parts)


def render_html(report: Mapping[str, Any], *, title: str = "pytest-laya report") -> str:
    """The page, as text (UTF-8 when written)."""
    Figure = _matplotlib()
    tests = report.get("tests") or []
    merged = report.get("merged_from")
    meta = f"mode {report.get('mode')}; {len(tests)} test records; servers: " + (
        ", ".join(f"{name} ({spec} spec)" for name, spec in (report.get("servers") or {}).items()) or "none")
    if merged:
        meta += f"; merged from {len(merged)} reports: " + ", ".join(str(name) for name in merged)
    sections = [
        ("conformance", "Conformance", _conformance(report, Figure)),
        ("violations", f"Violations ({len(violations_of(report))})", _violations(report)),
        ("drift", "Drift: recorded against live", _drift(report, Figure)),
        ("measures", "Behaviour measured", _measures(report, Figure)),
        ("latency", "Latency per server", _latency(report, Figure)),
        ("cassettes", "Cassettes", _cassettes(report)),
    ]
    body = "".join(f'<section id="{name}"><h2>{_esc(heading)}</h2>{content}</section>' for name, heading, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_esc(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{_esc(title)}</h1><p class=\"meta\">{_esc(meta)}</p>"
            f"{body}</body></html>\n")
