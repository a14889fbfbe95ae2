package fleet

// lossPercent is lost / (received + lost) in percent; 0 with nothing
// numbered. The reprise profile numbers room-wide casts and counts the
// gaps (internal/profile/loss.go).
func lossPercent(received, lost int64) float64 {
	if lost <= 0 || received+lost <= 0 {
		return 0
	}
	return 100 * float64(lost) / float64(received+lost)
}
