package coder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Keeper keeps the conversation's files off the sandbox (the host, in a sandbox), so
// that it outlives a restart of the sandbox, whose /tmp starts empty.
type Keeper interface {
	// LoadState is the kept file name; nil when none is kept.
	LoadState(ctx context.Context, name string) ([]byte, error)
	SaveState(ctx context.Context, name string, b []byte) error
}

// stateFiles are the files of the state directory that are kept.
var stateFiles = []string{conversationFile, eventsFile}

// RestoreState brings the kept conversation back into dir when dir has none (the
// sandbox restarted since it was written).
func RestoreState(ctx context.Context, k Keeper, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, conversationFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for _, name := range stateFiles {
		b, err := k.LoadState(ctx, name)
		if err != nil {
			return fmt.Errorf("restoring the conversation's %s: %w", name, err)
		}
		if len(b) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return fmt.Errorf("restoring the conversation's %s: %w", name, err)
		}
	}
	return nil
}

// SaveState keeps dir's conversation (an absent file is kept empty: forgotten).
func SaveState(ctx context.Context, k Keeper, dir string) error {
	var errs []error
	for _, name := range stateFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if err := k.SaveState(ctx, name, b); err != nil {
			errs = append(errs, fmt.Errorf("keeping the conversation's %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

var _ Keeper = (*ServicesHost)(nil)

func (h *ServicesHost) LoadState(ctx context.Context, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := h.raw(ctx, "GET", name, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the host's answer: %w", errdefs.ErrUnavailable)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("HTTP %d: %s: %w", resp.StatusCode, errorMessage(b), errdefs.ErrUnavailable)
	}
	return b, nil
}

func (h *ServicesHost) SaveState(ctx context.Context, name string, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := h.raw(ctx, "PUT", name, b)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return fmt.Errorf("HTTP %d: %s: %w", resp.StatusCode, errorMessage(msg), errdefs.ErrUnavailable)
	}
	return nil
}

func (h *ServicesHost) raw(ctx context.Context, method, name string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(h.Base, "/")+wire.ServicesAgentStatePath+name, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", servicesEnv, h.Base, errdefs.ErrInvalidArgument)
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the host's services did not answer (%s): %w", shortErr(err), errdefs.ErrUnavailable)
	}
	return resp, nil
}
