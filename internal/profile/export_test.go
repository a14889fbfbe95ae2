package profile

import "github.com/reprise-harness/reprise/internal/session"

type sessionLoop = session.Loop

func parseSessionLoop(s string) (session.Loop, bool, error) { return session.ParseLoop(s) }
