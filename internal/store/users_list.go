package store

import (
	"context"
	"fmt"
)

// ListUsers returns every account, oldest first (for admins' listings).
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+userCols+` FROM users u ORDER BY u.created_at, u.id`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", mapErr(err))
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("list users: %w", mapErr(err))
		}
		out = append(out, u)
	}
	return out, mapErr(rows.Err())
}
