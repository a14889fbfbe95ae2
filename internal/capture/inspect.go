package capture

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Summary is what a person needs to choose a flow and loop points: the
// flows, their frames by kind, bytes, message rates over time, who joined
// where, and where the login ends.
type Summary struct {
	File     string        `json:"file"`
	Packets  int           `json:"packets"`
	Flows    []FlowSummary `json:"flows"`
	Warnings []string      `json:"warnings,omitempty"`
}

// FlowSummary describes one flow of a capture.
type FlowSummary struct {
	// Index is the flow's position in Capture.Flows (0-based).
	Index     int       `json:"index"`
	Longest   bool      `json:"longest"`
	Client    string    `json:"client"`
	Server    string    `json:"server"`
	Transport Transport `json:"transport"`
	Start     time.Time `json:"start"`
	DurationS float64   `json:"duration_s"`
	Packets   int       `json:"packets"`

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
}

// maxRateBuckets caps the per-second rate arrays of a flow.
const maxRateBuckets = 3600

// Inspect summarises a capture.
func Inspect(c *Capture) *Summary {
	s := &Summary{File: c.Path, Packets: c.Packets, Warnings: c.Warnings, Flows: []FlowSummary{}}
	longest := c.Longest()
	for i, f := range c.Flows {
		s.Flows = append(s.Flows, summarizeFlow(i, f, f == longest))
	}
	return s
}

func summarizeFlow(i int, f *Flow, longest bool) FlowSummary {
	fs := FlowSummary{
		Index: i, Longest: longest, Client: f.Client.String(), Server: f.Server.String(), Transport: f.Transport,
		Start: f.Start, DurationS: f.Duration().Seconds(), Packets: f.Packets,
		ClientFrames: len(f.ClientFrames), ServerFrames: len(f.ServerFrames),
		FramesByKind: map[string]int{}, Users: []string{}, Rooms: []string{},
		LoginEndS: -1, LoginEndFrame: -1, Resynced: f.Resynced, Notes: f.Notes, ClientBy: f.ClientBy,
	}
	fs.RateBucketS = rateBucket(f.Duration())
	secs := int(f.Duration()/time.Second)/fs.RateBucketS + 1
	fs.ClientPerSecond, fs.ServerPerSecond = make([]int, secs), make([]int, secs)
	bucket := time.Duration(fs.RateBucketS) * time.Second
	users, rooms := map[string]bool{}, map[string]bool{}
	for _, fr := range f.ClientFrames {
		fs.ClientBytes += int64(len(fr.Bytes))
		fs.FramesByKind[fr.Type.String()]++
		countSecond(fs.ClientPerSecond, fr.Offset, bucket)
		if fr.Type == wire.TypeJoin {
			fs.HasJoin = true
			var j wire.Frame
			if _, err := wire.Decode(fr.Bytes, len(fr.Bytes), &j); err == nil {
				users[string(j.User)], rooms[string(j.Room)] = true, true
			}
		}
	}
	joined := time.Duration(-1)
	for _, fr := range f.ServerFrames {
		fs.ServerBytes += int64(len(fr.Bytes))
		fs.FramesByKind[fr.Type.String()]++
		countSecond(fs.ServerPerSecond, fr.Offset, bucket)
		if fr.Type == wire.TypeJoined && joined < 0 {
			joined = fr.Offset
		}
	}
	for k, fr := range f.ClientFrames {
		if fr.Type == wire.TypeSend && fr.Offset >= joined {
			fs.LoginEndS, fs.LoginEndFrame = fr.Offset.Seconds(), k
			break
		}
	}
	fs.Users, fs.Rooms = sortedKeys(users), sortedKeys(rooms)
	fs.Usable, fs.Unusable = f.Usable()
	return fs
}

// Why a flow cannot be replayed.
const (
	UnusableNoClient = "no client frames: only the server spoke"
	UnusableNoJoin   = "no join frame: the capture starts after its login, or the join was cut"
)

// Usable says whether a replay can play a reprise flow, and why not.
func (f *Flow) Usable() (bool, string) {
	if len(f.ClientFrames) == 0 {
		return false, UnusableNoClient
	}
	for _, fr := range f.ClientFrames {
		if fr.Type == wire.TypeJoin {
			return true, ""
		}
	}
	return false, UnusableNoJoin
}

// ErrUnusable marks a capture, or a chosen flow, that a replay cannot
// play: every command that reads one exits with the same code for it.
var ErrUnusable = errors.New("unusable capture")

// Usable returns the indexes of the flows a replay can play, or an error
// wrapping ErrUnusable that says why none can.
func (c *Capture) Usable() ([]int, error) {
	var ok []int
	why := map[string]int{}
	for i, f := range c.Flows {
		if u, reason := f.Usable(); u {
			ok = append(ok, i)
		} else {
			why[reason]++
		}
	}
	if len(ok) > 0 {
		return ok, nil
	}
	if len(c.Flows) == 0 {
		return nil, fmt.Errorf("%w: no flow carried protocol frames", ErrUnusable)
	}
	reasons := make([]string, 0, len(why))
	for _, r := range sortedKeys(map[string]bool{UnusableNoClient: why[UnusableNoClient] > 0, UnusableNoJoin: why[UnusableNoJoin] > 0}) {
		if why[r] > 0 {
			reasons = append(reasons, fmt.Sprintf("%d with %s", why[r], r))
		}
	}
	return nil, fmt.Errorf("%w: none of its %d flows can be replayed (%s)", ErrUnusable, len(c.Flows), strings.Join(reasons, "; "))
}

// rateBucket is the width in seconds of a flow's rate buckets.
func rateBucket(d time.Duration) int {
	secs := int64(d/time.Second) + 1
	return int(max(1, (secs+maxRateBuckets-1)/maxRateBuckets))
}

func countSecond(per []int, off, bucket time.Duration) {
	if s := int(off / bucket); s >= 0 && s < len(per) {
		per[s]++
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WriteJSON writes the summary as indented JSON.
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// WriteText writes the summary for people.
func (s *Summary) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "capture %s: %d packets, %d flows with protocol frames\n", s.File, s.Packets, len(s.Flows))
	for _, f := range s.Flows {
		writeFlowText(bw, f)
	}
	if len(s.Warnings) > 0 {
		fmt.Fprintln(bw, "warnings:")
		for _, w := range s.Warnings {
			fmt.Fprintf(bw, "  %s\n", w)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

func writeFlowText(w io.Writer, f FlowSummary) {
	tag := ""
	if f.Longest {
		tag = " (longest: the default script)"
	}
	fmt.Fprintf(w, "\nflow %d%s: %s %s -> %s\n", f.Index, tag, f.Transport, f.Client, f.Server)
	fmt.Fprintf(w, "  start %s, duration %.3fs, %d packets\n", f.Start.Format(time.RFC3339Nano), f.DurationS, f.Packets)
	fmt.Fprintf(w, "  client: %d frames, %d bytes (%s)\n", f.ClientFrames, f.ClientBytes, kinds(f.FramesByKind, true))
	fmt.Fprintf(w, "  server: %d frames, %d bytes (%s)\n", f.ServerFrames, f.ServerBytes, kinds(f.FramesByKind, false))
	fmt.Fprintf(w, "  users: %s; rooms: %s\n", list(f.Users), list(f.Rooms))
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

func kinds(m map[string]int, client bool) string {
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

func list(s []string) string {
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
