package main

import (
	"io"

	"github.com/reprise-harness/reprise/internal/profile"
)

// readWSMessages is a test server's read loop: it feeds what in reads,
// 4 KiB at a time, to a WebSocket reader of messages up to 64 KiB and
// hands each message to each, until a read fails or each says stop
// (the messages after that one in the same read are not handed on).
func readWSMessages(in io.Reader, each func(profile.WSMessage) (stop bool)) {
	rd := profile.WSReader{Max: 1 << 16}
	buf := make([]byte, 4096)
	for stop := false; !stop; {
		k, err := in.Read(buf)
		if err != nil {
			return
		}
		rd.Feed(buf[:k], func(m profile.WSMessage) error {
			if !stop {
				stop = each(m)
			}
			return nil
		})
	}
}
