package wire

import "testing"

// TestKnownMatchesNames: Known (a switch, for speed) says yes for exactly
// the types that have a name.
func TestKnownMatchesNames(t *testing.T) {
	for i := range 256 {
		ty := Type(i)
		_, named := typeNames[ty]
		if ty.Known() != named {
			t.Errorf("Type(0x%02x).Known() = %v, named %v", i, ty.Known(), named)
		}
	}
}
