package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/reprise-harness/reprise/internal/cli"
)

// targetValue is --target as a flag: host:port, or a URL whose scheme
// says whether the server speaks TLS (wss://host:port/path,
// mqtts://host:8883, tls://host:port, nats://host:4222 ...), parsed
// when set. A URL without a port takes its scheme's. The URL's path is
// not used: a WebSocket client asks for the recorded upgrade request's.
// "" and "off" mean no target (the command starts a relay).
type targetValue struct {
	Addr *string
	TLS  *bool
}

// schemes are the URL schemes a target may have: whether they mean TLS,
// and their default port.
var schemes = map[string]struct {
	tls  bool
	port int
}{
	"tcp": {false, 0}, "tls": {true, 0}, "ssl": {true, 0},
	"ws": {false, 80}, "wss": {true, 443}, "http": {false, 80}, "https": {true, 443},
	"mqtt": {false, 1883}, "mqtts": {true, 8883}, "nats": {false, 4222}, "redis": {false, 6379}, "rediss": {true, 6379},
}

// Set parses s and keeps its address (and its TLS, for a URL).
func (v targetValue) Set(s string) error {
	if s == "" || s == "off" {
		*v.Addr = ""
		return nil
	}
	if !strings.Contains(s, "://") {
		if err := cli.CheckAddr(s, false); err != nil {
			return err
		}
		*v.Addr = s
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("want host:port or a URL: %w", err)
	}
	sc, ok := schemes[strings.ToLower(u.Scheme)]
	if !ok {
		return fmt.Errorf("%s://: want one of tcp, tls, ws, wss, http, https, mqtt, mqtts, nats, redis, rediss", u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		if sc.port == 0 {
			return fmt.Errorf("%s: no port (%s:// has no default)", s, u.Scheme)
		}
		port = strconv.Itoa(sc.port)
	}
	addr := net.JoinHostPort(host, port)
	if err := cli.CheckAddr(addr, false); err != nil {
		return err
	}
	*v.Addr = addr
	if sc.tls {
		*v.TLS = true
	}
	return nil
}

func (v targetValue) String() string {
	if v.Addr == nil {
		return ""
	}
	return *v.Addr
}

// Type names the flag's value in the usage.
func (v targetValue) Type() string { return "host:port|url" }
