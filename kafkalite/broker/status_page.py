"""The status page (admin HTTP `/`): HTML rendered from a status snapshot, pure functions.

`render_page(snapshot, refresh_s)` is the whole document; `render_body(snapshot)` is what
`/status/fragment` serves and the page's script swaps in every `refresh_s` seconds (so
the rendering lives here once, in Python, and is unit-tested from a dict). Without
script, a `<noscript>` meta refresh reloads the page. Every asset is served by the broker
(`/status.css`, `/status.js`; the icon is an inline data URL), and the admin server sends
a Content-Security-Policy that allows nothing else.

Rows carry data attributes (`data-broker-id`, `data-alive`, `data-topic`,
`data-partition`, `data-status`) for scripts and tests; under-replicated and offline
partitions, and dead brokers, have their own classes, highlighted by the stylesheet.

The page is bounded whatever the cluster's size: at most PARTITION_ROWS_MAX partitions
are listed, the problem ones first (offline, under min ISR, under-replicated), and at
most TOPIC_BLOCKS_MAX topic blocks; the partitions and topics left out are counted per
topic and in a note (`#partitions-folded`). /status.json has every partition.
"""

from __future__ import annotations

from html import escape
from typing import Any

from kafkalite.broker.status_snapshot import PARTITION_OFFLINE, PARTITION_OK, PARTITION_UNDER_REPLICATED

REFRESH_S_DEFAULT = 2.0
REFRESH_S_MIN = 0.5
REFRESH_S_MAX = 300.0
# 100,000 partitions listed in full made a 48 MB page that took 2.3 s to render on the
# broker's event loop; these keep it to a few hundred KB.
PARTITION_ROWS_MAX = 300
TOPIC_BLOCKS_MAX = 500

_STATUS_LABEL = {PARTITION_OK: "ok", PARTITION_UNDER_REPLICATED: "under-replicated", PARTITION_OFFLINE: "offline"}


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "—"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:,}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def render_page(snapshot: dict[str, Any], refresh_s: float = REFRESH_S_DEFAULT, body: str | None = None) -> str:
    """`body`: render_body(snapshot) if the caller has it already (the admin server's cache)."""
    assert REFRESH_S_MIN <= refresh_s <= REFRESH_S_MAX
    title = f"kafkalite — broker {snapshot['broker_id']}"
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_e(title)}</title>"
        "<link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/status.css\">"
        f"<noscript><meta http-equiv=\"refresh\" content=\"{refresh_s:g}\"></noscript>"
        "<script src=\"/status.js\" defer></script></head>\n<body>"
        f"<header><h1>kafkalite <small>as broker {_e(snapshot['broker_id'])} sees it</small></h1>"
        f"<p id=\"refresh\" data-refresh-ms=\"{int(refresh_s * 1000)}\">refreshes every {refresh_s:g} s"
        "<span id=\"refresh-error\" hidden></span></p></header>\n"
        f"<main id=\"status\">{render_body(snapshot) if body is None else body}</main></body></html>\n"
    )


def render_body(snapshot: dict[str, Any]) -> str:
    return "\n".join([
        _summary(snapshot), _rates(snapshot.get("rates")), _brokers(snapshot["brokers"]),
        _partitions(snapshot["partitions"]), _reassignments(snapshot), _groups(snapshot["groups"]),
    ])


def _summary(s: dict[str, Any]) -> str:
    brokers = s["brokers"]
    alive = sum(1 for b in brokers if b["alive"])
    parts = s["partitions"]
    under = sum(1 for p in parts if p["status"] == PARTITION_UNDER_REPLICATED)
    offline = sum(1 for p in parts if p["status"] == PARTITION_OFFLINE)
    controller = s["controller_id"] if s["controller_id"] >= 0 else "none"
    return (
        f"<section id=\"summary\" data-generated-ms=\"{_e(s['generated_ms'])}\"><dl>"
        f"<dt>cluster</dt><dd>{_e(s.get('cluster_id'))}</dd>"
        f"<dt>controller</dt><dd id=\"controller-id\">{_e(controller)} (epoch {_e(s['controller_epoch'])})</dd>"
        f"<dt>brokers alive</dt><dd id=\"brokers-alive\">{alive} of {len(brokers)}</dd>"
        f"<dt>partitions</dt><dd>{len(parts)}</dd>"
        f"<dt>under-replicated</dt><dd id=\"under-replicated-count\" class=\"{'bad' if under else ''}\">{under}</dd>"
        f"<dt>offline</dt><dd id=\"offline-count\" class=\"{'bad' if offline else ''}\">{offline}</dd>"
        "</dl></section>"
    )


def _rates(rates: dict[str, float] | None) -> str:
    if rates is None:
        return "<section id=\"rates\"><h2>Rates on this broker</h2><p class=\"muted\">measuring…</p></section>"
    rows = [
        ("produce requests", f"{rates['produce_requests']:.1f}/s"),
        ("messages in (as leader)", f"{rates['messages_in']:.1f}/s"),
        ("bytes in (as leader)", f"{human_bytes(rates['bytes_in'])}/s"),
        ("fetch requests", f"{rates['fetch_requests']:.1f}/s"),
        ("bytes out to consumers", f"{human_bytes(rates['consumer_fetch_bytes'])}/s"),
        ("bytes out to followers", f"{human_bytes(rates['replica_fetch_bytes'])}/s"),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<section id=\"rates\"><h2>Rates on this broker</h2><table class=\"kv\">{body}</table></section>"


def _brokers(brokers: list[dict[str, Any]]) -> str:
    rows = []
    for b in brokers:
        cls = "alive" if b["alive"] else "down"
        address = f"{b['host']}:{b['port']}" if b.get("host") else "—"
        status = "<span class=\"pill ok\">up</span>" if b["alive"] else "<span class=\"pill bad\">down</span>"
        ctrl = "<span class=\"pill controller\">controller</span>" if b["controller"] else ""
        rows.append(
            f"<tr class=\"broker {cls}\" data-broker-id=\"{_e(b['id'])}\" data-alive=\"{'true' if b['alive'] else 'false'}\">"
            f"<td>{_e(b['id'])}</td><td>{_e(address)}</td><td>{_e(b.get('rack') or '—')}</td><td>{status}</td><td>{ctrl}</td></tr>"
        )
    return ("<section id=\"brokers\"><h2>Brokers</h2><table><thead><tr><th>id</th><th>address</th><th>rack</th><th>alive</th>"
            f"<th>role</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>")


def _replica_cells(p: dict[str, Any]) -> str:
    offsets = p.get("replica_offsets") or {}
    items = []
    for rid in p["replicas"]:
        o = offsets.get(str(rid))
        flags = []
        if rid == p["leader"]:
            flags.append("leader")
        if rid not in p["isr"]:
            flags.append("out-of-isr")
        detail = ""
        if o is not None:
            lag = "" if o.get("lag") is None else f" · lag {_num(o['lag'])}"
            detail = f" <span class=\"offsets\">HW {_num(o.get('hw'))} · LEO {_num(o.get('leo'))}{lag}</span>"
        items.append(f"<li class=\"replica {' '.join(flags)}\" data-replica=\"{_e(rid)}\">{_e(rid)}{detail}</li>")
    return f"<ul class=\"replicas\">{''.join(items)}</ul>"


def _rank(p: dict[str, Any]) -> int:
    """Which partitions are listed first when not all are: offline, then under min ISR,
    then under-replicated, then healthy ones."""
    if p["status"] == PARTITION_OFFLINE:
        return 0
    if p.get("under_min_isr"):
        return 1
    return 2 if p["status"] == PARTITION_UNDER_REPLICATED else 3


def _listed(parts: list[dict[str, Any]]) -> set[int]:
    """The id()s of the partitions listed in detail: all if there are few enough, else the
    problem ones by rank, then healthy ones of user topics, then of internal ones (each in
    the snapshot's order: topic, partition)."""
    if len(parts) <= PARTITION_ROWS_MAX:
        return {id(p) for p in parts}
    problems = sorted((p for p in parts if _rank(p) < 3), key=_rank)  # (stable)
    chosen = problems[:PARTITION_ROWS_MAX]
    for internal in (False, True):
        for p in parts:
            if len(chosen) >= PARTITION_ROWS_MAX:
                break
            if _rank(p) == 3 and p["topic"].startswith("__") == internal:
                chosen.append(p)
    return {id(p) for p in chosen}


def _partitions(parts: list[dict[str, Any]]) -> str:
    """One block per topic: a summary line, then its partitions. Internal topics
    (`__consumer_offsets`) start folded unless something is wrong with them; the page's
    script keeps what the reader folded or unfolded across refreshes (by the block's id).
    Bounded (PARTITION_ROWS_MAX, TOPIC_BLOCKS_MAX): what is left out is counted."""
    head = "<section id=\"partitions\"><h2>Topics and partitions</h2>"
    if not parts:
        return head + "<p class=\"muted\">no topics</p></section>"
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in parts:
        by_topic.setdefault(p["topic"], []).append(p)
    listed = _listed(parts)
    shown_of = {topic: [p for p in rows if id(p) in listed] for topic, rows in by_topic.items()}
    # Topics with listed partitions always have their block; the others share what is left.
    folded_blocks_max = max(0, TOPIC_BLOCKS_MAX - sum(1 for shown in shown_of.values() if shown))
    blocks = []
    left_topics, left_parts, left_problems = 0, 0, 0
    for topic, rows in sorted(by_topic.items(), key=lambda kv: (kv[0].startswith("__"), kv[0])):
        shown = shown_of[topic]
        if shown or folded_blocks_max > 0:
            folded_blocks_max -= 0 if shown else 1
            blocks.append(_topic_block(topic, rows, shown))
        else:
            left_topics += 1
            left_parts += len(rows)
            left_problems += sum(1 for p in rows if p["status"] != PARTITION_OK)
    note = ""
    if len(listed) < len(parts):
        note = (f"<p id=\"partitions-folded\" class=\"muted\" data-listed=\"{len(listed)}\" data-total=\"{len(parts)}\">"
                f"Listing {len(listed):,} of {len(parts):,} partitions: problem ones first (offline, under min ISR, "
                f"under-replicated); the other {len(parts) - len(listed):,} are counted per topic. "
                "<a href=\"/status.json\">/status.json</a> has them all.</p>")
    if left_topics:
        problems = f", {left_problems:,} of them with problems" if left_problems else ", all healthy"
        blocks.append(f"<p id=\"topics-folded\" class=\"muted\" data-topics=\"{left_topics}\">and {left_topics:,} more topics "
                      f"({left_parts:,} partitions{problems}) not shown</p>")
    return head + note + "".join(blocks) + "</section>"


def _topic_block(topic: str, parts: list[dict[str, Any]], shown: list[dict[str, Any]]) -> str:
    """`parts`: the topic's partitions, counted in the summary line; `shown`: those listed."""
    under = sum(1 for p in parts if p["status"] == PARTITION_UNDER_REPLICATED)
    offline = sum(1 for p in parts if p["status"] == PARTITION_OFFLINE)
    rf = max(len(p["replicas"]) for p in parts)
    problems = [f"{n} {label}" for n, label in ((under, "under-replicated"), (offline, "offline")) if n]
    health = f"<span class=\"pill bad\">{_e(', '.join(problems))}</span>" if problems else "<span class=\"pill ok\">healthy</span>"
    is_open = " open" if problems or not topic.startswith("__") else ""
    rows = []
    for p in shown:
        status = p["status"]
        label = _STATUS_LABEL[status]
        cls = ("" if status == PARTITION_OK else f" {label}") + (" under-min-isr" if p.get("under_min_isr") else "")
        leader = p["leader"] if p["leader"] >= 0 else "none"
        min_isr = " <span class=\"pill bad\">under min ISR</span>" if p.get("under_min_isr") and status != PARTITION_OFFLINE else ""
        rows.append(
            f"<tr class=\"partition{cls}\" data-topic=\"{_e(p['topic'])}\" data-partition=\"{_e(p['partition'])}\" "
            f"data-status=\"{_e(status)}\"><td>{_e(p['partition'])}</td><td>{_e(leader)}</td>"
            f"<td>{_e(p['leader_epoch'])}</td><td>{_replica_cells(p)}</td><td>{_e(_ids(p['isr']))}</td>"
            f"<td><span class=\"pill {'ok' if status == PARTITION_OK else 'bad'}\">{_e(label)}</span>{min_isr}</td></tr>"
        )
    table = ("<table><thead><tr><th>partition</th><th>leader</th><th>epoch</th><th>replicas (HW · LEO · lag where known)</th>"
             f"<th>ISR</th><th>status</th></tr></thead><tbody>{''.join(rows)}</tbody></table>") if rows else ""
    folded = len(parts) - len(shown)
    note = (f"<p class=\"folded muted\" data-folded=\"{folded}\">{folded:,} {'more ' if rows else ''}partitions "
            "not listed</p>") if folded else ""
    return (f"<details class=\"topic\" id=\"topic-{_e(topic)}\" data-topic=\"{_e(topic)}\"{is_open}><summary><b>{_e(topic)}</b> "
            f"<span class=\"muted\">{len(parts)} partitions × {rf} replicas</span> {health}</summary>"
            f"{table}{note}</details>")


def _reassignments(s: dict[str, Any]) -> str:
    head = "<section id=\"reassignments\"><h2>Reassignments in progress</h2>"
    if not s.get("reassignment_known", True):
        return head + "<p class=\"muted\">unknown: ZooKeeper could not be read</p></section>"
    moves = s["reassignments"]
    if not moves:
        return head + "<p class=\"muted\">none</p></section>"
    rows = []
    for m in moves:
        waiting = [r for r in m["target"] if r not in m["isr"]]
        rows.append(f"<tr data-topic=\"{_e(m['topic'])}\" data-partition=\"{_e(m['partition'])}\"><td>{_e(m['topic'])}</td>"
                    f"<td>{_e(m['partition'])}</td><td>{_e(_ids(m['replicas']))}</td><td>{_e(_ids(m['target']))}</td>"
                    f"<td>{_e(_ids(m['isr']))}</td><td>{_e(_ids(waiting))}</td></tr>")
    return (head + "<table><thead><tr><th>topic</th><th>partition</th><th>replicas now</th><th>target</th><th>ISR</th>"
            f"<th>not yet in ISR</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>")


def _groups(groups: list[dict[str, Any]]) -> str:
    head = "<section id=\"groups\"><h2>Consumer groups coordinated here</h2>"
    if not groups:
        return head + "<p class=\"muted\">none</p></section>"
    rows = []
    for g in groups:
        detail = "".join(f"<li>{_e(r['topic'])}-{_e(r['partition'])}: committed {_num(r['committed'])}, end {_num(r['end'])}, "
                         f"lag {_num(r['lag'])}</li>" for r in g["partitions"])
        rows.append(f"<tr data-group=\"{_e(g['group'])}\"><td>{_e(g['group'])}</td><td>{_e(g['state'])}</td><td>{_e(g['members'])}</td>"
                    f"<td class=\"lag\">{_num(g['total_lag'])}</td><td><ul class=\"offsets\">{detail}</ul></td></tr>")
    return (head + "<table><thead><tr><th>group</th><th>state</th><th>members</th><th>total lag</th><th>partitions</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table></section>")


STATUS_CSS = """
:root { font-family: system-ui, sans-serif; color: #1d2330; background: #f6f7f9; }
body { margin: 0 1.5rem 2rem; }
header h1 { margin: 1rem 0 0.2rem; font-size: 1.5rem; }
header small { font-weight: normal; color: #5b6475; font-size: 0.9rem; }
#refresh { color: #5b6475; margin: 0 0 1rem; font-size: 0.85rem; }
#refresh-error { color: #b00020; font-weight: bold; margin-left: 1em; }
main.stale { opacity: 0.55; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 0.6rem 1rem; margin-bottom: 1rem; }
h2 { font-size: 1.05rem; margin: 0.2rem 0 0.5rem; }
table { border-collapse: collapse; width: 100%; font-size: 0.9rem; }
th, td { text-align: left; padding: 0.25rem 0.5rem; border-bottom: 1px solid #eef0f3; vertical-align: top; }
table.kv { width: auto; }
dl { display: grid; grid-template-columns: repeat(6, auto); gap: 0.2rem 1rem; margin: 0; }
dt { color: #5b6475; font-size: 0.8rem; } dd { margin: 0; font-weight: 600; }
.bad { color: #b00020; }
.muted { color: #8a93a3; }
.pill { display: inline-block; padding: 0 0.5em; border-radius: 1em; font-size: 0.8rem; background: #e6f4ea; color: #137333; }
.pill.bad { background: #fce8e6; color: #b00020; }
.pill.controller { background: #e8f0fe; color: #1a56c4; }
details.topic { margin: 0.3rem 0 0.6rem; }
details.topic summary { cursor: pointer; padding: 0.2rem 0; }
tr.broker.down { background: #fff1f0; }
tr.partition.under-replicated { background: #fff8e1; }
tr.partition.offline { background: #fde7e9; }
ul.replicas, ul.offsets { list-style: none; margin: 0; padding: 0; }
li.replica.leader { font-weight: 600; }
li.replica.out-of-isr { color: #b00020; }
li.replica.out-of-isr::after { content: " (not in ISR)"; }
.offsets { color: #5b6475; font-size: 0.8rem; font-weight: normal; }
"""

# Swaps in /status/fragment (same query string) every data-refresh-ms; when the broker does
# not answer, keeps the last view greyed out with the error and the time since it failed.
STATUS_JS = """
(function () {
  "use strict";
  var marker = document.getElementById("refresh");
  var main = document.getElementById("status");
  var error = document.getElementById("refresh-error");
  if (!marker || !main) { return; }
  var every = parseInt(marker.getAttribute("data-refresh-ms"), 10) || 2000;
  var failedSince = null;
  var chosen = {};  // topic blocks the reader folded or unfolded: kept across refreshes
  main.addEventListener("click", function (e) {
    var summary = e.target.closest("summary");
    if (summary && summary.parentElement.id) { chosen[summary.parentElement.id] = !summary.parentElement.open; }
  });
  function tick() {
    fetch("/status/fragment" + window.location.search, {cache: "no-store"})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        main.innerHTML = html;
        main.querySelectorAll("details[id]").forEach(function (d) { if (d.id in chosen) { d.open = chosen[d.id]; } });
        main.classList.remove("stale");
        error.hidden = true;
        failedSince = null;
      })
      .catch(function (e) {
        if (failedSince === null) { failedSince = new Date(); }
        main.classList.add("stale");
        error.hidden = false;
        error.textContent = "broker unreachable since " + failedSince.toLocaleTimeString() + " (" + e.message + ")";
      })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
"""

# The page needs nothing from elsewhere; the policy makes sure it never loads anything.
CONTENT_SECURITY_POLICY = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:"
