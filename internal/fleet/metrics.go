package fleet

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// Bucket bounds, in seconds.
var (
	latencyBuckets   = []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 20, 30, 60}
	handshakeBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}
	lagBuckets       = []float64{.0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5, 1, 5, 10, 60}
)

// collector exposes the fleet's atomics and histograms at scrape time, so
// the hot paths never touch a Prometheus metric.
type collector struct {
	f                                          *Fleet
	loggedIn, requested, attempts, logins      *prometheus.Desc
	sentMsgs, sentBytes, sentFrames            *prometheus.Desc
	recvMsgs, recvBytes, latency, lag, disconn *prometheus.Desc
	loops, delayed, shard                      *prometheus.Desc
	numbered, lost, joinRetries                *prometheus.Desc
	handshake, handshakes, httpStep            *prometheus.Desc
	expected, casts, starved, unacked          *prometheus.Desc
	next                                       *prometheus.Desc
}

func registerMetrics(reg *prometheus.Registry, f *Fleet) error {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	c := &collector{
		f:           f,
		loggedIn:    d("replay_clients_logged_in", "Fleet clients logged in (joined and not disconnected) now."),
		requested:   d("replay_clients_requested", "Clients this process runs: --clients, or this shard's share of them."),
		shard:       d("replay_shard_info", "Always 1: which shard of how many this fleet process is (0 of 1 when not sharded).", "shard", "shards"),
		attempts:    d("replay_login_attempts_total", "Login attempts started by the ramp."),
		logins:      d("replay_logins_total", "Finished login attempts by result: ok, or the failure reason (relay error code name, timeout, connect_refused, port_exhausted, ...).", "result"),
		sentMsgs:    d("replay_sent_messages_total", "Send frames (casts) written to the relay."),
		sentBytes:   d("replay_sent_bytes_total", "Bytes written to the relay (all frames; UDP tokens included)."),
		sentFrames:  d("replay_sent_frames_total", "Frames written to the relay by type (join, send, heartbeat, leave).", "type"),
		recvMsgs:    d("replay_received_messages_total", "Deliver frames received from the relay."),
		recvBytes:   d("replay_received_bytes_total", "Bytes read from the relay (all frames)."),
		latency:     d("replay_delivery_latency_seconds", "Send to deliver latency of traced sends, measured by the receiving fleet client (one clock)."),
		lag:         d("replay_schedule_lag_seconds", "How late each send left against its scheduled time."),
		disconn:     d("replay_disconnects_total", "Logged-in clients that lost their connection, by reason (the server's: a relay error code name, a profile's error reason, ws_<close code>, closed_by_relay or closed_by_server; the fleet's: reset, write_timeout, send_backlog_full, ...).", "reason"),
		loops:       d("replay_loops_completed_total", "Loop passes completed, summed over clients."),
		numbered:    d("replay_numbered_messages_received_total", "Deliveries of room-wide casts (broadcast, othercast) whose sender sequence the receiver checks for gaps."),
		lost:        d("replay_messages_lost_total", "Gaps in senders' sequences of room-wide casts as their receivers saw them (lost deliveries; late ones counted back off). Loss ratio: lost / (numbered received + lost)."),
		expected:    d("replay_deliveries_expected_total", "Deliveries the server owed the clients: their rooms' casts while they were in, by the profile's fan-out (others, all, none). Absent when the fleet cannot know them (fanout: server, or a sharded fleet, whose rooms span shards)."),
		casts:       d("replay_deliveries_received_total", "Deliveries received of the casts counted in replay_deliveries_expected_total. Loss: expected - received (per client, at least 0)."),
		starved:     d("replay_receivers_without_deliveries", "Logged-in or gone clients owed at least one delivery that received none."),
		unacked:     d("replay_leave_unacked_bytes_total", "Sent bytes the kernel still held unsent or unacknowledged by the server's TCP (SIOCOUTQ) when clients closed at the leave: sends counted as sent that the server may never have read."),
		next:        d("replay_next_connections_total", "Clients' later connections when they play recorded flows in turn (--flows all), by result: ok, or flow<index>_<reason>. Not logins: replay_logins_total counts a client once, on its first connection.", "result"),
		joinRetries: d("replay_udp_join_retries_total", "UDP join datagrams sent again because joined did not arrive in time (backoff 250 ms doubling to 2 s, until the login timeout)."),
		handshake:   d("replay_tls_handshake_seconds", "TLS handshake durations (after the TCP connect, before the login's first message); none without --tls."),
		handshakes:  d("replay_tls_handshakes_total", "TLS handshakes completed, by whether they resumed a session (--tls-resume).", "resumed"),
		httpStep:    d("replay_http_step_seconds", "The profile's HTTP steps (a seat, a token before the connection), request to the answer's last byte, by step; answered ones whatever their status (failures are replay_logins_total's <step>_http_<status>). Apart from the login time.", "step"),
		delayed:     d("replay_send_backpressure_total", "Frames that could not be handed to the kernel when due because the relay's socket buffer was full (the relay read too slowly) and waited in the client's send backlog."),
	}
	host, err := metrics.NewHostCollector("replay")
	if err != nil {
		return fmt.Errorf("host metrics: %w", err)
	}
	for _, col := range []prometheus.Collector{c, host, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.loggedIn, c.requested, c.attempts, c.logins, c.sentMsgs, c.sentBytes,
		c.sentFrames, c.recvMsgs, c.recvBytes, c.latency, c.lag, c.disconn, c.loops, c.delayed, c.shard,
		c.numbered, c.lost, c.joinRetries, c.handshake, c.handshakes, c.httpStep, c.expected, c.casts, c.starved, c.unacked, c.next} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.f.stats
	t := s.totals()
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.loggedIn, t.LoggedIn)
	sh := c.f.cfg.Shard
	gauge(c.requested, int64(sh.Clients(c.f.cfg.Clients)))
	gauge(c.shard, 1, strconv.Itoa(sh.Index), strconv.Itoa(sh.count()))
	counter(c.attempts, t.LoginAttempts)
	counter(c.logins, t.LoginsSucceeded, "ok")
	for reason, n := range s.failed.snapshot() {
		counter(c.logins, n, reason)
	}
	if len(c.f.turnFlows) > 0 {
		counter(c.next, s.next.ok.Load(), "ok")
		for reason, n := range s.next.failed.snapshot() {
			counter(c.next, n, reason)
		}
	}
	counter(c.sentMsgs, t.MessagesSent)
	counter(c.sentBytes, t.BytesSent)
	for ty, n := range s.framesByType() {
		counter(c.sentFrames, n, ty)
	}
	counter(c.recvMsgs, t.MessagesReceived)
	counter(c.recvBytes, t.BytesReceived)
	for reason, n := range s.disconn.snapshot() {
		counter(c.disconn, n, reason)
	}
	counter(c.loops, c.f.loops())
	counter(c.delayed, t.SendsDelayed)
	counter(c.numbered, t.NumberedReceived)
	counter(c.lost, t.MessagesLost)
	counter(c.joinRetries, t.UDPJoinRetries)
	if hs := c.f.hs; hs != nil {
		b, n, sum, full, resumed := hs.prom(handshakeBuckets)
		ch <- prometheus.MustNewConstHistogram(c.handshake, n, sum, b)
		counter(c.handshakes, full, "false")
		counter(c.handshakes, resumed, "true")
	}
	c.f.httpTimes.prom(handshakeBuckets, func(step string, b map[float64]uint64, n uint64, sum float64) {
		ch <- prometheus.MustNewConstHistogram(c.httpStep, n, sum, b, step)
	})
	d := c.f.deliveries()
	if d.Measured() {
		counter(c.expected, d.Expected)
		counter(c.casts, d.Received)
		gauge(c.starved, d.Starved)
	}
	counter(c.unacked, d.UnackedAtLeaveBytes)
	b, n, sum := s.promBuckets(false, latencyBuckets)
	ch <- prometheus.MustNewConstHistogram(c.latency, n, sum, b)
	b, n, sum = s.promBuckets(true, lagBuckets)
	ch <- prometheus.MustNewConstHistogram(c.lag, n, sum, b)
}
