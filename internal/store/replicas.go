package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Replica is one `paddock serve` process sharing the database: its ID, the address the
// other replicas reach it at, and when it last said it was alive.
type Replica struct {
	ID          string
	Advertise   string
	StartedAt   time.Time
	HeartbeatAt time.Time
}

// Heartbeat records that replica r is alive at now, registering it on its first call.
// r.StartedAt, when set, is when this process of the replica started (its first beat);
// a beat without it keeps the one recorded.
func (s *Store) Heartbeat(ctx context.Context, r Replica, now time.Time) error {
	started, restarted := r.StartedAt, 1
	if started.IsZero() {
		started, restarted = now, 0
	}
	return s.Update(ctx, func(tx *Tx) error {
		_, err := tx.tx.ExecContext(ctx, `INSERT INTO replicas (id, advertise, started_at, heartbeat_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET advertise = excluded.advertise, heartbeat_at = excluded.heartbeat_at,
			started_at = CASE WHEN ? = 1 THEN excluded.started_at ELSE replicas.started_at END`,
			r.ID, r.Advertise, nanos(started), nanos(now), restarted)
		if err != nil {
			return fmt.Errorf("heartbeat of replica %s: %w", r.ID, mapErr(err))
		}
		return nil
	})
}

// ReplicaByID returns replica id, or [errdefs.ErrNotFound].
func (s *Store) ReplicaByID(ctx context.Context, id string) (Replica, error) {
	return replicaByID(ctx, s.r, id)
}

func replicaByID(ctx context.Context, q queryRower, id string) (Replica, error) {
	var (
		r           Replica
		started, hb int64
	)
	err := q.QueryRowContext(ctx, `SELECT id, advertise, started_at, heartbeat_at FROM replicas WHERE id = ?`, id).
		Scan(&r.ID, &r.Advertise, &started, &hb)
	if err != nil {
		return Replica{}, fmt.Errorf("replica %s: %w", id, mapErr(err))
	}
	r.StartedAt, r.HeartbeatAt = fromNanos(started), fromNanos(hb)
	return r, nil
}

// HeldElsewhere is the error of a sandbox that another replica runs, and that only it
// can reach (its channel, its workspace are on that replica's host).
type HeldElsewhere struct {
	SandboxID string
	Replica   Replica
	// Alive is whether the replica's last heartbeat is recent: a dead one answers nothing.
	Alive bool
}

func (e *HeldElsewhere) Error() string {
	if !e.Alive {
		return fmt.Sprintf("sandbox %s runs on replica %s, which has not been heard from since %s: it is unreachable until that replica is back (or delete the sandbox): %s",
			e.SandboxID, e.Replica.ID, e.Replica.HeartbeatAt.UTC().Format(time.RFC3339), errdefs.ErrUnavailable)
	}
	return fmt.Sprintf("sandbox %s runs on replica %s (%s): %s", e.SandboxID, e.Replica.ID, e.Replica.Advertise, errdefs.ErrUnavailable)
}

// Unwrap makes it [errdefs.ErrUnavailable]: a 503 where it reaches a client.
func (e *HeldElsewhere) Unwrap() error { return errdefs.ErrUnavailable }

// Holder says which replica holds sandbox id: nil when none other than self does (the
// sandbox records self or no replica, or a replica the database does not know), else a
// *HeldElsewhere. A replica is alive while its heartbeat is newer than aliveSince.
func (s *Store) Holder(ctx context.Context, id, self string, aliveSince time.Time) error {
	return holder(ctx, s.r, id, self, aliveSince)
}

func holder(ctx context.Context, q queryRower, id, self string, aliveSince time.Time) error {
	var owner string
	if err := q.QueryRowContext(ctx, `SELECT replica FROM sandboxes WHERE id = ?`, id).Scan(&owner); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, mapErr(err))
	}
	if owner == "" || owner == self {
		return nil
	}
	r, err := replicaByID(ctx, q, owner)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return &HeldElsewhere{SandboxID: id, Replica: r, Alive: r.HeartbeatAt.After(aliveSince)}
}

// ClaimSandbox records that replica self runs sandbox id, unless another replica holds it
// (then the error is a *HeldElsewhere, alive or not): two replicas never both start one.
func (tx *Tx) ClaimSandbox(ctx context.Context, id, self string, aliveSince time.Time) error {
	if err := holder(ctx, tx.tx, id, self, aliveSince); err != nil {
		return err
	}
	res, err := tx.tx.ExecContext(ctx, `UPDATE sandboxes SET replica = ? WHERE id = ?`, self, id)
	return affectedOne(res, err, "sandbox "+id)
}

// channelName is what a notification channel may be called: a PostgreSQL identifier.
var channelName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Notify sends payload to every listener of channel, in every process sharing the
// database, once the transaction commits (PostgreSQL's NOTIFY; within the one process
// on SQLite, which has no other).
func (tx *Tx) Notify(ctx context.Context, channel, payload string) error {
	if !channelName.MatchString(channel) {
		return fmt.Errorf("notify: channel %q: want a lower-case identifier: %w", channel, errdefs.ErrInvalidArgument)
	}
	if tx.tx.b == backendPostgres {
		if _, err := tx.tx.ExecContext(ctx, `SELECT pg_notify(?, ?)`, channel, payload); err != nil {
			return fmt.Errorf("notify %s: %w", channel, mapErr(err))
		}
		return nil
	}
	tx.notes = append(tx.notes, note{channel, payload})
	return nil
}

type note struct{ channel, payload string }

// hub delivers SQLite's notifications within the process.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*func(string)]struct{}
}

func (h *hub) deliver(notes []note) {
	for _, n := range notes {
		h.mu.Lock()
		var fns []func(string)
		for fn := range h.subs[n.channel] {
			fns = append(fns, *fn)
		}
		h.mu.Unlock()
		for _, fn := range fns {
			fn(n.payload)
		}
	}
}

// Listen calls fn with the payload of each notification sent to channel until ctx ends.
// It returns once listening, so that a notification sent after it returns is delivered.
// fn runs on one goroutine, one call at a time; an empty payload says that the connection
// was lost and listening resumed: notifications of the meantime may be missing.
func (s *Store) Listen(ctx context.Context, channel string, fn func(payload string)) error {
	if !channelName.MatchString(channel) {
		return fmt.Errorf("listen: channel %q: want a lower-case identifier: %w", channel, errdefs.ErrInvalidArgument)
	}
	if s.b != backendPostgres {
		var mu sync.Mutex
		serial := func(p string) { mu.Lock(); defer mu.Unlock(); fn(p) }
		key := &serial
		s.hub.mu.Lock()
		if s.hub.subs == nil {
			s.hub.subs = map[string]map[*func(string)]struct{}{}
		}
		if s.hub.subs[channel] == nil {
			s.hub.subs[channel] = map[*func(string)]struct{}{}
		}
		s.hub.subs[channel][key] = struct{}{}
		s.hub.mu.Unlock()
		context.AfterFunc(ctx, func() {
			s.hub.mu.Lock()
			defer s.hub.mu.Unlock()
			delete(s.hub.subs[channel], key)
		})
		return nil
	}
	conn, err := s.listenConn(ctx, channel)
	if err != nil {
		return err
	}
	go func() {
		for backoff := 100 * time.Millisecond; ; {
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				backoff = 100 * time.Millisecond
				fn(n.Payload)
			}
			conn.Close(context.WithoutCancel(ctx))
			for {
				if ctx.Err() != nil {
					return
				}
				if conn, err = s.listenConn(ctx, channel); err == nil {
					break
				}
				slog.Warn("store: listening again", "channel", channel, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
			}
			fn("")
		}
	}()
	return nil
}

// listenConn is a connection of its own that listens on channel.
func (s *Store) listenConn(ctx context.Context, channel string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pgcfg)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", channel, unavailable(err))
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen %s: %w", channel, unavailable(err))
	}
	return conn, nil
}

// NextRolesSeq takes the next number of a change of roles, to notify with it: the numbers
// rise in the order the changes commit (one writer at a time).
func (tx *Tx) NextRolesSeq(ctx context.Context) (int64, error) {
	var seq int64
	if err := tx.tx.QueryRowContext(ctx, `UPDATE roles_seq SET seq = seq + 1 WHERE id = 1 RETURNING seq`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("next roles change: %w", mapErr(err))
	}
	return seq, nil
}

// RolesSeq is the number of the last change of roles committed.
func (s *Store) RolesSeq(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.r.QueryRowContext(ctx, `SELECT seq FROM roles_seq WHERE id = 1`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("last roles change: %w", mapErr(err))
	}
	return seq, nil
}

// AckRoles records that replica id has applied every change of roles up to seq.
func (s *Store) AckRoles(ctx context.Context, id string, seq int64) error {
	return s.Update(ctx, func(tx *Tx) error {
		_, err := tx.tx.ExecContext(ctx, `UPDATE replicas SET roles_seen = ? WHERE id = ? AND roles_seen < ?`, seq, id, seq)
		if err != nil {
			return fmt.Errorf("replica %s: roles seen: %w", id, mapErr(err))
		}
		return nil
	})
}

// RolesUnacked names the live replicas other than self (heartbeat newer than aliveSince)
// that have not yet applied the change of roles numbered seq.
func (s *Store) RolesUnacked(ctx context.Context, self string, seq int64, aliveSince time.Time) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM replicas WHERE id <> ? AND heartbeat_at > ? AND roles_seen < ? ORDER BY id`,
		self, nanos(aliveSince), seq)
	if err != nil {
		return nil, fmt.Errorf("replicas behind on roles: %w", mapErr(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("replicas behind on roles: %w", mapErr(err))
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Replicas lists the replicas that have registered, alive or not.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, advertise, started_at, heartbeat_at FROM replicas ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", mapErr(err))
	}
	defer rows.Close()
	var out []Replica
	for rows.Next() {
		var (
			r           Replica
			started, hb int64
		)
		if err := rows.Scan(&r.ID, &r.Advertise, &started, &hb); err != nil {
			return nil, fmt.Errorf("list replicas: %w", mapErr(err))
		}
		r.StartedAt, r.HeartbeatAt = fromNanos(started), fromNanos(hb)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list replicas: %w", mapErr(err))
	}
	return out, nil
}
