package sandboxops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// Backups of sandboxes' workspace histories to an S3 store (package wsbackup). The
// control plane holds the store's credentials and the backup key; the sandbox never does.

// maxBackoff bounds the pause between a backup's attempts.
const maxBackoff = time.Minute

// Retryable reports whether the store's error err at attempt (from 1) is worth another
// attempt: the store was unavailable and retries remain. Backups and artifacts' copies
// share the policy.
func (b *Backups) Retryable(err error, attempt int) bool {
	return errors.Is(err, errdefs.ErrUnavailable) && attempt <= b.Retries
}

// NextPause is the pause after pause between attempts: doubled, up to a minute.
func NextPause(pause time.Duration) time.Duration { return min(2*pause, maxBackoff) }

// keptAttempts bounds the attempts not in the store (running, retrying, failed) kept per
// sandbox for ls.
const keptAttempts = 10

// Backups is where backups go and how hard a backup tries.
type Backups struct {
	// Target is this install's namespace (Namespace) under Shared, the bucket and prefix
	// other installs may share.
	Target    wsbackup.Target
	Shared    wsbackup.Target
	Namespace string
	Key       []byte
	// Retries is how many times a backup is tried again after the store failed; Backoff
	// is the first pause, doubled after each attempt up to a minute.
	Retries int
	Backoff time.Duration
	// Retention, when set, is applied by RunRetention.
	Retention *wsbackup.Retention
	// Leases holds the bucket's leases, shared by the replicas of one database: a
	// retention pass runs on one replica at a time, a backup waits while one runs (it
	// may reuse a blob the pass would delete), and a pass sweeps no blob while a backup
	// is under way on any replica. Replica names this one in them.
	Leases  *store.Store
	Replica string
	// Log is where lease trouble is logged (nil: nowhere).
	Log *slog.Logger

	mu       sync.Mutex
	attempts map[string][]*api.Backup // by sandbox: those not (yet) in the store
	running  map[string]bool          // sandboxes with a backup under way
	done     *prometheus.CounterVec
	retried  prometheus.Counter
}

// Register adds the backups' metrics to reg.
func (b *Backups) Register(reg prometheus.Registerer) error {
	b.done = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paddock_backups_total",
		Help: "Backups of sandboxes to the S3 store, by result (done, failed)."}, []string{"result"})
	b.retried = prometheus.NewCounter(prometheus.CounterOpts{Name: "paddock_backup_retries_total",
		Help: "Backup attempts tried again after the S3 store failed."})
	for _, c := range []prometheus.Collector{b.done, b.retried} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	b.done.WithLabelValues("done")
	b.done.WithLabelValues("failed")
	return nil
}

func (o *Ops) backupsOn() (*Backups, error) {
	if o.backups == nil {
		return nil, fmt.Errorf("backups: the server has no backup store: set the backup section (endpoint, bucket, keys) in its configuration: %w", errdefs.ErrFailedPrecondition)
	}
	return o.backups, nil
}

// keep records attempt a of sandbox id, or with drop forgets it.
func (b *Backups) keep(id string, a *api.Backup, drop bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.attempts == nil {
		b.attempts = map[string][]*api.Backup{}
	}
	l := b.attempts[id]
	for i, x := range l {
		if x == a {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if !drop {
		l = append(l, a)
		if len(l) > keptAttempts {
			l = l[len(l)-keptAttempts:]
		}
	}
	b.attempts[id] = l
}

func (b *Backups) set(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

// BackupNow takes a checkpoint of sandbox id when it runs (the workspace's current files
// are then a checkpoint like any other) and backs its history up, trying again with
// backoff while the store is down or failing. One backup of a sandbox runs at a time.
func (o *Ops) BackupNow(ctx context.Context, c fleet.Caller, id string) (api.Backup, error) {
	// Whose sandbox first: another user's is not found, whatever the server's setup.
	sb, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return api.Backup{}, err
	}
	b, err := o.backupsOn()
	if err != nil {
		return api.Backup{}, err
	}
	b.mu.Lock()
	if b.running == nil {
		b.running = map[string]bool{}
	}
	if b.running[id] {
		b.mu.Unlock()
		return api.Backup{}, fmt.Errorf("backup of sandbox %s: one is under way (see paddock backup ls): %w", id, errdefs.ErrFailedPrecondition)
	}
	b.running[id] = true
	b.mu.Unlock()
	defer b.set(func() { delete(b.running, id) })

	if sb.State == api.StateRunning {
		if _, err := o.Checkpoint(ctx, c, id, api.CheckpointRequest{Message: "before backup"}); err != nil {
			return api.Backup{}, fmt.Errorf("backup of sandbox %s: %w", id, err)
		}
	}
	record, err := o.backupRecord(ctx, sb)
	if err != nil {
		return api.Backup{}, fmt.Errorf("backup of sandbox %s: %w", id, err)
	}
	src, err := o.historySource(ctx, c, sb)
	if err != nil {
		return api.Backup{}, fmt.Errorf("backup of sandbox %s: %w", id, err)
	}
	a := &api.Backup{Time: time.Now().UTC(), State: api.BackupRunning}
	b.keep(id, a, false)
	pause := b.Backoff
	for {
		b.set(func() { a.Attempts++ })
		var res wsbackup.Backup
		err := b.leaseBackup(ctx, id, a, func(ctx context.Context) (err error) {
			res, err = wsbackup.RunFrom(ctx, b.Target, b.Key, id, src, record)
			return err
		})
		if errors.Is(err, errUnderWay) {
			b.keep(id, a, true)
			return api.Backup{}, err
		}
		if err == nil {
			b.keep(id, a, true)
			b.done.WithLabelValues("done").Inc()
			out := api.Backup{ID: res.ID, Time: res.At, State: api.BackupDone, Checkpoint: res.Checkpoint, Blobs: res.Blobs,
				UploadedBlobs: res.Uploaded, UploadedBytes: res.UploadedBytes, Attempts: a.Attempts}
			o.event(ctx, c.UserID, "sandbox.backup", map[string]any{"sandbox": id, "backup": res.ID, "checkpoint": res.Checkpoint,
				"uploaded_bytes": res.UploadedBytes, "attempts": a.Attempts})
			return out, nil
		}
		retry := b.Retryable(err, a.Attempts) && ctx.Err() == nil
		b.set(func() {
			a.Error = err.Error()
			a.State = api.BackupFailed
			if retry {
				a.State = api.BackupRetrying
			}
		})
		if !retry {
			b.done.WithLabelValues("failed").Inc()
			o.event(ctx, c.UserID, "sandbox.backup_failed", map[string]any{"sandbox": id, "attempts": a.Attempts, "error": err.Error()})
			return api.Backup{}, fmt.Errorf("backup of sandbox %s failed after %d attempts: %w", id, a.Attempts, err)
		}
		b.retried.Inc()
		o.log.Warn("backup: the store failed; trying again", "sandbox", id, "attempt", a.Attempts, "pause", pause, "err", err)
		o.event(ctx, c.UserID, "sandbox.backup_retry", map[string]any{"sandbox": id, "attempt": a.Attempts, "error": err.Error()})
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = NextPause(pause)
	}
}

// historySource is where a backup reads sandbox sb's history: its store on this host, or,
// where the runner cannot reach that (a cluster's volume), its agent, which must run.
func (o *Ops) historySource(ctx context.Context, c fleet.Caller, sb store.Sandbox) (wsbackup.Source, error) {
	if !o.fleet.HistoryOnHost() {
		hc, err := o.fleet.Agent(ctx, c, sb.ID)
		if err != nil {
			return nil, fmt.Errorf("its history is read through its agent: %w", err)
		}
		return agentHistory{hc: hc}, nil
	}
	dir := o.fleet.HistoryDir(sb)
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, fmt.Errorf("it has no workspace history to back up (a microVM keeps none): %w", errdefs.ErrFailedPrecondition)
	}
	return wsbackup.Dir(dir), nil
}

// ListBackups lists sandbox id's backups in the store, oldest first, then its attempts
// under way or failed since the server started.
//
// The backups of a sandbox this server's database does not have (deleted, lost with its
// disk, or made by the server this one replaces) are listed from the bucket alone, for
// an admin or for the user their record names (ownsInBucket).
func (o *Ops) ListBackups(ctx context.Context, c fleet.Caller, id string) (api.BackupList, error) {
	_, missing := o.fleet.Get(ctx, c, id)
	if missing != nil && !errors.Is(missing, errdefs.ErrNotFound) {
		return api.BackupList{}, missing
	}
	b, err := o.backupsOn()
	if err != nil {
		if missing != nil && !c.Admin {
			return api.BackupList{}, missing
		}
		return api.BackupList{}, err
	}
	if missing != nil && !c.Admin {
		if err := o.ownsInBucket(ctx, c, b, id, missing); err != nil {
			return api.BackupList{}, err
		}
	}
	out := api.BackupList{Backups: []api.Backup{}}
	es, err := wsbackup.Entries(ctx, b.source(ctx, id), b.Key, id)
	if errors.Is(err, errdefs.ErrUnavailable) {
		out.StoreError = err.Error()
	} else if err != nil {
		return api.BackupList{}, err
	}
	if missing != nil && len(es) == 0 && !c.Admin {
		return api.BackupList{}, missing
	}
	if missing != nil && len(es) == 0 {
		return api.BackupList{}, b.elsewhere(ctx, id, missing)
	}
	for _, e := range es {
		x := api.Backup{ID: e.ID, Time: e.At, State: api.BackupDone, Checkpoint: e.Checkpoint, Blobs: e.Blobs,
			UploadedBlobs: e.Uploaded, UploadedBytes: e.UploadedBytes}
		if e.Err != nil {
			x.State, x.Error = api.BackupDamaged, e.Err.Error()
		}
		out.Backups = append(out.Backups, x)
	}
	b.mu.Lock()
	for _, a := range b.attempts[id] {
		out.Backups = append(out.Backups, *a)
	}
	b.mu.Unlock()
	return out, nil
}

// RestoreBackup restores one of sandbox id's backups: into a new sandbox of c's like it
// (req.Into a name), whose history is the backup's and whose workspace is its current
// checkpoint, or into id itself ("same"), whose history and workspace are replaced as an
// import replaces them. A stopped sandbox is started for it and stopped again. Every
// object is authenticated before anything changes; a bad one is refused, naming it.
func (o *Ops) RestoreBackup(ctx context.Context, c fleet.Caller, id string, req api.BackupRestoreRequest) (api.BackupRestoreResult, *store.Sandbox, error) {
	var out api.BackupRestoreResult
	sb, err := o.fleet.Get(ctx, c, id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return out, nil, err
	}
	b, berr := o.backupsOn()
	if berr != nil {
		if err != nil && !c.Admin {
			return out, nil, err
		}
		return out, nil, berr
	}
	if err != nil {
		return o.restoreFromBucket(ctx, c, b, id, req, err)
	}
	tmp := o.fleet.HistoryDir(sb) + ".backup-" + randomSuffix()
	defer os.RemoveAll(tmp)
	picked, record, err := fetchBackup(ctx, b, id, req, tmp)
	if err != nil {
		return out, nil, err
	}
	out.Backup = picked.Format(wsbackup.IDFormat)
	if req.Into != "" && req.Into != "same" {
		rec, also, err := fromRecord(ctx, sb, record)
		if err != nil {
			return out, nil, fmt.Errorf("restore backup %s of sandbox %s: %w", out.Backup, id, err)
		}
		f, err := o.fleet.ForkFrom(ctx, c, rec, tmp, "", req.Into, also...)
		if err != nil {
			return out, nil, err
		}
		out.Sandbox, out.Checkpoint = f.Sandbox.ID, f.History.At
		o.event(ctx, c.UserID, "sandbox.backup_restore", map[string]any{"sandbox": f.Sandbox.ID, "from": id, "backup": out.Backup, "checkpoint": out.Checkpoint})
		return out, &f.Sandbox, nil
	}
	if sb.State != api.StateRunning {
		if _, err := o.fleet.Start(ctx, c, id); err != nil {
			return out, nil, fmt.Errorf("restore into sandbox %s: start it: %w", id, err)
		}
		defer func() {
			if _, err := o.fleet.Stop(context.WithoutCancel(ctx), c, id); err != nil {
				o.log.Warn("restore: stop the sandbox again", "sandbox", id, "err", err)
			}
		}()
	}
	cp, err := o.restoreSame(ctx, c, sb, tmp)
	if err != nil {
		return out, nil, fmt.Errorf("restore backup %s into sandbox %s: %w", out.Backup, id, err)
	}
	out.Sandbox, out.Checkpoint = id, cp
	o.event(ctx, c.UserID, "sandbox.backup_restore", map[string]any{"sandbox": id, "from": id, "backup": out.Backup, "checkpoint": out.Checkpoint})
	return out, nil, nil
}

func randomSuffix() string {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	return hex.EncodeToString(suffix)
}

// fetchBackup writes the backup of sandbox id that req picks (by ID, the newest at or
// before a time, or the newest) into the history directory dir, and returns its time and
// the sandbox's record it kept.
func fetchBackup(ctx context.Context, b *Backups, id string, req api.BackupRestoreRequest, dir string) (time.Time, json.RawMessage, error) {
	at := req.At
	if req.Backup != "" {
		if !at.IsZero() {
			return time.Time{}, nil, fmt.Errorf("restore: give backup or at, not both: %w", errdefs.ErrInvalidArgument)
		}
		var err error
		if at, err = wsbackup.ParseID(req.Backup); err != nil {
			return time.Time{}, nil, err
		}
		all, err := wsbackup.List(ctx, b.source(ctx, id), id)
		if err != nil {
			return time.Time{}, nil, err
		}
		found := false
		for _, a := range all {
			found = found || a.Equal(at)
		}
		if !found {
			return time.Time{}, nil, fmt.Errorf("backup %s of sandbox %s: %w", req.Backup, id, errdefs.ErrNotFound)
		}
	}
	picked, record, err := wsbackup.RestoreWithRecord(ctx, b.source(ctx, id), b.Key, id, at, dir)
	if errors.Is(err, errdefs.ErrDataLoss) {
		// A damaged or tampered object (or one sealed under another key) is the backup's
		// fault, not the server's: refused by name, nothing changed.
		err = fmt.Errorf("%w (nothing was restored): %w", err, errdefs.ErrFailedPrecondition)
	}
	return picked, record, err
}

// ownsInBucket says whether c, not an admin, may read sandbox id's backups from the
// bucket alone (this server's database does not have the sandbox): the record its newest
// backup kept must name c by user ID and username (a restore checks the backup it picks
// again). A user ID is random, made with the account: a user registered on a fresh
// install under an old username has another, so the name alone proves nothing, and only
// an admin may (403). missing is why the database has no sandbox id: the answer, as for any sandbox
// not c's, when the bucket does not tie it to c.
func (o *Ops) ownsInBucket(ctx context.Context, c fleet.Caller, b *Backups, id string, missing error) error {
	if _, err := o.st.SandboxByID(ctx, id); err == nil {
		return missing // another user's sandbox: not c's to read
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	_, raw, err := wsbackup.RecordAt(ctx, b.source(ctx, id), b.Key, id, time.Time{})
	if errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	if err != nil {
		return missing
	}
	return recordOwnedBy(raw, c, id, missing)
}

// recordOwnedBy is ownsInBucket's answer for record raw, a backup's.
func recordOwnedBy(raw json.RawMessage, c fleet.Caller, id string, missing error) error {
	var r sandboxRecord
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil {
		return missing
	}
	sameID, sameName := r.OwnerID != "" && r.OwnerID == c.UserID, r.Owner != "" && strings.EqualFold(r.Owner, c.Username)
	switch {
	case sameID && sameName:
		return nil
	case sameID || sameName:
		return fmt.Errorf("sandbox %s: its backups were made for an account named %s that is not this one (another install's, or one made before "+
			"this server's database was): ask an admin to restore it: %w", id, r.Owner, errdefs.ErrPermissionDenied)
	}
	return missing
}

// restoreFromBucket restores a backup of sandbox id, which this server's database does
// not have, into a new sandbox: an admin may, or the user the backup's record names by
// user ID and username (ownsInBucket). The new sandbox is the record's: its owner (the
// caller when it is that user; for an admin, the user of the record's username when this
// server has one, else the admin), tier, limits, app and policy. missing is why the
// database has no sandbox id.
func (o *Ops) restoreFromBucket(ctx context.Context, c fleet.Caller, b *Backups, id string, req api.BackupRestoreRequest, missing error) (api.BackupRestoreResult, *store.Sandbox, error) {
	var out api.BackupRestoreResult
	all, err := wsbackup.List(ctx, b.source(ctx, id), id)
	if err != nil {
		return out, nil, err
	}
	if len(all) == 0 {
		if !c.Admin {
			return out, nil, missing // another install's backups are not a user's to hear of
		}
		return out, nil, b.elsewhere(ctx, id, missing)
	}
	if !c.Admin {
		if err := o.ownsInBucket(ctx, c, b, id, missing); err != nil {
			return out, nil, err
		}
	}
	if req.Into == "" || req.Into == "same" {
		return out, nil, fmt.Errorf("restore sandbox %s: this server's database does not have it, only the bucket: restore into a new sandbox (into: a name): %w", id, errdefs.ErrFailedPrecondition)
	}
	owner := store.Sandbox{ID: id, UserID: c.UserID, Username: c.Username}
	hist := o.fleet.HistoryDir(owner)
	// The admin's history directory, made as the runner makes it for a first sandbox.
	if err := os.MkdirAll(filepath.Dir(filepath.Dir(hist)), 0o711); err != nil {
		return out, nil, fmt.Errorf("restore sandbox %s: %w", id, err)
	}
	if err := os.MkdirAll(filepath.Dir(hist), 0o700); err != nil {
		return out, nil, fmt.Errorf("restore sandbox %s: %w", id, err)
	}
	tmp := hist + ".backup-" + randomSuffix()
	defer os.RemoveAll(tmp)
	picked, raw, err := fetchBackup(ctx, b, id, req, tmp)
	if err != nil {
		return out, nil, err
	}
	out.Backup = picked.Format(wsbackup.IDFormat)
	if len(raw) == 0 {
		return out, nil, fmt.Errorf("restore backup %s of sandbox %s: it keeps no record of the sandbox, and this server's database has none: %w", out.Backup, id, errdefs.ErrFailedPrecondition)
	}
	var r sandboxRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return out, nil, fmt.Errorf("restore backup %s of sandbox %s: the sandbox's record in the backup: %w", out.Backup, id, errdefs.ErrDataLoss)
	}
	if !c.Admin {
		// The backup restored may be older than the newest, which was checked above.
		if err := recordOwnedBy(raw, c, id, missing); err != nil {
			return out, nil, err
		}
	} else if r.Owner != "" {
		if u, err := o.st.UserByUsername(ctx, r.Owner); err == nil {
			owner.UserID, owner.Username = u.ID, u.Username
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return out, nil, fmt.Errorf("restore backup %s of sandbox %s: its owner %s: %w", out.Backup, id, r.Owner, err)
		}
	}
	owner.Name = r.Name
	rec, also, err := fromRecord(ctx, owner, raw)
	if err != nil {
		return out, nil, fmt.Errorf("restore backup %s of sandbox %s: %w", out.Backup, id, err)
	}
	f, err := o.fleet.ForkFrom(ctx, c, rec, tmp, "", req.Into, also...)
	if err != nil {
		return out, nil, err
	}
	out.Sandbox, out.Checkpoint = f.Sandbox.ID, f.History.At
	o.event(ctx, c.UserID, "sandbox.backup_restore", map[string]any{"sandbox": f.Sandbox.ID, "from": id, "backup": out.Backup,
		"checkpoint": out.Checkpoint, "owner": rec.Username, "from_bucket": true})
	return out, &f.Sandbox, nil
}

// source is where sandbox id's backups are read from: the key's namespace, or, when that
// holds none of them and the bucket's prefix itself does, the prefix: backups written
// before backups had namespaces stay readable (never pruned; new ones go to the
// namespace).
func (b *Backups) source(ctx context.Context, id string) wsbackup.Target {
	if b.Shared.Client == nil {
		return b.Target
	}
	if own, err := wsbackup.List(ctx, b.Target, id); err != nil || len(own) > 0 {
		return b.Target
	}
	if old, err := wsbackup.List(ctx, b.Shared, id); err == nil && len(old) > 0 {
		return b.Shared
	}
	return b.Target
}

// others are the other namespaces under the shared bucket and prefix: other installs'
// backups, or backups sealed under another key than this server's.
func (b *Backups) others(ctx context.Context) ([]wsbackup.Target, error) {
	if b.Shared.Client == nil {
		return nil, nil
	}
	nss, err := wsbackup.Namespaces(ctx, b.Shared)
	if err != nil {
		return nil, err
	}
	var out []wsbackup.Target
	for _, ns := range nss {
		if ns != b.Namespace {
			t := b.Shared
			t.Prefix += ns + "/"
			out = append(out, t)
		}
	}
	return out, nil
}

// elsewhere is why sandbox id's backups are not in this server's namespace: when another
// namespace holds them, the error opening its newest manifest under this server's key
// (naming the object that fails authentication: the wrong backup key); else missing.
func (b *Backups) elsewhere(ctx context.Context, id string, missing error) error {
	others, err := b.others(ctx)
	if err != nil {
		return err
	}
	for _, t := range others {
		es, err := wsbackup.Entries(ctx, t, b.Key, id)
		if err != nil {
			return err
		}
		if len(es) > 0 && es[len(es)-1].Err != nil {
			return fmt.Errorf("sandbox %s: its backups in the bucket are sealed under another backup key than this server's (backup.key_file): %w: %w",
				id, es[len(es)-1].Err, errdefs.ErrFailedPrecondition)
		}
	}
	return missing
}

// BackupSandboxes lists the sandboxes with backups in the store, with what each newest
// backup's record says of it: every one for an admin; for a user, those that are theirs
// (mine).
func (o *Ops) BackupSandboxes(ctx context.Context, c fleet.Caller) (api.BackupSandboxList, error) {
	b, err := o.backupsOn()
	if err != nil {
		return api.BackupSandboxList{}, err
	}
	all, err := wsbackup.Sandboxes(ctx, b.Target, b.Key)
	if err != nil {
		return api.BackupSandboxList{}, err
	}
	if c.Admin {
		// Sandboxes under other keys are listed with the object that fails authentication
		// under this one. A user hears nothing of them.
		others, err := b.others(ctx)
		if err != nil {
			return api.BackupSandboxList{}, err
		}
		for _, t := range others {
			more, err := wsbackup.Sandboxes(ctx, t, b.Key)
			if err != nil {
				return api.BackupSandboxList{}, err
			}
			all = append(all, more...)
		}
	}
	out := api.BackupSandboxList{Sandboxes: make([]api.BackupSandbox, 0, len(all))}
	for _, s := range all {
		x := api.BackupSandbox{ID: s.Sandbox, Backups: s.Backups, Newest: s.Newest.Format(wsbackup.IDFormat), Time: s.Newest}
		var r sandboxRecord
		switch {
		case s.Err != nil:
			x.Error = s.Err.Error()
		case len(s.Record) > 0 && json.Unmarshal(s.Record, &r) == nil:
			x.Name, x.Owner = r.Name, r.Owner
		}
		sb, err := o.st.SandboxByID(ctx, s.Sandbox)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return api.BackupSandboxList{}, fmt.Errorf("sandbox %s: %w", s.Sandbox, err)
		}
		x.Known = err == nil
		if !c.Admin && !mine(c, s, sb, x.Known) {
			continue
		}
		out.Sandboxes = append(out.Sandboxes, x)
	}
	return out, nil
}

// mine says whether user c may see sandbox s of the bucket in their listing: the
// database's owner decides for a sandbox it has (known, sb); for one it lacks, the same
// rule as a restore from the bucket alone (recordOwnedBy): its newest backup's record
// names c by user ID and username both.
func mine(c fleet.Caller, s wsbackup.Stored, sb store.Sandbox, known bool) bool {
	if known {
		return sb.UserID == c.UserID
	}
	return s.Err == nil && recordOwnedBy(s.Record, c, s.Sandbox, errdefs.ErrNotFound) == nil
}

// PruneBackups runs the backups' retention now: over sandbox req.Sandbox's backups (its
// owner's or an admin's call), or every sandbox's (an admin's). The blobs no kept backup
// names are swept either way.
func (o *Ops) PruneBackups(ctx context.Context, c fleet.Caller, req api.BackupPruneRequest) (api.BackupPruneResult, error) {
	if req.Sandbox == "" && !c.Admin {
		return api.BackupPruneResult{}, fmt.Errorf("retention over every sandbox's backups: only admins may; name a sandbox of yours: %w", errdefs.ErrPermissionDenied)
	}
	if req.Sandbox != "" {
		if _, err := o.fleet.Get(ctx, c, req.Sandbox); err != nil && !(c.Admin && errors.Is(err, errdefs.ErrNotFound)) {
			return api.BackupPruneResult{}, err
		}
	}
	b, err := o.backupsOn()
	if err != nil {
		return api.BackupPruneResult{}, err
	}
	p, err := b.PruneWith(ctx, time.Now(), wsbackup.PruneOptions{Sandbox: req.Sandbox, DryRun: req.DryRun})
	out := api.BackupPruneResult{DryRun: req.DryRun, Kept: p.Kept, Dropped: make([]api.BackupRef, 0, len(p.Dropped)), Blobs: p.Blobs, Bytes: p.Bytes}
	for _, d := range p.Dropped {
		out.Dropped = append(out.Dropped, api.BackupRef{Sandbox: d.Sandbox, Backup: d.ID})
	}
	if err != nil {
		return out, err
	}
	o.log.Info("backup retention on request", "user", c.Username, "sandbox", req.Sandbox, "dry_run", req.DryRun,
		"backups_kept", p.Kept, "backups_dropped", p.Manifests, "blobs_deleted", p.Blobs, "bytes", p.Bytes)
	if !req.DryRun {
		o.event(ctx, c.UserID, "backup.prune", map[string]any{"sandbox": req.Sandbox, "backups_dropped": p.Manifests, "blobs_deleted": p.Blobs, "bytes": p.Bytes})
	}
	return out, nil
}

// sandboxRecord is what a backup keeps of a sandbox's record, for a restore into a new
// sandbox to be like it was: its tier, limits, app, environment and own policy.
type sandboxRecord struct {
	Name string `json:"name"`
	// Owner is the owner's username: a server that never saw the sandbox gives the
	// restored one to the user of that name.
	Owner string `json:"owner,omitempty"`
	// OwnerID is the owner's user ID: random, made with the account, so a server whose
	// user of that ID and name calls holds the very account that owned the sandbox.
	OwnerID       string    `json:"owner_id,omitempty"`
	Tier          string    `json:"tier"`
	Runtime       string    `json:"runtime,omitempty"`
	MemoryBytes   int64     `json:"memory_bytes,omitempty"`
	CPUs          float64   `json:"cpus,omitempty"`
	Pids          int64     `json:"pids,omitempty"`
	TmpBytes      int64     `json:"tmp_bytes,omitempty"`
	FileSizeBytes int64     `json:"file_size_bytes,omitempty"`
	DiskBytes     int64     `json:"disk_bytes,omitempty"`
	App           store.App `json:"app"`
	Env           []string  `json:"env,omitempty"`
	// Policy is the sandbox's own policy file, and who attached it (an admin's stays
	// one only an admin may replace).
	Policy          string `json:"policy,omitempty"`
	PolicyUpdatedBy string `json:"policy_updated_by,omitempty"`
}

// backupRecord is sb's record as a backup keeps it.
func (o *Ops) backupRecord(ctx context.Context, sb store.Sandbox) (json.RawMessage, error) {
	r := sandboxRecord{Name: sb.Name, Owner: sb.Username, OwnerID: sb.UserID, Tier: sb.Tier, Runtime: sb.Runtime, MemoryBytes: sb.MemoryBytes, CPUs: sb.CPUs, Pids: sb.Pids,
		TmpBytes: sb.TmpBytes, FileSizeBytes: sb.FileSizeBytes, DiskBytes: sb.DiskBytes, App: sb.App, Env: sb.Env}
	p, err := o.st.SandboxPolicy(ctx, sb.ID)
	switch {
	case err == nil:
		r.Policy, r.PolicyUpdatedBy = p.Text, p.UpdatedBy
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, fmt.Errorf("its policy: %w", err)
	}
	return json.Marshal(r)
}

// fromRecord is the sandbox a restore into a new one makes: sb as the backup's record
// had it (sb itself for a backup without one), and what attaches the record's policy.
func fromRecord(ctx context.Context, sb store.Sandbox, raw json.RawMessage) (store.Sandbox, []func(*store.Tx, store.Sandbox) error, error) {
	if len(raw) == 0 {
		return sb, nil, nil
	}
	var r sandboxRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return sb, nil, fmt.Errorf("the sandbox's record in the backup: %w", errdefs.ErrDataLoss)
	}
	sb.Tier, sb.Runtime, sb.App, sb.Env = r.Tier, r.Runtime, r.App, r.Env
	sb.MemoryBytes, sb.CPUs, sb.Pids, sb.TmpBytes, sb.FileSizeBytes, sb.DiskBytes = r.MemoryBytes, r.CPUs, r.Pids, r.TmpBytes, r.FileSizeBytes, r.DiskBytes
	if r.Policy == "" {
		return sb, nil, nil
	}
	if _, err := policy.Load([]byte(r.Policy), "policy"); err != nil {
		return sb, nil, fmt.Errorf("the sandbox's policy in the backup no longer loads: %w", err)
	}
	attach := func(tx *store.Tx, rec store.Sandbox) error {
		return tx.PutSandboxPolicy(ctx, store.SandboxPolicy{SandboxID: rec.ID, Text: r.Policy, UpdatedBy: r.PolicyUpdatedBy, UpdatedAt: time.Now()})
	}
	return sb, []func(*store.Tx, store.Sandbox) error{attach}, nil
}

// restoreSame puts the restored history at dir back into sandbox sb, running: when its
// history still holds the backup's current checkpoint (same ID, same files), by the
// history's own restore of it; when its history is empty (a workspace lost), by importing
// the backup's whole history. A history that went another way is left alone.
func (o *Ops) restoreSame(ctx context.Context, c fleet.Caller, sb store.Sandbox, dir string) (string, error) {
	want, err := o.fleet.Checkpoint(ctx, dir, "")
	if err != nil {
		return "", fmt.Errorf("the backup's history: %w", err)
	}
	same, empty, err := o.holds(ctx, c, sb, want)
	if err != nil {
		return "", err
	}
	if same {
		if _, err := o.Restore(ctx, c, sb.ID, api.RestoreRequest{Checkpoint: want.At}); err != nil {
			return "", err
		}
		return want.At, nil
	}
	if empty {
		res, err := o.importRestored(ctx, c, sb.ID, dir)
		return res.Current, err
	}
	return "", fmt.Errorf("the sandbox's history no longer holds the backup's checkpoint %s as it was: restore into a new sandbox (into: a name): %w", want.At, errdefs.ErrFailedPrecondition)
}

// holds says whether sandbox sb's history holds checkpoint want as it was (same ID, same
// files), or is empty: read on this host, or through its agent where the runner cannot.
func (o *Ops) holds(ctx context.Context, c fleet.Caller, sb store.Sandbox, want wire.ForkInfo) (same, empty bool, err error) {
	if o.fleet.HistoryOnHost() {
		live := o.fleet.HistoryDir(sb)
		have, err := o.fleet.Checkpoint(ctx, live, want.At)
		if err == nil && have.Tree == want.Tree {
			return true, false, nil
		}
		_, err = o.fleet.Checkpoint(ctx, live, "")
		return false, errors.Is(err, errdefs.ErrFailedPrecondition), nil
	}
	hc, err := o.fleet.Agent(ctx, c, sb.ID)
	if err != nil {
		return false, false, err
	}
	list, err := hc.HistoryList(ctx)
	if err != nil {
		return false, false, historyError("history", sb.ID, err)
	}
	for _, cp := range list.GetCheckpoints() {
		if cp.GetId() == want.At && cp.GetTree() == want.Tree {
			return true, false, nil
		}
	}
	// A new agent's first checkpoint is of the workspace it found: an import takes its place.
	return false, len(list.GetCheckpoints()) <= 1, nil
}

// importRestored streams the restored history at dir to sandbox id's agent as an export,
// which replaces its history and restores its workspace to the export's current checkpoint.
func (o *Ops) importRestored(ctx context.Context, c fleet.Caller, id, dir string) (api.RestoreResult, error) {
	rd, err := o.fleet.ExportHistory(ctx, dir)
	if err != nil {
		return api.RestoreResult{}, err
	}
	defer rd.Close()
	return o.ImportHistory(ctx, c, id, rd)
}

// RunBackups backs up every running sandbox every period until ctx ends, one at a time.
func (o *Ops) RunBackups(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sbs, err := o.fleet.List(ctx, fleet.Caller{Admin: true}, true)
		if err != nil {
			o.log.Warn("scheduled backups: list sandboxes", "err", err)
			continue
		}
		for _, sb := range sbs {
			if sb.State != api.StateRunning || ctx.Err() != nil {
				continue
			}
			owner := fleet.Caller{UserID: sb.UserID, Username: sb.Username}
			if _, err := o.BackupNow(ctx, owner, sb.ID); err != nil {
				o.log.Warn("scheduled backup", "sandbox", sb.ID, "err", err)
			} else {
				o.log.Info("scheduled backup", "sandbox", sb.ID)
			}
		}
	}
}

// Prune applies the backups' retention to the bucket: see [wsbackup.Prune].
func (b *Backups) Prune(ctx context.Context, now time.Time) (wsbackup.Pruned, error) {
	return b.PruneWith(ctx, now, wsbackup.PruneOptions{})
}

// PruneWith is Prune narrowed by o: see [wsbackup.PruneWith]. It holds the retention
// lease (refused, 409, while a pass runs on any replica), and sweeps once the backups
// under way when it took the lease have ended: none starts until it is done.
func (b *Backups) PruneWith(ctx context.Context, now time.Time, o wsbackup.PruneOptions) (wsbackup.Pruned, error) {
	if b.Retention == nil {
		return wsbackup.Pruned{}, fmt.Errorf("retention: backup.keep_last is not set in the server's configuration: %w", errdefs.ErrFailedPrecondition)
	}
	holder := b.holder()
	way, busy, ok, err := b.Leases.LeaseRetention(ctx, holder, time.Now(), time.Now().Add(leaseTTL))
	if err != nil {
		return wsbackup.Pruned{}, fmt.Errorf("retention: %w", err)
	}
	if !ok {
		return wsbackup.Pruned{}, fmt.Errorf("retention: a pass is under way on %s: %w: %w", holderName(way.Holder), errPassUnderWay, errdefs.ErrFailedPrecondition)
	}
	var p wsbackup.Pruned
	err = b.leased(ctx, store.RetentionLease, holder, func(ctx context.Context) error {
		if err := b.awaitBackups(ctx, busy); err != nil {
			return err
		}
		var err error
		p, err = wsbackup.PruneWith(ctx, b.Target, b.Key, *b.Retention, now, o)
		return err
	})
	return p, err
}

// errPassUnderWay is a retention pass under way, on this replica or another.
var errPassUnderWay = errors.New("retention pass under way")

// errUnderWay is a backup of the sandbox under way on another replica.
var errUnderWay = errors.New("backup under way")

// leaseTTL is how long a lease on the bucket lasts unless renewed. Its holder renews it
// every third of that, so a replica that died frees what it held within leaseTTL.
const leaseTTL = time.Minute

// leasePoll is how often a backup looks again whether the retention pass in its way has
// ended, and a pass whether the backups in its way have.
const leasePoll = 250 * time.Millisecond

func (b *Backups) log() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Log
}

// holder is a fresh holder's name for a lease: this replica's ID and a random suffix.
func (b *Backups) holder() string { return b.Replica + "/" + randomSuffix() }

// holderName is who holds a lease, for a message.
func holderName(holder string) string {
	r, _, _ := strings.Cut(holder, "/")
	if r == "" {
		return "this server"
	}
	return "replica " + r
}

// leaseBackup runs f, one attempt of attempt a at sandbox id's backup, holding the
// sandbox's lease. While a retention pass holds its lease it waits, saying so in a; a
// backup of the sandbox under way elsewhere is refused (409).
func (b *Backups) leaseBackup(ctx context.Context, id string, a *api.Backup, f func(context.Context) error) error {
	holder := b.holder()
	for {
		now := time.Now()
		way, ok, err := b.Leases.LeaseBackup(ctx, id, holder, now, now.Add(leaseTTL))
		if err != nil {
			return fmt.Errorf("backup %s: %w", id, err)
		}
		if ok {
			b.set(func() { a.Error = "" })
			return b.leased(ctx, id, holder, f)
		}
		if way.Name != store.RetentionLease {
			return fmt.Errorf("backup of sandbox %s: one is under way on %s (see paddock backup ls): %w: %w", id, holderName(way.Holder), errUnderWay, errdefs.ErrFailedPrecondition)
		}
		b.set(func() { a.Error = "waiting for the retention pass under way on " + holderName(way.Holder) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leasePoll):
		}
	}
}

// awaitBackups waits until the backups busy, under way when a retention pass took its
// lease, have ended (released their leases, or let them lapse).
func (b *Backups) awaitBackups(ctx context.Context, busy []store.BackupLease) error {
	for len(busy) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("retention: waiting for the backup of sandbox %s on %s: %w", busy[0].Name, holderName(busy[0].Holder), ctx.Err())
		case <-time.After(leasePoll):
		}
		live, err := b.Leases.BackupLeases(ctx, time.Now())
		if err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		busy = slices.DeleteFunc(busy, func(l store.BackupLease) bool {
			return !slices.ContainsFunc(live, func(x store.BackupLease) bool { return x.Name == l.Name && x.Holder == l.Holder })
		})
	}
	return nil
}

// leased runs f holding lease name as holder: it renews the lease while f runs, ends f's
// context when the lease is lost (lapsed, another holder's), and releases it after.
func (b *Backups) leased(ctx context.Context, name, holder string, f func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(leaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			now := time.Now()
			ok, err := b.Leases.RenewBackupLease(ctx, name, holder, now, now.Add(leaseTTL))
			if err == nil && !ok {
				cancel(fmt.Errorf("the lease %s on the backup bucket lapsed: %w", name, errdefs.ErrUnavailable))
				return
			}
			// A renewal that failed (the database restarting) is tried at the next tick.
		}
	}()
	err := f(ctx)
	close(done)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	if rerr := b.Leases.ReleaseBackupLease(context.WithoutCancel(ctx), name, holder); rerr != nil {
		// It lapses by itself within leaseTTL.
		b.log().Warn("backup: release a lease on the bucket", "lease", name, "err", rerr)
	}
	return err
}

// RunRetention applies the backups' retention every period until ctx ends.
func (o *Ops) RunRetention(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := o.backups.Prune(ctx, time.Now())
		if errors.Is(err, errPassUnderWay) {
			o.log.Info("backup retention: skipped today", "why", err)
			continue
		}
		if err != nil {
			o.log.Warn("backup retention", "err", err, "backups_dropped", p.Manifests, "blobs_deleted", p.Blobs)
			continue
		}
		o.log.Info("backup retention", "backups_kept", p.Kept, "backups_dropped", p.Manifests, "blobs_deleted", p.Blobs, "bytes", p.Bytes)
	}
}
