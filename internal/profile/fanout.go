package profile

import (
	"fmt"
	"strings"
)

// Fanout is how a server passes one sent message on to the sender's room:
// what the fleet expects each member to receive, so that loss shows as
// expected minus received deliveries (Events.Casts) rather than as a
// number only a numbering protocol can give. A profile declares it
// (fanout:); FanoutServer, the zero value, says the fleet cannot know it
// (topic subscriptions, server-side logic), and then loss is not measured
// that way.
type Fanout uint8

const (
	// FanoutServer: the server decides; the fleet expects nothing.
	FanoutServer Fanout = iota
	// FanoutNone: the server delivers the message to no one.
	FanoutNone
	// FanoutOthers: every other member of the room receives it.
	FanoutOthers
	// FanoutAll: every member, the sender too, receives it.
	FanoutAll
)

var fanoutNames = [...]string{FanoutServer: "server", FanoutNone: "none", FanoutOthers: "others", FanoutAll: "all"}

// String is the profile's word for f.
func (f Fanout) String() string {
	if int(f) < len(fanoutNames) {
		return fanoutNames[f]
	}
	return fmt.Sprintf("fanout(%d)", f)
}

// Known reports whether the fleet can count what f delivers.
func (f Fanout) Known() bool { return f != FanoutServer }

// ParseFanout reads a profile's fanout; empty is FanoutServer.
func ParseFanout(s string) (Fanout, error) {
	if s == "" {
		return FanoutServer, nil
	}
	for f, name := range fanoutNames {
		if s == name {
			return Fanout(f), nil
		}
	}
	return FanoutServer, fmt.Errorf("%q: want %s", s, strings.Join(fanoutNames[:], ", "))
}
