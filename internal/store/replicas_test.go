package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A sandbox is claimed by one replica at a time: another live replica's sandbox is held
// elsewhere (alive), a dead one's too (not alive), and an unclaimed one goes to the first.
func TestClaimSandbox(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice := mustUser(t, s, "alice")
		mustSandbox(t, s, alice.ID, "sb-aaaaaaaaaa", "one")
		now := time.Now()
		for _, r := range []Replica{{ID: "r1", Advertise: "10.0.0.1:7000"}, {ID: "r2", Advertise: "10.0.0.2:7000"}} {
			if err := s.Heartbeat(ctx, r, now); err != nil {
				t.Fatal(err)
			}
		}
		claim := func(self string, aliveSince time.Time) error {
			return s.Update(ctx, func(tx *Tx) error { return tx.ClaimSandbox(ctx, "sb-aaaaaaaaaa", self, aliveSince) })
		}
		if err := claim("r1", now.Add(-time.Minute)); err != nil {
			t.Fatalf("first claim: %v", err)
		}
		if err := claim("r1", now.Add(-time.Minute)); err != nil {
			t.Fatalf("claim again by its holder: %v", err)
		}
		var held *HeldElsewhere
		if err := claim("r2", now.Add(-time.Minute)); !errors.As(err, &held) || !held.Alive || held.Replica.Advertise != "10.0.0.1:7000" || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("claim by r2 of r1's: %v, want held by a live r1", err)
		}
		if err := s.Holder(ctx, "sb-aaaaaaaaaa", "r2", now.Add(time.Minute)); !errors.As(err, &held) || held.Alive {
			t.Fatalf("holder after r1's heartbeat aged: %v, want held by a dead r1", err)
		}
		if err := s.Holder(ctx, "sb-aaaaaaaaaa", "r1", now.Add(time.Minute)); err != nil {
			t.Fatalf("holder seen by r1 itself: %v", err)
		}
		sb, err := s.SandboxByID(ctx, "sb-aaaaaaaaaa")
		if err != nil || sb.Replica != "r1" {
			t.Fatalf("sandbox's replica %q (%v), want r1", sb.Replica, err)
		}
	})
}

// A notification reaches a listener once its transaction commits, and none of a rolled
// back one; on PostgreSQL, across two separate stores (processes) on one database.
func TestNotifyListen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		target := db.target(t)
		sender, err := Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer sender.Close()
		listener := sender
		if sender.Backend() == "postgres" {
			if listener, err = Open(ctx, target); err != nil {
				t.Fatal(err)
			}
			defer listener.Close()
		}
		got := make(chan string, 10)
		if err := listener.Listen(ctx, "paddock_test", func(p string) { got <- p }); err != nil {
			t.Fatal(err)
		}
		if err := listener.Listen(ctx, "Bad-Name", func(string) {}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("listen on a bad channel name: %v", err)
		}
		boom := errors.New("boom")
		if err := sender.Update(ctx, func(tx *Tx) error {
			if err := tx.Notify(ctx, "paddock_test", "rolled back"); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if err := sender.Update(ctx, func(tx *Tx) error { return tx.Notify(ctx, "paddock_test", "u1:3") }); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if p != "u1:3" {
				t.Errorf("got %q, want u1:3 (and nothing of the rolled-back transaction)", p)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no notification")
		}
	})
}

// Handoff codes are taken once, a user's codes are bounded, and a user's cookies past
// the bound push the oldest out.
func TestHandoffs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		now := time.Now()
		h := Handoff{UserID: "u1", Host: "live-u1.localhost:8080", Sealed: []byte{1, 2, 3}, Expires: now.Add(time.Minute)}
		for i := range 2 {
			if err := s.PutHandoff(ctx, false, fmt.Sprint("code", i), h, 2, now); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutHandoff(ctx, false, "code2", h, 2, now); !errors.Is(err, errdefs.ErrLimitExceeded) {
			t.Errorf("a third code over a bound of 2: %v", err)
		}
		got, err := s.TakeHandoffCode(ctx, "code0")
		if err != nil || got.Host != h.Host || got.UserID != "u1" || string(got.Sealed) != "\x01\x02\x03" || !got.Expires.Equal(h.Expires) {
			t.Errorf("take code0: %+v, %v", got, err)
		}
		if _, err := s.TakeHandoffCode(ctx, "code0"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("take code0 again: %v, want not found", err)
		}
		for i := range 3 {
			c := h
			c.Expires = now.Add(time.Duration(i+1) * time.Hour)
			if err := s.PutHandoff(ctx, true, fmt.Sprint("cookie", i), c, 2, now); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AppCookie(ctx, "cookie0"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("the oldest cookie past the bound: %v, want gone", err)
		}
		if err := s.DeleteAppCookie(ctx, "cookie2"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppCookie(ctx, "cookie2"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a deleted cookie: %v", err)
		}
		if c, err := s.AppCookie(ctx, "cookie1"); err != nil || c.UserID != "u1" {
			t.Errorf("cookie1: %+v, %v", c, err)
		}
	})
}

// Reconnect attempts are counted per user within the window, a refused one is not
// counted, and a storm is reported once per window.
func TestReconnectAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		now := time.Now()
		for i := range 2 {
			if ok, _, _, err := s.ReconnectAttempt(ctx, "u1", now.Add(time.Duration(i)*time.Second), 10*time.Second, 2); !ok || err != nil {
				t.Fatalf("attempt %d: %v %v", i, ok, err)
			}
		}
		ok, retry, report, err := s.ReconnectAttempt(ctx, "u1", now.Add(2*time.Second), 10*time.Second, 2)
		if ok || err != nil || !report || retry != 8*time.Second {
			t.Errorf("third attempt: ok %v retry %s report %v err %v, want refused, retry 8s, reported", ok, retry, report, err)
		}
		if ok, _, report, _ := s.ReconnectAttempt(ctx, "u1", now.Add(3*time.Second), 10*time.Second, 2); ok || report {
			t.Errorf("fourth attempt: ok %v report %v, want refused, not reported again", ok, report)
		}
		if ok, _, _, _ := s.ReconnectAttempt(ctx, "u2", now, 10*time.Second, 2); !ok {
			t.Error("another user's first attempt was refused")
		}
		if ok, _, _, err := s.ReconnectAttempt(ctx, "u1", now.Add(10*time.Second+time.Millisecond), 10*time.Second, 2); !ok || err != nil {
			t.Errorf("after the window slid: %v %v", ok, err)
		}
	})
}

// Changes of roles are numbered in commit order; a live replica is behind on one until it
// acknowledges it (or a later one), and a dead replica is never waited for.
func TestRolesAcks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		now := time.Now()
		for _, r := range []Replica{{ID: "r1", Advertise: "10.0.0.1:7000"}, {ID: "r2", Advertise: "10.0.0.2:7000"}, {ID: "r3", Advertise: "10.0.0.3:7000"}} {
			at := now
			if r.ID == "r3" {
				at = now.Add(-time.Hour)
			}
			if err := s.Heartbeat(ctx, r, at); err != nil {
				t.Fatal(err)
			}
		}
		var seqs []int64
		for range 2 {
			var seq int64
			err := s.Update(ctx, func(tx *Tx) (err error) { seq, err = tx.NextRolesSeq(ctx); return err })
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		if seqs[1] != seqs[0]+1 {
			t.Fatalf("roles changes numbered %v, want consecutive", seqs)
		}
		if last, err := s.RolesSeq(ctx); err != nil || last != seqs[1] {
			t.Fatalf("last roles change %d (%v), want %d", last, err, seqs[1])
		}
		alive := now.Add(-time.Minute)
		if behind, err := s.RolesUnacked(ctx, "r1", seqs[0], alive); err != nil || fmt.Sprint(behind) != "[r2]" {
			t.Fatalf("behind r1 on %d: %v (%v), want [r2] (r3 is dead, r1 is self)", seqs[0], behind, err)
		}
		if err := s.AckRoles(ctx, "r2", seqs[1]); err != nil {
			t.Fatal(err)
		}
		if err := s.AckRoles(ctx, "r2", seqs[0]); err != nil {
			t.Fatal(err)
		}
		for _, seq := range seqs {
			if behind, err := s.RolesUnacked(ctx, "r1", seq, alive); err != nil || len(behind) != 0 {
				t.Fatalf("behind r1 on %d after r2's ack of %d (an older ack after it): %v (%v), want none", seq, seqs[1], behind, err)
			}
		}
		if behind, err := s.RolesUnacked(ctx, "r2", seqs[0], alive); err != nil || fmt.Sprint(behind) != "[r1]" {
			t.Fatalf("behind r2: %v (%v), want [r1]", behind, err)
		}
	})
}

// A replica's first beat of a process records when that process started; its later beats
// keep it, and Replicas lists every replica with it.
func TestReplicasStartedAt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		t0 := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
		beat := func(r Replica, at time.Time) {
			t.Helper()
			if err := s.Heartbeat(ctx, r, at); err != nil {
				t.Fatal(err)
			}
		}
		beat(Replica{ID: "r1", Advertise: "a:1", StartedAt: t0}, t0)
		beat(Replica{ID: "r1", Advertise: "a:1"}, t0.Add(time.Second))
		beat(Replica{ID: "r2", Advertise: "b:1"}, t0.Add(2*time.Second))
		beat(Replica{ID: "r1", Advertise: "a:1", StartedAt: t0.Add(time.Hour)}, t0.Add(time.Hour)) // r1 started again
		beat(Replica{ID: "r2", Advertise: "b:1"}, t0.Add(time.Hour))
		got, err := s.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []Replica{
			{ID: "r1", Advertise: "a:1", StartedAt: t0.Add(time.Hour), HeartbeatAt: t0.Add(time.Hour)},
			{ID: "r2", Advertise: "b:1", StartedAt: t0.Add(2 * time.Second), HeartbeatAt: t0.Add(time.Hour)},
		}
		if len(got) != len(want) {
			t.Fatalf("Replicas() = %+v, want %+v", got, want)
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].Advertise != want[i].Advertise || !got[i].StartedAt.Equal(want[i].StartedAt) || !got[i].HeartbeatAt.Equal(want[i].HeartbeatAt) {
				t.Errorf("replica %d = %+v, want %+v", i, got[i], want[i])
			}
		}
	})
}
