package live

import (
	"strings"
	"testing"
)

func TestBuildFilter(t *testing.T) {
	tests := []struct {
		port          uint16
		proto, client string
		want, err     string
	}{
		{7400, "", "", "(tcp or udp) and port 7400", ""},
		{7400, "both", "", "(tcp or udp) and port 7400", ""},
		{7400, "tcp", "", "tcp port 7400", ""},
		{9000, "udp", "127.0.0.2", "udp port 9000 and host 127.0.0.2", ""},
		{7400, "tcp", "127.0.0.1:5555", "tcp port 7400 and host 127.0.0.1 and port 5555", ""},
		{7400, "tcp", "[::1]:5555", "tcp port 7400 and host ::1 and port 5555", ""},
		{7400, "sctp", "", "", "--proto"},
		{7400, "tcp", "example.com", "", "IP address"},
		{7400, "tcp", "127.0.0.1:x", "", "bad port"},
	}
	for _, tc := range tests {
		got, err := BuildFilter(tc.port, tc.proto, tc.client)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("BuildFilter(%d, %q, %q) error %v, want %q", tc.port, tc.proto, tc.client, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("BuildFilter(%d, %q, %q) = %q, %v; want %q", tc.port, tc.proto, tc.client, got, err, tc.want)
		}
	}
}

func TestUnknownInterface(t *testing.T) {
	err := checkIface("nope0")
	if err == nil || !strings.Contains(err.Error(), `unknown interface "nope0"`) || !strings.Contains(err.Error(), "lo") {
		t.Fatalf("error %v", err)
	}
	if err := checkIface("lo"); err != nil {
		t.Fatal(err)
	}
}
