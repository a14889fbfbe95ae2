package profile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// The reprise protocol's inspection: what `replay inspect` shows of a
// capture of reprise frames (kinds, bytes, rates, who joined which room,
// where the login ends, whether a replay can play a flow). The capture
// reader cuts the frames; this reads them, while the capture is read
// (Summarizer) or from the frames kept.

// Summarizer gathers each flow's summary while a capture is read, in
// place of its frames (capture.Options.Summarize): a few hundred bytes a
// flow, whatever the flow's length. One Summarizer serves one read: it
// shares one copy of a user or room name among the flows that name it.
type Summarizer struct {
	names map[string]string
}

// maxInterned caps the names a Summarizer shares.
const maxInterned = 4096

// maxNames caps the users and rooms kept per flow.
const maxNames = 32

// intern gives one copy of a user or room name for the flows that share
// it (up to maxInterned names; after that, a copy each).
func (s *Summarizer) intern(b []byte) string {
	if n, ok := s.names[string(b)]; ok {
		return n
	}
	n := string(b)
	if s.names == nil {
		s.names = map[string]string{}
	}
	if len(s.names) < maxInterned {
		s.names[n] = n
	}
	return n
}

// Tally implements capture.Summarizer.
func (s *Summarizer) Tally() capture.Tally { return &tally{intern: s.intern} }

// Summarize implements capture.Summarizer: the flow's flowStats.
func (s *Summarizer) Summarize(f *capture.Flow, client, server capture.Tally) any {
	c, sv := client.(*tally), server.(*tally)
	return statsOf(f, c.mk, sv.mk, c.users, c.rooms)
}

// tally is one direction's frames as flowStats needs them: each one's
// mark, and the users and rooms its joins name.
type tally struct {
	intern       func([]byte) string
	mk           []mark
	users, rooms []string
}

// Add implements capture.Tally.
func (t *tally) Add(at time.Time, b []byte) {
	typ := wire.Type(b[wire.LenSize])
	t.mk = append(t.mk, mark{t: at.UnixNano(), n: int32(len(b)), typ: typ})
	if typ == wire.TypeJoin {
		t.users, t.rooms = addJoin(t.users, t.rooms, b, t.intern)
	}
}

// mark is what flowStats needs of a frame: its time, size and kind.
type mark struct {
	t   int64 // UnixNano
	n   int32
	typ wire.Type
}

// statsOfFlow is the flow's flowStats: gathered while it was read, or
// from its frames.
func statsOfFlow(f *capture.Flow) *flowStats {
	if st, ok := f.Summary.(*flowStats); ok {
		return st
	}
	return capture.SummarizeFrames(&Summarizer{}, f).(*flowStats)
}

// CaptureSummary is what a person needs to choose a flow and loop
// points in a reprise capture: the flows, their frames by kind, bytes, message rates over time, who joined
// where, and where the login ends.
type CaptureSummary struct {
	File     string        `json:"file"`
	Packets  int           `json:"packets"`
	Flows    []FlowSummary `json:"flows"`
	Warnings []string      `json:"warnings,omitempty"`
}

// FlowSummary describes one flow of a reprise capture.
type FlowSummary struct {
	// Index is the flow's position in Capture.Flows (0-based).
	Index     int               `json:"index"`
	Longest   bool              `json:"longest"`
	Client    string            `json:"client"`
	Server    string            `json:"server"`
	Transport capture.Transport `json:"transport"`
	Start     time.Time         `json:"start"`
	DurationS float64           `json:"duration_s"`
	Packets   int               `json:"packets"`

	ClientFrames int            `json:"client_frames"`
	ServerFrames int            `json:"server_frames"`
	ClientBytes  int64          `json:"client_bytes"`
	ServerBytes  int64          `json:"server_bytes"`
	FramesByKind map[string]int `json:"frames_by_kind"`

	// ClientPerSecond and ServerPerSecond count frames in each bucket of
	// RateBucketS seconds of the flow, from its start: 1 s, longer for a
	// flow of over maxRateBuckets seconds, so their size never depends on
	// how far apart timestamps are.
	ClientPerSecond []int `json:"client_msgs_per_s"`
	ServerPerSecond []int `json:"server_msgs_per_s"`
	RateBucketS     int   `json:"rate_bucket_s"`

	Users []string `json:"users"`
	Rooms []string `json:"rooms"`

	// LoginEndS is the offset (seconds from the flow's start) of the first
	// send after the joined reply, and LoginEndFrame its index in the
	// client frames; -1 when the flow has no such send.
	LoginEndS     float64 `json:"login_end_s"`
	LoginEndFrame int     `json:"login_end_frame"`

	// ClientBy says how the client side was told apart (see Flow.ClientBy).
	ClientBy string `json:"client_by"`
	// HasJoin says the client frames hold a join, which a replay needs.
	HasJoin bool `json:"has_join"`
	// Usable says a replay can play this flow; Unusable says why not.
	Usable   bool   `json:"usable"`
	Unusable string `json:"unusable,omitempty"`

	Resynced bool     `json:"resynced"`
	Notes    []string `json:"notes,omitempty"`
	// TLS says the flow was TLS (see Flow.TLS).
	TLS *capture.TLSInfo `json:"tls,omitempty"`
}

// maxRateBuckets caps the per-second rate arrays of a flow.
const maxRateBuckets = 3600

// SummaryOf summarises a reprise capture.
func SummaryOf(c *capture.Capture) *CaptureSummary {
	s := &CaptureSummary{File: c.Path, Packets: c.Packets, Warnings: c.Warnings, Flows: []FlowSummary{}}
	longest := c.Longest()
	for i, f := range c.Flows {
		s.Flows = append(s.Flows, summarizeFlow(i, f, f == longest))
	}
	return s
}

func summarizeFlow(i int, f *capture.Flow, longest bool) FlowSummary {
	st := statsOfFlow(f)
	fs := FlowSummary{
		Index: i, Longest: longest, Client: f.Client.String(), Server: f.Server.String(), Transport: f.Transport,
		Start: f.Start, DurationS: f.Duration().Seconds(), Packets: f.Packets,
		ClientFrames: int(st.ClientFrames), ServerFrames: int(st.ServerFrames),
		ClientBytes: st.ClientBytes, ServerBytes: st.ServerBytes,
		FramesByKind: map[string]int{}, Users: st.Users, Rooms: st.Rooms,
		LoginEndS: -1, LoginEndFrame: int(st.LoginEndFrame), Resynced: f.Resynced, Notes: f.Notes, ClientBy: f.ClientBy,
		HasJoin: st.HasJoin, TLS: f.TLS,
	}
	if st.LoginEndFrame >= 0 {
		fs.LoginEndS = st.LoginEnd.Seconds()
	}
	for k, n := range st.kinds {
		if n > 0 {
			fs.FramesByKind[knownKinds[k].String()] += int(n)
		}
	}
	for k, n := range st.other {
		fs.FramesByKind[k] += n
	}
	fs.RateBucketS = rateBucket(f.Duration())
	secs := int(f.Duration()/time.Second)/fs.RateBucketS + 1
	fs.ClientPerSecond, fs.ServerPerSecond = fold(st.rates[:st.split], secs, fs.RateBucketS), fold(st.rates[st.split:], secs, fs.RateBucketS)
	fs.Usable, fs.Unusable = FlowUsable(f)
	return fs
}

// flowStats is what inspect shows of a flow's frames: counts, bytes and
// kinds each way, frames per second, users and rooms, where the login
// ends. Read with Summarizer (capture.Options.Summarize), a flow holds it
// as its Summary, gathered while reading instead of the frames.
//
// It is kept for every flow of a capture, so it is packed: 32-bit counts.
type flowStats struct {
	ClientBytes, ServerBytes int64
	Users, Rooms             []string
	// LoginEnd is the offset of the first client send after the first
	// joined reply, LoginEndFrame its index in the client frames (-1:
	// none).
	LoginEnd                   time.Duration
	LoginEndFrame              int32
	ClientFrames, ServerFrames int32
	HasJoin                    bool
	kinds                      [len(knownKinds)]int32
	other                      map[string]int // frames of other kinds
	// rates count frames per second of the flow from its start, up to
	// the last frame's second: the client's, then from split the
	// server's.
	rates []int32
	split int32
}

// knownKinds are the frame kinds flowStats counts in place.
var knownKinds = [...]wire.Type{wire.TypeJoin, wire.TypeLeave, wire.TypeSend, wire.TypeHeartbeat, wire.TypeJoined,
	wire.TypeMemberJoined, wire.TypeMemberLeft, wire.TypeDeliver, wire.TypeHeartbeatReply, wire.TypeError}

// statsOf gathers a flow's flowStats from its frames' marks, each way.
func statsOf(f *capture.Flow, client, server []mark, users, rooms []string) *flowStats {
	st := &flowStats{ClientFrames: int32(len(client)), ServerFrames: int32(len(server)), LoginEndFrame: -1}
	start := f.Start.UnixNano()
	count := func(m mark) int32 {
		for k, t := range knownKinds {
			if t == m.typ {
				st.kinds[k]++
				return m.n
			}
		}
		if st.other == nil {
			st.other = map[string]int{}
		}
		st.other[m.typ.String()]++
		return m.n
	}
	rate := func(rates []int32, m mark) []int32 {
		sec := int(time.Duration(m.t-start) / time.Second)
		if sec < 0 {
			return rates
		}
		for len(rates) <= sec {
			rates = append(rates, 0)
		}
		rates[sec]++
		return rates
	}
	joined := time.Duration(-1)
	var clientRates, serverRates []int32
	for _, m := range server {
		st.ServerBytes += int64(count(m))
		serverRates = rate(serverRates, m)
		if m.typ == wire.TypeJoined && joined < 0 {
			joined = time.Duration(m.t - start)
		}
	}
	for k, m := range client {
		st.ClientBytes += int64(count(m))
		clientRates = rate(clientRates, m)
		st.HasJoin = st.HasJoin || m.typ == wire.TypeJoin
		if off := time.Duration(m.t - start); m.typ == wire.TypeSend && off >= joined && st.LoginEndFrame < 0 {
			st.LoginEnd, st.LoginEndFrame = off, int32(k)
		}
	}
	st.rates = make([]int32, 0, len(clientRates)+len(serverRates))
	st.rates = append(append(st.rates, clientRates...), serverRates...)
	st.split = int32(len(clientRates))
	sort.Strings(users)
	sort.Strings(rooms)
	st.Users, st.Rooms = nonNil(users), nonNil(rooms)
	return st
}

// nonNil is s, or an empty list (JSON [] rather than null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// fold sums per-second counts into secs buckets of bucket seconds.
func fold(rates []int32, secs, bucket int) []int {
	out := make([]int, secs)
	for sec, n := range rates {
		if b := sec / bucket; b < secs {
			out[b] += int(n)
		}
	}
	return out
}

// addJoin adds the user and room a join frame names, once each (at most
// maxNames of each are kept).
// intern, if set, gives a string's shared copy (many flows name one room).
func addJoin(users, rooms []string, b []byte, intern func([]byte) string) ([]string, []string) {
	var j wire.Frame
	if _, err := wire.Decode(b, len(b), &j); err != nil {
		return users, rooms
	}
	if intern == nil {
		intern = func(b []byte) string { return string(b) }
	}
	return addOnce(users, j.User, intern), addOnce(rooms, j.Room, intern)
}

func addOnce(set []string, b []byte, intern func([]byte) string) []string {
	for _, x := range set {
		if x == string(b) {
			return set
		}
	}
	if len(set) >= maxNames {
		return set
	}
	return append(set, intern(b))
}

// Why a flow cannot be replayed.
const (
	UnusableNoClient = "no client frames: only the server spoke"
	UnusableNoJoin   = "no join frame: the capture starts after its login, or the join was cut"
	UnusableTLS      = "TLS without its plaintext: give --tls-keylog, or record through record proxy --tls-cert"
)

// FlowUsable says whether a replay can play a reprise flow, and why not.
func FlowUsable(f *capture.Flow) (bool, string) {
	if f.TLS != nil && f.TLS.Plaintext == "" {
		return false, UnusableTLS
	}
	if st, _ := f.Summary.(*flowStats); st != nil {
		switch {
		case st.ClientFrames == 0:
			return false, UnusableNoClient
		case !st.HasJoin:
			return false, UnusableNoJoin
		}
		return true, ""
	}
	if len(f.ClientFrames) == 0 {
		return false, UnusableNoClient
	}
	for _, fr := range f.ClientFrames {
		if wire.Type(fr.Bytes[wire.LenSize]) == wire.TypeJoin {
			return true, ""
		}
	}
	return false, UnusableNoJoin
}

// Usable returns the indexes of the flows of a reprise capture a replay
// can play, or an error wrapping capture.ErrUnusable that says why none
// can.
func Usable(c *capture.Capture) ([]int, error) {
	var ok []int
	why := map[string]int{}
	for i, f := range c.Flows {
		if u, reason := FlowUsable(f); u {
			ok = append(ok, i)
		} else {
			why[reason]++
		}
	}
	if len(ok) > 0 {
		return ok, nil
	}
	if len(c.Flows) == 0 {
		return nil, fmt.Errorf("%w: no flow carried protocol frames", capture.ErrUnusable)
	}
	reasons := make([]string, 0, len(why))
	for _, r := range sortedSet(map[string]bool{UnusableNoClient: why[UnusableNoClient] > 0, UnusableNoJoin: why[UnusableNoJoin] > 0, UnusableTLS: why[UnusableTLS] > 0}) {
		if why[r] > 0 {
			reasons = append(reasons, fmt.Sprintf("%d with %s", why[r], r))
		}
	}
	return nil, fmt.Errorf("%w: none of its %d flows can be replayed (%s)", capture.ErrUnusable, len(c.Flows), strings.Join(reasons, "; "))
}

// rateBucket is the width in seconds of a flow's rate buckets.
func rateBucket(d time.Duration) int {
	secs := int64(d/time.Second) + 1
	return int(max(1, (secs+maxRateBuckets-1)/maxRateBuckets))
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WriteJSON writes the summary as indented JSON.
func (s *CaptureSummary) WriteJSON(w io.Writer) error {
	return writeSummary(w, s.File, s.Packets, len(s.Flows), func(i int) FlowSummary { return s.Flows[i] }, s.Warnings, true)
}

// WriteText writes the summary for people.
func (s *CaptureSummary) WriteText(w io.Writer) error {
	return writeSummary(w, s.File, s.Packets, len(s.Flows), func(i int) FlowSummary { return s.Flows[i] }, s.Warnings, false)
}

// WriteCaptureSummary writes what SummaryOf(c) gives (only flow `only` when it is
// >= 0), with more warnings, as text or JSON, one flow at a time: a
// capture of many flows needs no summary of all of them at once.
func WriteCaptureSummary(w io.Writer, c *capture.Capture, only int, warnings []string, asJSON bool) error {
	longest := c.Longest()
	warnings = append(append([]string(nil), c.Warnings...), warnings...)
	if only >= 0 {
		f := summarizeFlow(only, c.Flows[only], c.Flows[only] == longest)
		return writeSummary(w, c.Path, c.Packets, 1, func(int) FlowSummary { return f }, warnings, asJSON)
	}
	return writeSummary(w, c.Path, c.Packets, len(c.Flows), func(i int) FlowSummary {
		return summarizeFlow(i, c.Flows[i], c.Flows[i] == longest)
	}, warnings, asJSON)
}

// writeSummary writes a CaptureSummary of n flows, flow(i) giving each in turn:
// as JSON, the bytes encoding/json gives the whole CaptureSummary with a
// two-space indent.
func writeSummary(w io.Writer, file string, packets, n int, flow func(int) FlowSummary, warnings []string, asJSON bool) error {
	bw := bufio.NewWriter(w)
	if asJSON {
		if err := writeSummaryJSON(bw, file, packets, n, flow, warnings); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
	} else {
		fmt.Fprintf(bw, "capture %s: %d packets, %d flows with protocol frames\n", file, packets, n)
		for i := range n {
			writeFlowText(bw, flow(i))
		}
		if len(warnings) > 0 {
			fmt.Fprintln(bw, "warnings:")
			for _, w := range warnings {
				fmt.Fprintf(bw, "  %s\n", w)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

func writeSummaryJSON(w *bufio.Writer, file string, packets, n int, flow func(int) FlowSummary, warnings []string) error {
	name, err := json.Marshal(file)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "{\n  \"file\": %s,\n  \"packets\": %d,\n  \"flows\": [", name, packets)
	for i := range n {
		b, err := json.MarshalIndent(flow(i), "    ", "  ")
		if err != nil {
			return err
		}
		if i > 0 {
			w.WriteString(",")
		}
		w.WriteString("\n    ")
		w.Write(b)
	}
	if n > 0 {
		w.WriteString("\n  ")
	}
	w.WriteString("]")
	if len(warnings) > 0 {
		b, err := json.MarshalIndent(warnings, "  ", "  ")
		if err != nil {
			return err
		}
		w.WriteString(",\n  \"warnings\": ")
		w.Write(b)
	}
	_, err = w.WriteString("\n}\n")
	return err
}

func writeFlowText(w io.Writer, f FlowSummary) {
	tag := ""
	if f.Longest {
		tag = " (longest: the default script)"
	}
	fmt.Fprintf(w, "\nflow %d%s: %s %s -> %s\n", f.Index, tag, f.Transport, f.Client, f.Server)
	fmt.Fprintf(w, "  start %s, duration %.3fs, %d packets\n", f.Start.Format(time.RFC3339Nano), f.DurationS, f.Packets)
	if t := f.TLS; t != nil {
		how := t.Plaintext
		if how == "" {
			how = "not decrypted: " + t.Problem
		}
		fmt.Fprintf(w, "  %s: %s\n", t, how)
	}
	fmt.Fprintf(w, "  client: %d frames, %d bytes (%s)\n", f.ClientFrames, f.ClientBytes, frameKinds(f.FramesByKind, true))
	fmt.Fprintf(w, "  server: %d frames, %d bytes (%s)\n", f.ServerFrames, f.ServerBytes, frameKinds(f.FramesByKind, false))
	fmt.Fprintf(w, "  users: %s; rooms: %s\n", nameList(f.Users), nameList(f.Rooms))
	if f.ClientBy != "" {
		fmt.Fprintf(w, "  client side told by: %s\n", f.ClientBy)
	}
	if !f.Usable {
		fmt.Fprintf(w, "  not usable: %s\n", f.Unusable)
	} else if f.LoginEndFrame >= 0 {
		fmt.Fprintf(w, "  login ends at %.3fs (client frame #%d)", f.LoginEndS, f.LoginEndFrame)
		// A second of margin after the login and before the end.
		if a, b := int(f.LoginEndS)+1, int(f.DurationS)-1; b > a {
			fmt.Fprintf(w, ": loop points after it, e.g. --loop=%ds,%ds", a, b)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  login end: no send after a joined reply")
	}
	if f.RateBucketS > 1 {
		fmt.Fprintf(w, "  client messages per %d s:\n", f.RateBucketS)
	} else {
		fmt.Fprintln(w, "  client messages per second:")
	}
	writeRates(w, f.ClientPerSecond, f.RateBucketS)
	if f.Resynced {
		fmt.Fprintln(w, "  resynchronised: part of a stream was realigned on a frame boundary")
	}
	for _, n := range f.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func frameKinds(m map[string]int, client bool) string {
	var parts []string
	for _, t := range []wire.Type{wire.TypeJoin, wire.TypeLeave, wire.TypeSend, wire.TypeHeartbeat, wire.TypeJoined,
		wire.TypeMemberJoined, wire.TypeMemberLeft, wire.TypeDeliver, wire.TypeHeartbeatReply, wire.TypeError} {
		if t.FromClient() == client && m[t.String()] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, m[t.String()]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func nameList(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// writeRates prints per-second counts ten to a line, labelled by second.
func writeRates(w io.Writer, per []int, bucket int) {
	for i := 0; i < len(per); i += 10 {
		end := min(i+10, len(per))
		vals := make([]string, 0, 10)
		for _, v := range per[i:end] {
			vals = append(vals, fmt.Sprintf("%4d", v))
		}
		fmt.Fprintf(w, "    %4ds %s\n", i*bucket, strings.Join(vals, " "))
	}
}

// SummaryPrinted is the bytes a flow's Summary (a Summarizer's) holds of
// what inspect prints of it: its users, rooms and rates. Tests bound what
// a summarising read holds beside it.
func SummaryPrinted(summary any) int64 {
	st, ok := summary.(*flowStats)
	if !ok {
		return 0
	}
	n := int64(len(st.rates)) * 4
	for _, list := range [][]string{st.Users, st.Rooms} {
		for _, s := range list {
			n += int64(len(s)) + 16
		}
	}
	return n
}
