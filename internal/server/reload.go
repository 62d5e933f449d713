package server

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/paddockhq/paddock/internal/broker"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandboxops"
)

// Reload reads the server's policy files again — the default policy (`policy`), the
// network ceiling (`network_policy`) and the broker's (`broker_policy`) — and its
// capability keyring (after `paddock sandbox capability rotate-key`), and puts each one
// that loads in force at once: for the next command, file operation, connection through
// the egress proxy and broker request of every sandbox, running ones included. A file that
// does not load leaves its last good version in force; the error names the file, line and
// field. Every reload is an event (server.policy_reload, with what changed and what
// failed). `paddock serve` calls it on SIGHUP. Users' own policy files need no reload:
// they are read again whenever they change.
//
// network_policy is reloaded only when the server started with one: without it the
// sandboxes have no route to the egress proxy, and a reload cannot give running sandboxes
// one (restart them after restarting the server).
func (s *Server) Reload(ctx context.Context) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	var changed, failed []string
	var errs []error
	note := func(name string, ch bool, err error) {
		switch {
		case err != nil:
			failed = append(failed, name)
			errs = append(errs, err)
		case ch:
			changed = append(changed, name)
		}
	}
	ch, err := s.pol.ReloadDefault()
	note("policy", ch, err)
	ch, err = s.reloadNetworkPolicy()
	note("network_policy", ch, err)
	ch, err = s.reloadBrokerPolicy()
	note("broker_policy", ch, err)
	ch, err = s.caps.Reload()
	note(sandboxops.KeysFile, ch, err)
	if ch && err == nil {
		// The pool's sandboxes were started with the old keyring.
		s.fleet.DrainPool()
	}

	err = errors.Join(errs...)
	detail := map[string]any{"changed": changed, "failed": failed}
	if err != nil {
		detail["error"] = err.Error()
		s.log.Error("reload: a policy file does not load; its last good version stays in force", "failed", failed, "changed", changed, "err", err)
	} else {
		s.log.Info("reload: policy files read again", "changed", changed)
	}
	s.event(ctx, "", "server.policy_reload", detail)
	return err
}

// readPolicyFile reads the policy file at path, the setting what names, and parses it; it
// returns the policy with its text (a reload tells a change by it). An empty path is no
// policy: the zero T.
func readPolicyFile[T any](path, what string, parse func(b []byte, source string) (T, error)) (T, string, error) {
	var none T
	if path == "" {
		return none, "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return none, "", fmt.Errorf("%s: %w: %w", what, err, errdefs.ErrNotFound)
	}
	p, err := parse(b, path)
	return p, string(b), err
}

// swapText makes *last text and says whether that changed it.
func swapText(last *string, text string) bool {
	changed := *last != text
	*last = text
	return changed
}

// loadBrokerPolicy reads the broker's policy file, if any, and returns it with its text.
func loadBrokerPolicy(path string) (*broker.Policy, string, error) {
	return readPolicyFile(path, "broker policy", broker.ParsePolicy)
}

// reloadBrokerPolicy reads broker_policy again; one that does not load leaves the last
// good one in force.
func (s *Server) reloadBrokerPolicy() (changed bool, err error) {
	if s.cfg.BrokerPolicy == "" {
		return false, nil
	}
	p, text, err := loadBrokerPolicy(s.cfg.BrokerPolicy)
	if err != nil {
		return false, err
	}
	s.broker.SetPolicy(p)
	return swapText(&s.reloaded.broker, text), nil
}
