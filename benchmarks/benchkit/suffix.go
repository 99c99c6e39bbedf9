package benchkit

import (
	"crypto/rand"
	"encoding/hex"
)

// Suffix returns 8 random hex digits, for names a run must own alone
// (databases, slots, topic prefixes) on servers that other runs share.
func Suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
