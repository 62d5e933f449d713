package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/policy"
)

// refusal is a request the proxy will not carry, and what the sandbox is told: the
// status, the rule that refused and a reason that says what happened. A reason never
// holds more than the sandbox itself sent and the addresses of hosts it was allowed to
// reach; the host's resolvers and internal errors stay in the log.
type refusal struct {
	status int
	stage  Stage // StageDenied or StageFailed
	rule   string
	reason string
	// proxyStatus is the RFC 9209 error type sent in the Proxy-Status header.
	proxyStatus string
	// authenticate is a 407's Proxy-Authenticate challenge.
	authenticate string
}

func deny(rule string, status int, proxyStatus, format string, args ...any) *refusal {
	return &refusal{status: status, stage: StageDenied, rule: rule, reason: fmt.Sprintf(format, args...), proxyStatus: proxyStatus}
}

func fail(rule string, status int, proxyStatus, format string, args ...any) *refusal {
	return &refusal{status: status, stage: StageFailed, rule: rule, reason: fmt.Sprintf(format, args...), proxyStatus: proxyStatus}
}

// badRequest refuses a malformed request with err's message.
func badRequest(rule string, err error) *refusal {
	return &refusal{status: http.StatusBadRequest, stage: StageDenied, rule: rule, reason: errText(err), proxyStatus: "http_request_error"}
}

// errText is err's message without the taxonomy's suffix: the reason says it better.
func errText(err error) string {
	s := err.Error()
	if u := errors.Unwrap(err); u != nil {
		s = strings.TrimSuffix(s, ": "+u.Error())
	}
	return s
}

// refuse records r for the exchange, answers the client and closes its connection.
func (p *Proxy) refuse(ctx context.Context, x *exchange, r *refusal) {
	if r.stage == "" {
		r.stage = StageDenied
	}
	x.ev.Stage, x.ev.Status = r.stage, r.status
	x.ev.Decision = policy.Decision{Rule: r.rule, Reason: r.reason}
	p.record(ctx, x.ev)
	c := x.client.Conn
	_ = c.SetWriteDeadline(time.Now().Add(p.headerTimeout))
	writeRefusal(c, r)
	lingerClose(c)
}

// writeRefusal writes r as an HTTP response that closes the connection.
func writeRefusal(w io.Writer, r *refusal) {
	body := "paddock egress proxy: " + r.reason + " (rule " + r.rule + ")\n"
	var b strings.Builder
	// The reason phrase carries the reason too: it is what most tools print (npm, pip,
	// curl -v), where a body or a header goes unread.
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", r.status, reasonPhrase(http.StatusText(r.status)+" by paddock egress: "+r.reason+" (rule "+r.rule+")"))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	b.WriteString("Connection: close\r\n")
	fmt.Fprintf(&b, "Proxy-Status: paddock-egress; error=%s; details=%s\r\n", r.proxyStatus, sfString(r.reason+" (rule "+r.rule+")"))
	if r.authenticate != "" {
		b.WriteString("Proxy-Authenticate: " + r.authenticate + "\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	_, _ = io.WriteString(w, b.String())
}

// lingerClose closes c after telling the client we are done (FIN) and reading what it
// still sends for a moment: closing a socket with unread bytes resets the connection,
// and a reset can destroy the refusal before the client reads it.
func lingerClose(c net.Conn) {
	closeWrite(c)
	_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 256<<10))
	_ = c.Close()
}

// sfString is s as an RFC 8941 string: printable ASCII, quotes and backslashes escaped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// printable clips s to max bytes and replaces what is not printable ASCII: it is for
// error texts that may hold raw bytes the sandbox sent.
func printable(s string, max int) string {
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

func joinReasons(rs []string) string {
	if len(rs) > 3 {
		return strings.Join(rs[:3], "; ") + fmt.Sprintf("; and %d more", len(rs)-3)
	}
	return strings.Join(rs, "; ")
}

func portList(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

// maxReasonPhrase bounds the status line's reason phrase.
const maxReasonPhrase = 300

// reasonPhrase is s as a status line's reason phrase: printable ASCII, bounded.
func reasonPhrase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	if len(b) > maxReasonPhrase {
		b = append(b[:maxReasonPhrase-3], "..."...)
	}
	return string(b)
}
