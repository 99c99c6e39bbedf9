package api

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
)

// jsonErrorListener makes the answers net/http gives before any handler
// runs — 431 for headers over MaxHeaderBytes, 400 for a malformed request
// line, header or Host, 501 for an unknown Transfer-Encoding, 505 for a bad
// HTTP version — carry the API's JSON error body like every other answer.
//
// net/http writes those answers itself, straight to the connection in one
// Write, as "HTTP/1.1 <status>" followed by exactly netHTTPErrorHeaders and
// a plain-text body; it offers no hook to change them. No handler answer
// looks like that (they carry Date and Content-Length, and the API's are
// application/json), so a Write of that shape is recognised and replaced
// on the wire. Raising MaxHeaderBytes and checking the size in middleware
// would cover 431 alone, and would let every connection buffer the larger
// headers first. TestNetHTTPErrorsAreJSON fails if a Go release changes
// the shape.
//
// The API serves plain HTTP/1.1 (TLS ends at the proxy in front of it);
// over TLS this wrapper would see ciphertext and change nothing.
type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return jsonErrorConn{c}, nil
}

type jsonErrorConn struct{ net.Conn }

// netHTTPErrorHeaders is net/http's errorHeaders (server.go).
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c jsonErrorConn) Write(p []byte) (int, error) {
	if b, ok := rewriteNetHTTPError(p); ok {
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// rewriteNetHTTPError returns the JSON answer for one of net/http's own
// error responses, or false when p is anything else.
func rewriteNetHTTPError(p []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 || rest[3] != ' ' {
		return nil, false
	}
	statusLine, text, ok := bytes.Cut(rest, []byte(netHTTPErrorHeaders))
	if !ok || bytes.ContainsAny(statusLine, "\r\n") {
		return nil, false
	}
	status, err := strconv.Atoi(string(statusLine[:3]))
	if err != nil || status < 400 {
		return nil, false
	}
	code := errMalformedRequest
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		code = errHeaderTooLarge
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusExpectationFailed:
		code = errUnsupportedRequest
	}
	// The text is net/http's public message, "431 Request Header Fields Too
	// Large" or "400 Bad Request: missing required Host header": fixed
	// strings, never the request's bytes.
	msg := string(text)
	if status == http.StatusRequestHeaderFieldsTooLarge {
		msg = "request headers are larger than " + strconv.Itoa(maxHeaderBytes>>10) + " KiB"
	}
	var body errorBody
	body.Error.Code, body.Error.Message = code, msg
	jb, _ := json.Marshal(body)
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 ")
	out.Write(statusLine)
	out.WriteString("\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: ")
	out.WriteString(strconv.Itoa(len(jb) + 1))
	out.WriteString("\r\n\r\n")
	out.Write(jb)
	out.WriteByte('\n')
	return out.Bytes(), true
}
