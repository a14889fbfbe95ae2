package profile

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Spec is a profile as written in a file (docs/profiles.md). The built-in
// profiles are files too (builtin/*.yaml; reprise aside), naming Go code
// (Hooks) where a protocol needs it.
type Spec struct {
	Name      string         `yaml:"name"`
	Transport string         `yaml:"transport"` // tcp (default), udp, websocket
	Port      uint16         `yaml:"port"`      // the server's port in captures
	Framing   FramingSpec    `yaml:"framing"`
	Kinds     KindsSpec      `yaml:"kinds"`
	Login     LoginSpec      `yaml:"login"`
	Heartbeat *HeartbeatSpec `yaml:"heartbeat"`
	// Delivery are the server kinds counted as received messages; Sends
	// the client kinds counted as sent messages.
	Delivery []string      `yaml:"delivery"`
	Sends    []string      `yaml:"sends"`
	Leave    *TemplateSpec `yaml:"leave"`
	Latency  *LatencySpec  `yaml:"latency"`
	// Rooms says who picks a client's room instance (rooms.go).
	Rooms       *RoomsSpec        `yaml:"rooms"`
	Identity    IdentitySpec      `yaml:"identity"`
	Correlation []CorrelationSpec `yaml:"correlation"`
	// Reactions answer server messages: every client, in every phase.
	Reactions []ReactionSpec `yaml:"reactions"`
	// Fresh are fields rewritten with a new value at every send.
	Fresh []FreshSpec `yaml:"fresh"`
	// Expects are server kinds the server wants answered, each with the
	// client kind that answers: a close without a reason while one is
	// unanswered is labelled no_reply_<kind>.
	Expects []ExpectSpec `yaml:"expects"`
	// Fanout is how the server passes a counted send on to the room:
	// others, all, none, or server (the default: the fleet cannot know,
	// and measures no expected deliveries).
	Fanout string `yaml:"fanout"`
	// HTTP are requests before the connection, their answers' values
	// correlations (httpstep.go).
	HTTP []HTTPStepSpec `yaml:"http"`
	// Turn are the values a client's connections in turn carry from one
	// to the next: set by the loader from the recording's links
	// (turncarry.go), not written in a file.
	Turn TurnSpec `yaml:"-"`
	// Connect is the address (host:port) the connection goes to, a
	// template over the HTTP steps' values; empty: --target; a port
	// alone (":${port}"): on --target's host.
	Connect string `yaml:"connect"`
	// UpgradeQuery sets query parameters of the recorded WebSocket
	// upgrade for each client: a template, or "" to leave the parameter
	// out (a session id the recording's HTTP requests were handed).
	UpgradeQuery map[string]string `yaml:"upgrade_query"`
	// Variant names this file's own way of logging in (default
	// "default"); Variants are the others (variant.go).
	Variant  string        `yaml:"variant"`
	Variants []VariantSpec `yaml:"variants"`
	// Hooks names Go code for what this syntax cannot say (namedHooks):
	// mqtt (the client id and topics inside MQTT packets, rewritten at
	// any length with the lengths re-encoded) or redis (RESP command
	// arguments, the command re-encoded).
	Hooks string `yaml:"hooks"`
}

// VariantSpec is another way the same protocol's client logs in (a
// socket.io client polling before its upgrade): the fields it gives
// replace the file's. When, a regular expression over the recorded
// WebSocket upgrade request (or the first client message), picks it for
// a recording that shows it; --variant forces one.
type VariantSpec struct {
	Name    string         `yaml:"name"`
	When    string         `yaml:"when"`
	HTTP    []HTTPStepSpec `yaml:"http"`
	Login   *LoginSpec     `yaml:"login"`
	Connect string         `yaml:"connect"`
	// UpgradeQuery's parameters replace the file's of the same name.
	UpgradeQuery map[string]string `yaml:"upgrade_query"`
}

// ExpectSpec is a server kind the server wants answered (On) and the
// client kind that answers it (Answer).
type ExpectSpec struct {
	On     string `yaml:"on"`
	Answer string `yaml:"answer"`
}

// FramingSpec says how a stream (or a WebSocket message) splits into
// messages.
type FramingSpec struct {
	// Type is length, varint, delimiter, resp, message (one per datagram
	// or WebSocket message) or raw (the recorded segments as they were).
	Type      string `yaml:"type"`
	Offset    int    `yaml:"offset"`
	Size      int    `yaml:"size"`
	Endian    string `yaml:"endian"` // big (default) or little
	Counts    string `yaml:"counts"` // after (default) or whole
	Adjust    int    `yaml:"adjust"`
	Delimiter string `yaml:"delimiter"` // with Go escapes: "\r\n"
	Bulk      string `yaml:"bulk"`      // prefix of a line giving a byte count: "$"
	// Count selects the lines of a counted framing that announce a
	// payload (a regular expression); its group named count, if any, is
	// the byte count, else the line's last token is.
	Count string `yaml:"count"`
	// Span lets a message span WebSocket messages (MQTT over WebSockets);
	// by default each WebSocket message or datagram ends the messages in
	// it.
	Span bool `yaml:"span"`
	Max  int  `yaml:"max"`
}

// MatchSpec tells a message's kind: a byte (under a mask) at an offset, a
// prefix (text or hex), a regular expression, or a RESP/inline command.
type MatchSpec struct {
	Offset  int    `yaml:"offset"`
	Byte    *int   `yaml:"byte"`
	Mask    *int   `yaml:"mask"`
	Prefix  string `yaml:"prefix"`
	Hex     string `yaml:"hex"`
	Regexp  string `yaml:"regexp"`
	Command string `yaml:"command"`
	// anyPrefix is a file's `prefix: ""`: the prefix every message has
	// (a kind that takes whatever the ones before it did not).
	anyPrefix bool
}

var matchKeys = map[string]bool{"offset": true, "byte": true, "mask": true, "prefix": true, "hex": true, "regexp": true, "command": true}

// UnmarshalYAML decodes a match strictly and tells `prefix: ""` from no
// prefix.
func (m *MatchSpec) UnmarshalYAML(n *yaml.Node) error {
	type plain MatchSpec
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !matchKeys[k.Value] {
				return fmt.Errorf("line %d: field %s not found in type profile.MatchSpec", k.Line, k.Value)
			}
			if k.Value == "prefix" && n.Content[i+1].Value == "" && n.Content[i+1].Tag == "!!str" {
				m.anyPrefix = true
			}
		}
	}
	return n.Decode((*plain)(m))
}

// KindSpec names the messages a matcher matches.
type KindSpec struct {
	Name  string    `yaml:"name"`
	Match MatchSpec `yaml:"match"`
}

// KindsSpec lists the kinds of each direction; the first match wins.
type KindsSpec struct {
	Client []KindSpec `yaml:"client"`
	Server []KindSpec `yaml:"server"`
}

// LoginSpec says which recorded client messages form the login and which
// server message answers it: in one step (Send, Success, When) or in
// Steps, each waiting for its answer before the next is sent.
type LoginSpec struct {
	Send    []string    `yaml:"send"`
	Success string      `yaml:"success"`
	When    *MatchSpec  `yaml:"when"` // an extra condition on the success kind
	Failure string      `yaml:"failure"`
	Reason  *ReasonSpec `yaml:"reason"`
	// Steps is a login in steps; Send, Success and When are then empty.
	Steps []LoginStepSpec `yaml:"steps"`
}

// LoginStepSpec is one step of a login: what the client sends, then the
// server message it waits for before the next step.
type LoginStepSpec struct {
	// Name labels the step's failures (default step1, step2, ...).
	Name string `yaml:"name"`
	// Send are recorded client kinds (each the run of consecutive
	// recorded messages of that kind) and templates, in order.
	Send []SendItem `yaml:"send"`
	// Success is the server kind that ends the step (empty: the next
	// server message that is no refusal); When an extra condition on it:
	// a message of the kind that fails it is waited past, not a refusal.
	Success string     `yaml:"success"`
	When    *MatchSpec `yaml:"when"`
	// StartTLS: when the fleet runs with --tls, the client starts TLS on
	// the same connection once this step's answer came, before the next
	// step's messages (a protocol that upgrades in band: NATS's INFO
	// then the handshake). Without --tls it means nothing.
	StartTLS bool `yaml:"starttls"`
}

// SendItem is a recorded client kind (a YAML string), a template (a
// mapping: text or hex, with ${...} values, and as: the kind it counts
// under), or both (a mapping with kind: the recorded run of that kind,
// or where the recording has none, the template, counted as the kind).
type SendItem struct {
	Kind     string
	Template *TemplateSpec
	As       string
}

// UnmarshalYAML takes a kind name or a template.
func (s *SendItem) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s.Kind = n.Value
		return nil
	}
	var t struct {
		Kind string `yaml:"kind"`
		Text string `yaml:"text"`
		Hex  string `yaml:"hex"`
		As   string `yaml:"as"`
	}
	if err := n.Decode(&t); err != nil {
		return err
	}
	s.Kind, s.As = t.Kind, t.As
	if t.Kind == "" || t.Text != "" || t.Hex != "" {
		s.Template = &TemplateSpec{Text: t.Text, Hex: t.Hex}
	}
	if t.Kind != "" && t.As != "" && t.As != t.Kind {
		return fmt.Errorf("line %d: a send with kind %s counts as that kind: drop as", n.Line, t.Kind)
	}
	return nil
}

// ReactionSpec answers a server message: when one of kind On arrives
// (and When matches it), Send goes out, its ${...} values filled in from
// that message (When's regexp groups, Capture) and from the client
// (user, room, index, correlations). As is the kind the answer counts
// under (default: the client kind it matches).
type ReactionSpec struct {
	On      string               `yaml:"on"`
	When    *MatchSpec           `yaml:"when"`
	Capture map[string]FieldSpec `yaml:"capture"`
	Send    TemplateSpec         `yaml:"send"`
	As      string               `yaml:"as"`
}

// ReasonSpec reads a failure's reason: a code at an offset named by a
// table, or the first group of a regular expression.
type ReasonSpec struct {
	Offset int            `yaml:"offset"`
	Size   int            `yaml:"size"`
	Names  map[int]string `yaml:"names"`
	Regexp string         `yaml:"regexp"`
}

// HeartbeatSpec is what a receive-only client sends to stay connected.
type HeartbeatSpec struct {
	Template TemplateSpec `yaml:"template"`
	Interval Duration     `yaml:"interval"`
}

// TemplateSpec is a message given as text (Go escapes allowed) or hex.
type TemplateSpec struct {
	Text string `yaml:"text"`
	Hex  string `yaml:"hex"`
}

// LatencySpec says where a send carries the sender's clock and where a
// delivery brings it back: at an offset (negative counts from the end;
// both count without the framing's final delimiter), in a regular
// expression's first group, or in a JSON string field; written as 8 raw
// bytes (binary, the default) or fixed-width decimal, hex or base64.
type LatencySpec struct {
	Send           string `yaml:"send"`
	SendOffset     int    `yaml:"send_offset"`
	Delivery       string `yaml:"delivery"`
	DeliveryOffset int    `yaml:"delivery_offset"`
	Encoding       string `yaml:"encoding"`
	Regexp         string `yaml:"regexp"`
	JSON           string `yaml:"json"`
	// Add puts the JSON field into a send that has none, first in its
	// first object (a message with no spare field for the stamp).
	Add bool `yaml:"add"`
}

// FieldSpec places a value: given (value), at an offset and length in a
// message of a kind, or as the first group of a regular expression. Skip
// moves the offset past variable-length parts first: "varint" (MQTT's
// remaining length), "len8" or "len16" (a string after its 1- or 2-byte
// big-endian length).
type FieldSpec struct {
	Value  string   `yaml:"value"`
	Kind   string   `yaml:"kind"`
	Offset int      `yaml:"offset"`
	Skip   []string `yaml:"skip"`
	Length int      `yaml:"length"`
	Regexp string   `yaml:"regexp"`
}

// IdentitySpec says where the recorded user id and room are and how a
// client's own replace them.
type IdentitySpec struct {
	User *FieldSpec `yaml:"user"`
	Room *FieldSpec `yaml:"room"`
	// Format is the client's id, with one %d (or %0Nd) for its index;
	// empty keeps the recorded length: its tail becomes the index.
	Format string `yaml:"format"`
	// LengthBefore is the size of a length field right before every
	// replaced value (MQTT strings: 2), fixed up when lengths differ.
	LengthBefore int    `yaml:"length_before"`
	Endian       string `yaml:"endian"`
	// Encoding is how client messages encode the strings the ids sit
	// in: json, msgpack or protobuf; a replaced id of another length
	// gets its string's length prefix (and in protobuf every enclosing
	// message's) written anew.
	Encoding string `yaml:"encoding"`
	// Peers places other users' ids in client messages (a unicast's
	// target): each distinct recorded one is mapped onto another client
	// of the same room.
	Peers *FieldSpec `yaml:"peers"`
	// ServerID names the correlation holding the id the server issued
	// this client (a socket.io socket id): published to the fleet when it
	// arrives, so that room-mates can address this client by it.
	ServerID string `yaml:"server_id"`
	// ServerPeers places other clients' server-issued ids in client
	// messages (a direct message's target): the k-th distinct recorded
	// one is room-mate k's current server id, as with Peers.
	ServerPeers *FieldSpec `yaml:"server_peers"`
}

// FreshSpec is a field every send must carry a new value in (a request
// id): a per-connection counter, or a value unique in the fleet.
type FreshSpec struct {
	// Into are the client kinds carrying it (empty: all).
	Into   []string `yaml:"into"`
	Regexp string   `yaml:"regexp"` // its first group, written in decimal
	// Offset and Length place it instead: decimal when the recorded bytes
	// are digits, else a big-endian integer.
	Offset int `yaml:"offset"`
	Length int `yaml:"length"`
	// Value is counter (default: 1, 2, ... per connection, on through
	// every loop) or unique (counter x clients + the client's index).
	Value string `yaml:"value"`
}

// CorrelationSpec is a value the server hands out that later client
// messages carry.
type CorrelationSpec struct {
	Name string    `yaml:"name"`
	From FieldSpec `yaml:"from"`
	// Into are the client kinds carrying it (empty: all).
	Into []string `yaml:"into"`
	// Wait holds the login until the value arrived.
	Wait bool `yaml:"wait"`
}

// Duration is a time.Duration written as "5s".
type Duration time.Duration

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration like 5s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// LineError is an error in a profile file at a line.
type LineError struct {
	File string
	Line int
	Path string
	Err  error
}

func (e *LineError) Error() string {
	switch {
	case e.Path == "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	case e.Path == "":
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s: %v", e.File, e.Line, e.Path, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.File, e.Path, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// specError is a validation error at a key path ("framing.size").
type specError struct {
	path string
	err  error
}

func (e *specError) Error() string { return e.path + ": " + e.err.Error() }

func bad(path, format string, args ...any) error {
	return &specError{path, fmt.Errorf(format, args...)}
}

// specErrors are a profile's validation errors, each at its key path,
// in the order the checks found them.
type specErrors []error

// add appends err unless it is nil; a specErrors is flattened.
func (e *specErrors) add(err error) {
	var more specErrors
	switch {
	case err == nil:
	case errors.As(err, &more):
		*e = append(*e, more...)
	default:
		*e = append(*e, err)
	}
}

// Error is the errors a line each, at most maxKeyErrors.
func (e specErrors) Error() string {
	lines := make([]string, 0, min(len(e), maxKeyErrors)+1)
	for i, err := range e {
		if i == maxKeyErrors {
			lines = append(lines, fmt.Sprintf("and %d more", len(e)-maxKeyErrors))
			break
		}
		lines = append(lines, err.Error())
	}
	return strings.Join(lines, "\n")
}

// err is e as an error, nil when it holds none (an empty specErrors in
// an error is not nil).
func (e specErrors) err() error {
	if len(e) > 0 {
		return e
	}
	return nil
}

// Unwrap is every error, for errors.Is and errors.As.
func (e specErrors) Unwrap() []error { return e }

// lineErrors turns a profile file's validation errors into lines
// "file:line: key.path: what", at most maxKeyErrors and a count of the
// rest; the result unwraps to the first as a *LineError.
func lineErrors(name string, data []byte, err error) error {
	var all specErrors
	if !errors.As(err, &all) {
		all = specErrors{err}
	}
	var errs []keyError
	for _, e := range all {
		var se *specError
		if errors.As(e, &se) {
			errs = append(errs, keyError{lineOf(data, se.path), se.path, se.err.Error()})
			continue
		}
		errs = append(errs, keyError{0, "", e.Error()})
	}
	// In the file's order: a line without a number (none found) last.
	sort.SliceStable(errs, func(i, j int) bool {
		li, lj := errs[i].line, errs[j].line
		return li > 0 && (lj == 0 || li < lj)
	})
	more := 0
	if len(errs) > maxKeyErrors {
		errs, more = errs[:maxKeyErrors], len(errs)-maxKeyErrors
	}
	return keyErrorsError(name, errs, more)
}

// maxSpecSize caps a profile file.
const maxSpecSize = 1 << 20

// ParseSpec decodes a profile file strictly: an unknown key, a value of
// the wrong type or a bad value is an error naming its line.
func ParseSpec(name string, data []byte) (*Spec, error) {
	if len(data) > maxSpecSize {
		return nil, fmt.Errorf("%s: profile over %d bytes", name, maxSpecSize)
	}
	if errs, more := checkKeys(data); len(errs) > 0 {
		return nil, keyErrorsError(name, errs, more)
	}
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, errEOF) || err.Error() == "EOF" {
			return nil, fmt.Errorf("%s: empty profile", name)
		}
		return nil, yamlErrors(name, err)
	}
	if err := s.validate(); err != nil {
		return nil, lineErrors(name, data, err)
	}
	return &s, nil
}

var errEOF = errors.New("EOF")

// yamlLine is a YAML decoder's "line N: what".
var yamlLine = regexp.MustCompile(`^\s*line (\d+): (.*)$`)

// yamlParserProblems are the YAML parser's (not its scanner's) syntax
// errors: yaml.v3 numbers their line from 0 (the construct's start),
// and leaves it out for the first.
var yamlParserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"did not find expected '-' indicator", "did not find expected <document start>",
	"did not find expected key", "did not find expected node content",
	"did not find expected <stream-start>", "found duplicate %YAML directive",
	"found duplicate %TAG directive", "found incompatible YAML document",
	"found undefined tag handle",
}

// yamlErrors are the YAML decoder's errors (a syntax error, or those
// checkKeys did not foresee) as "file:line: what" lines, the decoder's
// own framing ("yaml: unmarshal errors:") left out.
func yamlErrors(name string, err error) error {
	var errs []keyError
	for _, l := range strings.Split(strings.TrimPrefix(err.Error(), "yaml: "), "\n") {
		if l == "unmarshal errors:" {
			continue
		}
		e := keyError{msg: strings.TrimSpace(l)}
		if m := yamlLine.FindStringSubmatch(l); m != nil {
			e.line, _ = strconv.Atoi(m[1])
			e.msg = m[2]
		}
		if contains(yamlParserProblems, e.msg) {
			e.line++
		}
		errs = append(errs, e)
	}
	more := 0
	if len(errs) > maxKeyErrors {
		errs, more = errs[:maxKeyErrors], len(errs)-maxKeyErrors
	}
	return keyErrorsError(name, errs, more)
}

// LoadSpec reads and decodes a profile file.
func LoadSpec(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return ParseSpec(path, data)
}

// lineOf finds the line of a key path ("kinds.client[1].match.byte") in
// the YAML document, 0 when it cannot.
func lineOf(data []byte, path string) int {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return 0
	}
	n := root.Content[0]
	line := n.Line
	for _, part := range strings.Split(path, ".") {
		key, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 {
			key = part[:i]
			fmt.Sscanf(part[i:], "[%d]", &idx)
		}
		next := (*yaml.Node)(nil)
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					next, line = n.Content[i+1], n.Content[i].Line
					break
				}
			}
		}
		if next == nil {
			return line
		}
		n = next
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n, line = n.Content[idx], n.Content[idx].Line
		}
	}
	return line
}

// Bytes is the template's message.
func (t TemplateSpec) Bytes() ([]byte, error) {
	switch {
	case t.Text != "" && t.Hex != "":
		return nil, errors.New("give text or hex, not both")
	case t.Hex != "":
		b, err := hex.DecodeString(strings.Join(strings.Fields(t.Hex), ""))
		if err != nil {
			return nil, fmt.Errorf("hex %q: %s", t.Hex, hexWords(err))
		}
		return b, nil
	}
	return []byte(t.Text), nil
}

// hexWords says what is wrong with hex, in the profile's words rather
// than encoding/hex's.
func hexWords(err error) string {
	var ib hex.InvalidByteError
	switch {
	case errors.As(err, &ib):
		return fmt.Sprintf("%q is not a hex digit", rune(ib))
	case errors.Is(err, hex.ErrLength):
		return "an odd number of hex digits"
	}
	return err.Error()
}
