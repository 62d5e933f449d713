package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RetentionLease is the name of the backups' retention pass's lease; a sandbox's backup
// holds a lease named by the sandbox's ID.
const RetentionLease = "retention"

// BackupLease is a lease on the backup bucket: a retention pass's, or a sandbox's backup's.
type BackupLease struct {
	Name      string
	Holder    string
	ExpiresAt time.Time
}

// LeaseBackup takes sandbox's backup lease for holder until until. It is refused while a
// retention pass holds its lease, or another backup of the sandbox holds the sandbox's:
// ok is false and way is that lease.
func (s *Store) LeaseBackup(ctx context.Context, sandbox, holder string, now, until time.Time) (way BackupLease, ok bool, err error) {
	if sandbox == RetentionLease {
		return way, false, fmt.Errorf("backup lease: %q names the retention pass", sandbox)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		for _, name := range []string{RetentionLease, sandbox} {
			if way, ok, err = tx.liveLease(ctx, name, now); err != nil || ok {
				ok = false
				return err
			}
		}
		ok = true
		return tx.putLease(ctx, sandbox, holder, now, until)
	})
	return way, ok, err
}

// LeaseRetention takes the retention pass's lease for holder until until, refused (ok
// false, way the lease in the way) while another pass holds it. busy are the backups
// under way when it was taken: no other starts until the lease is released.
func (s *Store) LeaseRetention(ctx context.Context, holder string, now, until time.Time) (way BackupLease, busy []BackupLease, ok bool, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		if way, ok, err = tx.liveLease(ctx, RetentionLease, now); err != nil || ok {
			ok = false
			return err
		}
		if busy, err = tx.liveLeases(ctx, now); err != nil {
			return err
		}
		ok = true
		return tx.putLease(ctx, RetentionLease, holder, now, until)
	})
	return way, busy, ok, err
}

// BackupLeases lists the leases live at now, by name.
func (s *Store) BackupLeases(ctx context.Context, now time.Time) ([]BackupLease, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, holder, expires_at FROM backup_leases WHERE expires_at > ? ORDER BY name`, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("backup leases: %w", mapErr(err))
	}
	return scanLeases(rows)
}

// RenewBackupLease moves lease name's expiry to until if holder holds it still, live at
// now; ok is false when the lease lapsed or went to another holder.
func (s *Store) RenewBackupLease(ctx context.Context, name, holder string, now, until time.Time) (ok bool, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		res, err := tx.tx.ExecContext(ctx, `UPDATE backup_leases SET expires_at = ? WHERE name = ? AND holder = ? AND expires_at > ?`,
			nanos(until), name, holder, nanos(now))
		if err != nil {
			return fmt.Errorf("renew backup lease %s: %w", name, mapErr(err))
		}
		n, err := res.RowsAffected()
		ok = n == 1
		return err
	})
	return ok, err
}

// ReleaseBackupLease ends lease name if holder holds it.
func (s *Store) ReleaseBackupLease(ctx context.Context, name, holder string) error {
	return s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.tx.ExecContext(ctx, `DELETE FROM backup_leases WHERE name = ? AND holder = ?`, name, holder); err != nil {
			return fmt.Errorf("release backup lease %s: %w", name, mapErr(err))
		}
		return nil
	})
}

// liveLease is lease name if it is live at now.
func (tx *Tx) liveLease(ctx context.Context, name string, now time.Time) (BackupLease, bool, error) {
	l := BackupLease{Name: name}
	var exp int64
	err := tx.tx.QueryRowContext(ctx, `SELECT holder, expires_at FROM backup_leases WHERE name = ? AND expires_at > ?`, name, nanos(now)).Scan(&l.Holder, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return BackupLease{}, false, nil
	}
	if err != nil {
		return BackupLease{}, false, fmt.Errorf("backup lease %s: %w", name, mapErr(err))
	}
	l.ExpiresAt = fromNanos(exp)
	return l, true, nil
}

// liveLeases are the sandboxes' leases live at now.
func (tx *Tx) liveLeases(ctx context.Context, now time.Time) ([]BackupLease, error) {
	rows, err := tx.tx.QueryContext(ctx, `SELECT name, holder, expires_at FROM backup_leases WHERE expires_at > ? AND name <> ? ORDER BY name`,
		nanos(now), RetentionLease)
	if err != nil {
		return nil, fmt.Errorf("backup leases: %w", mapErr(err))
	}
	return scanLeases(rows)
}

// putLease makes name holder's until until, dropping the leases that lapsed by now.
func (tx *Tx) putLease(ctx context.Context, name, holder string, now, until time.Time) error {
	if _, err := tx.tx.ExecContext(ctx, `DELETE FROM backup_leases WHERE expires_at <= ?`, nanos(now)); err != nil {
		return fmt.Errorf("backup leases: %w", mapErr(err))
	}
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO backup_leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at`, name, holder, nanos(until))
	if err != nil {
		return fmt.Errorf("take backup lease %s: %w", name, mapErr(err))
	}
	return nil
}

func scanLeases(rows *sql.Rows) ([]BackupLease, error) {
	defer rows.Close()
	var out []BackupLease
	for rows.Next() {
		var l BackupLease
		var exp int64
		if err := rows.Scan(&l.Name, &l.Holder, &exp); err != nil {
			return nil, fmt.Errorf("backup leases: %w", mapErr(err))
		}
		l.ExpiresAt = fromNanos(exp)
		out = append(out, l)
	}
	return out, rows.Err()
}
