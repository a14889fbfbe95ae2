package profile

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// hexBytes is how many of a frame's bytes a frame listing shows.
const hexBytes = 32

// FrameInfo is one client frame of a flow, as `replay inspect --frames`
// lists the script a replay sends.
type FrameInfo struct {
	// Index is the frame's index in the flow's client frames: the #index
	// of a loop point.
	Index   int     `json:"index"`
	OffsetS float64 `json:"offset_s"`
	Packet  int     `json:"packet"`
	Kind    string  `json:"kind"`
	Size    int     `json:"size"`
	// Replayed says the fleet plays this frame; Why says why not (before
	// the first join, or from the leave on: the fleet joins and leaves by
	// itself).
	Replayed bool   `json:"replayed"`
	Why      string `json:"why,omitempty"`
	Decode   string `json:"decode"`
	Hex      string `json:"hex"` // the first hexBytes bytes
}

// frameListing lists a flow's client frames: what a replay of it sends,
// with time offset, kind, size, a short decode and the first bytes in hex.
func frameListing(f *capture.Flow) []FrameInfo {
	out := make([]FrameInfo, 0, len(f.ClientFrames))
	joined, left := false, false
	for i, fr := range f.ClientFrames {
		typ := wire.Type(fr.Bytes[wire.LenSize])
		info := FrameInfo{
			Index: i, OffsetS: fr.Offset.Seconds(), Packet: fr.Packet, Kind: typ.String(), Size: len(fr.Bytes),
			Decode: describe(fr.Bytes), Hex: hex.EncodeToString(fr.Bytes[:min(len(fr.Bytes), hexBytes)]),
		}
		if typ == wire.TypeJoin {
			joined = true
		}
		if typ == wire.TypeLeave && joined {
			left = true
		}
		switch {
		case !joined:
			info.Why = "before the first join"
		case left:
			info.Why = "from the leave on: the fleet leaves by itself"
		default:
			info.Replayed = true
		}
		out = append(out, info)
	}
	return out
}

// describe decodes a client frame into a short line.
func describe(b []byte) string {
	var f wire.Frame
	if _, err := wire.Decode(b, len(b), &f); err != nil {
		return "undecodable: " + err.Error()
	}
	switch f.Type {
	case wire.TypeJoin:
		return fmt.Sprintf("room %q user %q auth %d B", f.Room, f.User, len(f.Auth))
	case wire.TypeSend:
		var targets []string
		f.Targets(func(id []byte) { targets = append(targets, string(id)) })
		s := f.Mode.String()
		if len(targets) > 0 {
			s += " to " + strings.Join(targets, ",")
		}
		if f.HasTrace {
			s += " traced"
		}
		p := f.Payload[:min(len(f.Payload), 16)]
		return fmt.Sprintf("%s, payload %d B %s", s, len(f.Payload), quoteASCII(p))
	case wire.TypeHeartbeat:
		return fmt.Sprintf("timestamp %d", f.Timestamp)
	}
	return ""
}

// quoteASCII quotes bytes with printable ASCII as is and \xNN for the
// rest, byte by byte (binary payloads are not text).
func quoteASCII(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, "\\x%02x", c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// writeScriptText writes a frame listing as aligned text.
func writeScriptText(w io.Writer, flow *capture.Flow, index int, frames []FrameInfo) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "flow %d: %s: %d client frames (replayed: from the first join to before the leave)\n", index, flow, len(frames))
	for _, f := range frames {
		mark := " "
		if !f.Replayed {
			mark = "-"
		}
		fmt.Fprintf(bw, "%s #%-5d %10.6fs  pkt %-6d %-9s %6d B  %s\n      %s\n", mark, f.Index, f.OffsetS, f.Packet, f.Kind, f.Size, f.Decode, f.Hex)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write frames: %w", err)
	}
	return nil
}

// writeScriptJSON writes a frame listing as a JSON array.
func writeScriptJSON(w io.Writer, frames []FrameInfo) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(frames); err != nil {
		return fmt.Errorf("write frames: %w", err)
	}
	return nil
}
