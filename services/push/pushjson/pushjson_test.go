package pushjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestAppendStringMatchesEncodingJSON: byte for byte what encoding/json
// writes with HTML escaping off, for every kind of input the bodies carry.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "tab\tnl\ncr\r\x00\x1f\x7f", "새 강의 자료 — ünï ✓ 🚀",
		"<&>", "line\u2028para\u2029", "bad\xffutf8\xc3", "https://x.example/a?b=1&c=<2>#f"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		got := AppendString(nil, s)
		if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got, w) {
			t.Errorf("%q: got %s, want %s", s, got, w)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("x\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if got := AppendString(nil, s); !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Fatalf("%q: got %s, want %s", s, got, want.Bytes())
		}
	})
}
