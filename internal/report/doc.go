// Package report turns what a load run exposed on /metrics into numbers and
// pictures people can compare: a Sampler scrapes the relay's and the fleet's
// Prometheus endpoints (or an in-process registry) every second into per-second derived values (send
// Gbps, CPU idle %, logged-in clients, latency quantiles from histogram
// deltas), Analyze reduces each run to its figures (peak and plateau, login
// plateau, quadratic and linear fits of send Gbps against logged-in clients)
// and aggregates repeats into mean ± standard deviation, RunHeadline and
// Decide answer how many users the relay held and why it stopped there (a
// plateau, or the first breach of an SLO: typed Reasons), and Write
// renders summary.json, series.csv, PNG charts and a self-contained
// index.html that opens with that answer.
//
// It is not a metrics store or a Prometheus replacement: it keeps one run's
// samples in memory and knows only the metric names the relay and the fleet
// export (docs/metrics.md). It does not start relays or fleets; that is
// internal/compare's job.
package report
