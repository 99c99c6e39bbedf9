package publishbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// publishClient is one benchmark client: one request at a time on its own
// keep-alive connection.
type publishClient interface {
	post(ctx context.Context, body []byte, idempotencyKey string) (status int, resp []byte, err error)
	close()
}

// rawHTTPClient is the publish benchmark's lean load generator: a minimal
// HTTP/1.1 keep-alive client. net/http's client costs two goroutines and
// several channel hand-offs per request — about a third of the benchmark
// process's CPU in profiles — and the load generator shares the machine with
// the API and Postgres, so whatever it spends shows up as API latency. It
// speaks exactly what the benchmark needs: one POST at a time, a
// Content-Length body back, a new connection after "Connection: close" or
// any error. --client stdlib uses net/http instead (and is needed for https).
type rawHTTPClient struct {
	addr    string
	head    []byte // request line and the fixed headers
	timeout time.Duration

	conn net.Conn
	br   *bufio.Reader
	req  []byte
	resp []byte
}

func newRawHTTPClient(rawURL, authorization string, timeout time.Duration) (*rawHTTPClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("the lean benchmark client speaks plain http only, not %q: use --client stdlib", u.Scheme)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	head := "POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nContent-Type: application/json\r\nAuthorization: " + authorization + "\r\n"
	return &rawHTTPClient{addr: addr, head: []byte(head), timeout: timeout}, nil
}

func (c *rawHTTPClient) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

func (c *rawHTTPClient) post(ctx context.Context, body []byte, key string) (int, []byte, error) {
	status, resp, err := c.roundTrip(ctx, body, key)
	if err != nil {
		c.close()
	}
	return status, resp, err
}

func (c *rawHTTPClient) roundTrip(ctx context.Context, body []byte, key string) (int, []byte, error) {
	if c.conn == nil {
		d := net.Dialer{Timeout: c.timeout}
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 4096)
	}
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, nil, err
	}
	req := append(c.req[:0], c.head...)
	if key != "" {
		req = append(req, "Idempotency-Key: "...)
		req = append(req, key...)
		req = append(req, "\r\n"...)
	}
	req = append(req, "Content-Length: "...)
	req = strconv.AppendInt(req, int64(len(body)), 10)
	req = append(req, "\r\n\r\n"...)
	req = append(req, body...)
	c.req = req
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, err
	}

	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, fmt.Errorf("read status line: %w", err)
	}
	// "HTTP/1.1 201 Created\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, fmt.Errorf("malformed status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("malformed status line %q", line)
	}
	length, closing := -1, false
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, fmt.Errorf("read headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("malformed header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch http.CanonicalHeaderKey(string(name)) {
		case "Content-Length":
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("malformed Content-Length %q", value)
			}
		case "Connection":
			closing = bytes.EqualFold(value, []byte("close"))
		case "Transfer-Encoding":
			return 0, nil, errors.New("chunked response: not supported by the lean benchmark client (use --client stdlib)")
		}
	}
	if length < 0 {
		return 0, nil, errors.New("response without Content-Length: not supported by the lean benchmark client (use --client stdlib)")
	}
	if cap(c.resp) < length {
		c.resp = make([]byte, length)
	}
	resp := c.resp[:length]
	if _, err := io.ReadFull(c.br, resp); err != nil {
		return 0, nil, fmt.Errorf("read body: %w", err)
	}
	if closing {
		c.close()
	}
	return status, resp, nil
}

// stdlibClient is net/http's client, one connection per benchmark client.
type stdlibClient struct {
	url, authorization string
	client             *http.Client
}

func newStdlibClient(rawURL, authorization string, timeout time.Duration) *stdlibClient {
	return &stdlibClient{url: rawURL, authorization: authorization, client: &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxIdleConns: 1, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, IdleConnTimeout: time.Minute,
	}}}
}

func (c *stdlibClient) close() { c.client.CloseIdleConnections() }

func (c *stdlibClient) post(ctx context.Context, body []byte, key string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Authorization"] = []string{c.authorization}
	if key != "" {
		req.Header["Idempotency-Key"] = []string{key}
	}
	res, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}
