package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
)

// This file reads token usage out of provider answers as they pass through, without
// holding them back or buffering them: the bytes go to the client as they arrive, and a
// copy of each chunk is fed to a push parser that keeps O(1) state. The bytes are the
// provider's, but a compromised or buggy upstream, or a sandbox that steers what it
// echoes, must not make the parser crash, grow without bound or miscount by more than
// skipping a usage it cannot read; FuzzUsageSSE and FuzzUsageJSON hold it to that.

// maxUsageBytes bounds one captured usage value. Real ones are a few hundred bytes.
const maxUsageBytes = 16 << 10

// tokens is what one answer used.
type tokens struct{ in, out int64 }

func (t tokens) total() int64 { return satAdd(t.in, t.out) }

// usageFields is a usage object in either provider's words. OpenAI's chat and embeddings
// say prompt_tokens and completion_tokens, its Responses API and Anthropic input_tokens
// and output_tokens; Anthropic counts prompt-cache reads and writes apart from
// input_tokens, and the gateway counts them as input, since the provider processed them.
type usageFields struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheCreation    int64 `json:"cache_creation_input_tokens"`
	CacheRead        int64 `json:"cache_read_input_tokens"`
}

// merge folds a raw usage value into t. Counts in a stream are cumulative (Anthropic's
// message_delta repeats the running output count; message_start gives the input), so t
// keeps the largest seen of each rather than a sum. A value that is not a usage object
// counts nothing; a field of the wrong type counts as 0.
func (t *tokens) merge(raw []byte) {
	var u usageFields
	if err := json.Unmarshal(raw, &u); err != nil {
		if te := (*json.UnmarshalTypeError)(nil); !errors.As(err, &te) {
			return
		}
	}
	in := satAdd(satAdd(max(u.PromptTokens, u.InputTokens, 0), max(u.CacheCreation, 0)), max(u.CacheRead, 0))
	out := max(u.CompletionTokens, u.OutputTokens, 0)
	t.in, t.out = max(t.in, in), max(t.out, out)
}

// satAdd adds non-negative counts without wrapping.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// usageScanner finds the value of every "usage" key of the top-level object, or of an
// object that is the value of one of its keys, in a JSON document fed to it in pieces:
// the first is OpenAI's and Anthropic's answers and
// stream chunks; the second Anthropic's message_start ({"message":{"usage":…}}) and the
// Responses API's response.completed ({"response":{"usage":…}}). It tracks only nesting
// and strings; everything else is skipped unread, so a large answer (a batch of
// embeddings, with its usage at the very end) costs one pass and no memory.
type usageScanner struct {
	tok tokens

	depth    int
	kinds    [2]byte // '{' or '[' of the containers at depth 1 and 2
	inString bool
	escape   bool
	str      [8]byte // the current string's start, enough to tell "usage"
	strLen   int
	strPlain bool // the current string has no escapes and fits in str
	keyNext  bool // the last token was the string "usage" in an object at depth 1-2

	capturing bool
	capDepth  int
	overflow  bool
	buf       []byte
}

// reset forgets the document but keeps the tokens counted so far.
func (s *usageScanner) reset() {
	tok, buf := s.tok, s.buf[:0]
	*s = usageScanner{tok: tok, buf: buf}
}

// Write feeds p to the scanner; it never fails.
func (s *usageScanner) Write(p []byte) (int, error) {
	s.feed(p)
	return len(p), nil
}

func (s *usageScanner) tokens() tokens { return s.tok }

func (s *usageScanner) events() int64 { return 0 }

func (s *usageScanner) finished() bool { return false }

func (s *usageScanner) feed(p []byte) {
	capFrom := 0 // where in p the capture's bytes not yet kept begin
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.inString {
			if s.escape {
				s.escape = false
				continue
			}
			j := bytes.IndexAny(p[i:], "\"\\")
			if j < 0 {
				s.noteString(p[i:])
				break
			}
			s.noteString(p[i : i+j])
			i += j
			if p[i] == '\\' {
				s.escape, s.strPlain = true, false
				continue
			}
			s.inString = false
			s.keyNext = s.strPlain && string(s.str[:s.strLen]) == "usage" && s.inUsageObject()
			continue
		}
		switch c {
		case '"':
			s.inString, s.strLen, s.strPlain, s.keyNext = true, 0, true, false
		case ':':
			if s.keyNext && !s.capturing {
				s.capturing, s.capDepth, s.overflow, s.buf = true, s.depth, false, s.buf[:0]
				capFrom = i + 1
			}
			s.keyNext = false
		case '{', '[':
			s.depth++
			if s.depth <= len(s.kinds) {
				s.kinds[s.depth-1] = c
			}
			s.keyNext = false
		case '}', ']', ',':
			if s.capturing && s.depth == s.capDepth {
				s.keep(p[capFrom:i])
				s.endCapture()
			}
			if c != ',' && s.depth > 0 {
				s.depth--
			}
			s.keyNext = false
		case ' ', '\t', '\r', '\n':
		default:
			s.keyNext = false
		}
	}
	if s.capturing {
		s.keep(p[capFrom:])
	}
}

// inUsageObject reports whether the scanner is in the top-level object or in an object
// that is the value of one of its keys: where providers put usage.
func (s *usageScanner) inUsageObject() bool {
	return s.depth == 1 && s.kinds[0] == '{' || s.depth == 2 && s.kinds[0] == '{' && s.kinds[1] == '{'
}

func (s *usageScanner) noteString(b []byte) {
	if !s.strPlain {
		return
	}
	if s.strLen+len(b) > len(s.str) {
		s.strPlain = false
		return
	}
	s.strLen += copy(s.str[s.strLen:], b)
}

func (s *usageScanner) keep(b []byte) {
	if s.overflow || len(b) == 0 {
		return
	}
	if len(s.buf)+len(b) > maxUsageBytes {
		s.overflow = true
		return
	}
	s.buf = append(s.buf, b...)
}

func (s *usageScanner) endCapture() {
	s.capturing = false
	if !s.overflow {
		s.tok.merge(s.buf)
	}
	s.buf = s.buf[:0]
}

// sseParser reads a text/event-stream (the WHATWG HTML "server-sent events" format) fed
// in pieces, and streams each event's data into a usageScanner; a new event starts a new
// JSON document. Lines end in LF, CR or CRLF; "data" lines of one event are joined with
// LF, as the format says; other fields and comments are skipped. Nothing but the field
// name being read (at most 8 bytes) is kept between pieces.
type sseParser struct {
	scan usageScanner

	state     sseState
	field     [8]byte
	fieldLen  int
	fieldLong bool
	isData    bool
	skipSpace bool  // the byte after "data:" is a space to drop
	dataLines int   // data lines so far in this event
	nEvents   int64 // events with data, ended so far
	lastCR    bool  // the previous byte ended a line with CR; an LF now is part of it

	// The event's name and the start of its data, enough to tell the stream's last event.
	isEvent  bool
	name     [24]byte
	nameLen  int
	dataHead [8]byte
	dataLen  int
	ended    bool // the stream's last event has passed
}

// lastEvents are the events that end a provider's stream, after its final usage: the
// Responses API's response.completed (or .incomplete, .failed) and Anthropic's
// message_stop; OpenAI's Chat Completions ends with the data [DONE] instead.
var lastEvents = map[string]bool{
	"response.completed": true, "response.incomplete": true, "response.failed": true, "message_stop": true,
}

var lf = []byte{'\n'}

type sseState uint8

const (
	lineStart sseState = iota
	inField
	inValue
	skipLine
)

func (p *sseParser) Write(b []byte) (int, error) {
	p.feed(b)
	return len(b), nil
}

func (p *sseParser) tokens() tokens { return p.scan.tok }

func (p *sseParser) events() int64 { return p.nEvents }

func (p *sseParser) finished() bool { return p.ended }

func (p *sseParser) feed(b []byte) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '\n' && p.lastCR {
			p.lastCR = false
			continue
		}
		p.lastCR = c == '\r'
		if c == '\r' || c == '\n' {
			p.endLine()
			continue
		}
		switch p.state {
		case lineStart:
			if c == ':' {
				p.state = skipLine // a comment
				continue
			}
			p.state, p.fieldLen, p.fieldLong = inField, 0, false
			p.addField(c)
		case inField:
			if c == ':' {
				p.startValue()
				continue
			}
			p.addField(c)
		case inValue:
			if p.skipSpace {
				p.skipSpace = false
				if c == ' ' {
					continue
				}
			}
			if !p.isData && !p.isEvent {
				p.state = skipLine
				continue
			}
			// The rest of the line, up to its end, is taken at once.
			j := bytes.IndexAny(b[i:], "\r\n")
			if j < 0 {
				j = len(b) - i
			}
			v := b[i : i+j]
			if p.isEvent {
				p.nameLen = keepHead(p.name[:], p.nameLen, v)
			} else {
				p.dataLen = keepHead(p.dataHead[:], p.dataLen, v)
				p.scan.feed(v)
			}
			i += j - 1
		}
	}
}

// keepHead adds v to a value of which n bytes came before, keeping what fits in head,
// and returns the value's new length (which may pass len(head)).
func keepHead(head []byte, n int, v []byte) int {
	if n < len(head) {
		copy(head[n:], v)
	}
	return n + len(v)
}

// headValue is a kept value, or "" when it was longer than its head.
func headValue(head []byte, n int) string {
	if n > len(head) {
		return ""
	}
	return string(head[:n])
}

func (p *sseParser) addField(c byte) {
	if p.fieldLen == len(p.field) {
		p.fieldLong = true
		return
	}
	p.field[p.fieldLen] = c
	p.fieldLen++
}

// startValue begins a field's value; a data line after the first of its event adds the
// LF that joins them.
func (p *sseParser) startValue() {
	p.state, p.skipSpace = inValue, true
	p.isData = !p.fieldLong && string(p.field[:p.fieldLen]) == "data"
	p.isEvent = !p.fieldLong && string(p.field[:p.fieldLen]) == "event"
	if p.isEvent {
		p.nameLen = 0 // the last event field names the event
	}
	if p.isData {
		if p.dataLines > 0 {
			p.scan.feed(lf)
			p.dataLen = keepHead(p.dataHead[:], p.dataLen, lf)
		}
		p.dataLines++
	}
}

func (p *sseParser) endLine() {
	switch p.state {
	case lineStart: // an empty line: the event is complete
		if p.dataLines > 0 {
			p.scan.reset()
			p.nEvents++
			if lastEvents[headValue(p.name[:], p.nameLen)] || headValue(p.dataHead[:], p.dataLen) == "[DONE]" {
				p.ended = true
			}
		}
		p.dataLines, p.nameLen, p.dataLen = 0, 0, 0
	case inField: // a field name alone ("data") has an empty value
		p.startValue()
	}
	p.state = lineStart
}
