package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Policy maps capabilities to the user secrets that may satisfy them. It is loaded from a
// YAML file:
//
//	capabilities:
//	  github:
//	    secrets: [github_token]   # the first of these that the user has set is returned
//	    roles: [dev]              # optional: only sandboxes in these roles (live, dev)
//	    users: [alice]            # optional: only these users (by username)
//	    ttl: 15m                  # optional: the lease's lifetime (default 15m, at most 24h)
//
// A capability that is not listed is denied, for everyone. The empty policy denies all.
type Policy struct {
	Capabilities map[string]Capability `yaml:"capabilities"`
}

// Capability is one entry of a Policy.
type Capability struct {
	// Secrets are the names of user secrets that satisfy the capability, in order of
	// preference.
	Secrets []string `yaml:"secrets"`
	// Roles, when set, limit the capability to sandboxes in these roles.
	Roles []string `yaml:"roles"`
	// Users, when set, limit the capability to these usernames.
	Users []string `yaml:"users"`
	// TTL is the lease's lifetime; zero means DefaultTTL.
	TTL Duration `yaml:"ttl"`
}

// Lease lifetimes.
const (
	DefaultTTL = 15 * time.Minute
	MaxTTL     = 24 * time.Hour
)

// Duration is a time.Duration written as "15m" in YAML.
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: ttl %q: want a duration such as 15m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// capabilityName is what a capability is called: also a path segment of the broker's API.
var capabilityName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ParsePolicy parses and validates a policy; errors name the source and what is wrong.
func ParsePolicy(b []byte, source string) (*Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("broker policy %s: %v: %w", source, err, errdefs.ErrInvalidArgument)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("broker policy %s: %w", source, err)
	}
	return &p, nil
}

func (p *Policy) validate() error {
	names := make([]string, 0, len(p.Capabilities))
	for name := range p.Capabilities {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := p.Capabilities[name]
		at := "capabilities." + name
		if !capabilityName.MatchString(name) {
			return fmt.Errorf("%s: a capability name is 1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit: %w", at, errdefs.ErrInvalidArgument)
		}
		if len(c.Secrets) == 0 {
			return fmt.Errorf("%s.secrets: name at least one secret: %w", at, errdefs.ErrInvalidArgument)
		}
		for i, s := range c.Secrets {
			if !capabilityName.MatchString(s) {
				return fmt.Errorf("%s.secrets[%d]: %q is not a secret name: %w", at, i, s, errdefs.ErrInvalidArgument)
			}
		}
		for i, r := range c.Roles {
			if r != "live" && r != "dev" {
				return fmt.Errorf("%s.roles[%d]: %q: want live or dev: %w", at, i, r, errdefs.ErrInvalidArgument)
			}
		}
		if ttl := time.Duration(c.TTL); ttl < 0 || ttl > MaxTTL {
			return fmt.Errorf("%s.ttl: %v: want at most %v: %w", at, ttl, MaxTTL, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// decide says whether a user's sandbox in role may use capability name, and why not.
func (p *Policy) decide(name, username, role string) (Capability, string, bool) {
	c, ok := p.Capabilities[name]
	switch {
	case !ok:
		return c, "no such capability in the broker's policy", false
	case len(c.Users) > 0 && !slices.Contains(c.Users, username):
		return c, "the policy does not grant this capability to this user", false
	case len(c.Roles) > 0 && !slices.Contains(c.Roles, role):
		if role == "" {
			role = "no role"
		}
		return c, fmt.Sprintf("the policy grants this capability only to %v sandboxes, and this one is %s", c.Roles, role), false
	}
	return c, "", true
}

func (c Capability) ttl() time.Duration {
	if c.TTL == 0 {
		return DefaultTTL
	}
	return time.Duration(c.TTL)
}
