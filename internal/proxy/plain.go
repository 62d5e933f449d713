package proxy

import (
	"bufio"
	"io"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/httpmetrics"
)

// plain reports whether r, as the server parsed it, can go to the app without
// httputil.ReverseProxy: no body, no Expect, no trailers, no upgrade.
func plain(r *http.Request) bool {
	return (r.Body == nil || r.Body == http.NoBody) && r.ContentLength == 0 && len(r.TransferEncoding) == 0 &&
		r.Trailer == nil && r.Header.Get("Expect") == "" && r.Header.Get("Upgrade") == ""
}

// servePlain forwards a plain request as ReverseProxy with rewrite and modifyResponse
// would, without their copies: the outbound head is written straight from r's headers,
// scrubbed on the way, and the answer's headers are scrubbed in place and copied once.
// It is the path of most requests, where ReverseProxy's clones of the request and its
// headers cost more CPU than the exchange with the app.
func (p *Proxy) servePlain(w *httpmetrics.StatusWriter, r *http.Request, info *reqInfo) {
	head := func(bw *bufio.Writer) error { return p.writePlainHead(bw, r, info) }
	got1xx := func(code int, h http.Header) error {
		dst := w.Header()
		copyHeader(dst, h)
		w.WriteHeader(code)
		clear(dst) // a 1xx's headers are not the final answer's
		return nil
	}
	res, err := p.direct.roundTrip(r, info.target.SandboxID, head, got1xx)
	if err != nil {
		p.answerUnreachable(w, r, info, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		res.Body.Close()
		p.answerUnreachable(w, r, info, refusal("it switched protocols on a request that asked for no upgrade"))
		return
	}
	removeHopByHop(res.Header)
	p.scrubResponse(res.Header, info)
	stampResponse(res.Header, info)
	dst := w.Header()
	copyHeader(dst, res.Header)
	if len(res.Trailer) > 0 {
		keys := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	announced := len(res.Trailer)
	w.WriteHeader(res.StatusCode)
	if err := copyBody(w, res.Body, streams(res)); err != nil {
		res.Body.Close()
		if r.Context().Err() == nil {
			p.log.Warn("proxy: an app's answer was cut short", "user", info.caller.UserID, "role", info.caller.Role,
				"sandbox", info.target.SandboxID, "err", err)
		}
		panic(http.ErrAbortHandler) // the client must not take a cut body for a whole one
	}
	res.Body.Close()
	if len(res.Trailer) > 0 {
		p.scrubResponse(res.Trailer, info)
		_ = http.NewResponseController(w).Flush() // chunked, so that trailers can follow
	}
	if len(res.Trailer) == announced {
		copyHeader(dst, res.Trailer)
		return
	}
	for k, vv := range res.Trailer {
		for _, v := range vv {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
}

// writePlainHead writes r's head as the app is to see it, as rewrite makes it: hop-by-hop
// headers, credentials, reserved cookies and every header the client could use to pose as
// the proxy left out; X-Forwarded-* and the proxy's own headers added.
func (p *Proxy) writePlainHead(bw *bufio.Writer, r *http.Request, info *reqInfo) error {
	writeRequestLine(bw, r.Method, r.URL.RequestURI(), r.Host)
	conn := r.Header["Connection"]
	for k, vs := range r.Header {
		if !passesPlain(k, conn) {
			continue
		}
		for _, v := range vs {
			if v == "" && k == "User-Agent" {
				continue
			}
			writeField(bw, k, v)
		}
	}
	// A header Connection names is hop-by-hop, Te and Cookie too.
	if headerValuesHaveToken(r.Header["Te"], "trailers") && !headerValuesHaveToken(conn, "Te") {
		writeField(bw, "Te", "trailers")
	}
	if c := filterCookies(r.Header["Cookie"], p.isReserved); c != "" && !headerValuesHaveToken(conn, "Cookie") {
		writeField(bw, "Cookie", c)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		writeField(bw, "X-Forwarded-For", ip)
	}
	writeField(bw, "X-Forwarded-Host", r.Host)
	if r.TLS != nil {
		writeField(bw, "X-Forwarded-Proto", "https")
	} else {
		writeField(bw, "X-Forwarded-Proto", "http")
	}
	writeField(bw, api.HeaderRole, info.caller.Role)
	writeField(bw, api.HeaderSandbox, info.target.SandboxID)
	bw.WriteString("\r\n")
	return bw.Flush()
}

// plainDropped are the request headers writePlainHead leaves out or writes itself:
// framing, hop-by-hop (as ReverseProxy drops them), credentials and cookies.
var plainDropped = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true,
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Upgrade": true,
	"Authorization": true, "X-Csrf-Token": true, "Cookie": true,
	"Forwarded": true, "X-Real-Ip": true,
}

// passesPlain reports whether a request header goes to the app as it came: not dropped,
// not one of the proxy's or the forwarding headers, not named by Connection.
func passesPlain(k string, conn []string) bool {
	if !validHeaderName(k) || plainDropped[textproto.CanonicalMIMEHeaderKey(k)] ||
		hasPrefixFold(k, "X-Paddock-") || hasPrefixFold(k, "X-Forwarded-") {
		return false
	}
	return !headerValuesHaveToken(conn, k)
}

// headerValuesHaveToken reports whether comma-separated values list token, in any case.
func headerValuesHaveToken(values []string, token string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), token) {
				return true
			}
		}
	}
	return false
}

// hopHeaders are the response headers that concern one connection only.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop drops h's hop-by-hop headers and those its Connection names.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// copyHeader adds src's fields to dst. src is a parsed answer's, which nothing else holds,
// so that its value slices are taken as they are where dst has none.
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		if len(dst[k]) == 0 {
			dst[k] = vv
			continue
		}
		dst[k] = append(dst[k], vv...)
	}
}

// streams reports an answer whose every write must reach the client at once: an event
// stream, or a body of unknown length.
func streams(res *http.Response) bool {
	if res.ContentLength == -1 {
		return true
	}
	ct := res.Header.Get("Content-Type")
	if !hasPrefixFold(strings.TrimLeft(ct, " \t"), "text/event-stream") {
		return false
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "text/event-stream"
}

// copyBody copies an answer's body to the client, flushing after each write when flush
// is set.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) error {
	rc := http.NewResponseController(w)
	if flush {
		if err := rc.Flush(); err != nil {
			return err
		}
	}
	buf := bufferPool{}.Get()
	defer bufferPool{}.Put(buf)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
