package store

import (
	"context"
	"testing"
)

// A user's agent choice is kept, replaced and forgotten, apart from another user's, and
// goes with its user.
func TestAgentChoice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		alice, bob := mustUser(t, s, "alice").ID, mustUser(t, s, "bob").ID
		check := func(user string, want AgentChoice) {
			t.Helper()
			if got, err := s.AgentChoice(ctx, user); err != nil || got != want {
				t.Fatalf("AgentChoice(%s) = %+v, %v; want %+v", user, got, err, want)
			}
		}
		check(alice, AgentChoice{})
		for _, c := range []AgentChoice{{"anthropic", "claude-x"}, {"local", "llama3:8b"}, {"", "only-a-model"}} {
			if err := s.SetAgentChoice(ctx, alice, c); err != nil {
				t.Fatal(err)
			}
			check(alice, c)
		}
		check(bob, AgentChoice{})
		if err := s.SetAgentChoice(ctx, bob, AgentChoice{Provider: "openai"}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetAgentChoice(ctx, alice, AgentChoice{}); err != nil {
			t.Fatal(err)
		}
		check(alice, AgentChoice{})
		check(bob, AgentChoice{Provider: "openai"})
		if _, err := s.w.Exec(`DELETE FROM users WHERE id = ?`, bob); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.r.QueryRow(`SELECT count(*) FROM agent_choices`).Scan(&n); err != nil || n != 0 {
			t.Errorf("choices left after their user went: %d, %v", n, err)
		}
	})
}
