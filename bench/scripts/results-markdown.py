#!/usr/bin/env python3
"""Prints the markdown tables of docs/performance.md from one or more
benchcompare JSON reports; with several, medians are taken over the runs of
all of them. Usage: results-markdown.py bench/results/run2.json run3.json"""
import json, sys, statistics

def f(v, nd):
    return f"{v:,.{nd}f}"

KEYS = ["nominal_deliveries_per_s", "delivered_per_s", "server_cpu_s_per_million", "p50_ms", "p99_ms", "p999_ms",
        "server_rss_mib", "client_cpu_s_per_million_msgs", "missing", "late_sends", "skipped_sends"]

def pooled_medians(reports):
    groups = {}
    for r in reports:
        for x in r["runs"]:
            groups.setdefault((x["workload"], x["server"]), []).append(x)
    out = []
    for (w, srv), xs in groups.items():
        m = {"workload": w, "server": srv, "n": len(xs)}
        for k in KEYS:
            m[k] = statistics.median([x[k] for x in xs])
        out.append(m)
    return out

def main(*paths):
    reports = [json.load(open(p)) for p in paths]
    r = reports[-1]
    r["medians"] = pooled_medians(reports)
    r["runs"] = [x for rr in reports for x in rr["runs"]]
    n = max(m["n"] for m in r["medians"]) if r["medians"] else 0
    print(f"{r['machine']}; {r['rate_hz']:g} Hz, {r['payload_bytes']}-byte payloads, {r['window_s']:g} s window, medians of {n} runs ({', '.join(paths)})\n")
    print("| workload | server | nominal/s | delivered/s | srv CPU s/M | p50 ms | p99 ms | p99.9 ms | srv RSS MiB | client CPU s/M | missing | late+skipped |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {}
    for m in r["medians"]:
        by.setdefault(m["workload"], []).append(m)
    for w, rows in by.items():
        for m in rows:
            print(f"| {w} | {m['server']} | {f(m['nominal_deliveries_per_s'],0)} | {f(m['delivered_per_s'],0)} | {m['server_cpu_s_per_million']:.2f} | {m['p50_ms']:.2f} | {m['p99_ms']:.1f} | {m['p999_ms']:.1f} | {m['server_rss_mib']:.1f} | {m['client_cpu_s_per_million_msgs']:.2f} | {int(m['missing'])} | {int(m['late_sends'])+int(m['skipped_sends']):,} |")
        if len(rows) == 2:
            a, b = rows
            def q(k):
                return f"{a[k]/b[k]:.2f}" if b[k] else "-"
            print(f"| {w} | **{a['server']}/{b['server']}** | | {q('delivered_per_s')} | **{q('server_cpu_s_per_million')}** | {q('p50_ms')} | {q('p99_ms')} | {q('p999_ms')} | {q('server_rss_mib')} | {q('client_cpu_s_per_million_msgs')} | | |")
    print()
    print("| run | workload | server | delivered/s | srv CPU s/M | p99 ms | late | skipped | load avg before |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for x in r["runs"]:
        print(f"| {x['rep']} | {x['workload']} | {x['server']} | {f(x['delivered_per_s'],0)} | {x['server_cpu_s_per_million']:.2f} | {x['p99_ms']:.1f} | {x['late_sends']:,} | {x['skipped_sends']:,} | {x['loadavg_before']} |")
    if r.get("idle"):
        print()
        print("| idle (joined, rooms of 32) | connections | RSS before MiB | RSS after MiB | KiB per connection |")
        print("|---|---:|---:|---:|---:|")
        for i in r["idle"]:
            print(f"| {i['server']} | {i['connections']:,} | {i['base_rss_mib']:.1f} | {i['rss_mib']:.1f} | **{i['rss_per_conn_kib']:.1f}** |")
    if r.get("fleet_idle"):
        fi = r["fleet_idle"]
        print(f"| replay --receive-only (fleet) | {fi['clients']:,} | {fi['replay_base_rss_mib']:.1f} (1 client) | {fi['replay_rss_mib']:.1f} | **{fi['replay_rss_per_client_kib']:.1f}** per client (relay: {fi['relay_rss_per_conn_kib']:.1f}) |")
    if any(rr.get("fleet_load") for rr in reports):
        print()
        print("| fleet: cmd/replay N:N | clients | run | delivered/s of nominal | replay CPU s per M msgs | replay cores | replay RSS MiB | relay CPU s/M |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for i, x in enumerate([x for rr in reports for x in rr.get("fleet_load") or []]):
            print(f"| {x['workload']} | {x['clients']} | {i} | {f(x['delivered_per_s'],0)} of {f(x['nominal_deliveries_per_s'],0)} | {x['replay_cpu_s_per_million_msgs']:.3f} | {x['replay_cpu_cores']:.2f} | {x['replay_rss_mib']:.1f} | {x['relay_cpu_s_per_million']:.3f} |")
    for fl in r.get("failures") or []:
        print("\nFAILED:", fl)

if __name__ == "__main__":
    main(*sys.argv[1:])
