package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// request is a request line and its headers as the sandbox sent them. The proxy reads
// requests itself, with net/textproto for the headers as net/http does, because
// http.ReadRequest drops the Host header (the proxy must compare it with the target) and
// parses the target its own, more lenient way (it decodes percent-escapes in hosts).
type request struct {
	method string
	target string // the request target, raw
	proto  string // HTTP/1.1 or HTTP/1.0
	header http.Header
	// contentLength is the body's length; -1 for a chunked body.
	contentLength int64
	// hasLength is whether the client sent a Content-Length header.
	hasLength bool
	// body reads the body, de-chunked; nil when there is none.
	body io.Reader
	// close is whether the client asked for its connection to end after this request.
	close bool
}

func (r *request) http11() bool { return r.proto == "HTTP/1.1" }

// errTooLarge is textproto's refusal of too many headers.
var errTooLarge = errors.New("request headers too large")

// readRequest reads a request's line and headers from br, and sets up its body. A
// request that is malformed gives an error wrapping errdefs.ErrInvalidArgument; an error
// reading gives that error.
func readRequest(br *bufio.Reader) (*request, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return nil, malformed("the request line %s is not METHOD TARGET HTTP/1.1", quote(line))
	}
	if !httpguts.ValidHeaderFieldName(method) {
		return nil, malformed("the method %s is not a token", quote(method))
	}
	if proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return nil, malformed("the protocol %s is not HTTP/1.1 or HTTP/1.0", quote(proto))
	}
	if target == "" {
		return nil, malformed("the request target is empty")
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		if err.Error() == "message too large" { // textproto's own bounds on headers
			return nil, errTooLarge
		}
		var pe textproto.ProtocolError
		if errors.As(err, &pe) {
			return nil, malformed("a malformed header line: %s", printable(string(pe), 120))
		}
		return nil, err
	}
	r := &request{method: method, target: target, proto: proto, header: http.Header(mh)}
	if len(r.header["Host"]) > 1 {
		return nil, malformed("the request has %d Host headers", len(r.header["Host"]))
	}
	conn := strings.Join(r.header["Connection"], ",")
	r.close = !r.http11() || httpguts.HeaderValuesContainsToken([]string{conn}, "close")
	if err := r.framing(br); err != nil {
		return nil, err
	}
	return r, nil
}

// framing reads the body's framing (RFC 9112 §6): chunked, or a Content-Length, or no
// body. A request with both, or with another transfer coding, is refused rather than
// guessed at; the body is sent upstream framed by the proxy, never as the client framed
// it.
func (r *request) framing(br *bufio.Reader) error {
	te, cl := r.header["Transfer-Encoding"], r.header["Content-Length"]
	switch {
	case len(te) > 0 && len(cl) > 0:
		return malformed("the request has both Transfer-Encoding and Content-Length")
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return malformed("the Transfer-Encoding %s is not supported; only chunked is", quote(strings.Join(te, ", ")))
		}
		if !r.http11() {
			return malformed("chunked encoding in an HTTP/1.0 request")
		}
		r.contentLength = -1
		r.body = &chunkedBody{r: httputil.NewChunkedReader(br), br: br}
	case len(cl) > 0:
		n, err := parseContentLength(cl)
		if err != nil {
			return err
		}
		r.contentLength, r.hasLength = n, true
		if n > 0 {
			r.body = &exactReader{r: br, n: n}
		}
	}
	return nil
}

func parseContentLength(vals []string) (int64, error) {
	first := strings.TrimSpace(vals[0])
	for _, v := range vals[1:] {
		if strings.TrimSpace(v) != first {
			return 0, malformed("the request has Content-Length headers that differ")
		}
	}
	n, err := strconv.ParseInt(first, 10, 64)
	if err != nil || n < 0 || strings.Trim(first, "0123456789") != "" {
		return 0, malformed("the Content-Length %s is not a length", quote(first))
	}
	return n, nil
}

// exactReader reads exactly n bytes: an early end is io.ErrUnexpectedEOF, so a body cut
// short is never forwarded as if it were whole.
type exactReader struct {
	r io.Reader
	n int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.n {
		p = p[:e.n]
	}
	k, err := e.r.Read(p)
	e.n -= int64(k)
	if err == io.EOF && e.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

// maxTrailerBytes bounds a chunked body's trailer section, which the proxy reads and drops.
const maxTrailerBytes = 16 << 10

// chunkedBody de-chunks a body and, at its end, reads past the trailer section, so the
// connection is ready for the next request.
type chunkedBody struct {
	r    io.Reader
	br   *bufio.Reader
	done bool
}

func (c *chunkedBody) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	n, err := c.r.Read(p)
	if err == io.EOF {
		if terr := skipTrailers(c.br); terr != nil {
			return n, terr
		}
		c.done = true
	}
	return n, err
}

func skipTrailers(br *bufio.Reader) error {
	total := 0
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		switch {
		case errors.Is(err, bufio.ErrBufferFull) || total > maxTrailerBytes:
			return fmt.Errorf("the chunked body's trailers are over %d bytes", maxTrailerBytes)
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		case string(line) == "\r\n" || string(line) == "\n":
			return nil
		}
	}
}

// response is an upstream's status line and headers, read as requests are (net/http's
// ReadResponse drops the Connection header when it says close, and with it the headers
// it names, which must not reach the client).
type response struct {
	code   int
	status string // "200 OK"
	header http.Header
	// contentLength is the body's length, -1 when unknown (chunked, or until the
	// upstream closes).
	contentLength int64
	// body reads the body, de-chunked; nil when there is none.
	body io.Reader
	// chunked is whether the upstream sent the body chunked; if not, its bytes are the
	// body, to be copied as they are.
	chunked bool
}

// readResponse reads a response to a request of the given method.
func readResponse(br *bufio.Reader, method string) (*response, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	proto, status, _ := strings.Cut(line, " ")
	if !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 {
		return nil, fmt.Errorf("a malformed status line %s", quote(line))
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 100 || code > 999 || (len(status) > 3 && status[3] != ' ') {
		return nil, fmt.Errorf("a malformed status line %s", quote(line))
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	// The reason phrase goes to the client as it came, but for bytes that have no place there.
	r := &response{code: code, status: printable(status, 200), header: http.Header(mh), contentLength: -1}
	if method == http.MethodHead || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return r, nil // no body, whatever the headers say
	}
	te, cl := r.header["Transfer-Encoding"], r.header["Content-Length"]
	switch {
	case len(te) > 0 && len(cl) > 0:
		return nil, errors.New("a response with both Transfer-Encoding and Content-Length")
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return nil, fmt.Errorf("a response with the transfer coding %s; only chunked is passed on", quote(strings.Join(te, ", ")))
		}
		r.body, r.chunked = &chunkedBody{r: httputil.NewChunkedReader(br), br: br}, true
	case len(cl) > 0:
		n, err := parseContentLength(cl)
		if err != nil {
			return nil, err
		}
		r.contentLength = n
		if n > 0 {
			r.body = &exactReader{r: br, n: n}
		}
	default:
		r.body = br
	}
	return r, nil
}
