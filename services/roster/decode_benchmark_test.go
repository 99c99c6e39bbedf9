package roster_test

import (
	"testing"

	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/services/roster/rostertest"
)

func BenchmarkDecode(b *testing.B) {
	lsn := int64(77)
	for _, schemas := range []bool{false, true} {
		name := "schemas=false"
		if schemas {
			name = "schemas=true"
		}
		b.Run("users/"+name, func(b *testing.B) {
			d := decoders(b)[roster.TableUsers]
			row := map[string]any{"id": 12345, "full_name": "Student 12345", "lang": "en", "tz": "Europe/Berlin", "created_at": "2026-01-01T00:00:00Z"}
			key, value := rostertest.Users.KeyOf(row, schemas), rostertest.Users.ValueOf(rostertest.Event{Op: "r", After: row, LSN: &lsn, TsMs: 1}, schemas)
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.Decode(key, value, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
