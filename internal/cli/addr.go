package cli

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Addr is an address flag, host:port, checked when set, so a command
// refuses "9400" or a URL (exit 2, naming the flag) before it starts
// anything, instead of failing at its first listen or dial. It is a
// pflag.Value and a flag.Value.
type Addr struct {
	P *string
	// Listen: an address to serve on. Its host may be empty (":7400":
	// every interface) and its port 0 (a free one). An address to dial
	// needs both.
	Listen bool
	// Off: "" and "off" mean none.
	Off bool
	// Also are further words the flag takes as they are (the relay's
	// --udp "same").
	Also []string
}

// Set checks s and keeps it.
func (a Addr) Set(s string) error {
	if err := a.check(s); err != nil {
		return err
	}
	*a.P = s
	return nil
}

func (a Addr) String() string {
	if a.P == nil {
		return ""
	}
	return *a.P
}

// Type names the form in the usage text.
func (a Addr) Type() string { return "host:port" }

func (a Addr) check(s string) error {
	if a.Off && (s == "" || s == "off") {
		return nil
	}
	for _, w := range a.Also {
		if s == w {
			return nil
		}
	}
	return CheckAddr(s, a.Listen)
}

// CheckAddr says whether s is host:port with a numeric port: to serve on
// (listen: an empty host and port 0 allowed) or to dial.
func CheckAddr(s string, listen bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return fmt.Errorf("want host:port: %w", err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil:
		return fmt.Errorf("want host:port: port %q is not a number from 0 to 65535", port)
	case !listen && n == 0:
		return errors.New("want host:port: port 0 cannot be dialled")
	case !listen && host == "":
		return errors.New("want host:port: no host to dial")
	}
	return nil
}
