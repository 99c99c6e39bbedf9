package api

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
)

// BenchmarkRosterImport measures POST /v1/roster/import end to end against
// the real Postgres: each op is one request of 50,000 new users and their
// 50,000 enrollments in one course (100,000 lines), reported as lines/s.
//
//	go test -run XXX -bench BenchmarkRosterImport -benchtime 5x ./services/api/
func BenchmarkRosterImport(b *testing.B) {
	e := newTestEnv(b)
	e.srv = newTestServer(b, e.db.Pool, Config{IDs: ids.New(uuid.MustParse("2f1b9a4e-7c3d-4e5f-9a8b-1c2d3e4f5a6b")), RateLimit: -1})
	tok := e.serviceToken("lms", auth.ScopeRosterWrite)
	const users = 50_000
	bodies := make([][]byte, b.N)
	for i := range bodies {
		var buf bytes.Buffer
		fmt.Fprintf(&buf, `{"kind":"course","id":"c-%d","instructor_id":7,"title":"Course %d"}`+"\n", i, i)
		for u := range users {
			id := i*users + u
			fmt.Fprintf(&buf, `{"kind":"user","id":%d,"name":"student %d","locale":"ko-KR"}`+"\n", id, id)
			fmt.Fprintf(&buf, `{"kind":"enrollment","course_id":"c-%d","user_id":%d}`+"\n", i, id)
		}
		bodies[i] = buf.Bytes()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := httptest.NewRequest("POST", "/v1/roster/import", bytes.NewReader(bodies[i]))
		r.Header.Set("Content-Type", "application/x-ndjson")
		r.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			b.Fatalf("import: %d %s", rec.Code, rec.Body.Bytes())
		}
	}
	b.ReportMetric(float64(b.N*(2*users+1))/b.Elapsed().Seconds(), "lines/s")
}
