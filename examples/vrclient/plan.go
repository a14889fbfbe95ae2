package main

import (
	"math/rand/v2"
	"sort"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// kind is what a planned event sends.
type kind int

const (
	kindPose kind = iota
	kindVoice
	kindObject
	kindHeartbeat
)

var kindNames = [...]string{"pose", "voice", "object", "heartbeat"}

func (k kind) String() string { return kindNames[k] }

// event is one frame the client will send, at an offset from its join.
type event struct {
	at      time.Duration
	kind    kind
	mode    wire.Mode // send events
	payload []byte
}

// planConfig is what shapes a session.
type planConfig struct {
	Seed      uint64
	Duration  time.Duration
	Heartbeat time.Duration
	UDP       bool // object syncs must fit one datagram
}

const (
	poseHz  = 72
	voiceHz = 50
)

// plan lays out a whole session: head-and-hands poses at 72 Hz, voice at
// 50 Hz in talking bursts, occasional object syncs and heartbeats. It is a
// pure function of its config, so a seed gives the same session every time.
func plan(cfg planConfig) []event {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	var evs []event
	posePeriod := time.Second / poseHz
	for t := posePeriod; t < cfg.Duration; t += posePeriod {
		// Head plus two hands: position and rotation each, with a little
		// variable state (buttons, finger curls): 90-130 payload bytes.
		evs = append(evs, event{at: t, kind: kindPose, mode: wire.Othercast, payload: randBytes(rng, 90+rng.IntN(41))})
	}
	talking := rng.IntN(2) == 0
	for t := time.Duration(0); t < cfg.Duration; {
		burst := time.Duration(2000+rng.IntN(4000)) * time.Millisecond
		if !talking {
			burst = time.Duration(3000+rng.IntN(5000)) * time.Millisecond
		}
		if talking {
			for v := t + time.Second/voiceHz; v < t+burst && v < cfg.Duration; v += time.Second / voiceHz {
				evs = append(evs, event{at: v, kind: kindVoice, mode: wire.Othercast, payload: randBytes(rng, 60+rng.IntN(9))})
			}
		}
		t += burst
		talking = !talking
	}
	maxObject := 2048
	if cfg.UDP {
		maxObject = 1200
	}
	for t := time.Duration(1000+rng.IntN(3000)) * time.Millisecond; t < cfg.Duration; t += time.Duration(1500+rng.IntN(4000)) * time.Millisecond {
		mode := wire.Othercast
		switch r := rng.IntN(10); {
		case r < 4:
			mode = wire.Unicast
		case r < 7:
			mode = wire.Ownercast
		}
		evs = append(evs, event{at: t, kind: kindObject, mode: mode, payload: randBytes(rng, 300+rng.IntN(maxObject-300+1))})
	}
	if cfg.Heartbeat > 0 {
		for t := cfg.Heartbeat; t < cfg.Duration; t += cfg.Heartbeat {
			evs = append(evs, event{at: t, kind: kindHeartbeat})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	return evs
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
