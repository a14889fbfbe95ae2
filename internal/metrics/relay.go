package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Disconnect reasons that are not error codes (relay_disconnects_total).
const (
	ReasonClosed = "closed" // the client closed or reset the connection
	ReasonLeave  = "leave"  // a UDP session ended by leave
	// ReasonUnconfirmed: a UDP session whose client never sent back its
	// token within --udp-confirm-timeout (its source may have been forged).
	ReasonUnconfirmed = "unconfirmed"
	// ReasonMemoryBudget: a TCP connection cut because the relay's queued
	// bytes passed --queue-budget or its source's share, among those
	// holding the most.
	ReasonMemoryBudget = "memory_budget"
)

// Reasons a frame for a client was not sent (relay_undelivered_frames_total).
const (
	ReasonDatagramTooLarge = "datagram_too_large" // over the largest UDP datagram
	// ReasonUnconfirmed (above): a delivery to a UDP session not confirmed yet.
)

// undeliveredReasons are the labels of relay_undelivered_frames_total,
// initialised at 0.
var undeliveredReasons = []string{ReasonDatagramTooLarge, ReasonUnconfirmed}

// Rejection reasons for UDP datagrams that get no reply, beside error code
// names (relay_rejected_frames_total).
const (
	ReasonGarbage        = "garbage"         // not a datagram of token + one whole frame
	ReasonUnknownSession = "unknown_session" // token of no live session
	ReasonWrongSource    = "wrong_source"    // token used from another address than its join
)

// Causes of relay_frame_timeouts_total.
const (
	CauseTimeout = "timeout" // a frame not complete within --frame-timeout
	CauseBudget  = "budget"  // the largest partial frame when all of them passed --partial-budget
)

// Limits of relay_rate_limited_frames_total: the sender's own buckets,
// and its room's (what all members together send into one room).
const (
	LimitMessages     = "messages"
	LimitBytes        = "bytes"
	LimitRoomMessages = "room_messages"
	LimitRoomBytes    = "room_bytes"
)

// Caps of relay_limit_refusals_total: which cap refused a connection,
// session or join (each answered server_full).
const (
	CapConnections          = "connections"            // --max-connections
	CapConnectionsPerSource = "connections_per_source" // --max-connections-per-source
	CapRooms                = "rooms"                  // --max-rooms
	CapRoomsPerSource       = "rooms_per_source"       // --max-rooms-per-source
)

var caps = []string{CapConnections, CapConnectionsPerSource, CapRooms, CapRoomsPerSource}

// disconnectReasons and rejectReasons are the label values besides the
// error code names, which every labelled counter starts with at 0 so a
// dashboard shows 0 rather than no data.
var (
	disconnectReasons = []string{ReasonClosed, ReasonLeave, ReasonUnconfirmed, ReasonMemoryBudget}
	rejectReasons     = []string{ReasonGarbage, ReasonUnknownSession, ReasonWrongSource}
)

// Relay holds the relay's own metrics. Counters are meant to be added to in
// batches (once per read, once per write), not per delivery. Children of
// labelled vectors are resolved once here so the hot path does no label
// lookups.
type Relay struct {
	ConnectionsTCP    prometheus.Gauge
	ConnectionsUDP    prometheus.Gauge
	ReceivedMessages  prometheus.Counter
	QueuedMessages    prometheus.Counter
	DeliveredMessages prometheus.Counter
	ReceivedBytes     prometheus.Counter
	SentBytes         prometheus.Counter
	Writes            prometheus.Counter
	SlowConsumers     prometheus.Counter
	UDPJoinRepeats    prometheus.Counter
	UDPSendCalls      prometheus.Counter
	UDPDatagrams      prometheus.Counter
	Replaced          prometheus.Counter

	joins         *prometheus.CounterVec
	joinOK        prometheus.Counter
	rejected      *prometheus.CounterVec
	disconnects   *prometheus.CounterVec
	rateLimited   *prometheus.CounterVec
	limitedMsgs   prometheus.Counter
	limitedBytes  prometheus.Counter
	limitedRoomM  prometheus.Counter
	limitedRoomB  prometheus.Counter
	rejectLimited prometheus.Counter
	refusals      *prometheus.CounterVec
	frameTimeouts *prometheus.CounterVec
	undelivered   *prometheus.CounterVec
}

// NewRelay registers the relay_* metrics on reg, plus the host collector
// (relay_host_*). rooms reports the current number of rooms and partial the
// bytes held in partial frames, at scrape time.
func NewRelay(reg prometheus.Registerer, rooms func() int, partial func() float64) (*Relay, error) {
	conns := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "relay_connections", Help: "Open client connections (TCP) and live sessions (UDP).",
	}, []string{"transport"})
	m := &Relay{
		ConnectionsTCP: conns.WithLabelValues("tcp"),
		ConnectionsUDP: conns.WithLabelValues("udp"),
		ReceivedMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_received_messages_total", Help: "Frames received from clients and accepted (any type).",
		}),
		QueuedMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_queued_messages_total", Help: "Deliver frames queued to recipients (one per recipient of a send), written or not.",
		}),
		DeliveredMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_delivered_messages_total", Help: "Deliver frames written to recipients' sockets (TCP writes that succeeded, UDP datagrams sent).",
		}),
		ReceivedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_received_bytes_total", Help: "Bytes read from clients (TCP stream bytes, UDP datagram bytes).",
		}),
		SentBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_sent_bytes_total", Help: "Bytes written to clients (TCP and UDP).",
		}),
		Writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_writes_total", Help: "Write system calls (writev) to TCP clients; delivered messages / writes is how well the writers coalesce.",
		}),
		SlowConsumers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_slow_consumer_disconnects_total", Help: "Clients disconnected for an outbound queue over --max-pending or a write over --write-timeout.",
		}),
		UDPJoinRepeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_udp_join_repeats_total", Help: "UDP joins sent again by a client already joined from the same address as the same user and room (its joined was lost): answered with the session's joined again.",
		}),
		UDPSendCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_udp_send_calls_total", Help: "sendmmsg system calls of the UDP workers (each sends up to 1024 datagrams); relay_delivered_messages_total over UDP / this is how well the fan-out batches.",
		}),
		UDPDatagrams: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_udp_sent_datagrams_total", Help: "Datagrams the UDP workers' sendmmsg calls sent; deliveries over UDP / this is how many frames a datagram packs.",
		}),
		Replaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_replaced_sessions_total", Help: "Members whose place a newer join with the same user id in the same room took (their connection got replaced and was closed).",
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_rate_limited_frames_total", Help: "Frames dropped because their sender was over its rate limit, by limit (messages or bytes per second).",
		}, []string{"limit"}),
		frameTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_frame_timeouts_total", Help: "Connections closed for a partial frame, by cause: timeout (not complete within --frame-timeout) or budget (the largest when partial frames passed --partial-budget).",
		}, []string{"cause"}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_joins_total", Help: "Join attempts by result: ok or the error code name.",
		}, []string{"result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_rejected_frames_total", Help: "Frames or datagrams refused or dropped, by reason (error code name, rate_limited, or garbage, unknown_session, wrong_source for UDP).",
		}, []string{"reason"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_disconnects_total", Help: "Connections and UDP sessions ended, by reason (closed, leave, or the error code name).",
		}, []string{"reason"}),
	}
	m.undelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_undelivered_frames_total", Help: "Frames for a client that were not sent, by reason (datagram_too_large: over the largest UDP datagram; unconfirmed: a delivery to a UDP session that has not confirmed its address).",
	}, []string{"reason"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_limit_refusals_total", Help: "Connections, UDP sessions and joins refused with server_full, by the cap they would have passed (connections, connections_per_source, rooms, rooms_per_source).",
	}, []string{"limit"})
	m.joinOK = m.joins.WithLabelValues("ok")
	m.initLabels()
	m.limitedMsgs = m.rateLimited.WithLabelValues(LimitMessages)
	m.limitedBytes = m.rateLimited.WithLabelValues(LimitBytes)
	m.limitedRoomM = m.rateLimited.WithLabelValues(LimitRoomMessages)
	m.limitedRoomB = m.rateLimited.WithLabelValues(LimitRoomBytes)
	m.rejectLimited = m.rejected.WithLabelValues(wire.ErrRateLimited.String())
	roomsGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_rooms", Help: "Rooms that exist (rooms with at least one member).",
	}, func() float64 { return float64(rooms()) })
	partialGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_partial_frame_bytes", Help: "Bytes held in partial frames (frames whose first bytes arrived and the rest not yet), all connections.",
	}, partial)
	host, err := NewHostCollector("relay")
	if err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{conns, m.ReceivedMessages, m.QueuedMessages, m.DeliveredMessages, m.ReceivedBytes,
		m.SentBytes, m.Writes, m.SlowConsumers, m.UDPJoinRepeats, m.UDPSendCalls, m.UDPDatagrams, m.Replaced, m.joins, m.rejected, m.disconnects,
		m.undelivered, m.rateLimited, m.frameTimeouts, m.refusals, roomsGauge, partialGauge, host} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register relay metrics: %w", err)
		}
	}
	return m, nil
}

// initLabels creates every known label value of the labelled counters at
// 0: each error code name for joins, rejections and disconnects, plus the
// reasons that are not codes, the rate limits and the frame-timeout causes.
func (m *Relay) initLabels() {
	for _, code := range wire.ErrorCodes() {
		m.joins.WithLabelValues(code.String())
		m.rejected.WithLabelValues(code.String())
		m.disconnects.WithLabelValues(code.String())
	}
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(r)
	}
	for _, r := range disconnectReasons {
		m.disconnects.WithLabelValues(r)
	}
	for _, l := range []string{LimitMessages, LimitBytes, LimitRoomMessages, LimitRoomBytes} {
		m.rateLimited.WithLabelValues(l)
	}
	for _, c := range caps {
		m.refusals.WithLabelValues(c)
	}
	m.frameTimeouts.WithLabelValues(CauseTimeout)
	m.frameTimeouts.WithLabelValues(CauseBudget)
	for _, r := range undeliveredReasons {
		m.undelivered.WithLabelValues(r)
	}
}

// RateLimited counts frames dropped by the rate limits, by limit; they are
// rejections with reason rate_limited too.
func (m *Relay) RateLimited(msgs, bytes int) {
	if msgs > 0 {
		m.limitedMsgs.Add(float64(msgs))
	}
	if bytes > 0 {
		m.limitedBytes.Add(float64(bytes))
	}
	m.rejectLimited.Add(float64(msgs + bytes))
}

// RoomLimited counts frames dropped by their room's rate limits, by
// limit; they are rejections with reason rate_limited too.
func (m *Relay) RoomLimited(msgs, bytes int) {
	if msgs > 0 {
		m.limitedRoomM.Add(float64(msgs))
	}
	if bytes > 0 {
		m.limitedRoomB.Add(float64(bytes))
	}
	m.rejectLimited.Add(float64(msgs + bytes))
}

// Refused counts a connection, session or join refused by a cap (one of
// the Cap constants).
func (m *Relay) Refused(cap string) { m.refusals.WithLabelValues(cap).Inc() }

// FrameTimeouts counts a connection closed for its partial frame; cause is
// CauseTimeout or CauseBudget.
func (m *Relay) FrameTimeouts(cause string) { m.frameTimeouts.WithLabelValues(cause).Inc() }

// Join counts a join attempt; code 0 means it succeeded.
func (m *Relay) Join(code wire.ErrorCode) {
	if code == 0 {
		m.joinOK.Inc()
		return
	}
	m.joins.WithLabelValues(code.String()).Inc()
}

// Rejected counts a refused frame or datagram. reason must be an error code
// name or one of the Reason constants.
func (m *Relay) Rejected(reason string) { m.rejected.WithLabelValues(reason).Inc() }

// Disconnect counts an ended connection or session. reason must be an error
// code name or one of the Reason constants.
func (m *Relay) Disconnect(reason string) { m.disconnects.WithLabelValues(reason).Inc() }

// Undelivered counts a frame for a client that was not sent; reason is one
// of the Reason constants of relay_undelivered_frames_total.
func (m *Relay) Undelivered(reason string) { m.undelivered.WithLabelValues(reason).Inc() }

// RegisterQueueMemory registers relay_queued_bytes, read by queued at
// scrape time (the bytes in the TCP connections' outbound chunks, partial
// frames not included: relay_partial_frame_bytes), and the budget they
// count against with partial frames, relay_queue_budget_bytes{scope} (all,
// per_source; 0: none).
func RegisterQueueMemory(reg prometheus.Registerer, queued func() float64, budget, perSource int64) error {
	q := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_queued_bytes",
		Help: "Bytes in the TCP connections' outbound queues (pooled 4 KiB chunks, the write in flight included); with relay_partial_frame_bytes what --queue-budget bounds.",
	}, queued)
	b := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "relay_queue_budget_bytes",
		Help: "The memory budget of queued bytes and partial frames: scope all (--queue-budget) and per_source (--queue-budget-per-source); 0: none. Past either the connections holding the most are cut (relay_disconnects_total{reason=\"memory_budget\"}).",
	}, []string{"scope"})
	b.WithLabelValues("all").Set(float64(budget))
	b.WithLabelValues("per_source").Set(float64(perSource))
	for _, c := range []prometheus.Collector{q, b} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register relay queue metrics: %w", err)
		}
	}
	return nil
}

// RegisterUDPDrops registers relay_udp_receive_drops_total, read by drops
// at scrape time (the kernel's counter of the relay's own UDP sockets).
func RegisterUDPDrops(reg prometheus.Registerer, drops func() float64) error {
	c := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "relay_udp_receive_drops_total",
		Help: "Datagrams the kernel dropped at the relay's UDP sockets (receive buffer full: the relay read too slowly), from /proc/net/udp's drops column for its sockets. Sends lost there never reach the room.",
	}, drops)
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register relay_udp_receive_drops_total: %w", err)
	}
	return nil
}
