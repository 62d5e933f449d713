package paddock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Runtime providers' shapes: a step's request and its events.
type (
	// ProviderRequest names a step's project: its runtime, directory and (for new) name.
	ProviderRequest = api.ProviderRequest
	// ProviderEvent is one event of a step: progress, a log line, or the result.
	ProviderEvent = api.ProviderEvent
	// ProviderPreview is how a provider serves a project while it is developed.
	ProviderPreview = api.ProviderPreview
)

// AppStep runs a provider step (api.StepBuild, …) in a sandbox, calling emit with each
// event as it comes. It returns the result event; a step that failed is an error carrying
// the result's message.
func (c *Client) AppStep(ctx context.Context, id, step string, req api.ProviderRequest, emit func(api.ProviderEvent)) (api.ProviderEvent, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return api.ProviderEvent{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, "POST", c.base+sandboxPath(id, "app/"+step), bytes.NewReader(data))
	if err != nil {
		return api.ProviderEvent{}, fmt.Errorf("server URL %q: %v: %w", c.base, err, errdefs.ErrInvalidArgument)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return api.ProviderEvent{}, c.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.ProviderEvent{}, errorOf(resp)
	}
	var result *api.ProviderEvent
	err = ReadProviderEvents(resp.Body, func(ev api.ProviderEvent) {
		if ev.Type == api.EventResult {
			result = &ev
		}
		if emit != nil {
			emit(ev)
		}
	})
	switch {
	case err != nil:
		return api.ProviderEvent{}, fmt.Errorf("%s: the stream broke: %v: %w", step, err, errdefs.ErrUnavailable)
	case result == nil:
		return api.ProviderEvent{}, fmt.Errorf("%s: the stream ended without a result: %w", step, errdefs.ErrUnavailable)
	case result.Error != "":
		return *result, fmt.Errorf("%s", result.Error)
	}
	return *result, nil
}

// maxEventLine bounds one line of the stream: a log line is at most what an exec prints.
const maxEventLine = 4 << 20

// ReadProviderEvents reads a provider step's text/event-stream, calling emit with each
// event. Comments, unknown fields and events of unknown types are skipped, as the
// event-stream format wants.
func ReadProviderEvents(r io.Reader, emit func(api.ProviderEvent)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if len(data) > 0 {
				var ev api.ProviderEvent
				if err := json.Unmarshal(data, &ev); err != nil {
					return fmt.Errorf("event: %w", err)
				}
				emit(ev)
			}
			data = data[:0]
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) == "data" {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	return sc.Err()
}

// SetApp chooses what a sandbox runs as its app; an empty template is the server's default.
func (c *Client) SetApp(ctx context.Context, id string, t api.Template) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, "PUT", sandboxPath(id, "app"), t, &sb, http.StatusOK)
	return sb, err
}
