package profile

import (
	"embed"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Builtin names the built-in profiles.
var Builtin = []string{"reprise", "mqtt", "mqtt-ws", "redis", "socketio", "nats"}

// builtinFiles are the built-in profiles written in the file syntax
// users write (docs/profiles.md): every one but reprise. mqtt, mqtt-ws
// and redis name Go code for what the syntax cannot say (hooks:).
//
//go:embed builtin/*.yaml
var builtinFiles embed.FS

// BuiltinFiles names the built-in profiles that are files.
func BuiltinFiles() []string {
	var out []string
	for _, n := range Builtin {
		if _, ok := BuiltinFile(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// BuiltinFile returns a built-in profile's file; false for reprise (Go
// code) or no built-in.
func BuiltinFile(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/.") {
		return nil, false
	}
	b, err := builtinFiles.ReadFile("builtin/" + name + ".yaml")
	return b, err == nil
}

// Default is the profile of a replay that names none: the one place the
// default is decided (DefaultProfile is it, looked up).
const Default = "reprise"

// DefaultProfile is Default's profile.
func DefaultProfile() *Profile {
	return &Profile{Name: "reprise", Transport: TCP, Port: wire.DefaultPort, MetricsPort: wire.DefaultMetricsPort, reprise: true}
}

// Lookup returns a built-in profile by name, or reads a profile file.
func Lookup(nameOrFile string) (*Profile, error) {
	switch nameOrFile {
	case "", Default:
		return DefaultProfile(), nil
	}
	if data, ok := BuiltinFile(nameOrFile); ok {
		s, err := ParseSpec("built-in "+nameOrFile+".yaml", data)
		if err != nil {
			return nil, err
		}
		return Compile(s)
	}
	if !strings.ContainsAny(nameOrFile, "/.") {
		if _, err := os.Stat(nameOrFile); err != nil {
			return nil, fmt.Errorf("profile %q: not a built-in profile (%s) nor a file", nameOrFile, strings.Join(Builtin, ", "))
		}
	}
	s, err := LoadSpec(nameOrFile)
	if err != nil {
		return nil, err
	}
	return Compile(s)
}

// SpokenByRelay reports whether the reference relay (cmd/relay) speaks
// the profile's protocol, so that a command may start one as the target.
func (p *Profile) SpokenByRelay() bool { return p.reprise }

// namedHooks are the Go code a profile file may name (hooks: NAME) for
// what the file syntax cannot say; each call gives a profile its own.
var namedHooks = map[string]func() hooks{
	"mqtt": func() hooks {
		m := &mqttHooks{}
		return &hookFuncs{recordedFn: m.recorded, rewriteFn: m.rewrite, templatedFn: mqttTemplated}
	},
	"redis": func() hooks { return &hookFuncs{recordedFn: redisRecorded, rewriteFn: redisRewrite} },
}

// hookNames lists namedHooks, sorted, for errors.
func hookNames() []string {
	var out []string
	for n := range namedHooks {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// hooksError says a hooks: name names no Go code: the names there are,
// and the one probably meant.
func hooksError(name string) error {
	msg := fmt.Sprintf("%q: no Go code of that name (%s)", name, strings.Join(hookNames(), ", "))
	if s := suggest(name, hookNames()); s != "" {
		msg += " (did you mean " + s + "?)"
	}
	return bad("hooks", "%s", msg)
}

// hookFuncs implements hooks with optional functions.
type hookFuncs struct {
	recordedFn  func([]Message) ([]byte, []byte)
	rewriteFn   func([]byte, []sub) []byte
	failureFn   func([]byte) string
	successFn   func([]byte) bool
	templatedFn func([]byte) bool
}

func (h *hookFuncs) recorded(msgs []Message) ([]byte, []byte) {
	if h.recordedFn == nil {
		return nil, nil
	}
	return h.recordedFn(msgs)
}

func (h *hookFuncs) rewrite(m []byte, subs []sub) []byte {
	if h.rewriteFn == nil {
		return replaceAll(m, subs)
	}
	return h.rewriteFn(m, subs)
}

func (h *hookFuncs) failure(m []byte) string {
	if h.failureFn == nil {
		return ""
	}
	return h.failureFn(m)
}

func (h *hookFuncs) success(m []byte) bool { return h.successFn == nil || h.successFn(m) }

func (h *hookFuncs) templated(m []byte) bool { return h.templatedFn != nil && h.templatedFn(m) }

// redisRecorded proposes the room: the channel of the first SUBSCRIBE or
// PUBLISH; and the user: AUTH's user name, or CLIENT SETNAME's name.
func redisRecorded(msgs []Message) (user, room []byte) {
	for _, m := range msgs {
		args := RESPStrings(m.Bytes)
		if len(args) < 2 {
			continue
		}
		switch strings.ToUpper(string(args[0])) {
		case "SUBSCRIBE", "PUBLISH", "SSUBSCRIBE", "SPUBLISH":
			if room == nil {
				room = append([]byte(nil), args[1]...)
			}
		case "AUTH":
			if len(args) == 3 && user == nil {
				user = append([]byte(nil), args[1]...)
			}
		case "CLIENT":
			if len(args) == 3 && strings.EqualFold(string(args[1]), "SETNAME") && user == nil {
				user = append([]byte(nil), args[2]...)
			}
		}
	}
	return user, room
}

// redisRewrite re-encodes a command with arguments equal to an old value
// replaced (a channel, a name); payloads are left alone.
func redisRewrite(m []byte, subs []sub) []byte {
	args := RESPStrings(m)
	if len(args) == 0 || m[0] != '*' {
		return replaceAll(m, subs)
	}
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = a
		if i == 0 || (i == len(args)-1 && strings.EqualFold(string(args[0]), "PUBLISH")) {
			continue
		}
		for _, s := range subs {
			if string(a) == string(s.old) {
				out[i] = s.new
			}
		}
	}
	return AppendRESPCommand(nil, out...)
}
