package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/notify-dev/notify/internal/leaktest"
)

// The contract check: every request the package's tests send through
// testEnv.do, and the server's answer, are validated against openapi.json
// (the document GET /openapi.json serves). A request the document allows
// must get a response it documents (status, headers, body); a request it
// refuses must be refused by the server too (4xx), so the document is
// never stricter than the code; a path or method it does not list must be
// the mux's JSON 404/405. TestMain then checks that a full run exercised
// every documented operation with a success, so nothing documented goes
// untested.

var contract struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error

	mu sync.Mutex
	// succeeded: operationId → a 2xx answer was seen.
	succeeded map[string]bool
}

func loadContract() (*openapi3.T, routers.Router, error) {
	contract.once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(openAPIDoc)
		if err != nil {
			contract.err = fmt.Errorf("load openapi.json: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			contract.err = fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
			return
		}
		// The web app's files are text; validate their bodies as strings.
		for _, ct := range []string{"text/html", "text/javascript", "application/x-ndjson"} {
			if openapi3filter.RegisteredBodyDecoder(ct) == nil {
				openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
			}
		}
		r, err := legacy.NewRouter(doc)
		if err != nil {
			contract.err = fmt.Errorf("route openapi.json: %w", err)
			return
		}
		contract.doc, contract.router = doc, r
		contract.succeeded = map[string]bool{}
	})
	return contract.doc, contract.router, contract.err
}

// bearerShape is the document's view of security: a request without an
// Authorization: Bearer <token> header (Receipt <token> for the receipt
// scheme) is outside the contract (the server answers 401). Whether the
// token verifies is the server's business.
func bearerShape(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	want := "Bearer"
	if in.SecuritySchemeName == "receipt" {
		want = "Receipt"
	}
	scheme, tok, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, want) || strings.TrimSpace(tok) == "" {
		return errors.New("no " + strings.ToLower(want) + " token")
	}
	return nil
}

// checkContract validates one request the tests made (r, with its body
// reqBody) and the recorded response against the document.
func checkContract(t testing.TB, r *http.Request, reqBody []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	if err := contractError(r, reqBody, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
		t.Errorf("openapi.json contract: %s %s → %d %s:\n%v", r.Method, r.URL.RequestURI(), rec.Code, truncate(rec.Body.Bytes()), err)
	}
}

func contractError(r *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	doc, router, err := loadContract()
	if err != nil {
		return err
	}
	// The validator reads the body; give it its own copy of the request.
	vr := r.Clone(context.Background())
	vr.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := router.FindRoute(vr)
	if err != nil {
		// Not in the document: only the mux's own answers are allowed.
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("the server answers a route the document does not list (%v)", err)
		}
		return validateErrorBody(doc, header, body)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerShape, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && (status < 400 || status > 499) {
		return fmt.Errorf("the document refuses this request, but the server answered %d:\n%v", status, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("response does not match the document: %v", err)
	}
	if status >= 200 && status <= 299 {
		contract.mu.Lock()
		contract.succeeded[route.Operation.OperationID] = true
		contract.mu.Unlock()
	}
	return nil
}

// validateErrorBody checks an answer outside the document's routes is the
// JSON error every answer uses.
func validateErrorBody(doc *openapi3.T, header http.Header, body []byte) error {
	if ct := header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("404/405 with Content-Type %q, want application/json", ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("404/405 body is not JSON: %w", err)
	}
	return doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	// Only a full run of the package can tell an operation was never
	// exercised; a -run or -skip selection, -short or a failure cannot.
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" &&
		flag.Lookup("test.list").Value.String() == "" && !testing.Short() && contract.doc != nil {
		var missing []string
		for _, item := range contract.doc.Paths.Map() {
			for _, op := range item.Operations() {
				if !contract.succeeded[op.OperationID] {
					missing = append(missing, op.OperationID)
				}
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			fmt.Fprintf(os.Stderr, "FAIL: openapi.json documents operations no test exercised with a 2xx answer through testEnv.do: %s\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(leaktest.Check(code))
}

// TestOpenAPIServed: GET /openapi.json serves the embedded document, a
// valid OpenAPI 3.1 description.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.do(req{method: "GET", path: "/openapi.json"})
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	r.decode(t, &doc)
	if doc.OpenAPI != "3.1.0" || len(doc.Paths) == 0 {
		t.Fatalf("served document: openapi %q, %d paths", doc.OpenAPI, len(doc.Paths))
	}
	if _, _, err := loadContract(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenAPIRoutesServed: every operation of the document reaches a
// handler of the server's mux (a route the code dropped or renamed fails
// here; one the document lacks fails the contract check of the test that
// uses it).
func TestOpenAPIRoutesServed(t *testing.T) {
	t.Parallel()
	doc, _, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t)
	for path, item := range doc.Paths.Map() {
		concrete := strings.NewReplacer("{course_id}", NewUUID().String(), "{event_id}", NewUUID().String()).Replace(path)
		for method := range item.Operations() {
			_, pattern := e.srv.mux.Handler(httptest.NewRequest(method, concrete, nil))
			if pattern == "" {
				t.Errorf("%s %s is documented but the server has no route for it", method, path)
			} else if want := method + " " + path; pattern != want && !strings.HasPrefix(path, "/app/") {
				// Path parameter names must match too.
				t.Errorf("%s %s is served by pattern %q", method, path, pattern)
			}
		}
	}
}

// TestContractCatchesDrift: the check refuses responses the document does
// not describe and requests it refuses but the server accepts, so it can
// fail.
func TestContractCatchesDrift(t *testing.T) {
	t.Parallel()
	get := httptest.NewRequest("GET", "/v1/vapid-public-key", nil)
	h := http.Header{"Content-Type": {"application/json"}}
	cases := []struct {
		name   string
		r      *http.Request
		body   string
		status int
		resp   string
	}{
		{"undocumented field", get, "", 200, `{"public_key":"` + strings.Repeat("A", 87) + `","extra":1}`},
		{"undocumented status", get, "", 418, `{"error":{"code":"internal","message":"x"}}`},
		{"error shape", httptest.NewRequest("GET", "/readyz", nil), "", 503, `{"error":"unavailable"}`},
		{"undocumented error code", httptest.NewRequest("GET", "/readyz", nil), "", 503, `{"error":{"code":"nope","message":"x"}}`},
		{"undocumented route", httptest.NewRequest("GET", "/v1/secret", nil), "", 200, `{}`},
		{"refused request accepted", httptest.NewRequest("GET", "/v1/me/notifications?limit=1000", nil), "", 200, `{"items":[]}`},
	}
	for _, c := range cases {
		c.r.Header.Set("Authorization", "Bearer x")
		if err := contractError(c.r, []byte(c.body), c.status, h, []byte(c.resp)); err == nil {
			t.Errorf("%s: the contract check accepted %d %s", c.name, c.status, c.resp)
		}
	}
	ok := httptest.NewRequest("GET", "/v1/me/notifications?limit=10", nil)
	ok.Header.Set("Authorization", "Bearer x")
	if err := contractError(ok, nil, 200, h, []byte(`{"items":[]}`)); err != nil {
		t.Errorf("a documented answer was refused: %v", err)
	}
}

// TestOpenAPIErrorCodes: the document's ErrorCode enum is exactly the codes the code can
// answer — the package's err* constants and the push-endpoint policy's reasons (each
// also an API code) — so a new code cannot ship undocumented, even one no test triggers.
func TestOpenAPIErrorCodes(t *testing.T) {
	t.Parallel()
	doc, _, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, v.(string))
	}
	code := stringConsts(t, ".", "err")
	code = append(code, stringConsts(t, "../push/endpoint", "Reason")...)
	sort.Strings(documented)
	sort.Strings(code)
	code = slices.Compact(code) // endpoint.ReasonInvalid is errInvalidEndpoint
	if !slices.Equal(documented, code) {
		t.Errorf("ErrorCode enum differs from the code's error codes:\n  only documented: %v\n  only in code:    %v",
			minus(documented, code), minus(code, documented))
	}
}

// stringConsts returns the string constants named prefix* in the non-test Go files of dir.
func stringConsts(t *testing.T, dir, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, v)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s* string constants in %s", prefix, dir)
	}
	return out
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestWebAppContract: the browser integration's files are answered as the document
// says (the rest of the suite never asks for them).
func TestWebAppContract(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, c := range []struct {
		path   string
		status int
	}{{"/app/", 200}, {"/app/app.js", 200}, {"/app/sw.js", 200}, {"/app/index.html", 200}, {"/app/nope.js", 404}, {"/app", 404}} {
		r := e.do(req{method: "GET", path: c.path})
		if r.status != c.status {
			t.Errorf("GET %s: %d, want %d", c.path, r.status, c.status)
		}
		if loc := r.header.Get("Location"); loc != "" {
			t.Errorf("GET %s: redirects to %q; the API never redirects", c.path, loc)
		}
	}
	if r := e.do(req{method: "POST", path: "/app/sw.js", body: "{}"}); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /app/sw.js: %d", r.status)
	}
}
