package cgroups

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Freeze stops every process of the group and its descendants where it is, its memory
// kept, until Thaw: v1's freezer.state, v2's cgroup.freeze. It returns once the kernel
// says the group is frozen; if ctx ends first, it thaws the group again and says so.
func (g *Group) Freeze(ctx context.Context) error {
	dir, file, value, err := g.freezer(true)
	if err != nil {
		return err
	}
	if err := writeFile(dir, file, value); err != nil {
		return g.wrap(fmt.Errorf("freeze: %w", err))
	}
	for delay := freezePoll; ; delay = min(2*delay, maxFreezePoll) {
		frozen, err := g.Frozen()
		if frozen || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(g.wrap(fmt.Errorf("freeze: not frozen yet: %w", ctx.Err())), g.Thaw())
		}
		sleep(ctx, delay)
	}
}

// Thaw lets a frozen group run again; a group not frozen is left as it is.
func (g *Group) Thaw() error {
	dir, file, value, err := g.freezer(false)
	if err != nil {
		return err
	}
	if err := writeFile(dir, file, value); err != nil {
		return g.wrap(fmt.Errorf("thaw: %w", err))
	}
	return nil
}

// Frozen reports whether the kernel has frozen the whole group.
func (g *Group) Frozen() (bool, error) {
	dir, _, _, err := g.freezer(true)
	if err != nil {
		return false, err
	}
	if g.mode == V1 {
		s, err := readFile(dir, "freezer.state")
		return s == "FROZEN", g.wrapIf(err)
	}
	n, err := readKeyed(dir, "cgroup.events", "frozen")
	return n == 1, g.wrapIf(err)
}

// freezer is the file that freezes (or thaws) the group, and the value to write.
func (g *Group) freezer(freeze bool) (dir, file, value string, err error) {
	if g.mode == V1 {
		dir, file, value = g.controller("freezer"), "freezer.state", "THAWED"
		if freeze {
			value = "FROZEN"
		}
	} else {
		dir, file, value = g.dirs[0], "cgroup.freeze", "0"
		if freeze {
			value = "1"
		}
	}
	if dir == "" || !exists(dir, file) {
		return "", "", "", fmt.Errorf("cgroup %s: no %s to freeze it with: %w", g.path, file, errdefs.ErrUnavailable)
	}
	return dir, file, value, nil
}

func (g *Group) wrapIf(err error) error {
	if err == nil {
		return nil
	}
	return g.wrap(err)
}

// Polling of a freeze: most groups freeze within a millisecond.
const (
	freezePoll    = 100 * time.Microsecond
	maxFreezePoll = 10 * time.Millisecond
)
