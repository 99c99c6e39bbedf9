package pushmock_test

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/pushmock"
)

// The FCM side checks the token exchange and messages:send as strictly as
// Google does, over the mock's HTTP/2 listener.
func TestFCMStrict(t *testing.T) {
	credsFile := filepath.Join(t.TempDir(), "sa.json")
	m := startMock(t, pushmock.Config{FCMCredentialsFile: credsFile})
	creds, err := fcm.LoadCredentials(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	if creds.TokenURI != m.URL()+pushmock.FCMTokenPath || m.FCMProject() != fcm.DevProjectID {
		t.Fatalf("dev credentials: token_uri %s, project %s", creds.TokenURI, m.FCMProject())
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: m.CertPool()}, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	t.Cleanup(cl.CloseIdleConnections)
	post := func(path, ctype, auth, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, m.URL()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s answered over %s", path, resp.Proto)
		}
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	form := func(grant, assertion string) string {
		return url.Values{"grant_type": {grant}, "assertion": {assertion}}.Encode()
	}
	const grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	const formType = "application/x-www-form-urlencoded"
	good, _ := creds.Assertion(time.Now())
	stale, _ := creds.Assertion(time.Now().Add(-2 * time.Hour))
	for name, tc := range map[string]struct{ ctype, body, want string }{
		"grant type":   {formType, form("client_credentials", good), "unsupported_grant_type"},
		"expired":      {formType, form(grant, stale), "invalid_grant"},
		"tampered":     {formType, form(grant, good[:len(good)-3]+"abc"), "invalid_grant"},
		"content type": {"application/json", form(grant, good), "invalid_request"},
	} {
		if st, v := post(pushmock.FCMTokenPath, tc.ctype, "", tc.body); st != 400 || v["error"] != tc.want {
			t.Errorf("token %s: %d %v, want 400 %s", name, st, v, tc.want)
		}
	}
	st, v := post(pushmock.FCMTokenPath, formType, "", form(grant, good))
	if st != 200 || v["token_type"] != "Bearer" || v["expires_in"] != float64(3600) {
		t.Fatalf("token: %d %v", st, v)
	}
	bearer := "Bearer " + v["access_token"].(string)

	sendPath := "/v1/projects/" + creds.ProjectID + "/messages:send"
	token := pushmock.FCMToken(creds.ProjectID, 9)
	msg := func(inner string) string { return `{"message":{"token":"` + token + `"` + inner + `}}` }
	for name, tc := range map[string]struct {
		path, auth, ctype, body string
		status                  int
		code                    string
	}{
		"no bearer":         {sendPath, "", "application/json", msg(""), 401, ""},
		"unknown bearer":    {sendPath, "Bearer nope", "application/json", msg(""), 401, ""},
		"other project":     {"/v1/projects/other/messages:send", bearer, "application/json", msg(""), 403, ""},
		"content type":      {sendPath, bearer, "text/plain", msg(""), 400, "INVALID_ARGUMENT"},
		"unknown field":     {sendPath, bearer, "application/json", msg(`,"notificaton":{"title":"x"}`), 400, "INVALID_ARGUMENT"},
		"non-string data":   {sendPath, bearer, "application/json", msg(`,"data":{"course_id":42}`), 400, "INVALID_ARGUMENT"},
		"reserved data key": {sendPath, bearer, "application/json", msg(`,"data":{"from":"x"}`), 400, "INVALID_ARGUMENT"},
		"ttl without s":     {sendPath, bearer, "application/json", msg(`,"android":{"ttl":"3600"}`), 400, "INVALID_ARGUMENT"},
		"no token":          {sendPath, bearer, "application/json", `{"message":{"notification":{"title":"x"}}}`, 400, "INVALID_ARGUMENT"},
		"bad token":         {sendPath, bearer, "application/json", `{"message":{"token":"abc"}}`, 400, "INVALID_ARGUMENT"},
		"trailing data":     {sendPath, bearer, "application/json", msg("") + "{}", 400, "INVALID_ARGUMENT"},
	} {
		st, v := post(tc.path, tc.ctype, tc.auth, tc.body)
		if st != tc.status {
			t.Errorf("send %s: %d %v, want %d", name, st, v, tc.status)
			continue
		}
		if tc.code != "" && !strings.Contains(mustJSON(v), `"errorCode":"`+tc.code+`"`) {
			t.Errorf("send %s: %v, want errorCode %s", name, v, tc.code)
		}
	}
	st, v = post(sendPath, "application/json", bearer, msg(`,"notification":{"title":"t","body":"b"},"data":{"event_id":"e","course_id":"1","url":"u"},"android":{"ttl":"86400s","collapse_key":"e"}`))
	if st != 200 || !strings.HasPrefix(v["name"].(string), "projects/"+creds.ProjectID+"/messages/") {
		t.Fatalf("good message: %d %v", st, v)
	}
	fs := m.Stats().FCM
	if fs.Unique != 1 || fs.TokenExchanges != 1 || fs.AssertionFailures != 4 || fs.AuthFailures != 3 || fs.ByStatus["400"] != 8 {
		t.Fatalf("stats %+v", fs)
	}
	m.ResetStats()
	if fs := m.Stats().FCM; fs.Received != 0 || fs.Unique != 0 {
		t.Fatalf("after reset: %+v", fs)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Tokens carry their id and project; nothing else passes for one.
func TestFCMToken(t *testing.T) {
	for _, id := range []int64{1, 2, 1_097_488, pushmock.MaxID - 1} {
		tok := pushmock.FCMToken("p", id)
		got, same, ok := pushmock.FCMTokenID(tok, "p")
		if !ok || !same || got != id {
			t.Fatalf("id %d: %q → %d %v %v", id, tok, got, same, ok)
		}
		if _, same, ok := pushmock.FCMTokenID(tok, "q"); !ok || same {
			t.Fatalf("id %d: another project's token: same=%v ok=%v", id, same, ok)
		}
		bad := []byte(tok)
		bad[len(bad)-1] ^= 1
		if _, _, ok := pushmock.FCMTokenID(string(bad), "p"); ok {
			t.Fatalf("id %d: corrupted token accepted", id)
		}
	}
	if _, _, ok := pushmock.FCMTokenID(pushmock.FCMToken("p", 0), "p"); ok {
		t.Fatal("id 0 accepted")
	}
}
