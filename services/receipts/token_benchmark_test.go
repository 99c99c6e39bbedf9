package receipts_test

import (
	"testing"
	"time"

	"github.com/notify-dev/notify/services/receipts"
)

// BenchmarkMint is the push worker's cost per device.
func BenchmarkMint(b *testing.B) {
	k, _ := receipts.NewKey(testSecret, 0)
	m := k.Minter(eventX.String(), minted)
	b.ReportAllocs()
	for b.Loop() {
		if m.Token(userA, receipts.PlatformWebPush) == "" {
			b.Fatal("no token")
		}
	}
}

// BenchmarkVerify is the API's cost per receipt before any database work.
func BenchmarkVerify(b *testing.B) {
	k, _ := receipts.NewKey(testSecret, 0)
	tok := k.Minter(eventX.String(), minted).Token(userA, receipts.PlatformWebPush)
	now := minted.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Verify(tok, eventX, now); err != nil {
			b.Fatal(err)
		}
	}
}
