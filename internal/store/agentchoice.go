package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// AgentChoice is a user's choice for the coding agent: the gateway provider, by name, and
// the model. An empty field means the server's default.
type AgentChoice struct {
	Provider string
	Model    string
}

// AgentChoice reads userID's choice; a user who never chose has the zero choice.
func (s *Store) AgentChoice(ctx context.Context, userID string) (AgentChoice, error) {
	var c AgentChoice
	err := s.queryRow(ctx, `SELECT provider, model FROM agent_choices WHERE user_id = ?`, userID).Scan(&c.Provider, &c.Model)
	if errors.Is(err, sql.ErrNoRows) {
		return AgentChoice{}, nil
	}
	if err != nil {
		return AgentChoice{}, fmt.Errorf("read %s's agent choice: %w", userID, mapErr(err))
	}
	return c, nil
}

// SetAgentChoice records userID's choice; the zero choice forgets it.
func (s *Store) SetAgentChoice(ctx context.Context, userID string, c AgentChoice) error {
	return s.Update(ctx, func(tx *Tx) error {
		var err error
		if c == (AgentChoice{}) {
			_, err = tx.tx.ExecContext(ctx, `DELETE FROM agent_choices WHERE user_id = ?`, userID)
		} else {
			_, err = tx.tx.ExecContext(ctx, `INSERT INTO agent_choices (user_id, provider, model, updated_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (user_id) DO UPDATE SET provider = excluded.provider, model = excluded.model, updated_at = excluded.updated_at`,
				userID, c.Provider, c.Model, nanos(time.Now()))
		}
		if err != nil {
			return fmt.Errorf("record %s's agent choice: %w", userID, mapErr(err))
		}
		return nil
	})
}
