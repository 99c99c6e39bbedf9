package intake_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/intake"
)

func hdrs(kv ...string) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for i := 0; i < len(kv); i += 2 {
		out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return out
}

// The examples of the Kafka protocol binding (binary and structured
// content mode), with a notification as data.
func TestDecodeRecordModes(t *testing.T) {
	data := `{"audience":{"course_id":"c1"},"title":"t"}`
	bin := &kgo.Record{Value: []byte(data), Headers: hdrs(
		"ce_specversion", "1.0", "ce_type", "grade.posted", "ce_source", "/grades", "ce_id", "1234-1234-1234",
		"ce_time", "2018-04-05T17:31:00Z", "ce_subject", "s", "content-type", "application/json; charset=utf-8")}
	e, err := intake.DecodeRecord(bin)
	if err != nil || e.Mode != intake.ModeBinary || e.ID != "1234-1234-1234" || e.Source != "/grades" || e.Type != "grade.posted" || e.Subject != "s" || string(e.Data) != data {
		t.Fatalf("binary: %+v %v", e, err)
	}
	// Header names are case-insensitive; content-type may be absent.
	e, err = intake.DecodeRecord(&kgo.Record{Value: []byte(data), Headers: hdrs("CE_SpecVersion", "1.0", "ce_type", "a", "ce_source", "s", "ce_id", "1")})
	if err != nil || e.ID != "1" {
		t.Fatalf("binary, mixed case: %+v %v", e, err)
	}
	structured := `{"specversion":"1.0","type":"grade.posted","source":"/grades","id":"A234-1234-1234","time":"2018-04-05T17:31:00Z",
		"datacontenttype":"application/json","data":` + data + `}`
	e, err = intake.DecodeRecord(&kgo.Record{Value: []byte(structured), Headers: hdrs("content-type", "application/cloudevents+json; charset=UTF-8")})
	if err != nil || e.Mode != intake.ModeStructured || e.ID != "A234-1234-1234" || string(e.Data) != data {
		t.Fatalf("structured: %+v %v", e, err)
	}
	// data_base64 carries the same data.
	b64 := `{"specversion":"1.0","type":"a","source":"s","id":"2","data_base64":"eyJ0aXRsZSI6InQifQ=="}`
	e, err = intake.DecodeRecord(&kgo.Record{Value: []byte(b64), Headers: hdrs("content-type", "application/cloudevents+json")})
	if err != nil || string(e.Data) != `{"title":"t"}` {
		t.Fatalf("data_base64: %+v %v", e, err)
	}
}

func TestDecodeRecordRefuses(t *testing.T) {
	ce := func(extra ...string) []kgo.RecordHeader {
		return hdrs(append([]string{"ce_specversion", "1.0", "ce_type", "a", "ce_source", "s", "ce_id", "1"}, extra...)...)
	}
	st := hdrs("content-type", "application/cloudevents+json")
	for _, c := range []struct {
		name string
		rec  *kgo.Record
		want string
	}{
		{"plain JSON", &kgo.Record{Value: []byte(`{}`)}, "neither"},
		{"spec 0.3", &kgo.Record{Value: []byte(`{}`), Headers: hdrs("ce_specversion", "0.3", "ce_type", "a", "ce_source", "s", "ce_id", "1")}, "specversion"},
		{"no id", &kgo.Record{Value: []byte(`{}`), Headers: hdrs("ce_specversion", "1.0", "ce_type", "a", "ce_source", "s")}, "id is missing"},
		{"empty source", &kgo.Record{Value: []byte(`{}`), Headers: hdrs("ce_specversion", "1.0", "ce_type", "a", "ce_source", "", "ce_id", "1")}, "source is missing"},
		{"xml data", &kgo.Record{Value: []byte(`<a/>`), Headers: ce("content-type", "application/xml")}, "must be JSON"},
		{"long id", &kgo.Record{Value: []byte(`{}`), Headers: hdrs("ce_specversion", "1.0", "ce_type", "a", "ce_source", "s", "ce_id", strings.Repeat("x", 300))}, "at most"},
		{"bad header", &kgo.Record{Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte{0xff}}}}, "UTF-8"},
		{"batch", &kgo.Record{Value: []byte(`[]`), Headers: hdrs("content-type", "application/cloudevents-batch+json")}, "batch"},
		{"structured not JSON", &kgo.Record{Value: []byte(`nope`), Headers: st}, "JSON object"},
		{"structured id a number", &kgo.Record{Value: []byte(`{"specversion":"1.0","type":"a","source":"s","id":1}`), Headers: st}, "structured mode"},
		{"structured no type", &kgo.Record{Value: []byte(`{"specversion":"1.0","source":"s","id":"1"}`), Headers: st}, "type is missing"},
		{"structured both data", &kgo.Record{Value: []byte(`{"specversion":"1.0","type":"a","source":"s","id":"1","data":{},"data_base64":"e30="}`), Headers: st}, "both"},
		{"structured text data", &kgo.Record{Value: []byte(`{"specversion":"1.0","type":"a","source":"s","id":"1","datacontenttype":"text/plain","data":"x"}`), Headers: st}, "must be JSON"},
	} {
		_, err := intake.DecodeRecord(c.rec)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "not a CloudEvent") {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

func TestParseSources(t *testing.T) {
	ss, err := intake.ParseSources(" /grades/ , https://lms.example.edu/")
	if err != nil || len(ss) != 2 || ss[1].Prefix != "https://lms.example.edu/" {
		t.Fatalf("prefixes: %+v %v", ss, err)
	}
	ss, err = intake.ParseSources(`[{"prefix":"/grades/","service":"grades","types":["grade.*","assignment.due"],"users":true},
		{"prefix":"/grades/archive/","courses":false,"users":true}]`)
	if err != nil || len(ss) != 2 || ss[0].Service != "grades" || !ss[0].Users {
		t.Fatalf("rules: %+v %v", ss, err)
	}
	if r, ok := ss.Match("/grades/archive/7"); !ok || r.Prefix != "/grades/archive/" {
		t.Fatalf("the longest prefix wins: %+v", r)
	}
	if _, ok := ss.Match("/other"); ok {
		t.Fatal("an unknown source matched")
	}
	for _, bad := range []string{
		"", " , ", `[]`, `[{"prefix":""}]`, `[{"prefix":"a"},{"prefix":"a"}]`, `[{"prefix":"a","courses":false}]`,
		`[{"prefix":"a","types":["Not A Type"]}]`, `[{"prefix":"a","service":"A B"}]`, `[{"prefix":"a","typo":1}]`, "@/nonexistent/file",
	} {
		if _, err := intake.ParseSources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
