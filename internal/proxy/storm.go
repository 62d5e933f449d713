package proxy

import (
	"sync"
	"time"
)

// stormDetector counts each user's WebSocket connection attempts over a sliding window.
// A client stuck in a reconnect loop (an app that closes at once, a runtime that keeps
// failing to load) would otherwise hammer its sandbox; above the limit it is refused
// until the window slides, and the storm is reported once per window.
type stormDetector struct {
	mu     sync.Mutex
	window time.Duration
	limit  int
	now    func() time.Time
	users  map[string]*attempts
}

type attempts struct {
	at       []time.Time // accepted attempts within the window, oldest first
	reported time.Time   // when this user's last storm was reported
}

func newStormDetector(window time.Duration, limit int, now func() time.Time) *stormDetector {
	return &stormDetector{window: window, limit: limit, now: now, users: map[string]*attempts{}}
}

// allow records an attempt by user. When it is over the limit it returns ok false, how
// long until an attempt would pass, and report true the first time in a window. Refused
// attempts are not recorded, so a client that backs off as told gets back in.
func (d *stormDetector) allow(user string) (ok bool, retry time.Duration, report bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	a := d.users[user]
	if a == nil {
		d.sweep(now)
		a = &attempts{}
		d.users[user] = a
	}
	a.prune(now.Add(-d.window))
	if len(a.at) < d.limit {
		a.at = append(a.at, now)
		return true, 0, false
	}
	retry = a.at[0].Add(d.window).Sub(now)
	if a.reported.IsZero() || now.Sub(a.reported) >= d.window {
		a.reported = now
		report = true
	}
	return false, retry, report
}

func (a *attempts) prune(before time.Time) {
	i := 0
	for i < len(a.at) && !a.at[i].After(before) {
		i++
	}
	a.at = append(a.at[:0], a.at[i:]...)
}

// sweep forgets users whose attempts all left the window, so the map stays as small
// as the set of recently active users. It runs when a new user appears.
func (d *stormDetector) sweep(now time.Time) {
	if len(d.users) < 1024 {
		return
	}
	for u, a := range d.users {
		if a.prune(now.Add(-d.window)); len(a.at) == 0 && now.Sub(a.reported) >= d.window {
			delete(d.users, u)
		}
	}
}
