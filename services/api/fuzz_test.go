package api

import (
	"bytes"
	"crypto/ecdh"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodePublishRequest: the decoder never panics, and whatever it
// accepts satisfies every documented limit. Seed corpus:
// testdata/fuzz/FuzzDecodePublishRequest.
func FuzzDecodePublishRequest(f *testing.F) {
	for _, s := range []string{
		`{"title":"Week 1","body":"Read chapter 1.","url":"https://example.edu/w1"}`,
		`{"title":"t"}`,
		`{"title":"  padded  ","body":""}`,
		`{"title":"講義"}`,
		`{"title":"t","url":"http://example.com"}`,
		`{"title":"t","extra":1}`,
		`{"title":null}`,
		`[]`,
		`{"title":"t"}{}`,
		`{"title":"a\u0000b"}`,
		`{"title":"t","url":""}`,
		`{"title":"t","body":"a\u0000b"}`,
		`{"title":"a","title":"b"}`,
		`{"Title":"t"}`,
		`{"title":"\ud83d\ude00 \ud800"}`,
		"{\"title\":\"\xff\"}",
		`{"title":"a\u202eb"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, e := DecodePublishRequest(b)
		if e != nil {
			if e.Status < 400 || e.Status > 499 || e.Code == "" {
				t.Fatalf("error %+v is not a client error", e)
			}
			return
		}
		if n := utf8.RuneCountInString(req.Title); n < 1 || n > maxTitleRunes {
			t.Fatalf("accepted title of %d characters", n)
		}
		if strings.TrimSpace(req.Title) != req.Title {
			t.Fatalf("accepted untrimmed title %q", req.Title)
		}
		if len(req.Body) > maxBodyBytes {
			t.Fatalf("accepted body of %d bytes", len(req.Body))
		}
		if req.URL != "" && checkHTTPSURL(req.URL, errInvalidURL, "url") != nil {
			t.Fatalf("accepted url %q", req.URL)
		}
		// Nothing the decoder replaced or Postgres cannot store got through.
		for _, s := range []string{req.Title, req.Body, req.URL} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || strings.ContainsRune(s, utf8.RuneError) && !bytes.Contains(b, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
				t.Fatalf("accepted %q from %q", s, b)
			}
		}
		if strings.IndexFunc(req.Title, isBidiControl) >= 0 {
			t.Fatalf("accepted bidi control in title %q", req.Title)
		}
		// What was accepted re-encodes to a request that decodes the same.
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, e := DecodePublishRequest(again)
		if e != nil || req2 != req {
			t.Fatalf("re-decode of %s: %+v %v", again, req2, e)
		}
	})
}

// FuzzParseSubscriptionKeys: never panics; accepted keys are a valid P-256
// point and a 16-byte secret. Seed corpus:
// testdata/fuzz/FuzzParseSubscriptionKeys.
func FuzzParseSubscriptionKeys(f *testing.F) {
	// RFC 8291 Appendix A: the user agent's public key and auth secret.
	f.Add("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4", "BTBZMqHH6r4Tts7J_aSIgg")
	f.Add("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4=", "BTBZMqHH6r4Tts7J_aSIgg==")
	f.Add("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw5", "BTBZMqHH6r4Tts7J_aSIgg")
	f.Add("AA", "AA")
	f.Add("", "")
	f.Add("BCVxsr7N+eNgVRqvHtD0zTZsEc6/VV", "BTBZMqHH6r4Tts7J/aSIgg")
	f.Fuzz(func(t *testing.T, p256dh, auth string) {
		pub, secret, e := ParseSubscriptionKeys(p256dh, auth)
		if e != nil {
			if e.Status != 400 || (e.Code != errInvalidP256DH && e.Code != errInvalidAuth) {
				t.Fatalf("error %+v", e)
			}
			return
		}
		if len(pub) != p256dhBytes || len(secret) != authBytes {
			t.Fatalf("accepted %d-byte key, %d-byte secret", len(pub), len(secret))
		}
		if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
			t.Fatalf("accepted off-curve key: %v", err)
		}
	})
}

// TestRFC8291Keys: the user agent keys of RFC 8291 Appendix A parse.
func TestRFC8291Keys(t *testing.T) {
	t.Parallel()
	pub, secret, e := ParseSubscriptionKeys("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4", "BTBZMqHH6r4Tts7J_aSIgg")
	if e != nil || len(pub) != 65 || len(secret) != 16 {
		t.Fatalf("RFC 8291 keys: %v", e)
	}
}
