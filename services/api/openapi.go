package api

import (
	"bytes"
	_ "embed"
	"net/http"
)

// openAPIFile is the OpenAPI 3.1 document of the HTTP API, served at
// GET /openapi.json. openapi_test.go validates every request and response
// the package's tests make against it, so it describes what the code does.
//
//go:embed openapi.json
var openAPIFile []byte

// openAPIDoc is the document without the file's final newline (writeRawJSON
// adds one).
var openAPIDoc = bytes.TrimRight(openAPIFile, "\n")

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	// No-store like every other answer: the document changes with the
	// binary, and a stale copy would describe another version.
	writeRawJSON(w, http.StatusOK, openAPIDoc)
}
